"""Scheduler replay: every public trace through every policy of `mlyard.scheduler.decide`.

Each trace runs at several loads on a simulated cluster where FIFO queues substantially.

Traces: Philly (all 82,247 jobs), ITP cluster01–04 (1,595, 5,778, 3,011 and 15,802 jobs) and
Alibaba openb (8,152 pods, on its own 1,213 GPU nodes). Each is replayed at every load factor
of `--loads` (default 0.5 0.8 1.0 1.2: interarrival times divided by it, `mlyard.sim.load`),
each (trace, size, load, policy) one task for a pool of worker processes (one per core).
Prints one table per (trace, load) with the policies side by side (each policy's avg JCT also
as a ratio to FIFO's), then the targets for the scheduler's default policy (`DEFAULT_POLICY`,
"balanced"):

* on every (trace, load): its avg JCT ≤ FIFO's and ≤ LAS's, its p99 JCT ≤ 1.5 × FIFO's, and at
  most 1 preemption per job on average;
* on Philly and ITP cluster04 at load 1: its avg JCT ≤ 1/3 of FIFO's and its GPU utilization
  ≥ FIFO's; the full Philly replay at load 1 takes ≤ 120 s of wall time per policy (measured
  as the worker's CPU time, which equals wall time on an otherwise idle core and is not
  inflated by other processes sharing the machine).

Exits 1 when a target is missed. `--traces philly itp04 --loads 1` is the earlier benchmark
(`itp` still names cluster04, `--itp-gpus` its size).

Cluster sizes (CLUSTER_GPUS, whole nodes of 8). No trace but openb gives its cluster's size. A
policy can shorten the wait but never the run, so each trace runs where FIFO's average
queueing delay is well above its average duration while the queue still drains as the trace
ends (makespan as on a cluster big enough not to queue). Philly's time-averaged GPU demand is
374 GPUs (peak 1,243) but its weekly offered load reaches 714 in October; cluster04 averages
495 (peak 2,025); cluster01 28, cluster02 86, cluster03 140. Measured with `--probe` (FIFO,
load 1, avg queueing; avg duration in brackets; makespan ÷ arrival span where it matters):
Philly [3.6 h] 640 → 33.1 h, 672 → 11.9 h, 704 → 3.8 h, 768 → 0.8 h;
cluster04 [5.6 h] 512 → 43.3 h (drains only after the trace), 528 → 26.6 h, 544 → 16.4 h,
560 → 9.1 h, 576 → 5.6 h;
cluster01 [3.5 h; its largest jobs need 64 GPUs, fewer would reject them] 64 → 36.6 h,
80 → 23.4 h, 88 → 16.7 h, 96 → 13.0 h, 104 → 8.4 h, 128 → 2.1 h (all drain: 34.2 d ÷ 33.8 d);
cluster02 [6.4 h] 104 → 120.5 h (71.1 d ÷ 59.7 d), 128 → 52.1 h (62.0 d), 144 → 23.4 h
(60.5 d), 152 → 11.7 h (60.3 d), 160 → 6.8 h (60.2 d), 256 → 0.1 h (59.9 d);
cluster03 [6.2 h] 200 → 30.1 h (54.0 d ÷ 49.3 d), 232 → 16.7 h (52.0 d), 256 → 9.6 h
(50.9 d), 272 → 7.4 h (50.5 d), 320 → 3.4 h (49.8 d).
Hence 672 (Philly), 96 (cluster01), 152 (cluster02), 256 (cluster03), 544 (cluster04): FIFO
waits 1.5–4× the average duration and finishes within about a day of a cluster that hardly
queues.
docs/simulator.md has the full Philly/cluster04 table.

    .venv/bin/python bench/sched_replay.py [--traces philly itp01 ... openb] [--loads 0.5 1.0]
        [--policies fifo balanced ...] [--gpus itp02=144 ...] [--workers 2] [--json OUT]
    .venv/bin/python bench/sched_replay.py --probe 640 672 704 --traces philly   # FIFO queueing per size
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mlyard.scheduler import DEFAULT_POLICY

REPOSITORY = Path(__file__).resolve().parents[1]
TRACES = REPOSITORY.parent / "shared" / "traces"
ITP = TRACES / "microsoft-itp-2021" / "raw"
TRACE_FILES = {  # longest replay first: run_all starts the long ones first
    "philly": ("philly", TRACES / "philly-pollux" / "philly.csv"),
    "itp04": ("itp", ITP / "cluster04.csv"),
    "openb": ("openb", TRACES / "alibaba-openb-2023" / "openb_pod_list_default.csv"),
    "itp02": ("itp", ITP / "cluster02.csv"),
    "itp03": ("itp", ITP / "cluster03.csv"),
    "itp01": ("itp", ITP / "cluster01.csv"),
}
ALIASES = {"itp": "itp04"}
CLUSTER_GPUS: dict[str, int | None] = {"philly": 672, "itp04": 544, "openb": None,
                                       "itp02": 152, "itp03": 256, "itp01": 96}
"""None: the trace's own node list (openb)."""
POLICIES = ("fifo", "backfill", "priority", "las", "srtf-oracle", "balanced")
LOADS = (0.5, 0.8, 1.0, 1.2)
PHILLY_WALL_LIMIT = 120.0
ONE_THIRD_TRACES = ("philly", "itp04")
P99_LIMIT = 1.5
PREEMPTIONS_LIMIT = 1.0

