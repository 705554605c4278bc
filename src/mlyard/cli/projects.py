"""`mlyard projects …`: projects, their members and roles, and their limits."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from mlyard.cli.console import console
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import ago, print_json
from mlyard.client import Client
from mlyard.api.projects import ProjectInfo, ProjectStorage
from mlyard.spec import format_bytes, parse_memory

projects_app = typer.Typer(help="Projects: who may see and do what (viewer, member, maintainer), and their limits.")

NameArgument = Annotated[str, typer.Argument(help="the project's name", metavar="PROJECT")]
UserArgument = Annotated[str, typer.Argument(help="the user's name", metavar="USER")]
CLEAR = "none"


def _limits_text(project: ProjectInfo) -> str:
    limits = project.limits
    parts = [f"{limits.gpu:g} GPUs" if limits.gpu is not None else "",
             f"{limits.cpu:g} CPUs" if limits.cpu is not None else "",
             format_bytes(limits.memory) + " memory" if limits.memory is not None else "",
             f"{limits.running_jobs} running jobs" if limits.running_jobs is not None else "",
             format_bytes(limits.storage_bytes) + " of storage" if limits.storage_bytes is not None else ""]
    return ", ".join(part for part in parts if part) or "no limits"


def _print(project: ProjectInfo) -> None:
    console.print(f"[bold]{project.name}[/]{' — ' + project.description if project.description else ''}")
    console.print(f"Limits: {_limits_text(project)}")
    console.print(f"Storage kept (code and datasets): {format_bytes(project.storage_used_bytes)}"
                  + (f" of {format_bytes(project.limits.storage_bytes)}" if project.limits.storage_bytes is not None
                     else ""))
    members = ", ".join(f"{member.user} ({member.role})" for member in project.members) or "none"
    console.print(f"Members: {members}")


@projects_app.callback(invoke_without_command=True)
def projects(context: typer.Context, output: OutputOption = OutputFormat.table) -> None:
    """List your projects (every project for an administrator)."""
    if context.invoked_subcommand is not None:
        return
    with Client() as client:
        found = client.projects()
    if output is OutputFormat.json:
        print_json(found)
        return
    table = Table("Project", "Your role", "Members", "Limits", "Description")
    for project in found:
        table.add_row(project.name, project.your_role or "–", str(len(project.members)), _limits_text(project),
                      project.description or "")
    console.print(table)


@projects_app.command("show")
def show(name: NameArgument, output: OutputOption = OutputFormat.table) -> None:
    """A project with its members and limits."""
    with Client() as client:
        project = client.project(name)
    if output is OutputFormat.json:
        print_json(project)
    else:
        _print(project)


@projects_app.command("add")
def add(name: NameArgument,
        description: Annotated[str | None, typer.Option(help="what the project is")] = None) -> None:
    """Create a project (administrators)."""
    with Client() as client:
        project = client.create_project(name, description=description)
    console.print(f"Created project {project.name}")


def _amount(option: str, text: str | None, parse) -> Any:
    if text is None or text == CLEAR:
        return None
    try:
        value = parse(text)
    except ValueError as error:
        raise UsageError(f"{option} {text!r}: {error}") from None
    if value < 0:
        raise UsageError(f"{option} must not be negative")
    return value


@projects_app.command("set")
def set_limits(
    name: NameArgument,
    gpu: Annotated[str | None, typer.Option(help="GPUs its running jobs may hold; 'none' for no limit")] = None,
    cpu: Annotated[str | None, typer.Option(help="CPUs its running jobs may hold; 'none' for no limit")] = None,
    memory: Annotated[str | None, typer.Option(help="memory its running jobs may hold (e.g. 512Gi); 'none'")] = None,
    running_jobs: Annotated[str | None, typer.Option(help="jobs it may run at once; 'none'")] = None,
    storage: Annotated[str | None, typer.Option(help="code snapshots and dataset files it may keep (e.g. 10Gi); 'none'")] = None,
    description: Annotated[str | None, typer.Option(help="what the project is")] = None,
) -> None:
    """Change a project's limits (administrators) or description (maintainers)."""
    given = {"gpu": (gpu, float), "cpu": (cpu, float), "memory": (memory, parse_memory),
             "running_jobs": (running_jobs, int), "storage_bytes": (storage, parse_memory)}
    limits = {field: _amount(f"--{field.replace('_bytes', '').replace('_', '-')}", text, parse)
              for field, (text, parse) in given.items() if text is not None}
    change: dict[str, Any] = {}
    if limits:
        change["limits"] = limits
    if description is not None:
        change["description"] = description
    if not change:
        raise UsageError("nothing to change: give --gpu, --cpu, --memory, --running-jobs, --storage or --description")
    with Client() as client:
        project = client.change_project(name, change)
    _print(project)


