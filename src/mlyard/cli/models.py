"""`mlyard models …`: the model registry. A model is named `NAME` (in the project of `--project`,
by default `default`) or `PROJECT/NAME`; a version `NAME:v3` or `NAME@production`."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mlyard.cli.console import console, errors
from mlyard.cli.datasets import move_or_list_aliases, pull_with_progress, upload_with_progress
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import ago, print_json
from mlyard.client import Client
from mlyard.spec import format_bytes

if TYPE_CHECKING:
    from mlyard.api.models import ModelVersionInfo

models_app = typer.Typer(help="Models: versioned weights of a project with their metrics and lineage; push a "
                              "directory, register a job's checkpoint files, pull, move aliases, compare.")
ModelArgument = Annotated[str, typer.Argument(help="NAME or PROJECT/NAME", metavar="MODEL")]
VersionedArgument = Annotated[str, typer.Argument(help="[PROJECT/]NAME[:vN or @ALIAS] (default: @latest)",
                                                  metavar="MODEL[:VERSION]")]
ProjectOption = Annotated[str | None, typer.Option(help="the project of a MODEL given without one (default: default)")]
MetricOption = Annotated[list[str] | None, typer.Option("--metric", help="NAME=NUMBER (repeat for more)")]
FormatOption = Annotated[str | None, typer.Option(
    "--format", help="safetensors, pytorch-state-dict, torchscript, onnx, keras, tf-savedmodel or other "
    "(default: guessed from the files' names)")]
ParentOption = Annotated[str | None, typer.Option(help="the version it was fine-tuned from: NAME:vN or NAME@ALIAS")]
MessageOption = Annotated[str, typer.Option("--message", "-m", help="what it is")]
_REFERENCE = re.compile(r"^(?:(?P<project>[^/:@]+)/)?(?P<name>[^/:@]+)(?:(?P<kind>[:@])(?P<version>[^/:@]+))?$")


def _named(reference: str, project: str | None) -> tuple[str, str, str]:
    """(project, name, version or alias) of `[PROJECT/]NAME[:vN|@ALIAS]`."""
    found = _REFERENCE.fullmatch(reference)
    if found is None:
        raise UsageError(f"{reference!r} is not [PROJECT/]NAME[:vN or @ALIAS]")
    return found["project"] or project or "default", found["name"], found["version"] or "latest"


def _metrics(given: list[str] | None) -> dict[str, float]:
    metrics = {}
    for item in given or []:
        name, equals, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not equals or not name or not math.isfinite(number):
            raise UsageError(f"--metric {item!r} is not NAME=NUMBER")
        metrics[name] = number
    return metrics


def _described(format_name: str | None, metric: list[str] | None, parent: str | None, message: str,
               framework_version: str, signature: Path | None) -> dict:
    body = {"format": format_name, "metrics": _metrics(metric), "parent": parent, "message": message,
            "framework_version": framework_version}
    if signature is not None:
        try:
            body["signature"] = json.loads(signature.read_text())
        except (OSError, ValueError) as error:
            raise UsageError(f"--signature {signature}: {error}") from None
    return body


@models_app.command("ls")
def list_models(project: Annotated[str | None, typer.Option(help="only this project's")] = None,
                search: Annotated[str | None, typer.Option(help="words of the name or description")] = None,
                tag: Annotated[str | None, typer.Option(help="only those with this tag")] = None,
                task: Annotated[str | None, typer.Option(help="only those solving this task")] = None,
                output: OutputOption = OutputFormat.table) -> None:
    """List the models of your projects."""
    with Client() as client:
        found = client.models.list(project=project, q=search, tag=tag, task=task)
    if output is OutputFormat.json:
        print_json(found)
        return
    table = Table("MODEL", "TASK", "OWNER", "VERSIONS", "ALIASES", "UPDATED", box=None)
    for item in found:
        table.add_row(escape(f"{item.project}/{item.name}"), escape(item.task or "-"), escape(item.owner or "-"),
                      str(item.versions), escape(", ".join(f"{alias} → {version}" for alias, version
                                                           in item.aliases.items())), ago(item.updated_at))
    console.print(table)


def _print_version(found: ModelVersionInfo) -> None:
    console.print(f"[bold]{escape(found.project)}/{escape(found.model)}:{found.version}[/] {found.format} "
                  f"({found.file_count:,} files, {format_bytes(found.total_bytes)}) by "
                  f"{escape(found.created_by or '-')} {ago(found.created_at)}; "
                  f"aliases {', '.join(found.aliases) or '-'}")
    if found.message:
        console.print(escape(found.message))
    lineage = found.lineage
    if lineage.job is not None:
        console.print(f"  made by job {lineage.job} (attempt {lineage.attempt or '-'}, code "
                      f"{(lineage.snapshot or '-')[:12]})")
    for read in lineage.datasets:
        console.print(f"  read dataset {escape(read.project)}/{escape(read.dataset)}:{read.version}")
    if lineage.parent:
        console.print(f"  fine-tuned from {escape(lineage.parent)}")
    if found.children:
        console.print(f"  fine-tuned into {escape(', '.join(found.children))}")
    for name, value in sorted(found.metrics.items()):
        console.print(f"  {escape(name)} = {value:g}")
    if "parameters" in found.statistics:
        console.print(f"  {found.statistics['parameters']:,} parameters (safetensors headers)")


@models_app.command("show")
def show(model: VersionedArgument, project: ProjectOption = None, output: OutputOption = OutputFormat.table) -> None:
    """Show a model, or with :vN or @ALIAS one version: its files, metrics and lineage."""
    project, name, version = _named(model, project)
    with Client() as client:
        found = client.models.version(project, name, version) if re.search(r"[:@]", model) else \
            client.models.get(project, name)
    if output is OutputFormat.json:
        print_json(found)
        return
    if hasattr(found, "lineage"):
        _print_version(found)
        return
    console.print(f"[bold]{escape(found.project)}/{escape(found.name)}[/] task {escape(found.task or '-')}, owner "
                  f"{escape(found.owner or '-')}, {found.versions} versions; aliases: "
                  + (", ".join(f"{alias} → {target}" for alias, target in found.aliases.items()) or "none"))
    if found.description:
        console.print(escape(found.description))


@models_app.command("versions")
def versions(model: ModelArgument, project: ProjectOption = None, output: OutputOption = OutputFormat.table) -> None:
    """List a model's versions, oldest first, with their metrics."""
    project, name, _ = _named(model, project)
    with Client() as client:
        found = client.models.versions(project, name)
    if output is OutputFormat.json:
        print_json(found)
        return
    table = Table("VERSION", "FORMAT", "SIZE", "JOB", "PARENT", "METRICS", "ALIASES", "MADE", box=None)
    for item in found:
        table.add_row(item.version, item.format, format_bytes(item.total_bytes), str(item.lineage.job or "-"),
                      escape(item.lineage.parent or "-"),
                      escape(", ".join(f"{key}={value:g}" for key, value in sorted(item.metrics.items())[:6])),
                      ", ".join(item.aliases), ago(item.created_at))
    console.print(table)