Task = tuple[str, "int | None", float, str]


def replay_one(task: Task):
    """Worker: (trace, cluster GPUs, load, policy) → (trace, load, Metrics, Offered, CPU seconds).

    CPU time of the worker process (loading included), not wall time: on a shared machine the
    wall clock also counts other people's processes, while on an idle core the two agree.
    """
    from mlyard.sim import Scenario, offered, replay

    name, gpus, load, policy = task
    fmt, path = TRACE_FILES[name]
    started = time.process_time()
    scenario = Scenario(path, fmt, gpus=gpus, load=load)
    jobs = scenario.jobs()
    metrics = replay(scenario, policy, jobs=jobs)
    # The jobs are already rescaled: their span is the span at this load.
    offer = replace(offered(jobs, metrics.cluster_gpus), load=load)
    return name, load, metrics, offer, time.process_time() - started


def run_all(tasks: list[Task], workers: int, console: Console) -> list:
    results = []
    # Longest first (big traces, high loads, preemptive policies) so no worker is left with a long tail.
    order = list(TRACE_FILES)
    ordered = sorted(tasks, key=lambda task: (order.index(task[0]), task[3] == "fifo", -task[2]))
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for name, load, metrics, offer, seconds in pool.imap_unordered(replay_one, ordered):
            console.print(f"{name:>6} load {load:<4g} {metrics.policy:>11} on {metrics.cluster_gpus:>5} GPUs: "
                          f"avg JCT {metrics.avg_jct / 3600:8.2f} h, {seconds:6.1f} s of CPU, "
                          f"{metrics.wall_seconds:6.1f} s wall ({metrics.decide_seconds:.1f} s in decide)")
            results.append((name, load, metrics, offer, seconds))
    return results


def probe(sizes: list[int], traces: list[str], loads: list[float], workers: int, console: Console) -> int:
    tasks = [(name, size, load, "fifo") for name in traces for size in sizes for load in loads]
    results = run_all(tasks, workers, console)
    table = Table(title="FIFO queueing by cluster size")
    for column in ("trace", "load", "GPUs", "avg queueing", "p99 queueing", "avg JCT", "utilization",
                   "makespan", "arrivals"):
        table.add_column(column, justify="right")
    for name, load, metrics, offer, _ in sorted(results, key=lambda item: (item[0], item[1], item[2].cluster_gpus)):
        table.add_row(name, f"{load:g}", str(metrics.cluster_gpus), f"{metrics.avg_queueing / 3600:.2f} h",
                      f"{metrics.p99_queueing / 3600:.1f} h", f"{metrics.avg_jct / 3600:.2f} h",
                      f"{metrics.utilization:.1%}", f"{metrics.makespan / 86400:.1f} d",
                      f"{offer.arrival_span / 86400:.1f} d")
    table.caption = "arrivals: first submission to last; the queue drains when makespan ≈ arrivals + the last runs"
    console.print(table)
    return 0


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def sweep_targets(grid: dict, policy: str) -> tuple[Table, list[dict], bool]:
    """The default policy against FIFO and LAS on every (trace, load) replayed with them."""
    table = Table(title=f"targets: {policy} on every trace and load")
    for column in ("trace", "load", "avg JCT ≤ fifo's", "avg JCT ≤ las's", f"p99 JCT ≤ {P99_LIMIT:g} × fifo's",
                   f"preemptions per job ≤ {PREEMPTIONS_LIMIT:g}"):
        table.add_column(column, justify="right")
    checks, met_all = [], True

    def cell(trace: str, load: float, target: str, measured: str, met: bool) -> str:
        nonlocal met_all
        met_all &= met
        checks.append({"trace": trace, "load": load, "target": target, "measured": measured, "met": met})
        return f"{measured} {'✓' if met else '[red]NO[/]'}"

    for (name, load), results in grid.items():
        if policy not in results:
            continue
        own, fifo, las = results[policy], results.get("fifo"), results.get("las")
        cells = ["-", "-", "-"]
        if fifo is not None:
            cells[0] = cell(name, load, "avg JCT ≤ fifo's", f"{_hours(own.avg_jct)} vs {_hours(fifo.avg_jct)}",
                            own.avg_jct <= fifo.avg_jct)
            cells[2] = cell(name, load, f"p99 JCT ≤ {P99_LIMIT:g} × fifo's",
                            f"{own.p99_jct / fifo.p99_jct:.2f} × fifo's", own.p99_jct <= P99_LIMIT * fifo.p99_jct)
        if las is not None:
            cells[1] = cell(name, load, "avg JCT ≤ las's", f"{_hours(own.avg_jct)} vs {_hours(las.avg_jct)}",
                            own.avg_jct <= las.avg_jct)
        preemptions = cell(name, load, f"preemptions per job ≤ {PREEMPTIONS_LIMIT:g}",
                           f"{own.preemptions_per_job:.3f}", own.preemptions_per_job <= PREEMPTIONS_LIMIT)
        table.add_row(name, f"{load:g}", *cells, preemptions)
    return table, checks, met_all


