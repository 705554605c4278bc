"""`mlyard env build|ls|show|rm`: environments jobs name instead of an image."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from mlyard.api.errors import field_errors, summarize
from mlyard.cli.console import console, errors
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import ago, print_json
from mlyard.client import Client
from mlyard.api.environments import EnvironmentInfo, EnvironmentRequest
from mlyard.errors import MlyardError

env_app = typer.Typer(help="Environments: a base image plus apt and pip packages, built once per content; "
                           "jobs name one with `environment: NAME`.")
NameArgument = Annotated[str, typer.Argument(help="the environment's name", metavar="NAME")]
ProjectOption = Annotated[str | None, typer.Option(help="the project it belongs to (default: default)")]
POLL_SECONDS = 0.5


def _describe(environment: EnvironmentInfo) -> str:
    built = environment.image or ""
    reuse = f" ({environment.message})" if environment.cached and environment.message else ""
    return f"{environment.name}: {environment.status}{' as ' + environment.kind if environment.kind else ''}" \
           f"{' ' + built if built else ''}{reuse}"


@env_app.command("build")
def build(
    name: NameArgument,
    base: Annotated[str, typer.Option("--from", help="the image it starts from, e.g. python:3.11-slim")],
    requirements: Annotated[Path | None, typer.Option(
        help="a file of PEP 508 requirements, one a line (no options, paths or URLs)")] = None,
    apt: Annotated[list[str] | None, typer.Option(help="a Debian package to install (repeat for more)")] = None,
    project: ProjectOption = None,
    wait: Annotated[bool, typer.Option(help="follow the build until it ends")] = True,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Build an environment of a project you maintain (or find it built: the same inputs are
    never built twice). Packages come from the index the administrator set."""
    text = None
    if requirements is not None:
        try:
            text = requirements.read_text()
        except OSError as error:
            raise UsageError(f"--requirements {requirements}: {error.strerror}") from None
    try:
        fields = {"project": project} if project else {}
        request = EnvironmentRequest(name=name, base=base, requirements=text, apt=apt or [], **fields)
    except ValidationError as error:
        raise UsageError(f"invalid environment: {summarize(field_errors(error.errors()))}") from None
    with Client() as client:
        environment = client.build_environment(request)
        if wait and environment.status in ("queued", "building"):
            environment = _follow(client, environment)
    if output is OutputFormat.json:
        print_json(environment)
    else:
        console.print(escape(_describe(environment)), highlight=False)
    if environment.status == "failed":
        for line in environment.log_tail:
            errors.print(escape(line), highlight=False)
        raise MlyardError(f"environment {name} failed to build: {environment.message}")


def _follow(client: Client, environment: EnvironmentInfo) -> EnvironmentInfo:
    """Polls until the build ends, showing its status and last output line (live on a terminal)."""
    with errors.status(f"{environment.name}: {environment.status}") as status:
        while environment.status in ("queued", "building"):
            time.sleep(POLL_SECONDS)
            environment = client.environment(environment.name)
            last = environment.log_tail[-1] if environment.log_tail else ""
            status.update(escape(f"{environment.name}: {environment.status}  {last[:100]}"))
    return environment


@env_app.callback(invoke_without_command=True)
def environments(context: typer.Context, project: Annotated[str | None, typer.Option(
        help="only this project's")] = None, output: OutputOption = OutputFormat.table) -> None:
    """List the environments of your projects."""
    if context.invoked_subcommand is not None:
        return
    with Client() as client:
        found = client.environments(project)
    if output is OutputFormat.json:
        print_json(found)
        return
    table = Table("Name", "Project", "Status", "Kind", "Base", "Packages", "Built", "By")
    for environment in found:
        packages = len((environment.requirements or "").splitlines()) + len(environment.apt)
        table.add_row(environment.name, environment.project, environment.status + (" (cached)" if environment.cached else ""),
                      environment.kind or "-", environment.base, str(packages), ago(environment.built_at),
                      environment.created_by or "-")
    console.print(table)


env_app.command("ls")(environments)


@env_app.command("show")
def show(name: NameArgument, output: OutputOption = OutputFormat.table) -> None:
    """An environment with the last lines of its build."""
    with Client() as client:
        environment = client.environment(name)
    if output is OutputFormat.json:
        print_json(environment)
        return
    console.print(escape(_describe(environment)), highlight=False)
    if environment.message and not environment.cached:
        console.print(escape(environment.message), highlight=False)
    for line in environment.log_tail:
        console.print(f"  [dim]{escape(line)}[/]", highlight=False)


@env_app.command("rm")
def remove(name: NameArgument) -> None:
    """Remove an environment (maintainers of its project, administrators)."""
    with Client() as client:
        client.remove_environment(name)
    console.print(f"environment {name} removed")
