"""How the CLI prints: Rich tables for people, JSON (`--output json`) for scripts."""

from __future__ import annotations

import enum
import json
import sys
import time
from collections.abc import Sequence

from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mlyard.api_models import JobDetail, JobInfo, NodeInfo
from mlyard.spec import JobStatus, format_bytes

console = Console()
errors = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the width
if not console.is_terminal:  # piped output: wide rows rather than truncated columns
    console = Console(width=200)

STATUS_STYLES = {
    JobStatus.QUEUED: "yellow",
    JobStatus.SCHEDULED: "cyan",
    JobStatus.STARTING: "cyan",
    JobStatus.RUNNING: "blue",
    JobStatus.RESTARTING: "magenta",
    JobStatus.PREEMPTED: "magenta",
    JobStatus.SUCCEEDED: "green",
    JobStatus.FAILED: "red",
    JobStatus.CANCELLED: "dim",
}


class OutputFormat(str, enum.Enum):
    table = "table"
    json = "json"


def print_json(value: BaseModel | Sequence[BaseModel]) -> None:
    if isinstance(value, BaseModel):
        data = value.model_dump(mode="json")
    else:
        data = [item.model_dump(mode="json") for item in value]
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def status_text(status: JobStatus) -> str:
    return f"[{STATUS_STYLES[status]}]{status.value}[/]"


def ago(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return duration(time.time() - timestamp) + " ago"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def job_runtime(job: JobInfo) -> float | None:
    if job.started_at is None:
        return None
    return (job.finished_at or time.time()) - job.started_at


def jobs_table(jobs: Sequence[JobInfo]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("ID", "NAME", "STATUS", "REPLICAS", "QUEUE", "SUBMITTED", "RUNTIME", "MESSAGE"):
        table.add_column(column, no_wrap=column != "MESSAGE")
    for job in jobs:
        table.add_row(
            str(job.id), job.name, status_text(job.status), str(job.replica_count), job.queue,
            ago(job.submitted_at), duration(job_runtime(job)), escape(job.message or ""),
        )
    return table


def nodes_table(nodes: Sequence[NodeInfo]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "ADDRESS", "CPUS (used/all)", "MEMORY (used/all)", "GPUS (used/all)", "NOTES"):
        table.add_column(column, no_wrap=column != "NOTES")
    for node in nodes:
        gpus = f"{node.allocated_gpus}/{len(node.gpus)}"
        if node.gpus:
            gpus += f" {node.gpus[0].model}"
        table.add_row(
            node.name, node.address, f"{node.allocated_cpus}/{len(node.cpu_ids)}",
            f"{format_bytes(node.allocated_memory_bytes)} / {format_bytes(node.memory_bytes)}",
            gpus, escape("; ".join(node.notes)) or "-",
        )
    return table


def print_job_detail(job: JobDetail) -> None:
    console.print(f"[bold]Job {job.id}[/] {escape(job.name)}  {status_text(job.status)}")
    rows = [
        ("command", job.spec.display_command()),
        ("framework", job.spec.framework),
        ("queue", f"{job.queue} (project {job.project}, priority {job.priority})"),
        ("submitted", ago(job.submitted_at)),
        ("runtime", duration(job_runtime(job))),
        ("attempts", str(job.attempt_count)),
    ]
    if job.exit_code is not None:
        rows.append(("exit code", str(job.exit_code)))
    if job.message:
        rows.append(("message", job.message))
    for key, value in rows:
        console.print(f"  [dim]{key:<10}[/] {escape(value)}", highlight=False)
    if job.attempts:
        attempt = job.attempts[-1]
        table = Table(title=f"attempt {attempt.number}", box=None, header_style="bold", title_justify="left")
        for column in ("REPLICA", "RANK", "NODE", "STATE", "PID", "EXIT", "CPUS", "GPUS", "MEMORY"):
            table.add_column(column)
        for replica in attempt.replicas:
            table.add_row(
                replica.name, str(replica.rank), replica.node, replica.state, str(replica.pid or "-"),
                "-" if replica.exit_code is None else str(replica.exit_code),
                ",".join(map(str, replica.cpu_ids)) or "-", ",".join(map(str, replica.gpu_ids)) or "-",
                format_bytes(replica.memory_bytes),
            )
        console.print(table)
    console.print("[bold]events[/]")
    for event in job.events:
        moment = time.strftime("%H:%M:%S", time.localtime(event.at))
        console.print(f"  {moment} {status_text(event.to_status)} {escape(event.message or '')}", highlight=False)
    for replica, lines in job.log_tail.items():
        if lines:
            console.print(f"[bold]last lines of {replica}[/]")
            for line in lines:
                console.print(f"  {line}", markup=False, highlight=False)
