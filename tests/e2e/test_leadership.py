"""Two real servers on one database: one runs the controller, the other stands by, serves the
API all the same, and takes over when the leader is killed."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import postgres
import pytest
from conftest import (
    DATABASES,
    RunningServer,
    process_gone,
    start_server,
    stop_server,
    wait_for,
)

TAKEOVER_SECONDS = 15
LAUNCHED = "launched 1 replicas"


def role(server: RunningServer) -> str:
    return httpx.get(f"{server.url}/api/v1/health", timeout=10).json()["controller"]


def server_log(server: RunningServer) -> str:
    return (server.home / "server.log").read_text(errors="replace")


def run_to_success(via: RunningServer, name: str, command: str = "sleep 1; echo done") -> dict:
    job = via.cli_json("run", "--no-code", "--name", name, "--", "sh", "-c", command)
    waited = via.cli("wait", str(job["id"]), "--timeout", "60")
    detail = via.cli_json("show", str(job["id"]))
    assert waited.returncode == 0 and detail["status"] == "SUCCEEDED", detail
    assert via.cli("logs", str(job["id"]), check=True).stdout.strip() == "done"
    return detail


@pytest.fixture(params=DATABASES)
def shared_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL both servers are given: a SQLite file outside either home, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared' / 'mlyard.db'}"
    return postgres.create_database()


def test_one_of_two_servers_leads_and_the_other_takes_over_when_it_is_killed(
    shared_database: str, tmp_path: Path
) -> None:
    servers = []
    try:
        for name in ("first", "second"):
            servers.append(start_server(tmp_path / name, MLYARD_DATABASE_URL=shared_database))
        roles = {server.home.name: role(server) for server in servers}
        assert sorted(roles.values()) == ["leader", "standby"], roles
        leader, standby = sorted(servers, key=lambda server: role(server) != "leader")

        # Each home has a token of its own for the shared admin user; each works on both servers.
        for server in servers:
            for token_of in servers:
                answer = httpx.get(f"{server.url}/api/v1/jobs", timeout=10,
                                   headers={"Authorization": f"Bearer {token_of.token()}"})
                assert answer.status_code == 200, (server.home.name, token_of.home.name, answer.text)

        run_to_success(standby, "via-standby")
        assert LAUNCHED in server_log(leader)
        assert LAUNCHED not in server_log(standby), "only the leader's controller launches anything"
        assert role(standby) == "standby" and role(leader) == "leader"

        # A job the leader started survives its leader: the next one observes it to the end.
        surviving = standby.cli_json("run", "--no-code", "--name", "outlives-its-leader", "--",
                                     "sh", "-c", "sleep 4; echo done")
        assert wait_for(lambda: standby.cli_json("show", str(surviving["id"]))["status"] == "RUNNING",
                        timeout=30, interval=0.2)
        leader_pid = json.loads((leader.home / "server.json").read_text())["pid"]
        os.kill(leader_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        assert wait_for(lambda: process_gone(leader_pid), timeout=10)
        assert wait_for(lambda: role(standby) == "leader", timeout=TAKEOVER_SECONDS, interval=0.2), \
            f"no takeover within {TAKEOVER_SECONDS}s"
        assert time.monotonic() - killed_at < TAKEOVER_SECONDS

        assert standby.cli("wait", str(surviving["id"]), "--timeout", "60").returncode == 0
        assert standby.cli_json("show", str(surviving["id"]))["status"] == "SUCCEEDED"
        run_to_success(standby, "after-takeover")
        assert LAUNCHED in server_log(standby) and "this server leads" in server_log(standby)
    finally:
        for server in servers:
            stop_server(server)
