"""Scheduler replay: the Philly trace (all 82,247 jobs) and ITP cluster04 (15,802 jobs) through
every policy of `mlyard.scheduler.decide`, on simulated clusters where FIFO queues substantially.

Prints one table per trace with the policies side by side (each policy's avg JCT also as a ratio
to FIFO's), then the targets: on both traces balanced's avg JCT ≤ 1/3 of FIFO's and ≤ LAS's and
balanced's GPU utilization ≥ FIFO's; the full Philly replay takes ≤ 120 s of wall time per
policy (measured as the worker's CPU time, which equals wall time on an otherwise idle core and
is not inflated by other processes sharing the machine). Exits 1 when a target is missed.
Replays run in parallel worker processes (one per core).

Cluster sizes: Philly on 672 GPUs (84 nodes of 8), ITP cluster04 on 544 (68 nodes). Neither
trace gives its cluster's size. Philly's time-averaged GPU demand is 374 GPUs (peak 1,243) but
its weekly offered load reaches 714 in October; cluster04 averages 495 (peak 2,025). A policy
can shorten the wait but never the run (average duration 3.6 h and 5.6 h), so each trace runs
on the largest size, in whole racks of 32 GPUs, at which FIFO's average queueing delay exceeds
twice the average duration while the queue still drains as the trace ends. Measured with
`--probe` (FIFO avg queueing): Philly 640 → 33.1 h, 672 → 11.9 h, 704 → 3.8 h, 768 → 0.8 h;
cluster04 512 → 43.3 h (drains only after the trace), 528 → 26.6 h, 544 → 16.4 h,
560 → 9.1 h, 576 → 5.6 h. docs/simulator.md has the full table.

    .venv/bin/python bench/sched_replay.py [--traces philly itp] [--policies fifo balanced ...]
        [--philly-gpus 672] [--itp-gpus 544] [--workers 2] [--json OUT]
    .venv/bin/python bench/sched_replay.py --probe 640 672 704 [--traces philly]   # FIFO queueing per size
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPOSITORY = Path(__file__).resolve().parents[1]
TRACES = REPOSITORY.parent / "shared" / "traces"
TRACE_FILES = {
    "philly": ("philly", TRACES / "philly-pollux" / "philly.csv"),
    "itp": ("itp", TRACES / "microsoft-itp-2021" / "raw" / "cluster04.csv"),
}
CLUSTER_GPUS = {"philly": 672, "itp": 544}
POLICIES = ("fifo", "backfill", "priority", "las", "srtf-oracle", "balanced")
PHILLY_WALL_LIMIT = 120.0


def replay_one(task: tuple[str, int, str]):
    """Worker: (trace name, cluster GPUs, policy) → (trace name, Metrics, CPU seconds including loading).

    CPU time of the worker process, not wall time: on a shared machine the wall clock also
    counts other people's processes, while on an idle core the two agree.
    """
    from mlyard.sim import Scenario, replay

    name, gpus, policy = task
    fmt, path = TRACE_FILES[name]
    started = time.process_time()
    metrics = replay(Scenario(path, fmt, gpus=gpus), policy)
    return name, metrics, time.process_time() - started


def run_all(tasks: list[tuple[str, int, str]], workers: int, console: Console) -> list:
    results = []
    # Longest first (Philly, preemptive policies) so the last worker is not left with a long tail.
    ordered = sorted(tasks, key=lambda task: (task[0] != "philly", task[2] == "fifo"))
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for name, metrics, seconds in pool.imap_unordered(replay_one, ordered):
            console.print(f"{name:>6} {metrics.policy:>11} on {metrics.cluster_gpus} GPUs: "
                          f"avg JCT {metrics.avg_jct / 3600:8.2f} h, {seconds:6.1f} s of CPU, "
                          f"{metrics.wall_seconds:6.1f} s wall ({metrics.decide_seconds:.1f} s in decide)")
            results.append((name, metrics, seconds))
    return results


def probe(sizes: list[int], traces: list[str], workers: int, console: Console) -> int:
    results = run_all([(name, size, "fifo") for name in traces for size in sizes], workers, console)
    table = Table(title="FIFO queueing by cluster size")
    for column in ("trace", "GPUs", "avg queueing", "p99 queueing", "avg JCT", "utilization", "makespan"):
        table.add_column(column, justify="right")
    for name, metrics, _ in sorted(results, key=lambda item: (item[0], item[1].cluster_gpus)):
        table.add_row(name, str(metrics.cluster_gpus), f"{metrics.avg_queueing / 3600:.2f} h",
                      f"{metrics.p99_queueing / 3600:.1f} h", f"{metrics.avg_jct / 3600:.2f} h",
                      f"{metrics.utilization:.1%}", f"{metrics.makespan / 86400:.1f} d")
    console.print(table)
    return 0


def check_targets(by_trace: dict[str, dict[str, object]], seconds: dict[tuple[str, str], float]) -> tuple[Table, bool]:
    table = Table(title="targets")
    for column in ("target", "measured", "met"):
        table.add_column(column)
    met_all = True

    def row(label: str, measured: str, met: bool) -> None:
        nonlocal met_all
        met_all &= met
        table.add_row(label, measured, "yes" if met else "NO")

    for name, results in by_trace.items():
        if not {"fifo", "balanced"} <= results.keys():
            continue
        fifo, balanced = results["fifo"], results["balanced"]
        ratio = balanced.avg_jct / fifo.avg_jct
        row(f"{name}: balanced avg JCT ≤ 1/3 of fifo's", f"{ratio:.3f} of fifo's", ratio <= 1 / 3)
        if "las" in results:
            las = results["las"]
            row(f"{name}: balanced avg JCT ≤ las's", f"{balanced.avg_jct / 3600:.2f} h vs {las.avg_jct / 3600:.2f} h",
                balanced.avg_jct <= las.avg_jct)
        row(f"{name}: balanced utilization ≥ fifo's", f"{balanced.utilization:.2%} vs {fifo.utilization:.2%}",
            balanced.utilization >= fifo.utilization)
    for (name, policy), spent in sorted(seconds.items()):
        if name == "philly":
            row(f"philly replay time ≤ {PHILLY_WALL_LIMIT:.0f} s, {policy}", f"{spent:.1f} s CPU",
                spent <= PHILLY_WALL_LIMIT)
    table.caption = "all targets met" if met_all else "SOME TARGETS MISSED"
    return table, met_all


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="+", choices=sorted(TRACE_FILES), default=["philly", "itp"])
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--philly-gpus", type=int, default=CLUSTER_GPUS["philly"])
    parser.add_argument("--itp-gpus", type=int, default=CLUSTER_GPUS["itp"])
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--probe", type=int, nargs="+", metavar="GPUS",
                        help="only measure FIFO's queueing at these cluster sizes")
    parser.add_argument("--json", type=Path, help="also write every result to this file")
    arguments = parser.parse_args()
    console = Console()
    if not console.is_terminal:  # a log file gets the whole table, not one squeezed to 80 columns
        console = Console(width=160)
    missing = [str(TRACE_FILES[name][1]) for name in arguments.traces if not TRACE_FILES[name][1].exists()]
    if missing:
        console.print(f"[red]error:[/] trace not found: {', '.join(missing)}")
        return 2
    if arguments.probe:
        return probe(arguments.probe, arguments.traces, arguments.workers, console)

    from mlyard.sim.report import document, table

    sizes = {"philly": arguments.philly_gpus, "itp": arguments.itp_gpus}
    tasks = [(name, sizes[name], policy) for name in arguments.traces for policy in arguments.policies]
    results = run_all(tasks, arguments.workers, console)
    by_trace: dict[str, dict[str, object]] = {name: {} for name in arguments.traces}
    seconds = {}
    for name, metrics, spent in results:
        by_trace[name][metrics.policy] = metrics
        seconds[name, metrics.policy] = spent
    for name in arguments.traces:
        ordered = [by_trace[name][policy] for policy in arguments.policies]
        jobs = ordered[0].jobs + ordered[0].rejected
        console.print(table(ordered, f"{name}: {jobs:,} jobs on {sizes[name]:,} GPUs ({sizes[name] // 8} nodes × 8)"))
    targets, met = check_targets(by_trace, seconds)
    console.print(targets)
    if arguments.json:
        arguments.json.write_text(json.dumps({
            name: document([by_trace[name][policy] for policy in arguments.policies], cluster_gpus=sizes[name],
                           replay_cpu_seconds={policy: seconds[name, policy] for policy in arguments.policies})
            for name in arguments.traces
        }, indent=2) + "\n")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
