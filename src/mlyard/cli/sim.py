"""`mlyard sim`: replay a public job trace through the scheduler, offline, and compare policies.

Options are taken loosely typed and checked here so that every mistake is one
line on stderr (typer's own checks print a multi-line box).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from mlyard.cli.console import console, errors
from mlyard.cli.options import UsageError
from mlyard.scheduler import DEFAULT_POLICY, POLICIES
from mlyard.sim import (
    FORMATS,
    ClusterError,
    Metrics,
    Offered,
    Scenario,
    SimulationError,
    TraceError,
    TraceJob,
    offered,
    replay,
    rescale,
)
from mlyard.sim.cluster import QUOTA_MODES
from mlyard.sim.report import offered_line, table, write_json

MAX_LOADS = 16  # each factor replays every policy again; a finer sweep belongs in a script


def sim(
    trace: Annotated[Path | None, typer.Option(help="the trace file (CSV)")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help=f"trace format: {', '.join(FORMATS)}")] = None,
    gpus: Annotated[int | None, typer.Option(
        help="GPUs of the simulated cluster; openb without it uses the trace's own node list")] = None,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node of the simulated cluster")] = 8,
    policy: Annotated[list[str] | None, typer.Option(
        help=f"scheduling policy, repeatable for a side-by-side table: {', '.join(POLICIES)}; "
             f"default: the server's, {DEFAULT_POLICY}")] = None,
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
    preemption_budget: Annotated[int | None, typer.Option(
        help="how often one job may be preempted for the policy's ordering; default: no budget")] = None,
    predictions: Annotated[bool, typer.Option(
        help="hand the policy run times predicted from the finished jobs of the same tenant and size, as the "
             "server does from its users' earlier runs; replays report how close predictions come either way")
    ] = False,
    limit: Annotated[int | None, typer.Option(help="replay only the first N jobs")] = None,
    load: Annotated[str | None, typer.Option(
        help="comma-separated load factors, e.g. 0.5,0.8,1,1.2: jobs arrive that many times as fast, "
             "every policy is replayed at each; default: the trace as it is")] = None,
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
    policies = list(dict.fromkeys(policy or [])) or [DEFAULT_POLICY]
    for name in policies:
        if name not in POLICIES:
            raise UsageError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
    if quotas not in QUOTA_MODES:
        raise UsageError(f"--quotas must be one of {', '.join(QUOTA_MODES)}, not {quotas!r}")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be at least 1, not {limit}")
    if preemption_budget is not None and preemption_budget < 0:
        raise UsageError(f"--preemption-budget must be 0 or more, not {preemption_budget}")
    loads = _loads(load)
    scenario = Scenario(trace, fmt, gpus, gpus_per_node, tenants, quotas, limit, tick, requeue_interval,
                        preempt_grace, restart_overhead, runtime_estimate, preemption_budget=preemption_budget,
                        predictions=predictions)
    try:
        scenario.options(policies[0])
        jobs = scenario.jobs()
        nodes = scenario.nodes(jobs)
    except (TraceError, ClusterError, ValueError) as error:
        raise UsageError(str(error)) from None
    cluster_gpus = sum(len(node.gpu_ids) for node in nodes)
    if not policy:
        console.print(f"policy: {DEFAULT_POLICY} (the server's default)", highlight=False)
    title = f"{trace.name} ({fmt}, {len(jobs):,} jobs) on {cluster_gpus:,} GPUs in {len(nodes):,} nodes"
    sweep = _sweep(scenario, policies, jobs, cluster_gpus, loads, title, named=load is not None)
    if json_out is not None:
        try:
            write_json(json_out, sweep, trace=str(trace), format=fmt, cluster_gpus=cluster_gpus,
                       nodes=len(nodes), options=_options(scenario))
        except OSError as error:
            raise UsageError(f"cannot write {json_out}: {error.strerror}") from None


def _sweep(scenario: Scenario, policies: list[str], jobs: list[TraceJob], cluster_gpus: int, loads: list[float],
           title: str, named: bool) -> list[tuple[Offered, list[Metrics]]]:
    """Replay every policy at every load, printing each load's table as soon as it is complete."""
    sweep = []
    for factor in loads:
        figures = offered(jobs, cluster_gpus, factor)
        at_load = rescale(jobs, factor)
        # Without --load there is no sweep to tell apart: the output stays what it was, plus the figure.
        label = f" ×{factor:g}" if named else ""
        results = [_replay_with_progress(replace(scenario, load=factor), name, at_load, label) for name in policies]
        console.print(f"load {factor:g}: {offered_line(figures)}" if named else offered_line(figures),
                      highlight=False)
        console.print(table(results, f"{title} at load {factor:g}" if named else title))
        sweep.append((figures, results))
    return sweep


def _loads(text: str | None) -> list[float]:
    """The --load factors in the order given, each once; without it, 1: the trace as it is."""
    if text is None:
        return [1.0]
    items = [item.strip() for item in text.split(",")]
    if len(items) > MAX_LOADS:
        raise UsageError(f"--load: at most {MAX_LOADS} factors, not {len(items)}")
    loads = []
    for item in items:
        try:
            factor = float(item)
        except ValueError:
            raise UsageError(f"--load: {item!r} is not a number") from None
        if not (math.isfinite(factor) and factor > 0):
            raise UsageError(f"--load: {item!r} is not a positive number")
        loads.append(factor)
    return list(dict.fromkeys(loads))


def _replay_with_progress(scenario: Scenario, policy: str, jobs: list[TraceJob], label: str = "") -> Metrics:
    horizon = max(job.submitted_at for job in jobs) or 1.0
    columns = (TextColumn(f"{escape(policy + label):>12}"), BarColumn(),
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
        "runtime_estimate": scenario.runtime_estimate, "preemption_budget": scenario.preemption_budget,
        "predictions": scenario.predictions,
    }
