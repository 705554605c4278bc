"""Job commands: submit, run, show, logs, cancel, wait (`mlyard jobs` lists them: `mlyard.cli.listing`)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from mlyard.api.jobs import JobInfo
from mlyard.cli.batch import submit_files
from mlyard.cli.console import errors
from mlyard.cli.options import JobArgument, OutputFormat, OutputOption, UsageError
from mlyard.cli.output import duration, print_job_detail, print_json, status_text
from mlyard.cli.resources import current_usage
from mlyard.cli.submission import (
    add_secret_env,
    apply_overrides,
    load_spec_file,
    snapshot_project,
    upload_code,
    validate_spec,
)
from mlyard.client import Client, ClientError
from mlyard.spec import JobStatus, parse_memory

MaxCodeSizeOption = Annotated[str, typer.Option(
    envvar="MLYARD_MAX_SNAPSHOT", help="largest code directory to upload, e.g. 500Mi (the server has its own limit)",
)]
SecretEnvOption = Annotated[list[str] | None, typer.Option(
    "--secret-env", metavar="NAME", help="pass this variable of your environment to the replicas as a secret "
    "(env_secrets: stored encrypted, never shown); repeat for more")]


def _code_size(max_code_size: str) -> int:
    try:
        return parse_memory(max_code_size)
    except ValueError as error:
        raise UsageError(f"--max-code-size: {error}") from None


def _code_directory(context: Path, no_code: bool) -> Path | None:
    if no_code:
        return None
    if not context.is_dir():
        raise UsageError(f"--context {context} is not a directory")
    return context


def _submit_and_report(spec_data: dict, *, context: Path, no_code: bool, follow: bool, output: OutputFormat,
                       max_code_size: str) -> None:
    spec = validate_spec(spec_data)
    max_bytes = _code_size(max_code_size)
    with Client() as client:
        directory = _code_directory(context, no_code)
        if directory is not None:
            digest = upload_code(client, directory, max_bytes=max_bytes, projects=[snapshot_project(spec)])
            spec = spec.model_copy(update={"snapshot": digest})
        job = client.submit(spec)
        if output is OutputFormat.json and not follow:
            print_json(job)
            return
        errors.print(f"Submitted job [bold]{job.id}[/] ({job.name}), {status_text(job.status)}")
        if follow:
            # With --output json, stdout carries only the JSON document; the log goes to stderr.
            final = follow_job(client, job, log_stream=sys.stderr if output is OutputFormat.json else None)
            if output is OutputFormat.json:
                print_json(final)
            if final.status is not JobStatus.SUCCEEDED:
                raise typer.Exit(1)
        else:
            print(job.id)


def follow_job(client: Client, job: JobInfo, *, timeout: float | None = None, log_stream=None) -> JobInfo:
    """Streams rank 0's log and the job's status changes until it ends (or `timeout` passes)."""
    log_stream = log_stream or sys.stdout
    deadline = None if timeout is None else time.monotonic() + timeout
    last_status = None
    offset, attempt = 0, None
    while True:
        current = client.job(job.id)
        if current.status != last_status:
            note = f" ({escape(current.message)})" if current.message and current.status.is_terminal else ""
            errors.print(f"[dim]●[/] job {job.id} {status_text(current.status)}{note}", highlight=False)
            last_status = current.status
        if current.attempts and attempt != current.attempts[-1].number:
            attempt, offset = current.attempts[-1].number, 0
        text_seen = False
        if attempt is not None:
            while True:
                chunk = client.logs(job.id, attempt=attempt, offset=offset)
                if not chunk.text:
                    break
                text_seen = True
                log_stream.write(chunk.text)
                log_stream.flush()
                offset = chunk.next_offset
        if current.status.is_terminal and not text_seen:
            runtime = duration((current.finished_at or 0) - current.started_at) if current.started_at else "-"
            errors.print(f"Job {current.id} {status_text(current.status)} after {runtime}", highlight=False)
            return current
        if deadline is not None and time.monotonic() > deadline:
            raise ClientError(f"job {job.id} is still {current.status.value} after {timeout:g}s")
        time.sleep(0.3)


def submit(
    files: Annotated[list[Path], typer.Argument(
        help="job specs, YAML or JSON; several are submitted together, all or none per 1,000", metavar="FILE")],
    set_values: Annotated[list[str] | None, typer.Option(
        "--set", help="override a field: key.sub=value (in every file)")] = None,
    context: Annotated[Path, typer.Option(help="code directory to snapshot (one snapshot for every file)")
                       ] = Path("."),
    no_code: Annotated[bool, typer.Option("--no-code", help="run without a code snapshot")] = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="stream logs until the job ends (one file)")
                      ] = False,
    output: OutputOption = OutputFormat.table,
    max_code_size: MaxCodeSizeOption = "200Mi",
    secret_env: SecretEnvOption = None,
) -> None:
    """Submit jobs from spec files; the working directory is uploaded as their code."""
    if len(files) == 1:
        data = add_secret_env(apply_overrides(load_spec_file(files[0]), set_values or []), secret_env or [])
        _submit_and_report(data, context=context, no_code=no_code, follow=follow, output=output,
                           max_code_size=max_code_size)
        return
    if follow:
        raise UsageError("--follow streams one job: give one job file")
    max_bytes = _code_size(max_code_size)
    submit_files(files, overrides=set_values or [], secret_env=secret_env or [],
                 context=_code_directory(context, no_code), max_bytes=max_bytes, output=output)


def run(
    command: Annotated[list[str], typer.Argument(help="the command, after --", metavar="-- CMD...")],
    replicas: Annotated[int, typer.Option(help="number of replicas")] = 1,
    cpus: Annotated[float, typer.Option(help="CPUs per replica")] = 1.0,
    gpus: Annotated[int, typer.Option(help="GPUs per replica")] = 0,
    processes: Annotated[int, typer.Option(help="processes per replica (one per GPU is usual)")] = 1,
    memory: Annotated[str, typer.Option(help="memory per replica, e.g. 2Gi")] = "1Gi",
    name: Annotated[str | None, typer.Option(help="job name (default: from the command)")] = None,
    framework: Annotated[str, typer.Option(help="pytorch, tensorflow or none")] = "pytorch",
    interactive: Annotated[bool, typer.Option(
        "--interactive", help="a session (notebook, shell) rather than a batch run: stopped once idle")] = False,
    idle_timeout: Annotated[str | None, typer.Option(
        help="with --interactive: how long it may stay idle, e.g. 30m; 0: never (default: the server's)")] = None,
    set_values: Annotated[list[str] | None, typer.Option("--set", help="override a field: key.sub=value")] = None,
    context: Annotated[Path, typer.Option(help="code directory to snapshot")] = Path("."),
    no_code: Annotated[bool, typer.Option("--no-code", help="run without a code snapshot")] = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="stream logs until the job ends")] = False,
    output: OutputOption = OutputFormat.table,
    max_code_size: MaxCodeSizeOption = "200Mi",
    secret_env: SecretEnvOption = None,
) -> None:
    """Run a command as a job without writing a spec file."""
    data = {
        "name": name or _name_from(command),
        "command": command,
        "framework": framework,
        "roles": [{"name": "worker", "replicas": replicas, "processes": processes,
                   "resources": {"cpu": cpus, "gpu": gpus, "memory": memory}}],
    }
    if interactive:
        data["interactive"] = True
    if idle_timeout is not None:
        data["idle_timeout"] = idle_timeout
    data = add_secret_env(apply_overrides(data, set_values or []), secret_env or [])
    _submit_and_report(data, context=context, no_code=no_code, follow=follow, output=output,
                       max_code_size=max_code_size)


_INTERPRETERS = {"python", "python3", "sh", "bash", "torchrun", "env", "uv", "exec"}


def _name_from(command: list[str]) -> str:
    """A job name from the program or script a command runs: `python train.py` → train."""
    for part in command:
        if part.startswith("-") or not re.fullmatch(r"[\w./-]+", part):
            continue
        stem = Path(part).stem.lower()
        if stem not in _INTERPRETERS:
            cleaned = re.sub(r"[^a-z0-9-]+", "-", stem).strip("-")[:40].strip("-")
            if cleaned:
                return cleaned
    return "job"


def show(job_id: JobArgument, output: OutputOption = OutputFormat.table) -> None:
    """Show a job: status, exit code, replicas, events and the last log lines."""
    with Client() as client:
        job = client.job(job_id)
        usage = current_usage(client, job_id) if output is OutputFormat.table and job.status.is_active else None
    if output is OutputFormat.json:
        print_json(job)
    else:
        print_job_detail(job, usage=usage)


def logs(
    job_id: JobArgument,
    replica: Annotated[str | None, typer.Option("--replica", "-r", help="replica name or rank (default 0)")] = None,
    attempt: Annotated[int | None, typer.Option(help="attempt number (default: latest)")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing until the replica ends")] = False,
) -> None:
    """Print a replica's output (stdout and stderr)."""
    with Client() as client:
        if follow:
            for text in client.follow_logs(job_id, replica=replica, attempt=attempt):
                sys.stdout.write(text)
                sys.stdout.flush()
            return
        offset = 0
        while True:
            chunk = client.logs(job_id, replica=replica, attempt=attempt, offset=offset)
            if not chunk.text:
                break
            sys.stdout.write(chunk.text)
            offset = chunk.next_offset


def cancel(job_id: JobArgument, output: OutputOption = OutputFormat.table) -> None:
    """Cancel a job: queued ones at once, running ones after SIGTERM and a grace period."""
    with Client() as client:
        job = client.cancel(job_id)
    if output is OutputFormat.json:
        print_json(job)
    else:
        errors.print(f"job {job.id}: cancellation requested ({status_text(job.status)})")


def wait(
    job_id: JobArgument,
    timeout: Annotated[float | None, typer.Option(help="give up after this many seconds")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="stream rank 0's log and status changes")] = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Wait for a job to end; exit 0 only if it succeeded."""
    with Client() as client:
        if follow:
            job = follow_job(client, client.job(job_id), timeout=timeout,
                             log_stream=sys.stderr if output is OutputFormat.json else None)
        else:
            job = client.wait(job_id, timeout=timeout)
    if output is OutputFormat.json:
        print_json(job)
    elif not follow:
        note = f": {escape(job.message)}" if job.message else ""
        errors.print(f"job {job.id} {status_text(job.status)}{note}", highlight=False)
    if job.status is not JobStatus.SUCCEEDED:
        raise typer.Exit(1)
