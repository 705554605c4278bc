"""Recovery times on an embedded server, each beside a baseline measured in the same run.

- replica SIGKILL → training again: a 2-replica job with `max_restarts: 1` loses one replica's
  command to SIGKILL; measured until the restarted attempt's rank 0 prints its first step, minus
  the job's backoff. Baseline: the same job's cold start (submission → first step).
  Target ≤ 5 s.
- server kill -9 → re-adoption: the server is killed while a job runs and started again at
  at once (`python -m mlyard.server`, as a service manager restarts it); measured until the new
  server's health check reports the running replicas adopted.
  Baseline: a clean server start (stop, start → health). Target ≤ 3 s.

Prints a table with medians and ratios; exits 1 when a target is missed.

    .venv/bin/python bench/recovery.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

BIN = Path(sys.executable).parent
BACKOFF = 1.0
REPLICA_TARGET = 5.0
ADOPTION_TARGET = 3.0
# A stand-in for a training loop: resumes from the step its checkpoint file names, prints a
# timestamped step every 50 ms and checkpoints every 10 steps.
TRAINER = r"""
import os, sys, time
path = os.path.join(os.environ["MLYARD_CHECKPOINT_DIR"], "step-" + os.environ["RANK"])
step = int(open(path).read()) if os.path.exists(path) else 0
while step < 100000:
    step += 1
    print(f"step {step} at {time.time():.6f}", flush=True)
    if step % 10 == 0:
        open(path + ".tmp", "w").write(str(step)); os.replace(path + ".tmp", path)
    time.sleep(0.05)
"""
STEP = re.compile(r"^step \d+ at (\d+\.\d+)$", re.MULTILINE)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def first_step_at(log: Path, timeout: float = 60.0) -> float:
    """The time rank 0's command printed its first step (it stamps the line itself)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and (match := STEP.search(log.read_text(errors="replace"))):
            return float(match.group(1))
        time.sleep(0.01)
    raise SystemExit(f"no training step appeared in {log} within {timeout:g}s")


class Bench:
    def __init__(self, home: Path):
        from mlyard.client import Client

        self.home = home
        home.mkdir(parents=True, mode=0o700)
        self.environment = {key: value for key, value in os.environ.items() if not key.startswith("MLYARD_")}
        self.environment.update({"MLYARD_HOME": str(home), "MLYARD_PORT": str(free_port()),
                                 "MLYARD_NODE_CPUS": "2", "MLYARD_STOP_GRACE": "5"})
        self.start_server()
        self.client = Client(f"http://127.0.0.1:{self.environment['MLYARD_PORT']}",
                             (home / "admin.token").read_text().strip())

    def start_server(self) -> float:
        """Starts `python -m mlyard.server` as a service manager restarting it would (systemd's
        Restart=always, a container's restart policy); seconds until its health check answers."""
        import httpx

        started = time.perf_counter()
        with open(self.home / "server.log", "ab") as log:
            self.server = subprocess.Popen([sys.executable, "-m", "mlyard.server"], env=self.environment, stdout=log,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        url = f"http://127.0.0.1:{self.environment['MLYARD_PORT']}/api/v1/health"
        while True:
            try:
                if httpx.get(url, timeout=1).is_success:
                    return time.perf_counter() - started
            except httpx.TransportError:
                time.sleep(0.01)

    def run_directory(self, job_id: int, attempt: int, replica: str) -> Path:
        return self.home / "runs" / str(job_id) / str(attempt) / replica

    def submit(self, name: str, **fields) -> int:
        spec = {"name": name, "command": ["python", "-c", TRAINER],
                "roles": [{"replicas": 2, "resources": {"cpu": 1, "memory": "256Mi"}}], **fields}
        return self.client.submit(spec).id

    def replica_kill(self) -> tuple[float, float]:
        """(cold start, SIGKILL → training again minus the backoff), in seconds."""
        submitted = time.time()
        job_id = self.submit("replica-kill", restart_policy={"max_restarts": 1, "backoff_seconds": BACKOFF})
        cold = first_step_at(self.run_directory(job_id, 1, "worker-0") / "output.log") - submitted
        time.sleep(0.6)  # a checkpoint or so
        command = json.loads((self.run_directory(job_id, 1, "worker-1") / "started.json").read_text())["pid"]
        killed = time.time()
        os.kill(command, signal.SIGKILL)
        again = first_step_at(self.run_directory(job_id, 2, "worker-0") / "output.log") - killed
        self.client.cancel(job_id)
        self.client.wait(job_id, timeout=60)
        return cold, again - BACKOFF

    def server_kill(self) -> tuple[float, float]:
        """(clean server start, kill -9 → running replicas adopted by the next server)."""
        self.stop_server()
        clean = self.start_server()
        job_id = self.submit("server-kill")
        first_step_at(self.run_directory(job_id, 1, "worker-0") / "output.log")
        killed = time.perf_counter()
        self.server.kill()
        self.server.wait()
        self.start_server()
        while (adopted := self.client.health().adopted) is None:
            time.sleep(0.01)
        adoption = time.perf_counter() - killed
        if adopted < 2:
            raise SystemExit(f"the restarted server adopted {adopted} replicas, not 2")
        self.client.cancel(job_id)
        self.client.wait(job_id, timeout=60)
        return clean, adoption

    def stop_server(self) -> None:
        self.server.terminate()  # SIGTERM: running jobs are left running
        self.server.wait(timeout=60)

    def close(self) -> None:
        self.client.close()
        self.stop_server()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args()
    console = Console(width=150)
    cold, restart, clean, adoption = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="mlyard-bench-") as scratch:
        bench = Bench(Path(scratch) / "home")
        try:
            for run in range(arguments.runs):
                console.print(f"run {run + 1}/{arguments.runs}", style="dim")
                baseline, measured = bench.replica_kill()
                cold.append(baseline)
                restart.append(measured)
                baseline, measured = bench.server_kill()
                clean.append(baseline)
                adoption.append(measured)
        finally:
            bench.close()

    table = Table(title=f"recovery (median of {arguments.runs} runs)")
    for column in ("measure", "seconds", "baseline", "baseline seconds", "ratio", "target", "met"):
        table.add_column(column)
    rows = [
        ("replica SIGKILL → training again (− backoff)", statistics.median(restart),
         "cold start: submit → training", statistics.median(cold), REPLICA_TARGET),
        ("server kill -9 → jobs re-adopted", statistics.median(adoption),
         "clean server start", statistics.median(clean), ADOPTION_TARGET),
    ]
    missed = False
    for measure, seconds, baseline, baseline_seconds, target in rows:
        met = seconds <= target
        missed |= not met
        table.add_row(measure, f"{seconds:.2f}", baseline, f"{baseline_seconds:.2f}",
                      f"{seconds / baseline_seconds:.2f}", f"≤ {target:g} s", "yes" if met else "NO")
    console.print(table)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
