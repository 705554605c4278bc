"""Elastic resizes of examples/digits-elastic.yaml on an embedded server: what a grow and a
shrink cost the training, beside the job's cold start measured in the same run.

The server offers 2 cores and runs the `priority` policy. Each run:
- cold start: a 1-core `sleep` job (the blocker) holds one core; the elastic job is submitted
  and starts at 1 replica (submission → its first step reported: the baseline);
- grow 1 → 2: once it has trained a few steps the blocker is cancelled; the scheduler grows the
  job into the freed core (a checkpoint-restart) and the next attempt trains on 2 replicas;
- shrink 2 → 1: a 1-core job of higher priority is submitted; the scheduler shrinks the
  elastic job to 1 replica for it rather than preempt it whole.

For each resize: the seconds without training, from the last step the old attempt reported to
the first step the new one reported (the server's receive times of `report()`; the new step
includes one epoch of training, and the old attempt's unreported part of an epoch is lost), and
the steps repeated (the old attempt's last reported step minus the step the new one resumed
from), for each checkpoint interval; and where the seconds went: the old attempt stopping (its
last step → its replicas gone, SIGTERM included), the new one starting (→ its replicas running),
its start-up (→ its first step: torchrun, the c10d rendezvous, imports, the checkpoint, one
epoch). Steps are epochs of the digits example (no --epoch-delay: well under a second each).

The server runs with MLYARD_JOB_ISOLATION=none: with the default per-replica PID namespaces,
two torchrun agents on one machine get the same c10d node id and form two worlds of 1
(tests/e2e/test_elastic_training.py).

    .venv/bin/python bench/elastic.py [--repeats 3] [--checkpoint-every 1 5]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from bench_server import REPOSITORY, BenchServer  # the bench folder is on sys.path
EXAMPLE = REPOSITORY / "examples" / "digits-elastic.yaml"
EPOCHS = 2000  # never reached: each run cancels the job once it has shrunk
STEPS_BEFORE_RESIZE = 6  # at least; plus a random part of the checkpoint interval


class Steps:
    """The `loss` points a job reported, fetched as they come: (attempt, step, received at)."""

    def __init__(self, client, job_id: int):
        self.client, self.job_id, self.after, self.points = client, job_id, 0, []

    def poll(self) -> list[tuple[int, int, float]]:
        while True:
            page = self.client.metrics(self.job_id, names=["loss"], after=self.after)
            self.points += [(point.attempt, point.step, point.at) for point in page.points]
            if not page.points or page.next_after == self.after:
                return self.points
            self.after = page.next_after

    def of(self, attempt: int) -> list[tuple[int, float]]:
        return [(step, at) for number, step, at in self.points if number == attempt]

    def wait(self, attempt: int, count: int, timeout: float = 180.0) -> list[tuple[int, float]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            if len(self.of(attempt)) >= count:
                return self.of(attempt)
            time.sleep(0.1)
        raise SystemExit(f"job {self.job_id}: attempt {attempt} reported fewer than {count} steps in {timeout:g}s")


def resize_cost(steps: Steps, attempts: list, old: int, new: int) -> dict[str, float]:
    """From attempt `old` to attempt `new`: the seconds without training, the steps repeated,
    and where the seconds went (the old attempt stopping, the new one starting, its start-up
    until its first step)."""
    last_step, last_at = max(steps.of(old), key=lambda point: point[1])
    first_step, first_at = min(steps.of(new), key=lambda point: point[1])
    stopped, running = attempts[old - 1].finished_at, attempts[new - 1].running_at
    return {
        "gap": first_at - last_at,
        # The new attempt resumed from the checkpoint of step `first_step - 1`.
        "repeated": last_step - (first_step - 1),
        "stop": stopped - last_at,
        "restart": running - stopped,
        "start-up": first_at - running,
    }


class Bench:
    def __init__(self, scratch: Path):
        self.server = BenchServer(scratch, MLYARD_NODE_CPUS="2", MLYARD_STOP_GRACE="5",
                                  MLYARD_SCHEDULER_POLICY="priority", MLYARD_PREEMPT_MIN_RUN="0")
        self.home, self.environment, self.client = self.server.home, self.server.environment, self.server.client
        self.snapshot = self.server.snapshot
        self.example = yaml.safe_load(EXAMPLE.read_text())

    def elastic_spec(self, checkpoint_every: int) -> dict:
        spec = dict(self.example, snapshot=self.snapshot)
        spec["command"] = re.sub(r"examples/digits_ddp\.py.*$",
                                 f"examples/digits_ddp.py --epochs {EPOCHS} --checkpoint-every {checkpoint_every}",
                                 spec["command"].strip())
        spec.pop("max_runtime", None)
        return spec

    def sleeper(self, name: str, priority: int = 0) -> int:
        return self.client.submit({"name": name, "command": ["sleep", "3600"], "priority": priority,
                                   "roles": [{"resources": {"cpu": 1, "memory": "64Mi"}}]}).id

    def wait_status(self, job_id: int, status: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while (current := self.client.job(job_id).status.value) != status:
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job_id} is {current}, not {status}, after {timeout:g}s")
            time.sleep(0.1)

    def run(self, checkpoint_every: int, phase: random.Random) -> dict[str, float]:
        """One cold start, grow and shrink. Each resize comes at a random point of the checkpoint
        interval, as it would in a real cluster: the steps repeated are then its average."""
        client = self.client
        blocker = self.sleeper("blocker")
        self.wait_status(blocker, "RUNNING")
        submitted = time.time()
        job_id = client.submit(self.elastic_spec(checkpoint_every)).id
        steps = Steps(client, job_id)
        urgent = None
        try:
            cold = steps.wait(1, 1)[0][1] - submitted
            steps.wait(1, STEPS_BEFORE_RESIZE + phase.randrange(checkpoint_every))
            client.cancel(blocker)
            steps.wait(2, STEPS_BEFORE_RESIZE + phase.randrange(checkpoint_every))
            urgent = self.sleeper("urgent", priority=10)
            steps.wait(3, 1)
            attempts = client.job(job_id).attempts
            sizes = [len(attempt.replicas) for attempt in attempts]
            if sizes != [1, 2, 1]:
                raise SystemExit(f"job {job_id} ran attempts of {sizes} replicas, not [1, 2, 1]")
            grow, shrink = resize_cost(steps, attempts, 1, 2), resize_cost(steps, attempts, 2, 3)
            step_seconds = statistics.median(b[1] - a[1] for a, b in zip(steps.of(2), steps.of(2)[1:]))
        finally:
            for other in (blocker, urgent, job_id):
                if other is not None and not client.job(other).status.is_terminal:
                    client.cancel(other)
            for other in (blocker, urgent, job_id):
                if other is not None:
                    client.wait(other, poll_seconds=0.1, timeout=60)
        return {"cold": cold, "step at 2": step_seconds, **{f"grow {key}": value for key, value in grow.items()},
                **{f"shrink {key}": value for key, value in shrink.items()}}

    def close(self) -> None:
        self.server.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--checkpoint-every", type=int, nargs="+", default=[1, 5], metavar="STEPS")
    arguments = parser.parse_args()
    console = Console(width=160)
    results: dict[int, list[dict[str, float]]] = {interval: [] for interval in arguments.checkpoint_every}
    phase = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="mlyard-bench-") as scratch:
        bench = Bench(Path(scratch))
        try:
            for repeat in range(arguments.repeats):
                # Interleaved, so drift on a noisy machine hits every interval alike.
                for interval in arguments.checkpoint_every:
                    measured = bench.run(interval, phase)
                    results[interval].append(measured)
                    console.print(f"run {repeat + 1}/{arguments.repeats}, checkpoint every {interval}: "
                                  + ", ".join(f"{key} {value:.2f}" for key, value in measured.items()), style="dim")
        finally:
            bench.close()

    table = Table(title=f"elastic resizes of digits-elastic (median of {arguments.repeats}; seconds)")
    for column in ("resize", "checkpoint every (steps)", "without training", "baseline: cold start", "ratio",
                   "steps repeated", "repeated ÷ interval", "of which: old stops", "new starts",
                   "start-up → 1st step", "step at 2 replicas"):
        table.add_column(column)
    for interval, runs in results.items():
        def median(key: str) -> float:
            return statistics.median(run[key] for run in runs)

        for label, key in (("grow 1 → 2", "grow"), ("shrink 2 → 1", "shrink")):
            gap, repeated, cold = median(f"{key} gap"), median(f"{key} repeated"), median("cold")
            table.add_row(label, str(interval), f"{gap:.2f}", f"{cold:.2f}", f"{gap / cold:.2f}", f"{repeated:g}",
                          f"{repeated / interval:.2f}", f"{median(f'{key} stop'):.2f}",
                          f"{median(f'{key} restart'):.2f}", f"{median(f'{key} start-up'):.2f}",
                          f"{median('step at 2'):.3f}")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
