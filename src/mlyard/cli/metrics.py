"""`mlyard metrics JOB [--follow]`: the training metrics a job reported, one row per step."""

from __future__ import annotations

import time
from typing import Annotated, Optional

import typer
from rich.table import Table

from mlyard.api_models import METRICS_PAGE_SIZE, MetricPoint
from mlyard.cli.jobs import JobArgument, OutputOption
from mlyard.cli.output import OutputFormat, console, print_json
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
    name: Annotated[Optional[list[str]], typer.Option("--name", "-n", help="only this metric (repeatable)")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new steps until the job ends")] = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Show the metrics a job reported with mlyard.sdk.report (loss, accuracy, …) by step."""
    with Client() as client:
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
