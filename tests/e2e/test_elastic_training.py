"""Elastic training end to end: examples/digits-elastic.yaml (torchrun's c10d rendezvous over
`--nnodes=1:2`) starts on the one core left free, and once the other core frees up the
scheduler grows it to 2 replicas, where training resumes from the first attempt's checkpoint.

Growing into idle capacity needs no policy setting, no preemption and no `priority`: any
policy's round grows running elastic jobs when no pending job waits for resources
(`scheduler.cycle.decide_round` → `backfill.grow_elastic`), and the controller carries the
resize out as a checkpoint-restart.

Each replica runs in a PID namespace of its own (MLYARD_JOB_ISOLATION=namespace, for a job on
the server's account): the namespace numbers its pids after its host pid (`runtime/hide_home.py`),
since torchrun's c10d rendezvous tells nodes apart by host name and pid."""

from __future__ import annotations

import re

import pytest
from conftest import RunningServer, wait_until

pytestmark = pytest.mark.slow

EXAMPLE = "examples/digits-elastic.yaml"
EPOCHS = 30  # the example's --epochs
WORLD = re.compile(r"^rendezvous rank=(\d+) world_size=(\d+) ", re.MULTILINE)


def show(server: RunningServer, job_id: int) -> dict:
    return server.cli_json("show", str(job_id))


def logs(server: RunningServer, job_id: int, attempt: int, rank: int) -> str:
    return server.cli("logs", str(job_id), "--attempt", str(attempt), "--replica", str(rank)).stdout


def grow_and_resume(server: RunningServer) -> None:
    # One core taken: the elastic job can only start at its minimum, 1 replica.
    blocker = server.cli_json("run", "--cpus", "1", "--name", "blocker", "--no-code", "--", "sleep", "600")["id"]
    job_id = None
    try:
        wait_until(lambda: show(server, blocker)["status"] == "RUNNING", 60, "the blocker running")
        job_id = server.cli_json("submit", EXAMPLE)["id"]
        wait_until(lambda: "checkpoint saved at epoch 3\n" in server.cli("logs", str(job_id)).stdout, 180,
                   "the first attempt's checkpoints")
        first = show(server, job_id)
        assert [len(attempt["replicas"]) for attempt in first["attempts"]] == [1], first["attempts"]
        assert first["status"] == "RUNNING"
        server.cli("cancel", str(blocker), check=True)

        # The freed core is idle and nobody waits for it: the job is grown into it.
        wait_until(lambda: len(show(server, job_id)["attempts"]) == 2, 60, "a second attempt")
        # Both ranks of the second attempt say which world they joined before they train; a
        # world of 1 on either is two jobs training alone, not one grown job.
        worlds = wait_until(lambda: all(WORLD.search(logs(server, job_id, 2, rank)) for rank in (0, 1))
                            and {rank: WORLD.findall(logs(server, job_id, 2, rank)) for rank in (0, 1)},
                            120, "both ranks of the second attempt in a world")
        assert all(found[0][1] == "2" for found in worlds.values()), f"not one world of 2: {worlds}"

        result = server.cli("wait", str(job_id), "--timeout", "400")
        detail = show(server, job_id)
        assert result.returncode == 0, (detail["status"], detail["message"], detail["attempts"])
    finally:
        server.cli("cancel", str(blocker))
        if job_id is not None:
            server.cli("cancel", str(job_id))
            server.cli("wait", str(job_id), "--timeout", "60")

    assert detail["status"] == "SUCCEEDED"
    attempts = detail["attempts"]
    assert [len(attempt["replicas"]) for attempt in attempts] == [1, 2], attempts
    grown = attempts[0]
    assert grown["stop_outcome"] == "PREEMPTED", grown
    assert "resize to 2 replicas" in grown["stop_reason"] and "grown" in grown["stop_reason"], grown
    assert sorted(replica["rank"] for replica in attempts[1]["replicas"]) == [0, 1]
    cores = sorted(cpu for replica in attempts[1]["replicas"] for cpu in replica["cpu_ids"])
    assert cores == [0, 1], "each of the two replicas on a core of its own"
    statuses = [event["to_status"] for event in detail["events"]]
    assert statuses.count("PREEMPTED") == 1 and statuses[-1] == "SUCCEEDED", detail["events"]

    before = server.cli("logs", str(job_id), "--attempt", "1", check=True).stdout
    assert re.search(r"^rendezvous rank=0 world_size=1 ", before, re.MULTILINE), before[-2000:]
    last_saved = int(re.findall(r"^checkpoint saved at epoch (\d+)$", before, re.MULTILINE)[-1])
    assert last_saved >= 3

    after = {rank: logs(server, job_id, 2, rank) for rank in (0, 1)}
    for rank, log in after.items():
        # If one node joined the rendezvous late, torchrun restarts the workers once to take it
        # in; every world they formed had both nodes.
        assert {world for _, world in WORLD.findall(log)} == {"2"}, log[-3000:]
        resumed = [int(epoch) for epoch in
                   re.findall(r"^resumed from checkpoint at epoch (\d+) \(restart 1\)$", log, re.MULTILINE)]
        assert resumed, log[-3000:]
        # Rank 0 may have been stopped between saving a checkpoint and saying so.
        assert 0 < last_saved <= resumed[0] <= last_saved + 1, (last_saved, resumed)
    # c10d ranks nodes in the order they join, not by replica: rank 0 is either replica.
    [leader] = [log for log in after.values() if WORLD.findall(log)[-1][0] == "0"]
    trained = [int(epoch) for epoch in re.findall(rf"^epoch (\d+)/{EPOCHS} ", leader, re.MULTILINE)]
    assert trained and trained[0] > last_saved and trained[-1] == EPOCHS, trained
    accuracy = float(re.search(r"^final test_accuracy=([0-9.]+)", leader, re.MULTILINE).group(1))
    assert accuracy >= 0.95

    # The metrics of both attempts reach the last epoch with no gap (steps after the checkpoint
    # are reported twice: by the attempt that was stopped and by the one that resumed).
    steps = {point["step"] for point in server.cli_json("metrics", str(job_id)) if point["name"] == "loss"}
    assert steps == set(range(1, EPOCHS + 1))


@pytest.mark.parametrize("server", ["sqlite"], indirect=True)  # training: one database is enough
def test_an_elastic_job_grows_to_two_replicas_when_a_core_frees_and_resumes_from_its_checkpoint(
    server: RunningServer,
) -> None:
    # Each replica runs in a PID namespace of its own (MLYARD_JOB_ISOLATION=namespace): its pids
    # follow its host pid, or both torchrun agents would be one c10d node (`hide_home.py`).
    grow_and_resume(server)