def load_one_targets(grid: dict, seconds: dict, policy: str) -> tuple[Table, list[dict], bool]:
    """The earlier benchmark's targets: Philly and cluster04 as they are (load 1), Philly's replay time."""
    table = Table(title="targets at load 1")
    for column in ("target", "measured", "met"):
        table.add_column(column)
    checks, met_all = [], True

    def row(trace: str, label: str, measured: str, met: bool) -> None:
        nonlocal met_all
        met_all &= met
        checks.append({"trace": trace, "load": 1.0, "target": label, "measured": measured, "met": met})
        table.add_row(f"{trace}: {label}", measured, "yes" if met else "[red]NO[/]")

    for name in ONE_THIRD_TRACES:
        results = grid.get((name, 1.0), {})
        if not {"fifo", policy} <= results.keys():
            continue
        fifo, own = results["fifo"], results[policy]
        ratio = own.avg_jct / fifo.avg_jct
        row(name, f"{policy} avg JCT ≤ 1/3 of fifo's", f"{ratio:.3f} of fifo's", ratio <= 1 / 3)
        row(name, f"{policy} utilization ≥ fifo's", f"{own.utilization:.2%} vs {fifo.utilization:.2%}",
            own.utilization >= fifo.utilization)
    for (name, load, other), spent in sorted(seconds.items()):
        if name == "philly" and load == 1.0:
            row(name, f"replay time ≤ {PHILLY_WALL_LIMIT:.0f} s, {other}", f"{spent:.1f} s CPU",
                spent <= PHILLY_WALL_LIMIT)
    return table, checks, met_all


def write_json(path: Path, results: list, sizes: dict, checks: list[dict], met: bool, policies: list[str]) -> None:
    """Every result with its trace, cluster size (`cluster_gpus`), load and offered load; the targets."""
    from mlyard.sim.report import sweep_document

    traces, rows = {}, []
    for name in dict.fromkeys(item[0] for item in results):
        mine = [item for item in results if item[0] == name]
        sweep = []
        for load in sorted({item[1] for item in mine}):
            at = {item[2].policy: item for item in mine if item[1] == load}
            sweep.append((next(iter(at.values()))[3], [at[policy][2] for policy in policies if policy in at]))
        fmt, trace = TRACE_FILES[name]
        document = sweep_document(sweep, trace=name, format=fmt, path=str(trace), cluster_gpus=sizes[name])
        cpu = {(item[1], item[2].policy): item[4] for item in mine}
        for result in document.pop("results"):
            rows.append({"trace": name, **result, "replay_cpu_seconds": cpu[result["load"], result["policy"]]})
        traces[name] = document
    path.write_text(json.dumps({"default_policy": DEFAULT_POLICY, "traces": traces, "results": rows,
                                "targets": checks, "targets_met": met}, indent=2) + "\n")


def parse_sizes(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, int | None]:
    sizes = dict(CLUSTER_GPUS, philly=arguments.philly_gpus, itp04=arguments.itp_gpus)
    for item in arguments.gpus or []:
        name, _, count = item.partition("=")
        name = ALIASES.get(name, name)
        if name not in TRACE_FILES or not count.isdigit() or int(count) % 8:
            parser.error(f"--gpus {item}: expected TRACE=N with TRACE one of {', '.join(TRACE_FILES)} "
                         "and N a multiple of 8")
        sizes[name] = int(count)
    return sizes


