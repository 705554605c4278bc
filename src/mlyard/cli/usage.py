"""`mlyard usage`: GPU-hours and CPU-hours per user or project and per UTC day."""

from __future__ import annotations

import enum
import re
import time
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mlyard.api.usage import UsageDay, UsageReport
from mlyard.cli.console import console
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import print_json
from mlyard.client import Client

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_LATEST = datetime(9999, 12, 31, tzinfo=UTC).timestamp()


class Grouping(str, enum.Enum):
    user = "user"
    project = "project"


def parse_moment(text: str, option: str, now: float) -> float:
    """`7d`, `12h`, `30m`, `2w` before now; `now`; or an ISO date or time, UTC unless it says otherwise."""
    cleaned = text.strip().lower()
    if cleaned == "now":
        return now
    relative = _RELATIVE.fullmatch(cleaned)
    if relative:
        moment = now - float(relative.group(1)) * _UNITS[relative.group(2)]
    else:
        try:
            parsed = datetime.fromisoformat(text.strip())
        except ValueError:
            raise UsageError(f"{option}: cannot read {text!r}; give a time before now such as 7d, 12h or 30m, "
                             "or a UTC date such as 2026-11-01 or 2026-11-01T12:00") from None
        moment = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    if not 0 <= moment <= _LATEST:
        raise UsageError(f"{option}: {text!r} is out of range")
    return moment


def hours(value: float) -> str:
    # A short test job holds a core for seconds: show that it counted rather than 0.00.
    return f"{value:,.2f}" if value == 0 or value >= 0.01 else f"{value:.2g}"


def _moment(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M")


def _rows_table(report: UsageReport, daily: bool) -> Table:
    table = Table(box=None, header_style="bold")
    table.add_column(report.by.upper())
    if daily:
        table.add_column("DAY (UTC)")
    for column in ("JOBS", "GPU-HOURS", "CPU-HOURS"):
        table.add_column(column, justify="right")
    for row in report.rows:
        day_cells = ["all"] if daily else []
        table.add_row(escape(row.key), *day_cells, str(row.jobs), hours(row.gpu_hours), hours(row.cpu_hours))
        if daily:
            for day in row.days:
                table.add_row("", day.day, "", hours(day.gpu_hours), hours(day.cpu_hours), style="dim")
    table.add_section()
    jobs = sum(row.jobs for row in report.rows)  # a job has one owner and one project: none counts twice
    table.add_row("TOTAL", *(["all"] if daily else []), str(jobs), hours(report.total.gpu_hours),
                  hours(report.total.cpu_hours), style="bold")
    return table


def _days_table(days: list[UsageDay], report: UsageReport) -> Table:
    table = Table(box=None, header_style="bold")
    table.add_column("DAY (UTC)")
    table.add_column("GPU-HOURS", justify="right")
    table.add_column("CPU-HOURS", justify="right")
    for day in days:
        table.add_row(day.day, hours(day.gpu_hours), hours(day.cpu_hours))
    table.add_section()
    table.add_row("TOTAL", hours(report.total.gpu_hours), hours(report.total.cpu_hours), style="bold")
    return table


def usage(
    since: Annotated[str | None, typer.Option(
        help="start of the window: a time before now (7d, 12h, 30m) or a UTC date/time (2026-11-01) [default: 7d]",
    )] = None,
    until: Annotated[str | None, typer.Option(help="end of the window, in the same forms [default: now]")] = None,
    by: Annotated[Grouping, typer.Option("--by", help="a row per user or per project")] = Grouping.user,
    daily: Annotated[bool, typer.Option("--daily", help="break every row down by UTC day")] = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Show the GPU-hours and CPU-hours jobs held, per user or project and per day (UTC).

    Administrators see everyone's jobs; other users see their own."""
    now = time.time()
    start = parse_moment(since, "--since", now) if since is not None else None
    end = parse_moment(until, "--until", now) if until is not None else None
    if start is None and end is not None:
        start = end - 7 * 86400
    if start is not None and end is not None and start >= end:
        raise UsageError(f"--since ({_moment(start)} UTC) must be before --until ({_moment(end)} UTC)")
    with Client() as client:
        report = client.usage(since=start, until=end, by=by.value)
    if output is OutputFormat.json:
        print_json(report)
        return
    if not report.rows:
        console.print(f"No job held resources between {_moment(report.since)} and {_moment(report.until)} UTC"
                      + ("" if report.everyone else " (counting your jobs)") + ".")
        return
    console.print(f"[bold]Usage by {report.by}[/], {_moment(report.since)} → {_moment(report.until)} UTC"
                  + ("" if report.everyone else " (your jobs)"), highlight=False)
    console.print(_rows_table(report, daily))
    console.print()
    console.print(_days_table(report.days, report))