def _exists(client: Client, project: str, name: str) -> bool:
    from mlyard.client import ClientError
    try:
        client.models.get(project, name)
        return True
    except ClientError as error:
        if error.status != 404:
            raise
        return False


@models_app.command("push")
def push(model: ModelArgument, directory: Annotated[Path, typer.Argument(help="the files of the new version")],
         project: ProjectOption = None, format_name: FormatOption = None, metric: MetricOption = None,
         parent: ParentOption = None, message: MessageOption = "",
         framework_version: Annotated[str, typer.Option(help="e.g. 'torch 2.5.1'")] = "",
         signature: Annotated[Path | None, typer.Option(help="a JSON file of its inputs and outputs")] = None,
         task: Annotated[str, typer.Option(help="what a new model solves (image-classification, …)")] = "",
         output: OutputOption = OutputFormat.table) -> None:
    """Upload a directory as a new version: only files the server lacks travel. Creates the model
    if it does not exist."""
    project, name, _ = _named(model, project)
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory")
    described = _described(format_name, metric, parent, message, framework_version, signature)
    with Client() as client:
        if not _exists(client, project, name):
            client.models.create(project, name, task=task)
        plan, created = upload_with_progress(client.models, directory, cached=True, follows=None, push=lambda plan,
                                             uploaded: client.models.push(project, name, plan, uploaded=uploaded,
                                                                          **described))
    if output is OutputFormat.json:
        print_json(created)
        return
    for skipped in plan.skipped:
        errors.print(f"skipped {escape(skipped)}: not a regular file")
    version = created.version
    if not created.created:
        console.print(f"{project}/{name}: unchanged, still {version.version}")
        return
    console.print(f"{project}/{name}:{version.version} ({version.file_count:,} files, "
                  f"{format_bytes(version.total_bytes)}); uploaded {len(plan.missing):,} files, "
                  f"{format_bytes(sum(file.size for file in plan.missing))}")


