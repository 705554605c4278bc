"""A root server whose jobs could not run under per-user OS accounts refuses to start in the
default MLYARD_JOB_USERS=auto, rather than run every job as root; `off` said explicitly starts it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MLYARD, free_port

from mlyard.errors import MlyardError
from mlyard.paths import Paths
from mlyard.server.app import create_app
from mlyard.server.settings import ServerSettings

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only a root server has per-user accounts to fall back from")


def environment(home: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MLYARD_")}
    env.update(MLYARD_HOME=str(home), MLYARD_PORT=str(free_port()), **extra)
    return env


def closed_home(tmp_path: Path) -> Path:
    """Inside a 0700 directory, so that no job account could reach it."""
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    os.chmod(closed, 0o700)
    return closed / "home"


def assert_refused_with_the_fix(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    (line,) = [line for line in stderr.splitlines() if line.strip()]
    assert "MLYARD_JOB_USERS=auto: the server runs as root but cannot run jobs under per-user OS accounts" in line
    assert "is closed to other accounts" in line and "chmod o+x" in line
    assert "or set MLYARD_JOB_USERS=off to run every job as root" in line


def test_server_start_and_the_foreground_server_refuse(tmp_path: Path) -> None:
    home = closed_home(tmp_path)
    started = subprocess.run([MLYARD, "server", "start"], env=environment(home), capture_output=True, text=True,
                             timeout=60, check=False)
    assert started.returncode == 1, (started.stdout, started.stderr)
    assert_refused_with_the_fix(started.stderr)
    assert not (home / "server.pid").exists()

    foreground = subprocess.run([sys.executable, "-m", "mlyard.server"], env=environment(home),
                                capture_output=True, text=True, timeout=60, check=False)
    assert foreground.returncode == 1, (foreground.stdout, foreground.stderr)
    assert_refused_with_the_fix(foreground.stderr.removeprefix("error: "))


def test_the_apps_startup_refuses_too(tmp_path: Path) -> None:
    app = create_app(ServerSettings(paths=Paths(closed_home(tmp_path)), node_cpus=1))

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(MlyardError, match="MLYARD_JOB_USERS=off to run every job as root"):
        asyncio.run(start())