@projects_app.command("add-member")
def add_member(
    name: NameArgument,
    user: UserArgument,
    role: Annotated[str, typer.Option(help="viewer (reads), member (submits, manages own jobs) or maintainer "
                                           "(manages all its jobs, queues and members)")] = "member",
) -> None:
    """Add a member to a project, or change their role (maintainers, administrators)."""
    if role not in ("viewer", "member", "maintainer"):
        raise UsageError(f"--role {role!r}: choose viewer, member or maintainer")
    with Client() as client:
        client.set_member(name, user, role)
    console.print(f"{user} is a {role} of project {name}")


@projects_app.command("rm-member")
def remove_member(name: NameArgument, user: UserArgument) -> None:
    """Remove a member from a project (maintainers, administrators)."""
    with Client() as client:
        client.remove_member(name, user)
    console.print(f"{user} is no longer a member of project {name}")


def _print_storage(storage: ProjectStorage) -> None:
    limit = f" of {format_bytes(storage.limit_bytes)}" if storage.limit_bytes is not None else " (no limit)"
    console.print(f"Project {storage.project} keeps {format_bytes(storage.used_bytes)}{limit}")
    shared = storage.snapshots_bytes + storage.datasets_bytes + storage.volumes_bytes - storage.used_bytes
    console.print(f"  code snapshots {format_bytes(storage.snapshots_bytes)}, datasets "
                  f"{format_bytes(storage.datasets_bytes)}"
                  + (f", volumes {format_bytes(storage.volumes_bytes)}" if storage.volumes_bytes else "")
                  + (f" ({format_bytes(shared)} held by more than one, counted once)" if shared > 0 else ""))
    if storage.snapshots:
        table = Table("Snapshot", "Size", "Jobs", "Unfinished", "Last used", title="Code snapshots")
        for snapshot in storage.snapshots:
            table.add_row(snapshot.digest[:12], format_bytes(snapshot.size), str(snapshot.jobs),
                          str(snapshot.unfinished_jobs), ago(snapshot.last_used_at))
        console.print(table)
    if storage.datasets:
        table = Table("Dataset", "Versions", "Bytes", title="Datasets")
        for dataset in storage.datasets:
            table.add_row(dataset.name, str(dataset.versions), format_bytes(dataset.bytes))
        console.print(table)
    if storage.volumes:
        table = Table("Volume", "Quota", "Used", title="Volumes (each counts its quota)")
        for volume in storage.volumes:
            table.add_row(volume.name, format_bytes(volume.size_bytes),
                          "not measured" if volume.used_bytes is None else format_bytes(volume.used_bytes))
        console.print(table)


@projects_app.command("storage")
def storage(name: NameArgument, output: OutputOption = OutputFormat.table) -> None:
    """What a project keeps against its storage limit: code snapshots and datasets, each blob once, and
    its volumes' quotas."""
    with Client() as client:
        found = client.project_storage(name)
    if output is OutputFormat.json:
        print_json(found)
    else:
        _print_storage(found)


@projects_app.command("release-code")
def release_code(
    name: NameArgument,
    digest: Annotated[str, typer.Argument(help="the snapshot's digest, or a prefix of it that names one",
                                          metavar="SNAPSHOT")],
) -> None:
    """Stop a project keeping a snapshot none of its unfinished jobs use (maintainers); the code is
    deleted when no project keeps it, and resubmitting an old job then uploads it again."""
    with Client() as client:
        kept = [snapshot.digest for snapshot in client.project_storage(name).snapshots]
        matches = [candidate for candidate in kept if candidate.startswith(digest.lower())] if digest else []
        if len(matches) != 1:
            raise UsageError(f"{digest!r} names {'no' if not matches else 'more than one'} snapshot of project "
                             f"{name} (`mlyard projects storage {name}` lists them)")
        released = client.release_snapshot(name, matches[0])
    console.print(f"released {matches[0][:12]}; project {name} keeps {format_bytes(released.used_bytes)}")
