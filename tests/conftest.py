"""Shared fixtures: a real mlyard server process with its own MLYARD_HOME, driven by the CLI."""

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

import psutil
import pytest

from mlyard.client import Client

REPOSITORY = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MLYARD = str(BIN / "mlyard")


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
            check: bool = False) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([MLYARD, *arguments], cwd=cwd, env=self.env, capture_output=True, text=True,
                                timeout=timeout)
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


def start_server(home: Path, **environment: str) -> RunningServer:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MLYARD_")}
    env.update({"MLYARD_HOME": str(home), "MLYARD_NODE_CPUS": "2", "MLYARD_STOP_GRACE": "3"})
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


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server for the session's end-to-end tests (2 CPUs offered, 3 s stop grace)."""
    running = start_server(tmp_path_factory.mktemp("mlyard-home"))
    yield running
    stop_server(running)


def wait_for(condition: Callable[[], bool], timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Polls `condition` until it holds or `timeout` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


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
