"""`mlyard server start|stop|status|run`."""

from __future__ import annotations

from typing import Annotated

import typer

from mlyard.cli.console import errors

server_app = typer.Typer(help="Start, stop and inspect the mlyard server.", no_args_is_help=True)

HostOption = Annotated[str | None, typer.Option(help="address to listen on (default 127.0.0.1, MLYARD_HOST)")]
PortOption = Annotated[int | None, typer.Option(help="port to listen on (default 8642, MLYARD_PORT)")]


@server_app.command("run")
def run(host: HostOption = None, port: PortOption = None) -> None:
    """Run the server in the foreground."""
    from mlyard.server.daemon import run_foreground
    from mlyard.server.settings import ServerSettings

    run_foreground(ServerSettings.from_environment(host=host, port=port))


@server_app.command("start")
def start(host: HostOption = None, port: PortOption = None) -> None:
    """Start the server in the background (embedded: SQLite and local processes under MLYARD_HOME)."""
    from mlyard.server.daemon import start_background, state
    from mlyard.server.settings import ServerSettings

    settings = ServerSettings.from_environment(host=host, port=port)
    before = state(settings.paths)
    started = start_background(settings)
    verb = "is already running" if before.running else "started"
    errors.print(f"mlyard server {verb} at {started.url} (pid {started.pid}, home {settings.paths.home})")


@server_app.command("stop")
def stop() -> None:
    """Stop the background server. Running jobs keep running and are found again at the next start."""
    from mlyard.paths import Paths, home_directory
    from mlyard.server.daemon import stop_background

    stopped = stop_background(Paths(home_directory()))
    errors.print(f"mlyard server stopped (pid {stopped.pid})" if stopped.running else "mlyard server was not running")


@server_app.command("status")
def status() -> None:
    """Say whether the server of MLYARD_HOME is running; exit 1 if it is not."""
    from mlyard.paths import Paths, home_directory
    from mlyard.server.daemon import state

    current = state(Paths(home_directory()))
    if current.running:
        role = ""
        if current.url:
            from mlyard.client import Client, ClientError

            # The health check needs no token; no retries: a server that does not answer now is said to.
            with Client(current.url, token="", timeout=2, retry_seconds=0) as client:
                try:
                    role = f", controller: {client.health().controller}"
                except (ClientError, ValueError):
                    role = ", not answering"
        errors.print(f"mlyard server running at {current.url} (pid {current.pid}{role})")
    else:
        errors.print("mlyard server is not running")
        raise typer.Exit(1)
