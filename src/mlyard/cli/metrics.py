"""`mlyard metrics JOB [--follow]`: the training metrics a job reported, one row per step;
with `--resources`, what its processes used over time."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from mlyard.api.metrics import METRICS_PAGE_SIZE, MetricPoint
from mlyard.cli.console import console
from mlyard.cli.options import JobArgument, OutputFormat, OutputOption, UsageError
from mlyard.cli.output import print_json
from mlyard.cli.resources import Resolution, show_resources
from mlyard.client import Client

FOLLOW_SECONDS = 2.0


def _table(points: list[MetricPoint], names: list[str]) -> Table:
    """Rows by (attempt, step) in the order they were reported; a column per metric."""
    rows: dict[tuple[int, int], dict[str, float]] = {}
    for point in points:
        rows.setdefault((point.attempt, point.step), {})[point.name] = point.value
    table = Table(box=None, header_style="bold")
    for column in ("ATTEMPT", "STEP", *names):
        table.add_column(column, justify="right")
    for (attempt, step), values in rows.items():
        table.add_row(str(attempt), str(step), *(f"{values[name]:.6g}" if name in values else "-" for name in names))
    return table


def metrics(
    job_id: JobArgument,
    name: Annotated[list[str] | None, typer.Option("--name", "-n", help="only this metric (repeatable)")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new steps until the job ends")] = False,
    output: OutputOption = OutputFormat.table,
    resources: Annotated[bool, typer.Option(
        "--resources", help="show CPU, memory and GPU memory of the job's processes over time instead")] = False,
    since: Annotated[str | None, typer.Option(
        help="with --resources: how far back, e.g. 10m or 6h (default: 1h raw, 1d in minutes)")] = None,
    resolution: Annotated[Resolution, typer.Option(
        help="with --resources: raw samples (kept a day) or 1-minute averages (kept a month)")] = Resolution.raw,
) -> None:
    """Show the metrics a job reported with mlyard.sdk.report (loss, accuracy, …) by step."""
    if not resources and (since is not None or resolution is not Resolution.raw):
        raise UsageError("--since and --resolution go with --resources")
    if resources and name:
        raise UsageError("--name selects reported metrics; it does not go with --resources")
    with Client() as client:
        if resources:
            show_resources(client, job_id, since=since, resolution=resolution, follow=follow, output=output)
            return
        page = client.metrics(job_id, names=name or ())
        points = list(page.points)
        while len(page.points) == METRICS_PAGE_SIZE:  # a full page: there is more
            page = client.metrics(job_id, names=name or (), after=page.next_after)
            points.extend(page.points)
        if output is OutputFormat.json:
            print_json(points)
            return
        names = list(dict.fromkeys(point.name for point in points))
        console.print(_table(points, names))
        if not follow:
            return
        after = page.next_after
        while not client.job(job_id).status.is_terminal:
            time.sleep(FOLLOW_SECONDS)
            page = client.metrics(job_id, names=name or (), after=after)
            if page.points:
                after = page.next_after
                names = list(dict.fromkeys([*names, *(point.name for point in page.points)]))
                console.print(_table(page.points, names))
