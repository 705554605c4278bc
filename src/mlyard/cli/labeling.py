"""`mlyard label create|ls|show|export`: labeling tasks on dataset versions, and their labels
exported as a child version. Labeling itself goes through the API (a web page is to come)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mlyard.cli.console import console
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import print_json
from mlyard.client import Client

label_app = typer.Typer(help="Labeling tasks on dataset versions: who labels what, with which classes, and how far "
                             "they are.")
Names = Annotated[str, typer.Option(help="user names, comma-separated")]


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


@label_app.command("create")
def create(task: Annotated[str, typer.Argument(help="the task's name", metavar="NAME")],
           dataset: Annotated[str, typer.Option(help="[PROJECT/]NAME[:VERSION] of the data to label")],
           kind: Annotated[str, typer.Option(help="classification, multilabel, boxes or text")],
           classes: Annotated[str, typer.Option(help="the classes, comma-separated")],
           annotators: Names,
           reviewers: Names = "",
           per_item: Annotated[int, typer.Option(help="annotators who label each item")] = 1,
           instructions: str = "",
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
                                      annotators_per_item=per_item, instructions=instructions)
    if output is OutputFormat.json:
        print_json(made)
        return
    console.print(f"labeling task {made.id} ({made.project}/{made.name}): {made.items:,} items of "
                  f"{made.dataset}:{made.version} for {', '.join(made.annotators)}")


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
    """A task: its data, classes, people and progress."""
    with Client() as client:
        task = client.labeling.get(task_id)
    if output is OutputFormat.json:
        print_json(task)
        return
    console.print(f"[bold]{escape(task.project)}/{escape(task.name)}[/] ({task.kind}) on "
                  f"{escape(task.dataset)}:{task.version}: {task.done:,} of {task.items:,} items done")
    console.print(f"classes: {escape(', '.join(task.classes))}")
    console.print(f"annotators: {escape(', '.join(task.annotators))} ({task.annotators_per_item} per item); "
                  f"reviewers: {escape(', '.join(task.reviewers)) or 'none'}")


@label_app.command("export")
def export(task_id: Annotated[int, typer.Argument(metavar="ID")],
           layout: Annotated[str, typer.Option("--format", help="imagefolder or csv (classification), coco, yolo or "
                                                               "voc (boxes)")],
           message: Annotated[str, typer.Option("--message", "-m")] = "",
           output: OutputOption = OutputFormat.table) -> None:
    """Make a child version of the task's data with its labels in a standard layout."""
    with Client() as client:
        made = client.labeling.export(task_id, layout, message=message)
    if output is OutputFormat.json:
        print_json(made)
        return
    version = made.version
    console.print(f"{escape(version.project)}/{escape(version.dataset)}:{version.version} ({version.file_count:,} "
                  f"files, child of {version.parent}): {escape(version.message)}")
