"""`mlyard volumes …`: a project's persistent read-write directories with a size quota, which
jobs mount (`volumes: [{name: scratch, path: /scratch}]`). A volume is named `NAME` (in the
project of `--project`, by default `default`) or `PROJECT/NAME`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mlyard.cli.console import console, errors
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import print_json
from mlyard.cli.words import ago
from mlyard.client import Client
from mlyard.spec import format_bytes

if TYPE_CHECKING:
    from mlyard.api.volumes import VolumeInfo

volumes_app = typer.Typer(help="Volumes: a project's persistent read-write directories with a size quota, which jobs "
                               "mount (volumes: in the spec).")
VolumeArgument = Annotated[str, typer.Argument(help="NAME or PROJECT/NAME", metavar="VOLUME")]
ProjectOption = Annotated[str | None, typer.Option(help="the project of a VOLUME given without one (default: default)")]


def _named(reference: str, project: str | None) -> tuple[str, str]:
    if "/" in reference:
        if project is not None:
            raise UsageError(f"{reference!r} names its project; leave --project out")
        project, _, reference = reference.partition("/")
    if not reference or project == "":
        raise UsageError(f"{reference!r} is not [PROJECT/]NAME")
    return project or "default", reference


def _used(volume: VolumeInfo) -> str:
    if volume.used_bytes is None:
        return "not measured yet"
    share = f" ({volume.used_bytes / volume.size_bytes:.0%})" if volume.size_bytes else ""
    return format_bytes(volume.used_bytes) + share + (" OVER QUOTA" if volume.over_quota else "")


@volumes_app.command("create")
def create(volume: VolumeArgument,
           size: Annotated[str, typer.Option(help="its quota, e.g. 50Gi; it counts against the project's storage "
                                                  "limit from the start")],
           project: ProjectOption = None, description: str = "", output: OutputOption = OutputFormat.table) -> None:
    """Create an empty volume of a project you are a member of."""
    project, name = _named(volume, project)
    with Client() as client:
        made = client.volumes.create(project, name, size, description=description)
    if output is OutputFormat.json:
        print_json(made)
        return
    console.print(f"created volume {made.project}/{made.name} of {format_bytes(made.size_bytes)}; "
                  f"jobs mount it with volumes: [{{name: {made.name}, path: /scratch}}]")
    console.print(f"quota: {escape(made.enforcement) if made.enforcement else 'measured by mlyard'}")


@volumes_app.command("ls")
def list_volumes(project: Annotated[str | None, typer.Option(help="only this project's")] = None,
                 output: OutputOption = OutputFormat.table) -> None:
    """The volumes of your projects, with their quotas and what they hold as last measured."""
    with Client() as client:
        found = client.volumes.list(project)
    if output is OutputFormat.json:
        print_json(found)
        return
    if not found:
        console.print("no volumes; `mlyard volumes create NAME --size 50Gi` makes one")
        return
    table = Table("Project", "Name", "Quota", "Used", "Jobs", "Created")
    for volume in found:
        table.add_row(volume.project, volume.name, format_bytes(volume.size_bytes), _used(volume),
                      " ".join(map(str, volume.mounted_by)) or "-", ago(volume.created_at))
    console.print(table)


@volumes_app.command("show")
def show(volume: VolumeArgument, project: ProjectOption = None, output: OutputOption = OutputFormat.table) -> None:
    """A volume: its quota and how it is held to it, what it holds, and the unfinished jobs that mount it."""
    project, name = _named(volume, project)
    with Client() as client:
        found = client.volumes.get(project, name)
    if output is OutputFormat.json:
        print_json(found)
        return
    rows = [("Volume", f"{found.project}/{found.name}"), ("Description", found.description or "-"),
            ("Quota", format_bytes(found.size_bytes)),
            ("Used", _used(found) + (f", measured {ago(found.measured_at)}" if found.measured_at else "")),
            ("Enforced by", found.enforcement or "nothing on this filesystem: measured by mlyard, and new jobs "
                                                 "cannot mount it past its quota"),
            ("Mounted by", ", ".join(f"job {job}" for job in found.mounted_by) or "no unfinished job"),
            ("Created", f"{ago(found.created_at)} by {found.created_by or '-'}")]
    for label, value in rows:
        console.print(f"[bold]{label}:[/bold] {escape(value)}")


@volumes_app.command("rm")
def remove(volume: VolumeArgument, project: ProjectOption = None) -> None:
    """Remove a volume and everything in it (who made it, the project's maintainers); refused while
    an unfinished job mounts it."""
    project, name = _named(volume, project)
    with Client() as client:
        client.volumes.remove(project, name)
    errors.print(f"removed volume {project}/{name} and its files")
