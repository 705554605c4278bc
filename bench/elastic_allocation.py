"""Elastic allocation in replays: the same Pollux-like workload (`mlyard.sim.workloads.pollux_like`:
160 jobs over 8 hours on 64 GPUs) as rigid jobs and as elastic ones, on the simulator.

Rows, each the mean over `--seeds` workloads (a seed draws arrivals, kinds, sizes and run times):
- `las`, rigid: Tiresias's least-attained-service, jobs at the size they ask for;
- `balanced`, rigid: the default policy, the same jobs;
- `balanced`, elastic, scaling unknown: each job may run on 1 GPU up to what it asks, and the
  scheduler takes every job as scaling linearly;
- `balanced`, elastic, scaling known: the scheduler knows each job's serial fraction, as the
  server learns it from the throughput a job reports (`server/control/scaling_fits.py`); a
  simulated job's is exact, so this is the best learning gives.
Each row gives average and p99 JCT, preemptions per job and GPU utilization, and its average JCT
over the rigid `las` row's, beside Pollux's published ratio (2,751 s over Tiresias's 4,038 s:
0.68). The published absolute figures come from Pollux's testbed, whose run times this workload
does not have, so the targets are checked as the issue states them, with that caveat: rigid
`balanced` at or below 4,038 s and elastic `balanced` within 1.3 × 2,751 s; also rigid `balanced`
at or below rigid `las`, and elastic below rigid. Exits 1 when a target is missed.

    .venv/bin/python bench/elastic_allocation.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from rich.console import Console
from rich.table import Table

from mlyard.sim import EngineOptions, simulate, summarize
from mlyard.sim.cluster import queues, synthetic_nodes
from mlyard.sim.workloads import pollux_like

GPUS = 64
TIRESIAS_PUBLISHED = 4038.0
POLLUX_PUBLISHED = 2751.0
ROWS = (("las", "las", False, False), ("balanced", "balanced", False, False),
        ("balanced, elastic, scaling unknown", "balanced", True, False),
        ("balanced, elastic, scaling known", "balanced", True, True))


def replay(seed: int, policy: str, elastic: bool, scaling: bool):
    jobs = pollux_like(seed=seed, elastic=elastic)
    nodes = synthetic_nodes(jobs, GPUS, 1)  # a GPU per replica: elastic jobs grow a GPU at a time
    tenant_queues = queues([job.tenant for job in jobs], nodes, "none")
    return summarize(simulate(jobs, nodes, EngineOptions(policy=policy, gpus_per_node=1, scaling=scaling),
                              queues=tenant_queues))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    options = parser.parse_args()
    console = Console(width=160)
    means: dict[str, dict[str, float]] = {}
    for label, policy, elastic, scaling in ROWS:
        runs = [replay(seed, policy, elastic, scaling) for seed in range(1, options.seeds + 1)]
        means[label] = {name: statistics.fmean(getattr(run, name) for run in runs)
                        for name in ("avg_jct", "p99_jct", "preemptions_per_job", "utilization")}
    baseline = means["las"]["avg_jct"]
    table = Table(title=f"Pollux-like workload on {GPUS} GPUs, mean of {options.seeds} seeds")
    for column in ("replay", "avg JCT s", "p99 JCT s", "preemptions/job", "GPU utilization", "avg JCT / las",
                   "published"):
        table.add_column(column, justify="left" if column == "replay" else "right")
    published = {"las": f"Tiresias {TIRESIAS_PUBLISHED:,.0f} s",
                 "balanced, elastic, scaling known": f"Pollux {POLLUX_PUBLISHED:,.0f} s "
                                                     f"({POLLUX_PUBLISHED / TIRESIAS_PUBLISHED:.2f})"}
    for label, row in means.items():
        table.add_row(label, f"{row['avg_jct']:,.0f}", f"{row['p99_jct']:,.0f}", f"{row['preemptions_per_job']:.2f}",
                      f"{row['utilization']:.1%}", f"{row['avg_jct'] / baseline:.2f}", published.get(label, ""))
    console.print(table)
    rigid, known = means["balanced"]["avg_jct"], means["balanced, elastic, scaling known"]["avg_jct"]
    checks = [
        (f"rigid balanced ≤ Tiresias's published {TIRESIAS_PUBLISHED:,.0f} s", rigid <= TIRESIAS_PUBLISHED),
        (f"elastic balanced ≤ 1.3 × Pollux's published {POLLUX_PUBLISHED:,.0f} s", known <= 1.3 * POLLUX_PUBLISHED),
        ("rigid balanced ≤ rigid las", rigid <= baseline),
        ("elastic balanced < rigid balanced", known < rigid),
    ]
    for text, met in checks:
        console.print(f"{'met' if met else '[red]MISSED[/]'}: {text}")
    return 0 if all(met for _, met in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
