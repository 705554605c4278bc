"""Requests below one core on a live server: they share a core instead of each taking one
(the CPU quota that holds each near its share is checked at the launcher, test_launcher.py);
and a placement constraint, from the spec to the wait reason."""

from __future__ import annotations

import pytest
from conftest import RunningServer, wait_until

pytestmark = pytest.mark.slow


def test_four_quarter_core_replicas_run_together_on_one_core(server: RunningServer) -> None:
    # The server offers 2 cores: pinned whole, four replicas could not all run at once.
    job = server.cli_json("run", "--replicas", "4", "--cpus", "0.25", "--memory", "64Mi", "--no-code",
                          "--name", "quarters", "--", "sleep", "3")
    assert server.cli("wait", str(job["id"]), "--timeout", "90").returncode == 0, server.cli("show", str(job["id"]))
    detail = server.cli_json("show", str(job["id"]))
    assert len(detail["attempts"]) == 1
    replicas = detail["attempts"][0]["replicas"]
    assert len(replicas) == 4
    # Each holds a quarter of the same one core.
    assert len({tuple(replica["cpu_ids"]) for replica in replicas}) == 1, replicas
    assert all(replica["cpu_millicores"] == 250 and len(replica["cpu_ids"]) == 1 for replica in replicas), replicas
    # All four were RUNNING at the same time.
    assert max(replica["started_at"] for replica in replicas) < min(replica["finished_at"] for replica in replicas)
    shown = server.cli("show", str(job["id"]), check=True).stdout
    assert f"0.25 of core {replicas[0]['cpu_ids'][0]}" in shown


def test_a_same_node_job_waits_saying_how_much_room_the_largest_free_node_has(server: RunningServer) -> None:
    blocker = server.cli_json("run", "--cpus", "1", "--memory", "64Mi", "--no-code", "--name", "blocker", "--",
                              "sleep", "60")["id"]
    try:
        wait_until(lambda: server.cli_json("show", str(blocker))["status"] == "RUNNING", 30, "the blocker running")
        job = server.cli_json("run", "--replicas", "2", "--cpus", "1", "--memory", "64Mi", "--no-code",
                              "--set", "placement.same_node=true", "--name", "together", "--", "true")["id"]
        reason = wait_until(lambda: server.cli_json("show", str(job))["wait_reason"], 30, "a wait reason")
        assert reason == "needs 2 replicas on one node; largest free node has room for 1", reason
        server.cli("cancel", str(job), check=True)
    finally:
        server.cli("cancel", str(blocker), check=True)
