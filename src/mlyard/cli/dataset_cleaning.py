"""`mlyard datasets check|report|clean`: a cleaning report of a version, made by a job on the
scheduler, and a child version without what it found. Added to `datasets_app` by
`cli/datasets.py`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mlyard.api.dataset_checks import DROP_KINDS, MAX_DISTANCE
from mlyard.cli.console import console, errors
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import print_json
from mlyard.client import Client

if TYPE_CHECKING:
    from mlyard.api.dataset_checks import CheckInfo, CheckReport

VersionedArgument = Annotated[str, typer.Argument(help="[PROJECT/]NAME[:VERSION or ALIAS] (default: latest)",
                                                  metavar="DATASET[:VERSION]")]
SHOWN = 10
"""Groups of each kind printed; `--output json` gives them all."""


def _named(reference: str) -> tuple[str, str, str]:
    name, _, version = reference.partition(":")
    project, _, name = name.rpartition("/")
    if not name or "/" in project or reference.startswith("/"):
        raise UsageError(f"{reference!r} is not [PROJECT/]NAME[:VERSION]")
    return project or "default", name, version or "latest"


def _wait(client: Client, check: CheckInfo, timeout: float) -> CheckInfo:
    deadline = time.monotonic() + timeout
    with errors.status(f"report {check.id}: job {check.job} is making it (`mlyard logs {check.job} -f` shows "
                       "its progress)"):
        while check.state == "running":
            if time.monotonic() > deadline:
                raise UsageError(f"report {check.id} is not done after {timeout:g}s; job {check.job} goes on")
            time.sleep(1.0)
            check = next(item for item in client.datasets.checks(check.project, check.dataset, check.version)
                         if item.id == check.id)
    return check


def check(dataset: VersionedArgument,
          distance: Annotated[int, typer.Option(min=0, max=MAX_DISTANCE, help="near duplicates: perceptual "
                                                "hashes at most this many bits (of 64) apart")] = 6,
          predictions: Annotated[str | None, typer.Option(
              metavar="PATH", help="a CSV of out-of-sample predicted probabilities (a path column, one column per "
              "class) in the checked version, or in --predictions-from: cleanlab ranks likely label errors")] = None,
          predictions_from: Annotated[str | None, typer.Option(
              metavar="DATASET[:VERSION]", help="the dataset version holding --predictions (a job's outputs, say)")] = None,
          wait: Annotated[bool, typer.Option(help="wait for the report and print it")] = False,
          timeout: Annotated[float, typer.Option(help="with --wait: give up after this many seconds")] = 3600,
          output: OutputOption = OutputFormat.table) -> None:
    """Make a cleaning report of a version: a job of the dataset's project finds exact and near
    duplicates, leaks across train/test, undecodable files, wrong extensions and label conflicts."""
    project, name, version = _named(dataset)
    if predictions_from is not None and predictions is None:
        raise UsageError("--predictions-from names where --predictions PATH lies; give the PATH too")
    wanted = None
    if predictions is not None:
        source = _named(predictions_from) if predictions_from is not None else (project, name, version)
        # A dataset named without its project is looked for in the checked one's (the API's default).
        named_project = "/" in predictions_from.partition(":")[0] if predictions_from is not None else True
        wanted = {"project": source[0] if named_project else None, "dataset": source[1], "version": source[2],
                  "path": predictions}
    with Client() as client:
        made = client.datasets.check(project, name, version, distance=distance, predictions=wanted)
        if not wait:
            if output is OutputFormat.json:
                print_json(made)
            else:
                console.print(f"report {made.id} of {project}/{name}:{made.version}: job {made.job} queued; "
                              f"`mlyard logs {made.job} -f` follows it, `mlyard datasets report "
                              f"{project}/{name}:{made.version}` shows it")
            return
        done = _wait(client, made, timeout)
        shown = client.datasets.report(done.id)
    _print(shown, output)


def report(dataset: VersionedArgument,
           report_id: Annotated[int | None, typer.Option("--id", help="this report (default: the newest)")] = None,
           output: OutputOption = OutputFormat.table) -> None:
    """Show a version's newest cleaning report (or --id): its counts and groups of files."""
    project, name, version = _named(dataset)
    with Client() as client:
        if report_id is None:
            listed = client.datasets.checks(project, name, version)
            if not listed:
                raise UsageError(f"{project}/{name}:{version} has no cleaning report; `mlyard datasets check "
                                 f"{project}/{name}:{version}` makes one")
            report_id = listed[0].id
        shown = client.datasets.report(report_id)
    _print(shown, output)


