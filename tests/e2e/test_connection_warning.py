"""The "not training together" warning through a real server and real processes, on the CPU: two
PyTorch replicas that do not connect to rank 0 get the warning (an event, `mlyard show`,
`mlyard jobs`, the job's web page) once the grace is over, and lose it when they connect; the
DDP example, whose ranks connect as they start, never gets it."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from conftest import RunningServer, start_server, stop_server, wait_until
from web_login import web_session

from mlyard.api.jobs import NOT_CONNECTED

pytestmark = pytest.mark.slow

GRACE = 20.0
"""Well over what the DDP example takes to import torch and meet on a 2-core machine (7 s)."""
# Rank 0 serves MASTER_PORT; rank 1 connects once the file named by argv[1] exists, then both wait.
LATE_PAIR = """
import os, socket, sys, time
port = int(os.environ["MASTER_PORT"])
if os.environ["RANK"] == "0":
    connection, _ = socket.create_server(("", port)).accept()
else:
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.2)
    connection = socket.create_connection((os.environ["MASTER_ADDR"], port))
time.sleep(600)
"""


def show(server: RunningServer, job_id: int) -> dict:
    return server.cli_json("show", str(job_id))


def test_replicas_that_do_not_connect_are_warned_about_and_the_ddp_example_is_not(tmp_path: Path) -> None:
    server = start_server(tmp_path / "home", MLYARD_SAMPLE_INTERVAL="1", MLYARD_CONNECTION_GRACE=f"{GRACE:g}s")
    try:
        go = tmp_path / "connect-now"
        late = server.cli_json("run", "--no-code", "--replicas", "2", "--name", "late-pair", "--",
                               "python", "-c", LATE_PAIR, str(go))["id"]
        warned = wait_until(lambda: (job := show(server, late))["warning"] and job, GRACE + 60, "the warning")
        assert warned["status"] == "RUNNING" and warned["spec"]["framework"] == "pytorch"
        running_at = warned["attempts"][-1]["running_at"]
        [event] = [event for event in warned["events"] if (event["message"] or "").startswith(NOT_CONNECTED)]
        assert event["at"] - running_at >= GRACE, "not before the grace is over"
        port = warned["attempts"][-1]["master_port"]
        assert warned["warning"] == event["message"] == (
            f"{NOT_CONNECTED} (worker-1 has not connected to MASTER_PORT {port} in {GRACE:g}s)")
        shown = server.cli("show", str(late), check=True).stdout
        assert f"Warning: {NOT_CONNECTED}" in " ".join(shown.split()), shown
        listing = server.cli("jobs", check=True).stdout
        [line] = [line for line in listing.splitlines() if "late-pair" in line]
        assert "(not connected)" in line, listing
        with httpx.Client(base_url=server.url) as http:
            web_session(http, server.token())
            page = http.get(f"/jobs/{late}/summary").text
            table = http.get("/jobs/table").text
        assert f"Warning: {NOT_CONNECTED}" in page, page
        assert NOT_CONNECTED in table, table

        go.touch()
        cleared = wait_until(lambda: (job := show(server, late))["warning"] is None and job, 60,
                             "the warning cleared once rank 1 connected")
        assert cleared["status"] == "RUNNING"
        assert cleared["events"][-1]["message"] == f"replicas are connected to rank 0 (MASTER_PORT {port})"
        assert "(not connected)" not in server.cli("jobs", check=True).stdout
        server.cli("cancel", str(late), check=True)
        wait_until(lambda: show(server, late)["status"] == "CANCELLED", 60, "the late pair cancelled")

        # Slowed down so that it runs well past the grace: 15 epochs of 2 s, whatever the machine's speed.
        ddp = server.cli_json("submit", "examples/digits-ddp.yaml", "--set",
                              'command=["python", "examples/digits_ddp.py", "--epochs", "15", "--epoch-delay", "2"]'
                              )["id"]
        running_at = wait_until(lambda: (show(server, ddp)["attempts"] or [{}])[-1].get("running_at"), 120,
                                "the DDP example running")
        while (ended := show(server, ddp))["status"] == "RUNNING":
            assert ended["warning"] is None
            time.sleep(1)
        assert ended["status"] == "SUCCEEDED", ended["message"]
        assert ended["finished_at"] - running_at > GRACE + 5, "it ran long enough to be judged"
        assert not [event for event in ended["events"] if re.search("connected to rank 0", event["message"] or "")]
    finally:
        stop_server(server)
