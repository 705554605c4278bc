"""`mlyard tensorboard JOB`: serves a job's TensorBoard directory with a local TensorBoard."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from mlyard.cli.console import errors
from mlyard.cli.options import JobArgument, UsageError
from mlyard.client import Client

INSTALL_HINT = ("TensorBoard is not installed: run `pip install tensorboard` (any Python environment will do), "
                "then put its `tensorboard` on PATH or pass --tensorboard PATH (or set MLYARD_TENSORBOARD)")


def find_tensorboard(given: str | None) -> str:
    """The `tensorboard` executable: `given` (the file, or an environment or bin directory
    holding it), else the one on PATH."""
    if given:
        path = Path(given).expanduser()
        for candidate in (path, path / "tensorboard", path / "bin" / "tensorboard"):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
        raise UsageError(f"--tensorboard {given}: no executable tensorboard there")
    found = shutil.which("tensorboard")
    if found is None:
        raise UsageError(INSTALL_HINT)
    return found


def tensorboard(
    job_id: JobArgument,
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535, help="the port to serve on")] = 6006,
    host: Annotated[str, typer.Option(help="the address to serve on; 0.0.0.0 for every interface")] = "localhost",
    executable: Annotated[str | None, typer.Option(
        "--tensorboard", envvar="MLYARD_TENSORBOARD", metavar="PATH",
        help="the tensorboard executable, or the environment it is installed in [default: tensorboard on PATH]",
    )] = None,
) -> None:
    """Serve a job's TensorBoard logs (what it wrote to MLYARD_TENSORBOARD_DIR) until Ctrl-C."""
    program = find_tensorboard(executable)
    with Client() as client:
        info = client.tensorboard(job_id)
    directory = Path(info.directory)
    if info.exists and not directory.is_dir():
        raise UsageError(f"job {job_id}'s TensorBoard directory {info.directory} is not visible from this machine; "
                         "run this where the server's runs volume is mounted")
    if not info.exists:
        errors.print(f"[yellow]note:[/] job {job_id} has not started yet; TensorBoard shows its logs once it writes "
                     "some", highlight=False)
    errors.print(f"Serving job {job_id}'s TensorBoard logs from {escape(info.directory)} at "
                 f"http://{escape(host)}:{port}/ (Ctrl-C stops)", highlight=False)
    sys.stdout.flush()
    sys.stderr.flush()
    # Replaced rather than run as a child: Ctrl-C and kill then reach TensorBoard itself, and
    # nothing is left behind when this command is stopped.
    os.execv(program, [program, "--logdir", info.directory, "--port", str(port), "--host", host])
