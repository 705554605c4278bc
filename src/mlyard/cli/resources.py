"""What a job's processes use: the `usage` line of `mlyard show` and `mlyard metrics --resources`."""

from __future__ import annotations

import enum
import time

from rich.table import Table

from mlyard.api.resources import JobResources, JobUsagePoint
from mlyard.cli.console import console
from mlyard.cli.options import OutputFormat, UsageError
from mlyard.cli.output import print_json
from mlyard.client import Client, ClientError
from mlyard.spec import format_bytes, parse_duration

FOLLOW_SECONDS = 2.0
CURRENT_SECONDS = 60.0
"""Figures older than this are not the job's current use."""


class Resolution(str, enum.Enum):
    raw = "raw"
    minute = "1m"


def usage_text(cpu_percent: float, memory_bytes: int, gpu_memory_bytes: int) -> str:
    text = f"cpu {cpu_percent:.0f}% · mem {format_bytes(memory_bytes)}"
    return text + (f" · gpu mem {format_bytes(gpu_memory_bytes)}" if gpu_memory_bytes else "")


def current_usage(client: Client, job_id: int) -> str | None:
    """The job's latest figures summed over its replicas, or None when there are none recent
    (or the server does not measure)."""
    try:
        resources = client.job_resources(job_id, since=time.time() - CURRENT_SECONDS)
    except ClientError:
        return None
    recent = [replica for replica in resources.replicas if time.time() - replica.at <= CURRENT_SECONDS]
    if not recent:
        return None
    text = usage_text(sum(replica.cpu_percent for replica in recent), sum(replica.memory_bytes for replica in recent),
                      sum(replica.gpu_memory_bytes for replica in recent))
    return text + (f" ({len(recent)} replicas)" if len(recent) > 1 else "")


def resources_table(points: list[JobUsagePoint], resolution: str) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("TIME", "CPU %", "MEMORY", "GPU MEMORY", "REPLICAS"):
        table.add_column(column, justify="left" if column == "TIME" else "right")
    shape = "%H:%M" if resolution == "1m" else "%H:%M:%S"
    for point in points:
        table.add_row(time.strftime(shape, time.localtime(point.at)), f"{point.cpu_percent:.1f}",
                      format_bytes(point.memory_bytes), format_bytes(point.gpu_memory_bytes), str(point.replicas))
    return table


def show_resources(client: Client, job_id: int, *, since: str | None, resolution: Resolution, follow: bool,
                   output: OutputFormat) -> None:
    start = None
    if since is not None:
        try:
            start = time.time() - parse_duration(since)
        except ValueError as error:
            raise UsageError(f"--since: {error}") from None
    resources: JobResources = client.job_resources(job_id, since=start, resolution=resolution.value)
    if output is OutputFormat.json:
        print_json(resources)
        return
    console.print(resources_table(resources.points, resolution.value))
    if resources.points:
        last = resources.points[-1].at
    else:  # nothing yet: new points only (a sample is stamped a moment before it is stored)
        last = start if start is not None else time.time() - CURRENT_SECONDS
    while follow and not client.job(job_id).status.is_terminal:
        time.sleep(FOLLOW_SECONDS)
        new = client.job_resources(job_id, since=last, resolution=resolution.value).points
        if new:
            last = new[-1].at
            console.print(resources_table(new, resolution.value))
