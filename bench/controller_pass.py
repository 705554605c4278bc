"""Controller pass: `Controller.reconcile_once` with 10,000 queued jobs that cannot start (the
one node is full), on SQLite, with a backend fake that answers at once.

Prints, over several passes, the p50 pass time and the share of it spent validating job specs
(`JobSpec.model_validate`, from cProfile), for the server as it runs (specs parsed once per job
and kept) and for a baseline measured in the same run: the same passes with the parsed specs
forgotten before each one, which is what every pass paid when each read validated the JSON
again. Target: no spec validation in a pass after the first. Exits 1 when it is missed.

    .venv/bin/python bench/controller_pass.py [--jobs 10000] [--passes 5] [--top 0]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
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


def timed_passes(controller: Controller, passes: int, *, forget: bool) -> tuple[list[float], float, str]:
    """Pass times, the seconds spent in spec validation over all passes, and the profile's top."""
    times, validating, tops = [], 0.0, ""
    for _ in range(passes):
        if forget:
            controller.database.specs.clear()
        profile = cProfile.Profile()
        began = time.perf_counter()
        profile.enable()
        controller.reconcile_once()
        profile.disable()
        times.append(time.perf_counter() - began)
        stats = pstats.Stats(profile)
        validating += sum(row[3] for function, row in stats.stats.items()
                          if function[2] == "model_validate" and "pydantic" in function[0])
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(18)
        tops = text.getvalue()
    return times, validating, tops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--top", action="store_true", help="print each run's cProfile top (cumulative)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        paths = Paths(Path(home))
        settings = ServerSettings(paths=paths)
        database = Database.open(f"sqlite:///{paths.database}")
        backend = FullNode()
        record_nodes(database, backend.name, backend.nodes())
        queue_jobs(database, options.jobs)
        controller = Controller(database=database, backend=backend, settings=settings, blobs=BlobStore(paths.blobs))
        controller.reconcile_once()  # the first pass parses every spec once, as a new leader does
        kept = timed_passes(controller, options.passes, forget=False)
        baseline = timed_passes(controller, options.passes, forget=True)
        database.close()
    table = Table(title=f"controller pass, {options.jobs:,} queued jobs, SQLite")
    for column in ("run", "p50 pass", "spec validation per pass", "share of the pass", "p50 / baseline"):
        table.add_column(column, justify="right")
    baseline_p50 = statistics.median(baseline[0])
    for label, (times, validating, _) in (("specs kept (server)", kept), ("specs parsed every pass (baseline)", baseline)):
        p50 = statistics.median(times)
        per_pass = validating / len(times)
        table.add_row(label, f"{p50 * 1000:.0f} ms", f"{per_pass * 1000:.0f} ms", f"{per_pass / p50:.0%}",
                      f"{p50 / baseline_p50:.2f}")
    console = Console()
    console.print(table)
    if options.top:
        console.print("[bold]specs kept[/bold]\n" + kept[2])
        console.print("[bold]baseline[/bold]\n" + baseline[2])
    if kept[1] > 0:
        console.print(f"[red]missed: passes after the first spent {kept[1] * 1000:.1f} ms validating specs[/red]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
