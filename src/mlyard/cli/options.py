"""What command modules share and that `mlyard` loads cheaply: the output format, the options
and arguments many commands take, and `UsageError`. Typer and the standard library only."""

from __future__ import annotations

import enum
from typing import Annotated

import typer


class UsageError(Exception):
    """Bad input on the command line or in a job file: printed as one line, exit code 2."""


class OutputFormat(str, enum.Enum):
    table = "table"
    json = "json"


OutputOption = Annotated[OutputFormat, typer.Option("--output", "-o", help="table or json")]
JobArgument = Annotated[int, typer.Argument(help="the job's id", metavar="JOB")]
