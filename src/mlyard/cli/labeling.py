"""`mlyard label create|ls|show|export`: labeling tasks on dataset versions (pre-filled from labels
the version carries), their agreement, and their labels exported as a child version or downloaded
as Label Studio JSON. Labeling itself goes through the API and the web page."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mlyard.cli.console import console
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import print_json
from mlyard.client import Client

PREFILL_FORMATS = ("imagefolder", "csv", "coco", "yolo", "voc", "label-studio")

label_app = typer.Typer(help="Labeling tasks on dataset versions: who labels what, with which classes, and how far "
                             "they are.")
Names = Annotated[str, typer.Option(help="user names, comma-separated")]


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _prefill(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    layout, _, path = text.partition(":")
    if layout not in PREFILL_FORMATS:
        raise UsageError(f"--prefill {text!r}: FORMAT[:PATH], FORMAT one of {', '.join(PREFILL_FORMATS)}")
    return {"format": layout, "path": path or None}


@label_app.command("create")
def create(task: Annotated[str, typer.Argument(help="the task's name", metavar="NAME")],
           dataset: Annotated[str, typer.Option(help="[PROJECT/]NAME[:VERSION] of the data to label")],
           kind: Annotated[str, typer.Option(help="classification, multilabel, boxes or text")],
           classes: Annotated[str, typer.Option(help="the classes, comma-separated")],
           annotators: Names,
           reviewers: Names = "",
           per_item: Annotated[int, typer.Option(help="annotators who label each item")] = 1,
           instructions: str = "",
           prefill: Annotated[str | None, typer.Option(
               metavar="FORMAT[:PATH]", help="start each item from the labels the version carries: imagefolder, csv, "
                                             "coco, yolo, voc or label-studio, PATH the label file (csv, coco, "
                                             "label-studio) where not found by name")] = None,
           output: OutputOption = OutputFormat.table) -> None:
    """Make a labeling task on a dataset version (members of the dataset's project)."""
    reference, _, version = dataset.partition(":")
    project, _, name = reference.rpartition("/")
    if not name:
        raise UsageError(f"--dataset {dataset!r} is not [PROJECT/]NAME[:VERSION]")
    with Client() as client:
        made = client.labeling.create(name=task, project=project or "default", dataset=name,
                                      version=version or "latest", kind=kind, classes=_names(classes),
                                      annotators=_names(annotators), reviewers=_names(reviewers),
                                      annotators_per_item=per_item, instructions=instructions,
                                      prefill=_prefill(prefill))
    if output is OutputFormat.json:
        print_json(made)
        return
    filled = f", {made.prefilled:,} pre-filled" if made.prefilled else ""
    console.print(f"labeling task {made.id} ({escape(made.project)}/{escape(made.name)}): {made.items:,} items"
                  f"{filled} of {escape(made.dataset)}:{made.version} for {escape(', '.join(made.annotators))}")


@label_app.command("ls")
def list_tasks(project: Annotated[str | None, typer.Option(help="only this project's")] = None,
               output: OutputOption = OutputFormat.table) -> None:
    """The tasks you label or review, and those you manage, with their progress."""
    with Client() as client:
        found = client.labeling.list(project)
    if output is OutputFormat.json:
        print_json(found)
        return
    table = Table("ID", "TASK", "DATA", "KIND", "DONE", "YOURS", "ANNOTATORS", box=None)
    for task in found:
        table.add_row(str(task.id), f"{task.project}/{task.name}", f"{task.dataset}:{task.version}", task.kind,
                      f"{task.done:,}/{task.items:,}", "-" if task.mine is None else f"{task.mine:,}",
                      escape(", ".join(task.annotators)))
    console.print(table)


@label_app.command("show")
def show(task_id: Annotated[int, typer.Argument(metavar="ID")], output: OutputOption = OutputFormat.table) -> None:
    """A task: its data, classes, people, progress and the annotators' agreement."""
    with Client() as client:
        task = client.labeling.get(task_id)
        agreement = client.labeling.agreement(task_id)
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps({**task.model_dump(mode="json"), "agreement": agreement.model_dump(mode="json")},
                                    indent=2) + "\n")
        return
    filled = f" ({task.prefilled:,} pre-filled)" if task.prefilled else ""
    console.print(f"[bold]{escape(task.project)}/{escape(task.name)}[/] ({task.kind}) on "
                  f"{escape(task.dataset)}:{task.version}: {task.done:,} of {task.items:,} items done{filled}")
    console.print(f"classes: {escape(', '.join(task.classes))}")
    console.print(f"annotators: {escape(', '.join(task.annotators))} ({task.annotators_per_item} per item); "
                  f"reviewers: {escape(', '.join(task.reviewers)) or 'none'}")
    _print_agreement(agreement)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _print_agreement(agreement) -> None:
    kappa = "-" if agreement.kappa is None else f"{agreement.kappa:.3f}"
    console.print(f"agreement: {_share(agreement.percent)} over {agreement.items_compared:,} items; "
                  f"kappa ({agreement.kappa_kind or '-'}): {kappa}")
    if agreement.per_class:
        console.print("  per class: " + escape(", ".join(f"{name} {_share(value)}"
                                                        for name, value in agreement.per_class.items())))
    if any(value is not None for value in agreement.per_annotator.values()):
        console.print("  with the majority: " + escape(", ".join(f"{name} {_share(value)}"
                                                                for name, value in agreement.per_annotator.items())))
    if agreement.note:
        console.print(f"  ({escape(agreement.note)})")


@label_app.command("export")
def export(task_id: Annotated[int, typer.Argument(metavar="ID")],
           layout: Annotated[str, typer.Option("--format", help="imagefolder or csv (classification), coco, yolo or "
                                                               "voc (boxes): a child version; label-studio: a JSON "
                                                               "file (--file)")],
           message: Annotated[str, typer.Option("--message", "-m")] = "",
           destination: Annotated[Path | None, typer.Option(
               "--file", "-f", metavar="FILE", help="where the label-studio download is written")] = None,
           output: OutputOption = OutputFormat.table
           ) -> None:
    """Make a child version of the task's data with its labels in a standard layout, or download
    them as Label Studio JSON."""
    if (layout == "label-studio") != (destination is not None):
        raise UsageError("--format label-studio downloads to a file: give it --file FILE (and --file only with it)")
    with Client() as client:
        if destination is not None:
            content = client.labeling.label_studio(task_id)
            destination.write_bytes(content)
            console.print(f"{len(json.loads(content)):,} Label Studio tasks written to {escape(str(destination))}")
            return
        made = client.labeling.export(task_id, layout, message=message)
    if output is OutputFormat.json:
        print_json(made)
        return
    version = made.version
    console.print(f"{escape(version.project)}/{escape(version.dataset)}:{version.version} ({version.file_count:,} "
                  f"files, child of {version.parent}): {escape(version.message)}")
