"""`mlyard sim`: replay a public job trace through the scheduler, offline, and compare policies.

Options are taken loosely typed and checked here so that every mistake is one
line on stderr (typer's own checks print a multi-line box).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from mlyard.cli.console import console, errors
from mlyard.cli.options import UsageError
from mlyard.scheduler import POLICIES
from mlyard.sim import (
    FORMATS,
    ClusterError,
    Metrics,
    Scenario,
    SimulationError,
    TraceError,
    TraceJob,
    replay,
)
from mlyard.sim.cluster import QUOTA_MODES
from mlyard.sim.report import table, write_json


def sim(
    trace: Annotated[Path | None, typer.Option(help="the trace file (CSV)")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help=f"trace format: {', '.join(FORMATS)}")] = None,
    gpus: Annotated[int | None, typer.Option(
        help="GPUs of the simulated cluster; openb without it uses the trace's own node list")] = None,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node of the simulated cluster")] = 8,
    policy: Annotated[list[str] | None, typer.Option(
        help=f"scheduling policy, repeatable for a side-by-side table: {', '.join(POLICIES)}")] = None,
    tenants: Annotated[str | None, typer.Option(
        help="who owns a job: vc (philly), qos (openb), N synthetic tenants, or none; default: vc, qos, 4 for itp")
    ] = None,
    quotas: Annotated[str, typer.Option(help="none (fair share only) or equal (equal quota per tenant)")] = "none",
    tick: Annotated[float, typer.Option(help="seconds between scheduling rounds")] = 60.0,
    requeue_interval: Annotated[float, typer.Option(
        help="seconds between rounds with nothing new, for policies that depend on time")] = 300.0,
    preempt_grace: Annotated[float, typer.Option(help="seconds a preempted job keeps running to checkpoint")] = 30.0,
    restart_overhead: Annotated[float, typer.Option(help="extra run time a restarted job needs")] = 60.0,
    runtime_estimate: Annotated[float, typer.Option(
        help="max_runtime given to the scheduler, as a multiple of the true duration (backfill uses it)")] = 1.0,
    limit: Annotated[int | None, typer.Option(help="replay only the first N jobs")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the results to this JSON file")
                        ] = None,
) -> None:
    """Replay a job trace on a simulated cluster and compare scheduling policies."""
    if trace is None:
        raise UsageError("--trace is required (a philly, itp or openb CSV file)")
    if fmt is None:
        raise UsageError(f"--format is required: one of {', '.join(FORMATS)}")
    if fmt not in FORMATS:
        raise UsageError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")
    policies = list(dict.fromkeys(policy or []))
    if not policies:
        raise UsageError(f"give at least one --policy: {', '.join(POLICIES)}")
    for name in policies:
        if name not in POLICIES:
            raise UsageError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
    if quotas not in QUOTA_MODES:
        raise UsageError(f"--quotas must be one of {', '.join(QUOTA_MODES)}, not {quotas!r}")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be at least 1, not {limit}")
    scenario = Scenario(trace, fmt, gpus, gpus_per_node, tenants, quotas, limit, tick, requeue_interval,
                        preempt_grace, restart_overhead, runtime_estimate)
    try:
        scenario.options(policies[0])
        jobs = scenario.jobs()
        nodes = scenario.nodes(jobs)
    except (TraceError, ClusterError, ValueError) as error:
        raise UsageError(str(error)) from None
    cluster_gpus = sum(len(node.gpu_ids) for node in nodes)
    results = [_replay_with_progress(scenario, name, jobs) for name in policies]
    title = f"{trace.name} ({fmt}, {len(jobs):,} jobs) on {cluster_gpus:,} GPUs in {len(nodes):,} nodes"
    console.print(table(results, title))
    if json_out is not None:
        try:
            write_json(json_out, results, trace=str(trace), format=fmt, cluster_gpus=cluster_gpus,
                       nodes=len(nodes), options=_options(scenario))
        except OSError as error:
            raise UsageError(f"cannot write {json_out}: {error.strerror}") from None


def _replay_with_progress(scenario: Scenario, policy: str, jobs: list[TraceJob]) -> Metrics:
    horizon = max(job.submitted_at for job in jobs) or 1.0
    columns = (TextColumn(f"{escape(policy):>12}"), BarColumn(),
               TextColumn(f"day {{task.fields[day]:.1f}} of {horizon / 86400:.1f}"),
               TextColumn("{task.fields[finished]:,}/{task.fields[accepted]:,} jobs done"), TimeElapsedColumn())
    with Progress(*columns, console=errors, transient=True, disable=not errors.is_terminal) as bar:
        task = bar.add_task(policy, total=horizon, day=0.0, finished=0, accepted=len(jobs))

        def report(now: float, finished: int, accepted: int) -> None:
            # Simulated time runs past the last arrival while the queue drains; the bar then stays full.
            bar.update(task, completed=min(now, horizon), day=now / 86400, finished=finished, accepted=accepted)

        try:
            result = replay(scenario, policy, progress=report, jobs=jobs)
        except SimulationError as error:
            errors.print(f"[red]error:[/] {escape(str(error))}", highlight=False)
            raise typer.Exit(1) from None
    return result


def _options(scenario: Scenario) -> dict[str, object]:
    return {
        "gpus_per_node": scenario.gpus_per_node, "tenants": scenario.tenants, "quotas": scenario.quotas,
        "limit": scenario.limit, "tick": scenario.tick, "requeue_interval": scenario.requeue_interval,
        "preempt_grace": scenario.preempt_grace, "restart_overhead": scenario.restart_overhead,
        "runtime_estimate": scenario.runtime_estimate,
    }