@models_app.command("register")
def register(model: ModelArgument, job: Annotated[int, typer.Option(help="the job whose checkpoint files to take")],
             path: Annotated[str | None, typer.Option(help="a file or folder under the job's checkpoint directory "
                                                           "(default: all of it)")] = None,
             project: ProjectOption = None, format_name: FormatOption = None, metric: MetricOption = None,
             parent: ParentOption = None, message: MessageOption = "",
             framework_version: Annotated[str, typer.Option(help="e.g. 'torch 2.5.1'")] = "",
             output: OutputOption = OutputFormat.table) -> None:
    """Register the files a job saved (MLYARD_CHECKPOINT_DIR) as the next version, with the job's
    lineage and the last value of each metric it reported. Creates the model if it does not exist."""
    project, name, _ = _named(model, project)
    described = _described(format_name, metric, parent, message, framework_version, None)
    with Client() as client:
        created = client.models.register(project, name, job, path=path, **described)
    if output is OutputFormat.json:
        print_json(created)
        return
    _print_version(created.version)


@models_app.command("pull")
def pull(model: VersionedArgument, directory: Annotated[Path, typer.Argument(help="where its files go")],
         project: ProjectOption = None) -> None:
    """Download a version into a directory, each file checked against its sha256."""
    project, name, version = _named(model, project)
    with Client() as client:
        found = client.models.version(project, name, version)
        written, kept = pull_with_progress(client.models, project, name, found, directory)
    console.print(f"{project}/{name}:{found.version} in {directory}: {written:,} files written, {kept:,} already there")


@models_app.command("alias")
def alias(model: ModelArgument, name: Annotated[str | None, typer.Argument(help="the alias to move")] = None,
          version: Annotated[str | None, typer.Argument(help="the version it is to name (vN)")] = None,
          project: ProjectOption = None, output: OutputOption = OutputFormat.table) -> None:
    """Point an alias (production, staging, …) at a version; without one, list the aliases and
    their moves."""
    project, model_name, _ = _named(model, project)
    move_or_list_aliases(lambda client: client.models, project, model_name, name, version, output,
                         lambda moves: ", ".join(f"{move.before or '-'} → {move.after} by {move.moved_by} "
                                                 f"{ago(move.at)}" for move in moves))


@models_app.command("rm")
def remove(model: VersionedArgument, project: ProjectOption = None) -> None:
    """Remove a version (NAME:vN), or a model with no version left (NAME): its owner and the
    project's maintainers. A version an alias or a fine-tuned version needs stays."""
    project, name, version = _named(model, project)
    with Client() as client:
        if re.search(r"[:@]", model):
            client.models.remove_version(project, name, version)
            errors.print(f"removed {project}/{name}:{version}")
        else:
            client.models.remove(project, name)
            errors.print(f"removed model {project}/{name}")


def _lineage(found: ModelVersionInfo) -> dict[str, object]:
    lineage = found.lineage
    return {"job": lineage.job, "attempt": lineage.attempt, "code": (lineage.snapshot or "")[:12] or None,
            "datasets": ", ".join(f"{read.project}/{read.dataset}:{read.version}" for read in lineage.datasets)
            or None, "parent": lineage.parent, "format": found.format}


@models_app.command("compare")
def compare(first: Annotated[str, typer.Argument(metavar="MODEL:VERSION")],
            second: Annotated[str, typer.Argument(metavar="MODEL:VERSION")], project: ProjectOption = None,
            output: OutputOption = OutputFormat.table) -> None:
    """Show two versions' metrics side by side and where their lineage differs."""
    with Client() as client:
        versions_found = [client.models.version(*_named(reference, project)) for reference in (first, second)]
    before, after = versions_found
    names = sorted(before.metrics.keys() | after.metrics.keys())
    metrics = {name: [before.metrics.get(name), after.metrics.get(name)] for name in names}
    lineage = {key: [value, _lineage(after)[key]] for key, value in _lineage(before).items()
               if value != _lineage(after)[key]}
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps({"versions": [f"{item.project}/{item.model}:{item.version}"
                                                  for item in versions_found],
                                     "metrics": metrics, "lineage": lineage}, indent=2) + "\n")
        return
    labels = [f"{item.model}:{item.version}" for item in versions_found]
    table = Table("METRIC", *labels, "CHANGE", box=None)
    for name, (old, new) in metrics.items():
        change = f"{new - old:+g}" if old is not None and new is not None else "-"
        table.add_row(escape(name), "-" if old is None else f"{old:g}", "-" if new is None else f"{new:g}", change)
    console.print(table)
    if not lineage:
        console.print("same lineage")
    for key, (old, new) in lineage.items():
        console.print(f"{key}: {escape(_shown(old))} → {escape(_shown(new))}")


def _shown(value: object) -> str:
    return "-" if value is None else str(value)
