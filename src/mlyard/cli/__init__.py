"""The `mlyard` command. Errors are one line on stderr, never a traceback.

It starts fast: this module imports Typer alone (which brings its own click). A command's
module, and with it Rich, httpx and the API models, is imported only when that command runs (or
shows its own help); `mlyard --help` lists the commands from the short help kept in `COMMANDS`,
which tests/cli/test_fast_start.py holds equal to each command's own."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, NamedTuple

import typer
from typer.core import TyperGroup


class Entry(NamedTuple):
    module: str
    attribute: str
    """A command function, or a Typer app of subcommands."""
    help: str


COMMANDS: dict[str, Entry] = {
    "submit": Entry("mlyard.cli.jobs", "submit",
                    "Submit jobs from spec files; the working directory is uploaded as their code."),
    "run": Entry("mlyard.cli.jobs", "run", "Run a command as a job without writing a spec file."),
    "jobs": Entry("mlyard.cli.listing", "jobs", "List jobs, newest first: the first page of unfinished ones "
                  "(or of --status) and how many there are; --all lists every job."),
    "show": Entry("mlyard.cli.jobs", "show", "Show a job: status, exit code, replicas, events and the last log lines."),
    "logs": Entry("mlyard.cli.jobs", "logs", "Print a replica's output (stdout and stderr)."),
    "cancel": Entry("mlyard.cli.jobs", "cancel",
                    "Cancel a job: queued ones at once, running ones after SIGTERM and a grace period."),
    "wait": Entry("mlyard.cli.jobs", "wait", "Wait for a job to end; exit 0 only if it succeeded."),
    "nodes": Entry("mlyard.cli.nodes", "nodes",
                   "List nodes: capacity, what jobs hold, and what a node cannot enforce."),
    "metrics": Entry("mlyard.cli.metrics", "metrics",
                     "Show the metrics a job reported with mlyard.sdk.report (loss, accuracy, …) by step."),
    "sim": Entry("mlyard.cli.sim", "sim", "Replay a job trace on a simulated cluster and compare scheduling policies."),
    "usage": Entry("mlyard.cli.usage", "usage",
                   "Show the GPU-hours and CPU-hours jobs held, per user or project and per day (UTC)."),
    "audit": Entry("mlyard.cli.audit", "audit", "Show who changed what, when and from where: every POST, PUT, PATCH "
                   "and DELETE to the API and the web pages, newest first (administrators only)."),
    "tensorboard": Entry("mlyard.cli.tensorboard", "tensorboard",
                         "Serve a job's TensorBoard logs (what it wrote to MLYARD_TENSORBOARD_DIR) until Ctrl-C."),
    "top": Entry("mlyard.cli.top", "top", "Watch the cluster live: each node's CPU, memory, GPUs, network, disk and "
                 "allocation, and what every job holding resources uses. q or Ctrl-C quits."),
    "login": Entry("mlyard.cli.accounts", "login", "Log in to the server with your password; the CLI then uses the "
                   "token it gets (stored readable by you only, one per server)."),
    "logout": Entry("mlyard.cli.accounts", "logout",
                    "Revoke the token `mlyard login` stored for this server and forget it."),
    "whoami": Entry("mlyard.cli.accounts", "whoami", "Show who the CLI acts as."),
    "server": Entry("mlyard.cli.server", "server_app", "Start, stop and inspect the mlyard server."),
    "queues": Entry("mlyard.cli.queues", "queues_app",
                    "List queues; administrators set their quotas and borrowing limits."),
    "users": Entry("mlyard.cli.accounts", "users_app", "Users (administrators add them and may set their passwords)."),
    "tokens": Entry("mlyard.cli.accounts", "tokens_app",
                    "Your API tokens: create one for a script or CI, list them, revoke one."),
    "projects": Entry("mlyard.cli.projects", "projects_app",
                      "Projects: who may see and do what (viewer, member, maintainer), and their limits."),
    "datasets": Entry("mlyard.cli.datasets", "datasets_app", "Datasets: versioned files of a project that jobs "
                      "read and write; push a directory or archive, pull a version, compare versions, move "
                      "aliases, share, remove."),
    "models": Entry("mlyard.cli.models", "models_app", "Models: versioned weights of a project with their metrics "
                    "and lineage; push a directory, register a job's checkpoint files, pull, move aliases, compare."),
    "label": Entry("mlyard.cli.labeling", "label_app", "Labeling tasks on dataset versions: who labels what, with "
                   "which classes, and how far they are."),
    "volumes": Entry("mlyard.cli.volumes", "volumes_app", "Volumes: a project's persistent read-write directories "
                     "with a size quota, which jobs mount (volumes: in the spec)."),
    "env": Entry("mlyard.cli.environments", "env_app", "Environments: a base image plus apt and pip packages, built "
                 "once per content; jobs name one with `environment: NAME`."),
}


def load_command(name: str) -> Any:
    """The click command Typer builds for `name`: imports its module."""
    entry = COMMANDS[name]
    target = getattr(importlib.import_module(entry.module), entry.attribute)
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        app = typer.Typer(add_completion=False)
        app.command(name=name)(target)
        command = typer.main.get_command(app)
    command.name = name
    return command


class LazyGroup(TyperGroup):
    """`mlyard`: resolves a command by importing its module only when it is asked for. Its own
    help is click's plain one (Rich is not imported for it); each command's help stays Typer's."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.help) for name, entry in COMMANDS.items()])


cli = LazyGroup(name="mlyard", help="Queue, gang-schedule and run deep-learning training jobs.",
                no_args_is_help=True, rich_markup_mode=None, context_settings={"max_content_width": 120})

# Errors the CLI expects, by where their class lives, with the exit code each gets. Looked up in
# sys.modules: an error of a module that was never imported cannot have been raised.
EXPECTED_ERRORS = (
    ("mlyard.cli.options", "UsageError", 2),
    ("mlyard.client", "ClientError", 1),
    ("mlyard.errors", "MlyardError", 1),
    ("mlyard.storage.errors", "SnapshotError", 1),
)


def _exit_code(error: BaseException) -> int | None:
    for module_name, class_name, code in EXPECTED_ERRORS:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(error, getattr(module, class_name)):
            return code
    return None


def _print_error(text: str) -> None:
    from rich.markup import escape

    from mlyard.cli.console import errors

    errors.print(f"[red]error:[/] {escape(text)}", highlight=False)


def main() -> None:
    # httpx imports its own command-line tool, and with it click, Rich and Pygments, whenever they
    # are installed; this process never runs it, and httpx skips it on an ImportError.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    try:
        cli.main(standalone_mode=True)  # Typer's: a mistake on the command line gets click's usage note
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:  # a bug still gets one line; MLYARD_DEBUG=1 shows the traceback
        code = _exit_code(error)
        if code is not None:
            _print_error(str(error))
            sys.exit(code)
        if os.environ.get("MLYARD_DEBUG"):
            raise
        _print_error(f"unexpected {type(error).__name__}: {error} (set MLYARD_DEBUG=1 for the traceback)")
        sys.exit(1)