def _print(shown: CheckReport, output: OutputFormat) -> None:
    if output is OutputFormat.json:
        print_json(shown)
        return
    console.print(f"[bold]report {shown.id}[/] of {escape(shown.project)}/{escape(shown.dataset)}:{shown.version} "
                  f"(job {shown.job}): {shown.state}" + (f": {escape(shown.message)}" if shown.message else ""))
    found = shown.report or {}
    if not found:
        return
    table = Table("PROBLEM", "COUNT", box=None)
    for key, value in (found.get("summary") or {}).items():
        table.add_row(key.replace("_", " "), "-" if value is None else f"{value:,}")
    console.print(table)
    groups = [("exact duplicates", [group.get("paths", []) for group in found.get("exact_duplicates") or []]),
              ("near duplicates", [group.get("paths", []) for group in found.get("near_duplicates") or []]),
              ("leaks", [pair.get("paths", []) for pair in found.get("leaks") or []]),
              ("label conflicts", [[f"{path} ({label})" for path, label in (group.get("labels") or {}).items()]
                                   for group in found.get("label_conflicts") or []]),
              ("cannot be decoded", [[item.get("path", "")] for item in found.get("corrupt") or []]),
              ("wrong extension", [[f"{item.get('path')} is {item.get('format')}"]
                                   for item in found.get("wrong_extension") or []])]
    for title, listed in groups:
        for paths in listed[:SHOWN]:
            console.print(f"  {title}: " + ", ".join(escape(str(path)) for path in paths))
        if len(listed) > SHOWN:
            console.print(f"  … {len(listed) - SHOWN} more {title} (--output json lists them all)")


def clean(dataset: VersionedArgument,
          drop: Annotated[str, typer.Option(help=f"what to drop, comma-separated: {', '.join(DROP_KINDS)}")] = "",
          path: Annotated[list[str] | None, typer.Option(
              "--path", help="a file the report names, dropped as well (repeat for several; the first of a group "
                             "of duplicates too)")] = None,
          keep: Annotated[str, typer.Option(help="which file of a group of duplicates stays")] = "first",
          message: Annotated[str, typer.Option("--message", "-m", help="the new version's message (default: "
                                                                       "what was dropped)")] = "",
          output: OutputOption = OutputFormat.table) -> None:
    """Make a child version without the files the version's newest cleaning report found wrong."""
    project, name, version = _named(dataset)
    kinds = [kind.strip() for kind in drop.split(",") if kind.strip()]
    if unknown := [kind for kind in kinds if kind not in DROP_KINDS]:
        raise UsageError(f"--drop {unknown[0]!r} is not one of {', '.join(DROP_KINDS)}")
    if not kinds and not path:
        raise UsageError(f"--drop KINDS ({', '.join(DROP_KINDS)}) or --path FILE: say what to drop")
    if keep != "first":
        raise UsageError("--keep: only 'first' (the first file by path of each group stays)")
    with Client() as client:
        made = client.datasets.clean(project, name, version, kinds, message=message, paths=path or [])
    if output is OutputFormat.json:
        print_json(made)
        return
    if not made.created:
        console.print(f"{project}/{name}:{made.version.version}: nothing to drop")
        return
    console.print(f"{project}/{name}:{made.version.version} ({made.version.file_count:,} files, child of "
                  f"{made.version.parent}): {escape(made.version.message)}")


COMMANDS = {"check": check, "report": report, "clean": clean}


def add_commands(app: typer.Typer) -> None:
    for name, command in COMMANDS.items():
        app.command(name)(command)
