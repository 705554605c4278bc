"""`mlyard jobs`: the newest page of jobs and how many match; with `--all`, every job, printed
page by page as the pages arrive (keyset paging: `after` the last id of the page before).

Lines rather than a Rich table, and no Rich at all: a table is laid out whole (and costs a
millisecond a row), while these lines are written as they come, and the command starts sooner
without Rich. Columns keep the widths of the pages printed so far and widen when a later page
needs it. Colours only on a terminal, and never with NO_COLOR."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from typing import Annotated, Any, TextIO

import typer

from mlyard.api.job_listing import DEFAULT_PAGE_JOBS, MAX_PAGE_JOBS, NOT_CONNECTED
from mlyard.cli.options import OutputFormat, OutputOption
from mlyard.cli.words import STATUS_STYLES, ago, duration
from mlyard.client import Client
from mlyard.job_status import JobStatus

COLUMNS = ("ID", "NAME", "STATUS", "REPLICAS", "QUEUE", "SUBMITTED", "RUNTIME", "MESSAGE")
GAP = "  "
ANSI = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35",
        "cyan": "36"}
"""The SGR code of each style name `STATUS_STYLES` uses."""

Cell = list[tuple[str, str]]
"""A cell's text in parts, each with its style name ("" for none)."""
Job = dict[str, Any]
"""A job as the server's JSON gives it (`JobInfo`'s fields): the listing prints what it gets,
without validating each job's full spec into models first."""
STYLES = {status.value: style for status, style in STATUS_STYLES.items()}


def colours(stream: TextIO) -> bool:
    """Whether to colour what goes to `stream`: on a terminal, as Rich decides (NO_COLOR turns
    colours off, FORCE_COLOR on, a dumb terminal has none)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return stream.isatty() and os.environ.get("TERM") not in ("dumb", "unknown")


def _status_cell(job: Job) -> Cell:
    """The status with what follows it: `(idle 31m02s)`, `(not connected)`, `(warning)`."""
    status = job["status"]
    parts = [(status, STYLES.get(status, ""))]
    if job.get("idle_since") is not None:
        parts.append((f" (idle {duration(time.time() - job['idle_since'])})", "yellow"))
    warning = job.get("warning")
    if warning is not None:
        parts.append((" (not connected)" if warning.startswith(NOT_CONNECTED) else " (warning)", "yellow"))
    return parts


def _row(job: Job) -> list[Cell]:
    message = (job.get("wait_reason") or job.get("message")
               or " · ".join(filter(None, (job.get("idle_reason"), job.get("warning")))))
    started = job.get("started_at")
    runtime = None if started is None else (job.get("finished_at") or time.time()) - started
    plain = (str(job["id"]), job["name"], None, str(job["replica_count"]), job["queue"], ago(job["submitted_at"]),
             duration(runtime), message)
    return [_status_cell(job) if text is None else [(text, "")] for text in plain]


class JobLines:
    """Writes pages of jobs to stdout as aligned lines under one header. On a terminal a long
    message wraps under its own column; piped output keeps each job on one line."""

    def __init__(self) -> None:
        self.widths = [len(column) for column in COLUMNS]
        self.header_written = False
        self.terminal = sys.stdout.isatty()
        self.coloured = colours(sys.stdout)

    def write(self, jobs: Sequence[Job]) -> None:
        if not jobs:
            return
        rows = [_row(job) for job in jobs]
        for row in rows:
            for index, cell in enumerate(row[:-1]):
                self.widths[index] = max(self.widths[index], sum(len(text) for text, _style in cell))
        indent = sum(self.widths[:-1]) + len(GAP) * (len(COLUMNS) - 1)
        room = shutil.get_terminal_size().columns - indent if self.terminal else 0
        lines = []
        if not self.header_written:
            lines.append(self._line([[(column, "bold")] for column in COLUMNS], indent=indent, room=room))
            self.header_written = True
        lines += [self._line(row, indent=indent, room=room) for row in rows]
        sys.stdout.write("".join(lines))
        sys.stdout.flush()

    def close(self) -> None:
        pass

    def _styled(self, text: str, style: str) -> str:
        return f"\x1b[{ANSI[style]}m{text}\x1b[0m" if style and self.coloured else text

    def _line(self, row: list[Cell], *, indent: int, room: int) -> str:
        """`room`: the terminal's columns right of `indent`, where the message goes (0: no wrapping)."""
        out = []
        for index, cell in enumerate(row[:-1]):
            out += [self._styled(text, style) for text, style in cell]
            out.append(" " * (self.widths[index] - sum(len(text) for text, _style in cell)) + GAP)
        [(message, style)] = row[-1]
        lines = textwrap.wrap(message, room) if room >= 20 and len(message) > room else [message]
        out.append(self._styled(("\n" + " " * indent).join(lines), style))
        return "".join(out).rstrip() + "\n"


class JsonArray:
    """Writes pages of jobs to stdout as one JSON array, item by item: the text
    `json.dumps(jobs, indent=2)` gives for all of them at once."""

    def __init__(self) -> None:
        self.empty = True

    def write(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            item = json.dumps(job, indent=2).replace("\n", "\n  ")
            sys.stdout.write(("[\n  " if self.empty else ",\n  ") + item)
            self.empty = False
        sys.stdout.flush()

    def close(self) -> None:
        sys.stdout.write("[]\n" if self.empty else "\n]\n")


def jobs(
    show_all: Annotated[bool, typer.Option(
        "--all", "-a", help="every job, finished ones included, printed page by page as they arrive")] = False,
    status: Annotated[list[JobStatus] | None, typer.Option(help="only jobs in this status")] = None,
    queue: Annotated[str | None, typer.Option(help="only this queue's jobs")] = None,
    project: Annotated[str | None, typer.Option(help="only this project's jobs")] = None,
    owner: Annotated[str | None, typer.Option(help="only jobs this user submitted")] = None,
    search: Annotated[str | None, typer.Option("--search", "-s", help="only jobs whose name contains this")] = None,
    limit: Annotated[int | None, typer.Option(
        min=1, max=MAX_PAGE_JOBS, help=f"jobs per page (default {DEFAULT_PAGE_JOBS}; {MAX_PAGE_JOBS} with --all)")
                         ] = None,
    output: OutputOption = OutputFormat.table,
) -> None:
    """List jobs, newest first: the first page of unfinished ones (or of --status) and how many
    there are; --all lists every job."""
    filters = {"statuses": status or (), "include_finished": show_all, "queue": queue, "project": project,
               "owner": owner, "search": search}
    page_size = limit or (MAX_PAGE_JOBS if show_all else DEFAULT_PAGE_JOBS)
    writer = JsonArray() if output is OutputFormat.json else JobLines()
    with Client() as client:
        page, total, after = client.jobs_page_json(**filters, limit=page_size)
        writer.write(page)
        while show_all and after is not None:
            more, _total, after = client.jobs_page_json(**filters, after=after, limit=page_size)
            writer.write(more)
    writer.close()
    if not page and output is OutputFormat.table:
        sys.stderr.write("no jobs" + ("" if show_all or status else " (use --all to include finished ones)") + "\n")
    elif after is not None:  # without --all: a first page with more behind it
        which = "" if status else " unfinished"
        sys.stderr.write(f"showing the newest {len(page):,} of {total:,}{which} jobs; --all lists every job"
                         f"{'' if status else ', finished ones too'}\n")
