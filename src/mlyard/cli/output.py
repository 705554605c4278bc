"""How the CLI prints: Rich tables for people, JSON (`--output json`) for scripts. (`mlyard jobs`
writes its own lines: `mlyard.cli.listing`; `ago` and `duration` live in `mlyard.cli.words`.)"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from pydantic import BaseModel
from rich.markup import escape
from rich.table import Table

from mlyard.api.jobs import AttemptInfo, JobDetail, JobInfo, ReplicaInfo
from mlyard.api.nodes import JOBS_RUN_AS, NodeInfo
from mlyard.api.queues import QueueAmounts, QueueInfo
from mlyard.cli.console import console
from mlyard.cli.words import STATUS_STYLES, ago, duration, job_runtime
from mlyard.spec import JobStatus, format_bytes


def print_json(value: BaseModel | Sequence[BaseModel]) -> None:
    if isinstance(value, BaseModel):
        data = value.model_dump(mode="json")
    else:
        data = [item.model_dump(mode="json") for item in value]
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def status_text(status: JobStatus) -> str:
    return f"[{STATUS_STYLES[status]}]{status.value}[/]"


USAGE_STALE_SECONDS = 60.0
"""A node sample older than this is not shown as the node's current use (its sampler stopped)."""


def node_usage_cells(node: NodeInfo) -> tuple[str, str, str]:
    """CPU busy %, memory in use, and each GPU's utilization from the node's latest sample."""
    usage = node.usage
    if usage is None or time.time() - usage.at > USAGE_STALE_SECONDS:
        return "-", "-", "-"
    gpus = ",".join("-" if gpu.utilization_percent is None else f"{gpu.utilization_percent:.0f}%" for gpu in usage.gpus)
    return (f"{usage.cpu_percent:.0f}%",
            f"{format_bytes(usage.memory_used_bytes)} / {format_bytes(usage.memory_total_bytes)}", gpus or "-")


def nodes_table(nodes: Sequence[NodeInfo]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "ADDRESS", "CPUS (used/all)", "MEMORY (used/all)", "GPUS (used/all)", "CPU BUSY",
                   "MEMORY IN USE", "GPU UTIL", "NOTES"):
        table.add_column(column, no_wrap=column != "NOTES")
    for node in nodes:
        gpus = f"{node.allocated_gpus}/{len(node.gpus)}"
        if node.gpus:
            gpus += f" {node.gpus[0].model}"
        notes = [note for note in (*node.notes, *(node.inventory.notes if node.inventory else ()))
                 if not note.startswith(JOBS_RUN_AS)]  # `mlyard nodes` shows it below the table
        table.add_row(
            node.name, node.address, f"{node.allocated_cpus}/{len(node.cpu_ids)}",
            f"{format_bytes(node.allocated_memory_bytes)} / {format_bytes(node.memory_bytes)}",
            gpus, *node_usage_cells(node), escape("; ".join(notes)) or "-",
        )
    return table


def amounts_text(amounts: QueueAmounts, *, missing: str) -> str:
    """`gpu 4 · cpu 8 · mem 64.0 GiB`, leaving out null entries; `missing` when all are null."""
    parts = []
    if amounts.gpu is not None:
        parts.append(f"gpu {amounts.gpu}")
    if amounts.cpu is not None:
        parts.append(f"cpu {amounts.cpu:g}")
    if amounts.memory is not None:
        parts.append(f"mem {format_bytes(amounts.memory)}")
    return " · ".join(parts) or missing


def queues_table(queues: Sequence[QueueInfo]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "PROJECT", "QUOTA", "BORROW LIMIT", "WEIGHT", "USAGE", "RUNNING", "WAITING"):
        table.add_column(column, no_wrap=True)
    for queue in queues:
        usage = f"gpu {queue.usage.gpu} · cpu {queue.usage.cpu:g} · mem {format_bytes(queue.usage.memory)}"
        table.add_row(
            queue.name, queue.project, amounts_text(queue.quota, missing="none"),
            amounts_text(queue.borrow_limit, missing="unlimited"), f"{queue.weight:g}", usage,
            str(queue.running), str(queue.waiting),
        )
    return table


def print_waiting(queues: Sequence[QueueInfo]) -> None:
    """Each waiting job with the scheduler's reason, under the queue table."""
    for queue in queues:
        for job in queue.waiting_jobs:
            reason = job.reason or "not considered by the scheduler yet"
            console.print(f"  [dim]{escape(queue.name)}[/] job {job.id} ({escape(job.name)}) waits: {escape(reason)}",
                          highlight=False)


def service_text(job: JobInfo) -> str:
    unit = "GPU-seconds" if any(role.resources.gpu for role in job.spec.roles) else "core-seconds"
    return f"{job.attained_service:.1f} {unit} over {duration(job.attained_time)} of run time"


