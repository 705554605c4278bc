"""Environments on a server without a container engine: built as virtualenvs once per content
from the package index the administrator set, named by jobs, refused clearly when unknown or
unbuildable."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DATABASES, RunningServer, start_server, stop_server

pytestmark = pytest.mark.slow
VALUE = "tiny-42"


@pytest.fixture(scope="module", params=DATABASES)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Without containers (MLYARD_RUNTIME=process), even where an engine runs: environments
    become virtualenvs (tests/containers/ builds them as images). Packages come from a local
    index; builds run as the server's account, since this machine's Python is closed to others."""
    index = package_index(tmp_path_factory.mktemp("index"))
    running = start_server(tmp_path_factory.mktemp(f"mlyard-envs-{request.param}"), database=request.param,
                           MLYARD_RUNTIME="process", MLYARD_PIP_INDEX_URL=index.as_uri(), MLYARD_BUILD_USER="server")
    yield running
    stop_server(running)


def tiny_wheel(directory: Path) -> Path:
    """A wheel of one module, installable offline."""
    wheel = directory / "tinyenvpkg-1.0-py3-none-any.whl"
    files = {
        "tinyenvpkg/__init__.py": f"VALUE = {VALUE!r}\n",
        "tinyenvpkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinyenvpkg\nVersion: 1.0\n",
        "tinyenvpkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                          "Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("tinyenvpkg-1.0.dist-info/RECORD", "".join(f"{name},,\n" for name in files)
                         + "tinyenvpkg-1.0.dist-info/RECORD,,\n")
    return wheel


def package_index(directory: Path) -> Path:
    """A PEP 503 index on disk holding the tiny wheel (pip reads `index.html` of a file: URL)."""
    project = directory / "simple" / "tinyenvpkg"
    project.mkdir(parents=True)
    wheel = tiny_wheel(project)
    (directory / "simple" / "index.html").write_text('<a href="tinyenvpkg/">tinyenvpkg</a>\n')
    (project / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    return directory / "simple"


def build(server: RunningServer, name: str, *options: str):
    return server.cli("env", "build", name, "--from", "python:3.11-slim", *options, "--output", "json")


def test_an_environment_is_built_once_and_jobs_run_in_it(server: RunningServer, tmp_path: Path) -> None:
    name, twin = f"tiny-{server.port}", f"twin-{server.port}"
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# from the administrator's index\ntinyenvpkg==1.0\n")

    first = build(server, name, "--requirements", str(requirements))
    assert first.returncode == 0, first.stderr
    built = json.loads(first.stdout)
    assert (built["status"], built["kind"], built["cached"]) == ("ready", "virtualenv", False)
    venv = Path(built["image"])
    marker = venv / ".mlyard-complete"
    stamp = marker.stat().st_mtime_ns

    again = json.loads(build(server, name, "--requirements", str(requirements)).stdout)
    assert again["status"] == "ready" and again["cached"] and "nothing to do" in again["message"]
    same = json.loads(build(server, twin, "--requirements", str(requirements)).stdout)
    assert same["cached"] and same["image"] == str(venv) and f"environment {name!r}" in same["message"]
    assert marker.stat().st_mtime_ns == stamp, "the second and third builds built nothing"
    shown = server.cli("env", "show", name, check=True).stdout
    assert "-m venv" in shown and "Successfully installed tinyenvpkg-1.0" in shown
    assert "--only-binary :all:" in shown, "no source builds unless the administrator allows them"
    listed = server.cli("env", "ls", check=True).stdout
    assert name in listed and twin in listed

    job = server.cli_json("run", "--no-code", "--set", f"environment={name}", "--output", "json", "--",
                          "python", "-c", "import sys, tinyenvpkg; print(tinyenvpkg.VALUE, sys.prefix)")
    assert server.cli("wait", str(job["id"]), "--timeout", "120").returncode == 0
    assert f"{VALUE} {venv}" in server.cli("logs", str(job["id"]), check=True).stdout

    busy = server.cli_json("run", "--no-code", "--set", f"environment={name}", "--output", "json", "--",
                           "sleep", "60")
    refused = server.cli("env", "rm", name)
    assert refused.returncode == 1 and "1 unfinished job uses environment" in refused.stderr
    server.cli("cancel", str(busy["id"]), check=True)
    assert server.cli("env", "rm", twin).returncode == 0
    assert twin not in server.cli("env", "ls", check=True).stdout
    server.cli("wait", str(busy["id"]), "--timeout", "60")
    log = server.home / "environments" / "logs" / f"{name}.log"
    assert log.is_file() and server.cli("env", "rm", name).returncode == 0
    assert not log.exists(), "an environment made later under this name shows no log of this one"


def test_jobs_and_builds_that_cannot_work_are_refused_clearly(server: RunningServer, tmp_path: Path) -> None:
    unknown = server.cli("run", "--no-code", "--set", "environment=no-such-env", "--", "true")
    assert unknown.returncode == 1 and "environment 'no-such-env' does not exist" in unknown.stderr
    assert "Traceback" not in unknown.stderr

    apt = build(server, f"apt-{server.port}", "--apt", "curl")
    assert apt.returncode == 1 and "need a container engine" in apt.stderr
    failed = server.cli("run", "--no-code", "--set", f"environment=apt-{server.port}", "--", "true")
    assert failed.returncode == 1 and "failed to build" in failed.stderr

    bad = server.cli("env", "build", "x", "--from", "Not An Image")
    assert bad.returncode == 2 and "base" in bad.stderr
    both = server.cli("run", "--no-code", "--set", "environment=x", "--set", "image=busybox", "--", "true")
    assert both.returncode == 2 and "an image or an environment, not both" in both.stderr
