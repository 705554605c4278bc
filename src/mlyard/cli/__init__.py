"""The `mlyard` command. Errors are one line on stderr, never a traceback."""

from __future__ import annotations

import os
import sys

import typer
from rich.markup import escape

from mlyard.cli import accounts, environments, jobs, nodes, projects, queues, server
from mlyard.cli.audit import audit
from mlyard.cli.metrics import metrics
from mlyard.cli.output import errors
from mlyard.cli.sim import sim
from mlyard.cli.submission import UsageError
from mlyard.cli.tensorboard import tensorboard
from mlyard.cli.top import top
from mlyard.cli.usage import usage
from mlyard.client import ClientError
from mlyard.errors import MlyardError
from mlyard.storage import SnapshotError

app = typer.Typer(
    name="mlyard",
    help="Queue, gang-schedule and run deep-learning training jobs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(server.server_app, name="server")
jobs.register(app)
app.command()(nodes.nodes)
app.command()(metrics)
app.add_typer(queues.queues_app, name="queues")
app.command()(sim)
app.command()(usage)
app.command()(audit)
app.command()(tensorboard)
app.command()(top)
app.command()(accounts.login)
app.command()(accounts.logout)
app.command()(accounts.whoami)
app.add_typer(accounts.users_app, name="users")
app.add_typer(accounts.tokens_app, name="tokens")
app.add_typer(projects.projects_app, name="projects")
app.add_typer(environments.env_app, name="env")


def main() -> None:
    try:
        app(standalone_mode=True)
    except UsageError as error:
        errors.print(f"[red]error:[/] {escape(str(error))}", highlight=False)
        sys.exit(2)
    except (ClientError, MlyardError, SnapshotError) as error:
        errors.print(f"[red]error:[/] {escape(str(error))}", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:  # a bug still gets one line; MLYARD_DEBUG=1 shows the traceback
        if os.environ.get("MLYARD_DEBUG"):
            raise
        errors.print(f"[red]error:[/] unexpected {type(error).__name__}: {escape(str(error))} "
                     "(set MLYARD_DEBUG=1 for the traceback)", highlight=False)
        sys.exit(1)