def attempt_text(attempt: AttemptInfo) -> str:
    """One line per attempt: how long it ran and how it ended, with the reason it was stopped."""
    ran = duration((attempt.finished_at or time.time()) - attempt.launched_at) if attempt.launched_at else "-"
    if attempt.finished_at is None:
        state = "stopping" if attempt.stop_reason else "running"
    elif attempt.stop_outcome is JobStatus.RESTARTING:
        state = "FAILED, restarted"
    else:
        state = attempt.stop_outcome.value if attempt.stop_outcome else "finished"
    text = f"#{attempt.number}  ran {ran}  {state}"
    if attempt.stop_reason:
        text += f": {attempt.stop_reason}"
    return text if attempt.exit_code is None else f"{text}  (exit {attempt.exit_code})"


def print_job_detail(job: JobDetail, *, usage: str | None = None) -> None:
    """`usage`: what the job's processes use now, in words (`cli.resources.current_usage`)."""
    console.print(f"[bold]Job {job.id}[/] {escape(job.name)}  {status_text(job.status)}")
    if job.status is JobStatus.RESTARTING and job.restart_at is not None and job.restart_at > time.time():
        console.print(f"[magenta]Restarting[/] in {duration(job.restart_at - time.time())}", highlight=False)
    if job.status in (JobStatus.QUEUED, JobStatus.RESTARTING) and job.wait_reason:
        console.print(f"[yellow]Waiting:[/] {escape(job.wait_reason)}", highlight=False)
    if job.idle_since is not None:
        console.print(f"[yellow]Warning:[/] {escape(job.idle_reason or 'idle')} "
                      f"(idle for {duration(time.time() - job.idle_since)})", highlight=False)
    if job.warning is not None:
        console.print(f"[yellow]Warning:[/] {escape(job.warning)}", highlight=False)
    rows = [
        ("command", job.spec.display_command()),
        ("framework", job.spec.framework),
        ("queue", f"{job.queue} (project {job.project}, priority {job.priority})"),
        ("submitted", ago(job.submitted_at)),
        ("runtime", duration(job_runtime(job))),
        ("attempts", str(job.attempt_count)),
    ]
    # The lineage: what the job read, as pinned when it was submitted.
    rows += [("reads", f"dataset {item.project}/{item.name}:{item.version} at {item.directory}")
             for item in job.spec.datasets]
    rows += [("writes", f"dataset {item.project}/{item.dataset} from MLYARD_OUTPUT_DIR/{item.path or ''}")
             for item in job.spec.outputs]
    if job.spec.interactive:
        timeout = job.spec.idle_timeout
        if timeout is None:
            when = "after the server's idle timeout"
        else:
            when = f"after {duration(timeout)} idle" if timeout else "never"
        rows.append(("idle stop", f"interactive: {when}"))
    if job.attempt_count:
        rows.append(("service", service_text(job)))
    if usage:
        rows.append(("usage", usage))
    if job.restart_count:
        rows.append(("restarts", f"{job.restart_count} of {job.spec.restart_policy.max_restarts}"))
    if job.preemption_count:
        rows.append(("preempted", f"{job.preemption_count} time{'s' if job.preemption_count > 1 else ''}"))
    if job.exit_code is not None:
        rows.append(("exit code", str(job.exit_code)))
    if job.message:
        rows.append(("message", job.message))
    for key, value in rows:
        console.print(f"  [dim]{key:<10}[/] {escape(value)}", highlight=False)
    if len(job.attempts) > 1 or any(attempt.stop_reason for attempt in job.attempts):
        console.print("[bold]attempts[/]")
        for attempt in job.attempts:
            console.print(f"  {escape(attempt_text(attempt))}", highlight=False)
    if job.attempts:
        attempt = job.attempts[-1]
        table = Table(title=f"attempt {attempt.number}", box=None, header_style="bold", title_justify="left")
        for column in ("REPLICA", "RANK", "NODE", "STATE", "PID", "EXIT", "CPUS", "GPUS", "MEMORY"):
            table.add_column(column)
        for replica in attempt.replicas:
            table.add_row(
                replica.name, str(replica.rank), replica.node, replica.state, str(replica.pid or "-"),
                "-" if replica.exit_code is None else str(replica.exit_code),
                cpus_text(replica), ",".join(map(str, replica.gpu_ids)) or "-",
                format_bytes(replica.memory_bytes),
            )
        console.print(table)
        for replica in attempt.replicas:
            if replica.reason:
                console.print(f"  [dim]{replica.name}:[/] {escape(replica.reason)}", highlight=False)
    console.print("[bold]events[/]")
    for event in job.events:
        moment = time.strftime("%H:%M:%S", time.localtime(event.at))
        console.print(f"  {moment} {status_text(event.to_status)} {escape(event.message or '')}", highlight=False)
    for replica, lines in job.log_tail.items():
        if lines:
            console.print(f"[bold]last lines of {replica}[/]")
            for line in lines:
                console.print(f"  {line}", markup=False, highlight=False)


def cpus_text(replica: ReplicaInfo) -> str:
    """The cores a replica holds: its own ("2,3"), or its share of one it shares ("0.25 of core 0")."""
    if replica.cpu_millicores:
        return f"{replica.cpu_millicores / 1000:g} of core {','.join(map(str, replica.cpu_ids))}"
    return ",".join(map(str, replica.cpu_ids)) or "-"
