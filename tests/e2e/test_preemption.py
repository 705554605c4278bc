"""Preemption on a live server: a low-priority job checkpoints on SIGTERM, goes back to the
queue for a high-priority one, and resumes from its checkpoint afterwards."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import MLYARD, RunningServer, start_server, stop_server, wait_until

from mlyard.scheduler import LIVE_POLICIES

COUNTER = '''
import json, os, signal, sys, time

path = os.path.join(os.environ["MLYARD_CHECKPOINT_DIR"], "counter.json")
step = 0
if os.path.exists(path):
    with open(path) as handle:
        step = json.load(handle)["step"]
    print(f"resumed from step {step}", flush=True)


def save():
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        json.dump({"step": step}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def on_sigterm(_signal, _frame):
    save()
    print(f"checkpointed step {step} on SIGTERM", flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, on_sigterm)
while step < int(sys.argv[1]):
    time.sleep(0.1)
    step += 1
    save()
    print(f"step {step}", flush=True)
print("counted to the end", flush=True)
'''


def show(server: RunningServer, job_id: int) -> dict:
    return server.cli_json("show", str(job_id))


def test_a_low_priority_job_is_preempted_for_a_high_priority_one_and_resumes_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "counter.py").write_text(COUNTER)
    server = start_server(tmp_path / "home", MLYARD_SCHEDULER_POLICY="priority", MLYARD_PREEMPT_MIN_RUN="0",
                          MLYARD_STOP_GRACE="5")
    try:
        low = server.cli_json("run", "--cpus", "2", "--name", "low", "--context", str(code), "--",
                              sys.executable, "counter.py", "60")["id"]
        wait_until(lambda: re.search(r"^step [3-9]", server.cli("logs", str(low)).stdout, re.MULTILINE),
                   30, "progress of the low-priority job")

        high = server.cli_json("run", "--cpus", "2", "--name", "high", "--no-code", "--set", "priority=10", "--",
                               sys.executable, "-c", "print('high priority work')")["id"]
        assert server.cli("wait", str(high), "--timeout", "60").returncode == 0, show(server, high)

        history = [(event["to_status"], event["message"]) for event in show(server, low)["events"]]
        statuses = [status for status, _ in history]
        assert "PREEMPTED" in statuses, f"no preemption happened: {history}"
        at = statuses.index("PREEMPTED")
        assert f"job {high}" in history[at][1], history[at]
        assert history[at + 1] == ("QUEUED", "requeued; resumes from its checkpoint")

        assert server.cli("wait", str(low), "--timeout", "90").returncode == 0, show(server, low)
        detail = show(server, low)
        assert detail["status"] == "SUCCEEDED" and detail["preemption_count"] == 1
        assert detail["attained_service"] > 0 and len(detail["attempts"]) == 2
        first, second = detail["attempts"]
        assert first["stop_outcome"] == "PREEMPTED" and f"job {high}" in first["stop_reason"]
        high_detail = show(server, high)
        assert second["launched_at"] >= high_detail["finished_at"] - 1, "the low job came back after the high one"

        log = server.cli("logs", str(low), "--attempt", "2", check=True).stdout
        resumed = int(re.search(r"^resumed from step (\d+)$", log, re.MULTILINE).group(1))
        assert resumed > 0 and "counted to the end" in log
        interrupted = server.cli("logs", str(low), "--attempt", "1", check=True).stdout
        assert f"checkpointed step {resumed} on SIGTERM" in interrupted

        shown = " ".join(server.cli("show", str(low), check=True).stdout.split())
        assert "preempted 1 time" in shown and "#1 ran" in shown and "PREEMPTED:" in shown
    finally:
        stop_server(server)


def test_a_policy_the_server_cannot_run_stops_it_from_starting(tmp_path: Path) -> None:
    environment = {"MLYARD_HOME": str(tmp_path / "home"), "MLYARD_SCHEDULER_POLICY": "srtf-oracle",
                   "MLYARD_JOB_USERS": "off", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([MLYARD, "server", "start"], env=environment, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 1
    assert "MLYARD_SCHEDULER_POLICY" in result.stderr and ", ".join(LIVE_POLICIES) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
