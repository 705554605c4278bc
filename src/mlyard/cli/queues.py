"""`mlyard queues`, `mlyard queues set`, `mlyard queues rm`."""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from mlyard.api.queues import QueueSettings
from mlyard.cli.console import console, errors
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import print_json, print_waiting, queues_table
from mlyard.client import Client
from mlyard.spec import NAME_PATTERN

queues_app = typer.Typer(help="List queues; administrators set their quotas and borrowing limits.")

NameArgument = Annotated[str, typer.Argument(help="the queue's name", metavar="NAME")]
CLEAR = "none"
_AMOUNT_HELP = "{what}; 'none' for {cleared}"
# Where each option's value goes in the request, for setting it and for naming it in errors.
_OPTIONS = {
    "--project": ("project",),
    "--weight": ("weight",),
    "--gpu": ("quota", "gpu"),
    "--cpu": ("quota", "cpu"),
    "--memory": ("quota", "memory"),
    "--borrow-gpu": ("borrow_limit", "gpu"),
    "--borrow-cpu": ("borrow_limit", "cpu"),
    "--borrow-memory": ("borrow_limit", "memory"),
}


def _option(what: str, cleared: str) -> Any:
    return typer.Option(help=_AMOUNT_HELP.format(what=what, cleared=cleared))


def _check_name(name: str) -> None:
    if not re.match(NAME_PATTERN, name):
        raise UsageError(f"queue name {name!r}: use lowercase letters, digits and dashes (at most 63)")


@queues_app.callback(invoke_without_command=True)
def queues(context: typer.Context, output: OutputOption = OutputFormat.table) -> None:
    """List queues: quota, borrowing limit, what their jobs hold, and why jobs wait."""
    if context.invoked_subcommand is not None:
        return
    with Client() as client:
        found = client.queues()
    if output is OutputFormat.json:
        print_json(found)
        return
    console.print(queues_table(found))
    print_waiting(found)


@queues_app.command("set")
def set_queue(
    name: NameArgument,
    project: Annotated[str | None, typer.Option(help="the project the queue belongs to")] = None,
    gpu: Annotated[str | None, _option("GPUs guaranteed", "no GPU quota")] = None,
    cpu: Annotated[str | None, _option("CPU cores guaranteed", "no CPU quota")] = None,
    memory: Annotated[str | None, _option("memory guaranteed, e.g. 64Gi", "no memory quota")] = None,
    borrow_gpu: Annotated[str | None, _option("GPUs it may borrow beyond its quota", "unlimited")] = None,
    borrow_cpu: Annotated[str | None, _option("CPU cores it may borrow beyond its quota", "unlimited")] = None,
    borrow_memory: Annotated[str | None, _option("memory it may borrow beyond its quota", "unlimited")] = None,
    weight: Annotated[float | None, typer.Option(help="its share of idle capacity relative to others")] = None,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Create a queue or change it (administrators). Options left out keep their value."""
    _check_name(name)
    given = {"--project": project, "--weight": weight, "--gpu": gpu, "--cpu": cpu, "--memory": memory,
             "--borrow-gpu": borrow_gpu, "--borrow-cpu": borrow_cpu, "--borrow-memory": borrow_memory}
    settings: dict[str, Any] = {}
    for option, value in given.items():
        if value is None:
            continue
        path = _OPTIONS[option]
        if len(path) == 1:
            settings[path[0]] = value
        else:
            cleared = isinstance(value, str) and value.strip().lower() == CLEAR
            settings.setdefault(path[0], {})[path[1]] = None if cleared else value
    _validate(settings)
    with Client() as client:
        queue = client.set_queue(name, settings)
    if output is OutputFormat.json:
        print_json(queue)
    else:
        console.print(queues_table([queue]))


@queues_app.command("rm")
def remove_queue(name: NameArgument) -> None:
    """Delete a queue that has no unfinished jobs (administrators)."""
    _check_name(name)
    with Client() as client:
        client.delete_queue(name)
    errors.print(f"queue {name} deleted", highlight=False)


def _validate(settings: dict[str, Any]) -> None:
    """Checks the values here so an error names the option that was typed."""
    try:
        QueueSettings.model_validate(settings)
    except ValidationError as error:
        problems = []
        for problem in error.errors():
            location = tuple(str(part) for part in problem["loc"])
            option = next((name for name, path in _OPTIONS.items() if path == location), ".".join(location))
            problems.append(f"{option}: {problem['msg']}")
        raise UsageError("; ".join(problems)) from None
