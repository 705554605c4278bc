"""CPU cost of node sampling with 10 running replicas, beside a baseline measured in the same run.

Ten stand-ins for replicas run meanwhile, each a launcher-like parent with a command below it
(half of the commands spin, half sleep). Measured, as CPU seconds of the sampling thread per
sample (`time.thread_time`, so the replicas' own CPU does not count):

- measure: `Sampler.sample` (node figures, NVML where present, the 10 process trees);
- full pass: what the server's sampling thread does every interval: read the replicas from the
  database, measure, store the figures (SQLite, as in embedded mode);
- compaction: rolling a minute up and expiring rows, run once a minute, spread over the
  minute's samples.

Baseline: a bare `psutil.cpu_percent()` + `psutil.virtual_memory()` per sample. Target: the
full pass plus compaction ≤ 1% of one core at the default 5 s interval. Prints a table; exits
1 when the target is missed.

    .venv/bin/python bench/monitor_overhead.py [--samples 200]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from mlyard.backends.base import NodeDescription
from mlyard.paths import Paths
from mlyard.monitor import Root, Sampler
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobRow, ReplicaRow
from mlyard.server.workers.sampling import NodeMonitor
from mlyard.server.services import resources
from mlyard.server.services.nodes import record_nodes
from mlyard.server.settings import DEFAULT_SAMPLE_INTERVAL, ServerSettings

REPLICAS = 10
TARGET_PERCENT = 1.0
NODE = "bench-node"
PAUSE = 0.02
"""Between samples, so that each measures a real interval of the replicas' work."""
COMMANDS = ("while True: pass", "import time; time.sleep(3600)")
LAUNCHER = "import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1]])"


def start_replicas() -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", LAUNCHER, COMMANDS[index % 2]], start_new_session=True)
            for index in range(REPLICAS)]


def stop_replicas(replicas: list[subprocess.Popen]) -> None:
    for replica in replicas:
        try:
            for child in psutil.Process(replica.pid).children(recursive=True):
                child.kill()
        except psutil.Error:
            pass
        replica.kill()
        replica.wait()


def cpu_per_call(call: Callable[[], object], count: int) -> float:
    """CPU seconds of this thread per call, the first (warm-up) call left out."""
    call()
    spent = 0.0
    for _ in range(count):
        time.sleep(PAUSE)
        began = time.thread_time()
        call()
        spent += time.thread_time() - began
    return spent / count


def record_replicas(database: Database, replicas: list[subprocess.Popen]) -> None:
    now = time.time()
    with database.transaction() as session:
        for index, replica in enumerate(replicas, start=1):
            session.add(JobRow(id=index, name=f"job-{index}", project="default", queue="default", priority=0,
                               spec={}, status="RUNNING", attempt_count=1, submitted_at=now, updated_at=now))
            attempt = AttemptRow(job_id=index, number=1, created_at=now, launched_at=now)
            session.add(attempt)
            session.flush()
            session.add(ReplicaRow(attempt_id=attempt.id, job_id=index, role="worker", index=0, rank=0, node=NODE,
                                   cpu_ids=[0], gpu_ids=[], memory_bytes=1 << 30, directory="/nonexistent",
                                   state="running", pid=replica.pid,
                                   pid_started_at=psutil.Process(replica.pid).create_time()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    arguments = parser.parse_args()
    console = Console(width=max(110, Console().width))
    replicas = start_replicas()
    try:
        time.sleep(1.0)  # the stand-ins past their interpreters' start
        roots = {index: Root(replica.pid) for index, replica in enumerate(replicas)}

        def baseline() -> None:
            psutil.cpu_percent()
            psutil.virtual_memory()

        base = cpu_per_call(baseline, arguments.samples)
        sampler = Sampler()
        try:
            trees = sampler.sample(roots).trees
            measure = cpu_per_call(lambda: sampler.sample(roots), arguments.samples)
        finally:
            sampler.close()
        if len(trees) != REPLICAS or any(tree.processes < 2 for tree in trees.values()):
            console.print(f"[red]the sampler saw {len(trees)} of {REPLICAS} replica trees[/]")
            return 1

        with tempfile.TemporaryDirectory() as scratch:
            database = Database.open(f"sqlite:///{scratch}/mlyard.db")
            try:
                record_nodes(database, "local", [NodeDescription(name=NODE, address="127.0.0.1", cpu_ids=(0,),
                                                                 memory_bytes=1 << 30)])
                record_replicas(database, replicas)
                monitor = NodeMonitor(database, NODE, ServerSettings(paths=Paths(Path(scratch))))
                try:
                    full = cpu_per_call(monitor.sample_once, arguments.samples)
                finally:
                    monitor.sampler.close()
                began = time.thread_time()
                # As if the minutes of these samples had ended: each sample is rolled up once.
                rolled = resources.compact(database, time.time() + 120, raw_retention=7200, minute_retention=86400)
                compaction = (time.thread_time() - began) / arguments.samples
                if not rolled.minutes:
                    console.print("[red]compaction rolled nothing up[/]")
                    return 1
            finally:
                database.close()
    finally:
        stop_replicas(replicas)

    def percent(seconds: float) -> float:
        return 100 * seconds / DEFAULT_SAMPLE_INTERVAL

    total = full + compaction
    table = Table(title=f"Sampling cost, {REPLICAS} replicas, {arguments.samples} samples, "
                        f"{DEFAULT_SAMPLE_INTERVAL:g} s interval")
    for column in ("measure", "CPU ms / sample", "% of a core", "× baseline", "target", "met"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    table.add_row("baseline (cpu_percent + virtual_memory)", f"{base * 1000:.3f}", f"{percent(base):.4f}", "1.0",
                  "-", "-")
    for name, seconds in (("measure (node, GPUs, 10 trees)", measure), ("full pass (read, measure, store)", full),
                          ("compaction per sample", compaction)):
        table.add_row(name, f"{seconds * 1000:.3f}", f"{percent(seconds):.4f}", f"{seconds / base:.1f}", "-", "-")
    met = percent(total) <= TARGET_PERCENT
    table.add_row("[bold]full pass + compaction[/]", f"{total * 1000:.3f}", f"{percent(total):.4f}",
                  f"{total / base:.1f}", f"≤ {TARGET_PERCENT:g}%", "pass" if met else "[red]FAIL[/]")
    console.print(table)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
