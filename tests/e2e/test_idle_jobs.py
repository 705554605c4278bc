"""Utilization policies through a real server and real processes, on the CPU: an idle
interactive job is stopped for it (CANCELLED, with the reason and the events), a busy interactive
job keeps running, and a sleeping batch job keeps running with a warning in `mlyard jobs`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import DATABASES, RunningServer, start_server, stop_server, wait_until

pytestmark = pytest.mark.slow

IDLE_TIMEOUT = 15.0


def run(server: RunningServer, name: str, *command: str, interactive: bool = True, options: tuple[str, ...] = ()) -> int:
    options = (*options, "--interactive", "--idle-timeout", f"{IDLE_TIMEOUT:g}s") if interactive else options
    job = server.cli_json("run", "--no-code", "--framework", "none", "--name", name, *options, "--", *command)
    return job["id"]


def status(server: RunningServer, job_id: int) -> dict:
    return server.cli_json("show", str(job_id))


@pytest.mark.parametrize("database", DATABASES)
def test_an_idle_interactive_job_is_stopped_while_busy_and_batch_jobs_run_on(tmp_path: Path, database: str) -> None:
    server = start_server(tmp_path / "home", database=database, MLYARD_SAMPLE_INTERVAL="1", MLYARD_IDLE_AFTER="6s",
                          MLYARD_INTERACTIVE_IDLE_TIMEOUT="0")
    try:
        refused = server.cli("run", "--no-code", "--idle-timeout", "5m", "--", "sleep", "1")
        assert refused.returncode != 0 and "idle_timeout" in refused.stderr, refused.stderr

        # The machine may have two cores: the idle pair first, then the busy job beside the batch one.
        # Restarts left: an idle stop is not a failure, and is not restarted.
        idle = run(server, "idle-shell", "sleep", "600", options=("--set", "restart_policy.max_restarts=2"))
        batch = run(server, "batch-sleep", "sleep", "600", interactive=False)
        ended = wait_until(lambda: (job := status(server, idle))["status"] == "CANCELLED" and job, 120,
                           "the idle interactive job stopped")
        reason = f"stopped for being idle: CPU under 5% of a core per replica for {IDLE_TIMEOUT:g}s"
        assert ended["message"].startswith(reason), ended["message"]
        assert ended["attempts"][-1]["stop_outcome"] == "CANCELLED" and ended["attempt_count"] == 1
        messages = [event["message"] or "" for event in ended["events"]]
        assert any(message.startswith("CPU idle: under 5% of a core per replica for 6s") for message in messages)
        assert messages[-1].startswith(reason) and ended["events"][-1]["to_status"] == "CANCELLED"
        assert ended["idle_since"] is None  # the warning ends with the running attempt

        busy = run(server, "busy-shell", "python", "-c", "while True: pass")
        started = wait_until(lambda: status(server, busy)["started_at"], 60, "the busy job running")
        wait_until(lambda: time.time() - started > IDLE_TIMEOUT + 10, 60, "the busy job's idle timeout passing")
        assert status(server, busy)["status"] == "RUNNING"
        assert status(server, busy)["idle_since"] is None

        warned = status(server, batch)
        assert warned["status"] == "RUNNING" and warned["attempts"][-1]["stop_reason"] is None
        assert warned["idle_since"] is not None and warned["idle_reason"].startswith("CPU idle")
        listing = server.cli("jobs", check=True).stdout
        [line] = [line for line in listing.splitlines() if "batch-sleep" in line]
        assert "(idle " in line and "CPU idle" in line, listing
        assert "busy-shell" in listing and "(idle " not in next(
            line for line in listing.splitlines() if "busy-shell" in line)
        assert "Warning: CPU idle" in server.cli("show", str(batch), check=True).stdout
        for job_id in (busy, batch):
            server.cli("cancel", str(job_id), check=True)
    finally:
        stop_server(server)
