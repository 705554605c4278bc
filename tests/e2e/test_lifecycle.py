"""Job lifecycle through the real server process and the real CLI: failure, cancellation,
admission and gang scheduling."""

from __future__ import annotations

import json
import re
import time

import psutil
from conftest import RunningServer, processes_alive, replica_pids

PIDS_COMMAND = "echo shell=$$; sleep 120 & echo sleep=$!; {action}"


def user_pids(server: RunningServer, job_id: int) -> list[int]:
    """Every process below the job's launchers, as this machine numbers them (a replica on the
    server's own account has a PID namespace of its own, so the pids it prints are its own)."""
    pids = []
    for pid in replica_pids(server.cli_json("show", str(job_id))):
        try:
            pids += [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return pids


def sleeping(pids: list[int]) -> int:
    return sum(1 for pid in processes_alive(pids) if psutil.Process(pid).cmdline() == ["sleep", "120"])


def wait_for_log(server: RunningServer, job_id: int, replica: str, pattern: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = server.cli("logs", str(job_id), "--replica", replica).stdout
        if re.search(pattern, text):
            return text
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} {replica}: {pattern!r} not in log after {timeout}s")


def test_a_replica_exiting_non_zero_fails_the_job_and_stops_the_others(server: RunningServer) -> None:
    action = 'if [ "$RANK" = 1 ]; then sleep 4; echo "rank 1 gives up" >&2; exit 3; fi; wait'
    job = server.cli_json("run", "--replicas", "2", "--no-code", "--name", "fails", "--",
                          "sh", "-c", PIDS_COMMAND.format(action=action))
    job_id = job["id"]
    wait_for_log(server, job_id, "0", r"sleep=\d+")
    below = user_pids(server, job_id)
    assert sleeping(below) == 2

    result = server.cli("wait", str(job_id), "--timeout", "60")
    assert result.returncode == 1, "wait exits non-zero for a failed job"

    detail = server.cli_json("show", str(job_id))
    assert detail["status"] == "FAILED"
    assert detail["exit_code"] == 3
    assert "worker-1" in detail["message"] and "code 3" in detail["message"]
    states = {replica["name"]: replica for replica in detail["attempts"][-1]["replicas"]}
    assert states["worker-1"]["exit_code"] == 3
    assert states["worker-0"]["exit_code"] == 143, "the healthy replica was stopped with SIGTERM"
    assert processes_alive(replica_pids(detail) + below) == []

    shown = server.cli("show", str(job_id), check=True).stdout
    assert "exit code  3" in shown
    assert "rank 1 gives up" in shown, "show prints the last log lines"


def test_cancelling_a_running_job_stops_it_within_the_grace_period(server: RunningServer) -> None:
    job = server.cli_json("run", "--replicas", "2", "--no-code", "--name", "sleeper", "--",
                          "sh", "-c", PIDS_COMMAND.format(action="wait"))
    job_id = job["id"]
    wait_for_log(server, job_id, "0", r"sleep=\d+")
    wait_for_log(server, job_id, "1", r"sleep=\d+")
    below = user_pids(server, job_id)
    assert sleeping(below) == 2

    requested = time.monotonic()
    server.cli("cancel", str(job_id), check=True)
    result = server.cli("wait", str(job_id), "--timeout", "30")
    elapsed = time.monotonic() - requested
    assert result.returncode == 1
    detail = server.cli_json("show", str(job_id))
    assert detail["status"] == "CANCELLED"
    assert elapsed < 3 + 10, "cancelled within the 3 s grace period (plus polling)"
    assert processes_alive(replica_pids(detail) + below) == []


def test_a_command_ignoring_sigterm_is_killed_after_the_grace_period(server: RunningServer) -> None:
    job = server.cli_json("run", "--no-code", "--name", "stubborn", "--",
                          "sh", "-c", "trap '' TERM; echo shell=$$; while true; do sleep 0.2; done")
    job_id = job["id"]
    wait_for_log(server, job_id, "0", r"shell=\d+")
    below = user_pids(server, job_id)
    assert below, "the command runs below its launcher"
    started = time.monotonic()
    server.cli("cancel", str(job_id), check=True)
    server.cli("wait", str(job_id), "--timeout", "30")
    detail = server.cli_json("show", str(job_id))
    assert detail["status"] == "CANCELLED"
    assert time.monotonic() - started >= 2.5, "SIGKILL only after the grace period"
    assert processes_alive(replica_pids(detail) + below) == []


def test_a_job_larger_than_any_node_is_rejected_at_submission(server: RunningServer) -> None:
    for flags, resource in ((["--cpus", "64"], "CPU"), (["--gpus", "2"], "GPU"), (["--memory", "100Ti"], "memory")):
        result = server.cli("run", "--no-code", *flags, "--", "true")
        assert result.returncode == 1
        assert "can never run here" in result.stderr and resource in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    names = [job["name"] for job in server.cli_json("jobs", "--all")]
    assert "true" not in names, "nothing was queued"


def test_two_jobs_that_do_not_fit_together_run_one_after_the_other(server: RunningServer) -> None:
    command = "echo start=$(date +%s.%N); sleep 2; echo end=$(date +%s.%N)"
    first = server.cli_json("run", "--replicas", "2", "--no-code", "--name", "first", "--", "sh", "-c", command)
    second = server.cli_json("run", "--replicas", "2", "--no-code", "--name", "second", "--", "sh", "-c", command)
    assert second["status"] == "QUEUED"
    for job in (first, second):
        assert server.cli("wait", str(job["id"]), "--timeout", "60").returncode == 0
    first_detail = server.cli_json("show", str(first["id"]))
    second_detail = server.cli_json("show", str(second["id"]))
    first_end = max(r["finished_at"] for r in first_detail["attempts"][0]["replicas"])
    second_starts = [r["started_at"] for r in second_detail["attempts"][0]["replicas"]]
    assert all(start >= first_end for start in second_starts), "the second job waited for all of the first"
    assert len(second_detail["attempts"]) == 1 and len(second_starts) == 2, "never half-started"
    scheduled = [e for e in second_detail["events"] if e["to_status"] == "SCHEDULED"]
    assert scheduled[0]["at"] >= first_end


def test_submit_and_run_print_the_new_job_as_json(server: RunningServer) -> None:
    job = server.cli_json("run", "--no-code", "--name", "json-job", "--", "true")
    assert job["name"] == "json-job" and job["status"] == "QUEUED" and isinstance(job["id"], int)
    assert server.cli("wait", str(job["id"]), "--timeout", "30").returncode == 0
    listed = server.cli_json("jobs", "--status", "SUCCEEDED")
    assert job["id"] in [entry["id"] for entry in listed]
    nodes = server.cli_json("nodes")
    assert len(nodes) == 1 and len(nodes[0]["cpu_ids"]) == 2
    assert json.dumps(nodes)


def test_jobs_are_listed_by_queue_owner_and_part_of_the_name(server: RunningServer) -> None:
    job = server.cli_json("run", "--no-code", "--name", "filter-me-not-7", "--", "true")
    other = server.cli_json("run", "--no-code", "--name", "filter-other", "--", "true")

    def listed(*options: str) -> set[int]:
        return {entry["id"] for entry in server.cli_json("jobs", "--all", *options)} & {job["id"], other["id"]}

    assert job["owner"] == "admin"
    assert listed("--search", "FILTER-ME") == {job["id"]}  # any case; names are lowercase
    assert listed("--search", "filter-") == {job["id"], other["id"]}
    refused = server.cli("jobs", "--search", "50%")
    assert refused.returncode == 1 and "search" in refused.stderr and "Traceback" not in refused.stderr
    assert listed("--owner", "admin", "--queue", "default") == {job["id"], other["id"]}
    assert listed("--owner", "someone-else") == set()
    assert listed("--queue", "no-such-queue") == set()


def test_logs_follow_streams_until_the_replica_ends(server: RunningServer) -> None:
    job = server.cli_json("run", "--no-code", "--name", "ticker", "--",
                          "sh", "-c", "for i in 1 2 3 4 5; do echo tick $i; sleep 0.4; done")
    followed = server.cli("logs", str(job["id"]), "-f", timeout=60)
    assert followed.returncode == 0
    assert [line for line in followed.stdout.splitlines() if line.startswith("tick")] == [
        f"tick {i}" for i in range(1, 6)
    ]
    assert server.cli_json("show", str(job["id"]))["status"] == "SUCCEEDED"


def test_wait_gives_up_after_its_timeout(server: RunningServer) -> None:
    job = server.cli_json("run", "--no-code", "--name", "long", "--", "sleep", "30")
    try:
        for follow in ([], ["--follow"]):
            result = server.cli("wait", str(job["id"]), "--timeout", "1", *follow, timeout=60)
            assert result.returncode == 1 and "after 1s" in result.stderr, result.stderr
    finally:
        server.cli("cancel", str(job["id"]))
        server.cli("wait", str(job["id"]), "--timeout", "30")
