"""The server as a background process: start, status, stop, and what happens to running jobs."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from conftest import DATABASES, MLYARD, start_server, stop_server


# On both databases: the restarted server reconnects, leads again and finds the job running.
@pytest.mark.parametrize("database", DATABASES)
def test_server_start_status_stop_and_jobs_outliving_a_server_restart(tmp_path: Path, database: str) -> None:
    server = start_server(tmp_path / "home", database=database)
    try:
        status = server.cli("server", "status")
        assert status.returncode == 0 and f"127.0.0.1:{server.port}" in status.stderr
        again = server.cli("server", "start")
        assert again.returncode == 0 and "already running" in again.stderr
        assert (server.home / "server.log").exists() and (server.home / "server.pid").exists()
        # What lives once it has started is frozen out of garbage collections (server/heap.py).
        assert "objects (the server once started)" in (server.home / "server.log").read_text(errors="replace")

        job = server.cli_json("run", "--no-code", "--name", "outlives", "--", "sh", "-c", "sleep 4; echo done")
        deadline = time.monotonic() + 20
        while server.cli_json("show", str(job["id"]))["status"] != "RUNNING":
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.2)

        stopped = server.cli("server", "stop")
        assert stopped.returncode == 0 and "stopped" in stopped.stderr
        assert server.cli("server", "status").returncode == 1
        assert not (server.home / "server.pid").exists()

        server.cli("server", "start", check=True)
        assert server.cli("wait", str(job["id"]), "--timeout", "60").returncode == 0
        assert server.cli("logs", str(job["id"]), check=True).stdout.strip() == "done"
    finally:
        stop_server(server)


def test_a_second_server_on_a_busy_port_fails_with_the_reason(tmp_path: Path) -> None:
    first = start_server(tmp_path / "first")
    try:
        second_env = {**first.env, "MLYARD_HOME": str(tmp_path / "second")}
        result = subprocess.run([MLYARD, "server", "start"], env=second_env, capture_output=True, text=True, timeout=90,
                                check=False)
        assert result.returncode == 1
        assert "cannot listen on" in result.stderr and "Traceback" not in result.stderr
        assert not (tmp_path / "second" / "server.pid").exists()
    finally:
        stop_server(first)


def test_a_second_server_on_the_same_home_is_refused_and_the_first_keeps_running(tmp_path: Path) -> None:
    server = start_server(tmp_path / "home")
    try:
        other_port = {**server.env, "MLYARD_PORT": str(server.port + 1)}
        result = subprocess.run([MLYARD, "server", "run"], env=other_port, capture_output=True, text=True, timeout=60,
                                check=False)
        assert result.returncode == 1
        assert "another mlyard server is running" in result.stderr
        assert server.cli("server", "status").returncode == 0
        assert server.cli("jobs").returncode == 0
    finally:
        stop_server(server)


def test_a_stale_pid_file_is_not_taken_for_a_server(tmp_path: Path) -> None:
    home = tmp_path / "stale"
    home.mkdir()
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        (home / "server.pid").write_text(str(bystander.pid))
        (home / "server.json").write_text(f'{{"url": "http://127.0.0.1:9", "pid": {bystander.pid}}}')
        environment = {"MLYARD_HOME": str(home), "PATH": "/usr/bin:/bin"}
        status = subprocess.run([MLYARD, "server", "status"], env=environment, capture_output=True, text=True,
                                check=False)
        assert status.returncode == 1 and "not running" in status.stderr
        subprocess.run([MLYARD, "server", "stop"], env=environment, capture_output=True, text=True, timeout=30,
                       check=False)
        assert bystander.poll() is None, "stop must not signal a process that is not the server"
    finally:
        bystander.kill()
        bystander.wait()


def test_the_home_is_private_to_its_owner(tmp_path: Path) -> None:
    server = start_server(tmp_path / "home")
    try:
        assert server.home.stat().st_mode & 0o777 == 0o700
        for name in ("mlyard.db", "admin.token", "server.log"):
            assert (server.home / name).stat().st_mode & 0o077 == 0, name
    finally:
        stop_server(server)
