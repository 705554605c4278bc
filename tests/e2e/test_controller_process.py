"""The controller in a process of its own (`server/control/process.py`): the real server starts
it, dies with it, starts it again when it ends alone, and learns from it what the health check
and `/metrics` say."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import psutil
from conftest import process_gone, start_server, stop_server, wait_for

CONTROLLER = "mlyard.server.control.process"


def controller_of(server_pid: int) -> psutil.Process | None:
    for child in psutil.Process(server_pid).children():
        try:
            if CONTROLLER in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            pass
    return None


def health(url: str) -> dict:
    return httpx.get(f"{url}/api/v1/health", timeout=10).json()


def test_the_controller_runs_beside_the_server_comes_back_when_it_ends_and_dies_with_it(tmp_path: Path) -> None:
    server = start_server(tmp_path / "home")
    try:
        server_pid = json.loads((server.home / "server.json").read_text())["pid"]
        controller = controller_of(server_pid)
        assert controller is not None, "the server started no controller process"
        assert health(server.url)["controller"] == "leader", "the server answers once its controller leads"

        # Jobs are launched by the controller's process, not by the one that serves HTTP.
        job = server.cli_json("run", "--no-code", "--name", "launched-beside", "--", "sleep", "1")
        assert server.cli("wait", str(job["id"]), "--timeout", "60").returncode == 0

        # A controller process that ends alone is started again, and the next job runs.
        controller.kill()
        controller.wait(timeout=10)
        assert wait_for(lambda: (again := controller_of(server_pid)) is not None and again.pid != controller.pid
                        and health(server.url)["controller"] == "leader", timeout=60, interval=0.2)
        assert "the controller's process ended" in (server.home / "server.log").read_text(errors="replace")
        job = server.cli_json("run", "--no-code", "--name", "after-restart", "--", "true")
        assert server.cli("wait", str(job["id"]), "--timeout", "60").returncode == 0

        # Killed with its server: no controller is left leading a database nobody serves.
        controller = controller_of(server_pid)
        assert controller is not None
        os.kill(server_pid, signal.SIGKILL)
        assert wait_for(lambda: process_gone(server_pid) and process_gone(controller.pid), timeout=10)
    finally:
        stop_server(server)
