"""Live scheduling rounds: `Controller.reconcile_once` over a real SQLite database with 10,000
queued jobs that cannot start (every one asks for more cores than the one node has), with a
backend fake that answers at once. `bench/sched_cycle.py` times `decide()` alone; this times
the whole pass around it: reading what changed, the snapshot, `decide`, the waiting reasons.

Prints the p50 of each kind of pass, the share of it spent in `decide`, and the rows it read:
- the first pass (a new leader loads every waiting job and parses each distinct demand once);
- a pass after one submission (reads that job, decides, writes the reasons that changed);
- an idle pass (nothing changed: no round at all);
and a baseline measured in the same run: the same submission pass with the waiting jobs read
again from the rows, as every pass did when nothing was kept between passes. Targets: an idle
pass reads no job row and calls `decide` zero times; a pass after one submission reads one row.
Exits 1 when a target is missed.

    .venv/bin/python bench/controller_pass.py [--jobs 10000] [--passes 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mlyard.backends.base import AttemptLaunch, Backend, NodeDescription, ReplicaObservation, ReplicaRef
from mlyard.paths import Paths
from mlyard.scheduler import decide
from mlyard.server.control.controller import Controller
from mlyard.server.services.nodes import record_nodes
from mlyard.server.settings import ServerSettings
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow
from mlyard.spec import JobSpec, JobStatus
from mlyard.storage import BlobStore


class FullNode(Backend):
    """One node of two cores; every queued job asks for four, so each waits with a reason."""

    name = "bench"

    def nodes(self) -> list[NodeDescription]:
        return [NodeDescription(name="n1", address="127.0.0.1", cpu_ids=(0, 1), memory_bytes=8 << 30)]

    def reserve_ports(self, node: str, count: int) -> list[int]:
        return list(range(30000, 30000 + count))

    def dryrun(self, launch: AttemptLaunch) -> list[dict[str, Any]]:
        return []

    def launch(self, launch: AttemptLaunch) -> list[ReplicaRef]:
        raise AssertionError("nothing fits, so nothing is launched")

    def observe(self, refs: list[ReplicaRef]) -> dict[int, ReplicaObservation]:
        return {}

    def _stop_present(self, refs: list[ReplicaRef], force: bool) -> None:
        pass


def queue_jobs(database: Database, count: int) -> None:
    now = time.time()
    with database.transaction() as session:
        for number in range(count):
            spec = JobSpec.model_validate({
                "name": f"bench-{number}", "command": ["python", "train.py", f"--seed={number}"],
                "roles": [{"name": "worker", "replicas": 1 + number % 2, "resources": {"cpu": 4, "memory": "1Gi"}}],
                "env": {"LR": str(0.001 * (1 + number % 7))}, "priority": number % 3,
            })
            session.add(JobRow(name=spec.name, project=spec.project, queue=spec.queue, priority=spec.priority,
                               spec=spec.model_dump(mode="json"), status=JobStatus.QUEUED.value, attempt_count=0,
                               submitted_at=now + number * 1e-3, updated_at=now))


class Counted:
    """`decide`, timed."""

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, snapshot, now):
        began = time.perf_counter()
        try:
            return decide(snapshot, now)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - began


def submit_one(database: Database, number: int) -> None:
    spec = {"name": f"late-{number}", "command": ["python", "train.py"],
            "roles": [{"name": "worker", "replicas": 1, "resources": {"cpu": 4, "memory": "1Gi"}}]}
    now = time.time()
    with database.transaction() as session:
        validated = JobSpec.model_validate(spec)
        session.add(JobRow(name=validated.name, project="default", queue="default", priority=0,
                           spec=validated.model_dump(mode="json"), status=JobStatus.QUEUED.value, attempt_count=0,
                           submitted_at=now, updated_at=now))


def timed(controller: Controller, counted: Counted, passes: int, before) -> tuple[float, float, float, int]:
    """p50 seconds, decide share, decide calls per pass, job rows read per pass."""
    times, decided, calls, rows = [], 0.0, counted.calls, controller.rounds.queued.rows_read
    for number in range(passes):
        before(number)
        decided_before = counted.seconds
        began = time.perf_counter()
        controller.reconcile_once()
        times.append(time.perf_counter() - began)
        decided += counted.seconds - decided_before
        # A round keeps a gap as long as the last one took; each pass here is measured on its own
        # (and the controller keeps no gap of its own: `pass_gap_seconds` is 0).
        time.sleep(times[-1])
    return (statistics.median(times), decided / sum(times), (counted.calls - calls) / passes,
            (controller.rounds.queued.rows_read - rows) // passes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        paths = Paths(Path(home))
        database = Database.open(f"sqlite:///{paths.database}")
        backend = FullNode()
        record_nodes(database, backend.name, backend.nodes())
        queue_jobs(database, options.jobs)
        settings = ServerSettings(paths=paths, pass_gap_seconds=0)
        controller = Controller(database=database, backend=backend, settings=settings, blobs=BlobStore(paths.blobs))
        counted = controller.decide = Counted()
        rows = {"first pass (loads every waiting job)": timed(controller, counted, 1, lambda _: None)}
        rows["pass after one submission"] = timed(controller, counted, options.passes,
                                                  lambda number: submit_one(database, number))
        rows["idle pass"] = timed(controller, counted, options.passes, lambda _: None)

        def from_rows(number: int) -> None:
            submit_one(database, options.passes + number)
            controller.rounds.clear()
        rows["baseline: pass after one submission, jobs read from the rows"] = timed(
            controller, counted, options.passes, from_rows)
        database.close()
    baseline = rows["baseline: pass after one submission, jobs read from the rows"][0]
    table = Table(title=f"controller pass, {options.jobs:,} queued jobs, SQLite")
    for column in ("pass", "p50", "decide share", "decide calls", "job rows read", "p50 / baseline"):
        table.add_column(column, justify="right")
    for label, (p50, share, calls, read) in rows.items():
        table.add_row(label, f"{p50 * 1000:.1f} ms", f"{share:.0%}", f"{calls:g}", f"{read:,}", f"{p50 / baseline:.2f}")
    console = Console(width=150)
    console.print(table)
    missed = []
    if rows["idle pass"][2] or rows["idle pass"][3]:
        missed.append("an idle pass decided or read job rows")
    if rows["pass after one submission"][3] != 1:
        missed.append("a pass after one submission read more than its job")
    for line in missed:
        console.print(f"[red]missed: {line}[/red]")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
