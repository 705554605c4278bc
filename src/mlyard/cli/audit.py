"""`mlyard audit`: who changed what, when, from where (administrators only)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mlyard.api.audit import DEFAULT_PAGE, MAX_PAGE, AuditEvent
from mlyard.cli.console import console
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import print_json
from mlyard.cli.usage import parse_moment
from mlyard.client import Client


def _status(status: int) -> str:
    style = "green" if status < 400 else "yellow" if status < 500 else "red"
    return f"[{style}]{status}[/]"


def _time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _table(events: list[AuditEvent]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("TIME (UTC)", "ACTOR", "METHOD", "TARGET", "STATUS", "ADDRESS"):
        table.add_column(column, justify="right" if column == "STATUS" else "left")
    for event in events:
        # The route names the action when the path alone does not (a 404 has no route).
        target = escape(event.target or event.route)
        if event.target and event.route != event.target:
            target += f" [dim]({escape(event.route)})[/]"
        table.add_row(_time(event.at), escape(event.actor), event.method, target, _status(event.status),
                      escape(event.address or "-"))
    return table


def audit(
    since: Annotated[str | None, typer.Option(
        help="only events after this: a time before now (1d, 12h, 30m) or a UTC date/time (2026-11-01)")] = None,
    until: Annotated[str | None, typer.Option(help="only events before this, in the same forms")] = None,
    actor: Annotated[str | None, typer.Option(help="only this user's (or job's, e.g. job-12) requests")] = None,
    route: Annotated[str | None, typer.Option(help="only routes or paths containing this text, e.g. /cancel")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_PAGE, help="at most this many events")] = DEFAULT_PAGE,
    before_id: Annotated[int | None, typer.Option(
        min=1, max=2**31 - 1, help="only events older than this id (the next page of an earlier listing)")] = None,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Show who changed what, when and from where: every POST, PUT, PATCH and DELETE to the
    API and the web pages, newest first (administrators only)."""
    now = time.time()
    start = parse_moment(since, "--since", now) if since is not None else None
    end = parse_moment(until, "--until", now) if until is not None else None
    if start is not None and end is not None and start >= end:
        raise UsageError(f"--since ({_time(start)} UTC) must be before --until ({_time(end)} UTC)")
    with Client() as client:
        page = client.audit(since=start, until=end, actor=actor, route=route, limit=limit, before_id=before_id)
    if output is OutputFormat.json:
        print_json(page)
        return
    if not page.events:
        console.print("No audit events match.")
        return
    console.print(_table(page.events))
    if page.next_before_id is not None:
        console.print(f"[dim]There are older events: repeat with --before-id {page.next_before_id}[/]",
                      highlight=False)