def parse_arguments() -> tuple[argparse.Namespace, dict[str, int | None]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="+", choices=[*TRACE_FILES, *ALIASES], default=list(TRACE_FILES))
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--loads", nargs="+", type=float, metavar="L",
                        help=f"load factors (default {' '.join(map(str, LOADS))}; 1 for --probe)")
    parser.add_argument("--gpus", nargs="+", metavar="TRACE=N", help="cluster size of a trace (whole nodes of 8)")
    parser.add_argument("--philly-gpus", type=int, default=CLUSTER_GPUS["philly"])
    parser.add_argument("--itp-gpus", type=int, default=CLUSTER_GPUS["itp04"], help="ITP cluster04's size")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--probe", type=int, nargs="+", metavar="GPUS",
                        help="only measure FIFO's queueing at these cluster sizes")
    parser.add_argument("--json", type=Path, help="also write every result and the targets to this file")
    arguments = parser.parse_args()
    arguments.traces = list(dict.fromkeys(ALIASES.get(name, name) for name in arguments.traces))
    arguments.policies = list(dict.fromkeys(arguments.policies))
    if arguments.loads is None:
        arguments.loads = [1.0] if arguments.probe else list(LOADS)
    if any(not load > 0 for load in arguments.loads):
        parser.error("--loads: every load factor must be > 0")
    arguments.loads = sorted(set(arguments.loads))
    return arguments, parse_sizes(arguments, parser)


def size_label(size: int | None, gpus: int) -> str:
    """``size``: the cluster asked for (None: the trace's own nodes); ``gpus``: the GPUs it had."""
    if size is None:
        return f"its own nodes ({gpus:,} GPUs)"
    return f"{gpus:,} GPUs ({gpus // 8} nodes × 8)"


def show(results: list, arguments: argparse.Namespace, sizes: dict, console: Console) -> tuple[dict, dict]:
    """One table per (trace, load), policies side by side; returns the results by (trace, load) and policy."""
    from mlyard.sim.report import offered_line, table

    grid: dict[tuple[str, float], dict] = {}
    offers, seconds = {}, {}
    for name, load, metrics, offer, spent in results:
        grid.setdefault((name, load), {})[metrics.policy] = metrics
        offers[name, load] = offer
        seconds[name, load, metrics.policy] = spent
    for name in arguments.traces:
        for load in arguments.loads:
            ordered = [grid[name, load][policy] for policy in arguments.policies]
            jobs, gpus = ordered[0].jobs + ordered[0].rejected, ordered[0].cluster_gpus
            console.print(offered_line(offers[name, load]))
            console.print(table(ordered, f"{name}: {jobs:,} jobs on {size_label(sizes[name], gpus)} at load {load:g}"))
    return dict(sorted(grid.items(), key=lambda item: (arguments.traces.index(item[0][0]), item[0][1]))), seconds


def main() -> int:
    arguments, sizes = parse_arguments()
    console = Console()
    if not console.is_terminal:  # a log file gets the whole table, not one squeezed to 80 columns
        console = Console(width=160)
    missing = [str(TRACE_FILES[name][1]) for name in arguments.traces if not TRACE_FILES[name][1].exists()]
    if missing:
        console.print(f"[red]error:[/] trace not found: {', '.join(missing)}")
        return 2
    if arguments.probe:
        return probe(arguments.probe, arguments.traces, arguments.loads, arguments.workers, console)

    chosen = ", ".join(f"{name} on {f'{sizes[name]:,} GPUs' if sizes[name] else 'its own nodes'}"
                       for name in arguments.traces)
    console.print(f"cluster sizes: {chosen}; loads {' '.join(f'{load:g}' for load in arguments.loads)}; "
                  f"default policy {DEFAULT_POLICY}")
    tasks = [(name, sizes[name], load, policy) for name in arguments.traces for load in arguments.loads
             for policy in arguments.policies]
    results = run_all(tasks, arguments.workers, console)
    grid, seconds = show(results, arguments, sizes, console)
    sweep, sweep_checks, sweep_met = sweep_targets(grid, DEFAULT_POLICY)
    fixed, fixed_checks, fixed_met = load_one_targets(grid, seconds, DEFAULT_POLICY)
    met = sweep_met and fixed_met
    if sweep.row_count:
        console.print(sweep)
    if fixed.row_count:
        console.print(fixed)
    if DEFAULT_POLICY not in arguments.policies:
        console.print(f"no targets checked: the default policy {DEFAULT_POLICY} was not replayed")
    else:
        console.print("all targets met" if met else "[red]SOME TARGETS MISSED[/]")
    if arguments.json:
        write_json(arguments.json, results, sizes, sweep_checks + fixed_checks, met, arguments.policies)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
