"""`mlyard top`: a live screen of the cluster, its nodes' figures and the jobs holding resources.

Each refresh is two requests (`GET /nodes`, `GET /resources/jobs`) whatever the number of
jobs. Drawing is in `top_view`."""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from typing import Annotated

import typer
from rich.live import Live

from mlyard.cli.console import console
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import print_json
from mlyard.cli.top_view import TopFrame, render
from mlyard.client import Client, ClientError

REQUEST_TIMEOUT = 10.0


def fetch(client: Client) -> TopFrame:
    return TopFrame(at=time.time(), server=client.url, nodes=client.nodes(), jobs=client.running_jobs())


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], str]]:
    """A function that waits up to its argument in seconds for a key and returns it ('' for
    none). The terminal is put in cbreak mode, so a key counts without Enter while Ctrl-C
    still interrupts, and restored afterwards."""
    try:
        import termios
        import tty
    except ImportError:  # no POSIX terminal: Ctrl-C is the way out
        termios = None
    if termios is None or not sys.stdin.isatty():
        yield lambda seconds: time.sleep(seconds) or ""
        return
    descriptor = sys.stdin.fileno()
    saved = termios.tcgetattr(descriptor)

    def read(seconds: float) -> str:
        ready, _, _ = select.select([descriptor], [], [], seconds)
        return os.read(descriptor, 1).decode(errors="replace") if ready else ""

    try:
        tty.setcbreak(descriptor)
        yield read
    finally:
        termios.tcsetattr(descriptor, termios.TCSADRAIN, saved)


def _refresh(client: Client, frame: TopFrame) -> tuple[TopFrame, str | None]:
    """A new frame, or the last one and why it could not be renewed: a server that stops
    answering for a moment (a restart) should not end the screen."""
    try:
        return fetch(client), None
    except ClientError as error:
        return frame, str(error)


def _live(client: Client, frame: TopFrame, interval: float) -> None:
    error = None
    with _keys() as read_key, Live(render(frame, keys=True), console=console, screen=True,
                                   auto_refresh=False) as live:
        while True:
            deadline = time.monotonic() + interval
            while (left := deadline - time.monotonic()) > 0:
                if read_key(left).lower() == "q":
                    return
            frame, error = _refresh(client, frame)
            live.update(render(frame, error=error, keys=True), refresh=True)


def _batch(client: Client, frame: TopFrame, interval: float) -> None:
    """Output that is not a terminal gets one frame after another, as `top -b` does."""
    error = None
    while True:
        console.print(render(frame, error=error))
        time.sleep(interval)
        frame, error = _refresh(client, frame)


def top(
    interval: Annotated[float, typer.Option("--interval", "-n", min=0.2, help="seconds between refreshes")] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="print one frame and exit")] = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Watch the cluster live: each node's CPU, memory, GPUs, network, disk and allocation, and
    what every job holding resources uses. q or Ctrl-C quits."""
    if output is OutputFormat.json and not once:
        raise UsageError("-o json goes with --once")
    with Client(retry_seconds=0, timeout=REQUEST_TIMEOUT) as client:
        frame = fetch(client)
        if once:
            if output is OutputFormat.json:
                print_json(frame)
            else:
                console.print(render(frame))
            return
        try:
            if console.is_terminal:
                _live(client, frame, interval)
            else:
                _batch(client, frame, interval)
        except KeyboardInterrupt:
            pass
