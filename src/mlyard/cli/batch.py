"""`mlyard submit` with several job files: every file is read and checked here first, one code
snapshot serves all of them, and the jobs go in batches of up to 1,000 (`POST /api/v1/jobs:batch`),
each batch stored whole or not at all. Every job gets an idempotency key of its own, so a batch
sent again after a lost answer creates no second jobs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mlyard.api.jobs import MAX_BATCH_JOBS, JobInfo
from mlyard.cli.console import errors
from mlyard.cli.options import OutputFormat, UsageError
from mlyard.cli.output import print_json, status_text
from mlyard.cli.submission import (
    add_secret_env,
    apply_overrides,
    load_spec_file,
    snapshot_project,
    upload_code,
    validate_spec,
)
from mlyard.client import Client, ClientError
from mlyard.spec import JobSpec

LARGE_BATCH = 100
"""From this many files on, a progress bar shows the reading and the sending (on a terminal),
and the jobs are summed up in one line rather than one line each."""


def read_specs(files: Sequence[Path], *, overrides: list[str], secret_env: list[str],
               progress: Progress) -> list[JobSpec]:
    """Each file with the same `--set` overrides and `--secret-env` variables, checked; an error
    names its file."""
    reading = progress.add_task("reading job files", total=len(files))
    specs = []
    for file in files:
        try:
            specs.append(validate_spec(add_secret_env(apply_overrides(load_spec_file(file), overrides), secret_env)))
        except UsageError as error:
            message = str(error)
            raise UsageError(message if str(file) in message else f"{file}: {message}") from None
        progress.advance(reading)
    return specs


def send(client: Client, files: Sequence[Path], specs: Sequence[JobSpec], *, progress: Progress) -> list[JobInfo]:
    """The submitted jobs in the order of `specs`, batch after batch."""
    sending = progress.add_task("submitting jobs", total=len(specs))
    submitted: list[JobInfo] = []
    for start in range(0, len(specs), MAX_BATCH_JOBS):
        batch = specs[start:start + MAX_BATCH_JOBS]
        try:
            answers = client.submit_batch([(spec, None) for spec in batch])
        except ClientError as error:
            raise _named(error, files[start:start + len(batch)], submitted=len(submitted)) from None
        submitted += [job for job, _replayed in answers]
        progress.advance(sending, len(batch))
    return submitted


def _named(error: ClientError, files: Sequence[Path], *, submitted: int) -> ClientError:
    """The server's error with the batch item it names (`jobs.3.spec.roles`, `jobs.3: …`) as the file."""
    def file(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return str(files[index]) if index < len(files) else match.group(0)

    message = re.sub(r"\bjobs\.(\d+)\.spec\.", lambda match: f"{file(match)}: ", error.message)
    message = re.sub(r"\bjobs\.(\d+)\b", file, message)
    if submitted:
        message += f" (the jobs of the {submitted} files before were submitted)"
    return ClientError(message, status=error.status, code=error.code, details=error.details)


def submit_files(files: Sequence[Path], *, overrides: list[str], secret_env: list[str], context: Path | None,
                 max_bytes: int, output: OutputFormat) -> None:
    """`context`: the code directory every job gets (None: no code). Prints the jobs' ids, one a
    line, or with `output` json the jobs."""
    large = len(files) >= LARGE_BATCH
    with _progress(enabled=large) as progress:
        specs = read_specs(files, overrides=overrides, secret_env=secret_env, progress=progress)
    with Client() as client:
        if context is not None:
            projects = list(dict.fromkeys(snapshot_project(spec) for spec in specs))
            digest = upload_code(client, context, max_bytes=max_bytes, projects=projects)
            specs = [spec.model_copy(update={"snapshot": digest}) for spec in specs]
        with _progress(enabled=large) as progress:
            jobs = send(client, files, specs, progress=progress)
    if output is OutputFormat.json:
        print_json(jobs)
        return
    if large:
        errors.print(f"Submitted {len(jobs):,} jobs from {len(files):,} files", highlight=False)
    else:
        for file, job in zip(files, jobs):
            errors.print(f"Submitted job [bold]{job.id}[/] ({escape(job.name)}) from {escape(str(file))}, "
                         f"{status_text(job.status)}", highlight=False)
    print("\n".join(str(job.id) for job in jobs))


def _progress(*, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=errors,
        transient=not errors.is_terminal,
        disable=not enabled,
    )
