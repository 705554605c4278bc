"""Shared fixtures: a real mlyard server process with its own MLYARD_HOME, driven by the CLI.

Whatever touches a database runs once per database: on SQLite and on PostgreSQL (a cluster
the session starts itself, see postgres.py). The `server` and `database_url` fixtures are
parametrized over `DATABASES`, so their tests show [sqlite] and [postgresql] in their ids.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import postgres
import psutil
import pytest
from postgres import postgres_cluster  # noqa: F401 - a fixture for the tests that want the cluster itself

from mlyard.client import Client

REPOSITORY = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MLYARD = str(BIN / "mlyard")
DATABASES = ["sqlite", "postgresql"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RunningServer:
    home: Path
    port: int
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cli(self, *arguments: str, cwd: Path = REPOSITORY, timeout: float = 300,
            check: bool = False, input: str | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([MLYARD, *arguments], cwd=cwd, env=self.env, capture_output=True, text=True,
                                timeout=timeout, check=False, input=input)
        if check and result.returncode != 0:
            raise AssertionError(f"mlyard {' '.join(arguments)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def cli_json(self, *arguments: str, **options) -> object:
        arguments = list(arguments)
        at = arguments.index("--") if "--" in arguments else len(arguments)
        result = self.cli(*arguments[:at], "--output", "json", *arguments[at:], check=True, **options)
        return json.loads(result.stdout)

    def client(self) -> Client:
        return Client(self.url, (self.home / "admin.token").read_text().strip())

    def token(self) -> str:
        return (self.home / "admin.token").read_text().strip()

    @property
    def database_url(self) -> str:
        return self.env.get("MLYARD_DATABASE_URL") or f"sqlite:///{self.home / 'mlyard.db'}"


def start_server(home: Path, *, database: str = "sqlite", **environment: str) -> RunningServer:
    """`database="postgresql"`: on a fresh database of the session's cluster, unless
    MLYARD_DATABASE_URL is given (servers that share a database)."""
    if database not in DATABASES:
        raise ValueError(f"database must be one of {DATABASES}, not {database!r}")
    env = {key: value for key, value in os.environ.items() if not key.startswith("MLYARD_")}
    # MLYARD_CONFIG_DIR: `mlyard login` in a test must not write to, or read from, the real user's files.
    env.update({"MLYARD_HOME": str(home), "MLYARD_NODE_CPUS": "2", "MLYARD_STOP_GRACE": "3",
                "MLYARD_CONFIG_DIR": str(home / "cli-config")})
    if database == "postgresql" and "MLYARD_DATABASE_URL" not in environment:
        env["MLYARD_DATABASE_URL"] = postgres.create_database()
    # "off" unless a test asks otherwise: as root, "auto" refuses to start where per-user job
    # accounts cannot run Python, and this machine's Python lives under a closed /root.
    env["MLYARD_JOB_USERS"] = "off"
    env.update(environment)
    server = RunningServer(home=home, port=free_port(), env=env)
    server.env["MLYARD_PORT"] = str(server.port)
    server.cli("server", "start", check=True, timeout=90)
    return server


def stop_server(server: RunningServer) -> None:
    server.cli("server", "stop", timeout=60)
    # Whatever a failing test left running must not leak into the next one.
    for process in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmdline = process.info["cmdline"] or []
            if any(str(server.home) in part for part in cmdline):
                os.killpg(process.pid, signal.SIGKILL)
        except (psutil.Error, ProcessLookupError, PermissionError):
            pass


@pytest.fixture(scope="session", params=DATABASES)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server per database for the session's end-to-end tests (2 CPUs offered, 3 s stop
    grace); pytest runs the tests of one database, then stops its server before the next."""
    # Volumes measured every second: a test sees a write past a quota at once.
    running = start_server(tmp_path_factory.mktemp(f"mlyard-home-{request.param}"), database=request.param,
                           MLYARD_VOLUME_SCAN_INTERVAL="1")
    yield running
    stop_server(running)


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database: a SQLite file of the test's own, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mlyard.db'}"
    return postgres.create_database()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # start_server may have started the cluster outside any fixture.
    postgres.stop_cluster()


def wait_for(condition: Callable[[], bool], timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Polls `condition` until it holds or `timeout` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def wait_until(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.2):
    """Polls `condition` until it returns something true, which it returns; fails naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} did not happen within {timeout}s")


def process_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def replica_pids(detail: dict) -> list[int]:
    return [replica["pid"] for attempt in detail["attempts"] for replica in attempt["replicas"] if replica["pid"]]


def processes_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def favour(pid: int) -> None:
    """Raises a process's CPU priority where the tests may (as root), so that a busy loop whose
    CPU figure is checked gets a whole core even while other work loads a small test machine:
    what such a test checks is the measurement, not the machine's scheduler. The kernel shares
    CPU between sessions first (autogroups), so the session's priority is raised too; a process
    leads its own session when started with `start_new_session=True`."""
    try:
        with open(f"/proc/{pid}/autogroup", "w", encoding="ascii") as handle:
            handle.write("-10")
    except OSError:
        pass
    try:
        psutil.Process(pid).nice(-10)
    except psutil.Error:
        pass


# Last: browsing.py imports the helpers above from this module.
from browsing import browser, visit, web_server  # noqa: F401 - browser fixtures for tests/web
