"""What `mlyard top` draws: a frame of the cluster (nodes and the jobs holding resources) as
Rich renderables. Pure: the same frame always draws the same, so it is tested without a server."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pydantic import BaseModel, Field
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mlyard.api.nodes import GpuUsage, NodeInfo, NodeUsage
from mlyard.api.resources import RunningJobUsage
from mlyard.cli.output import USAGE_STALE_SECONDS, duration, status_text
from mlyard.spec import format_bytes

BAR_WIDTH = 10
_UNITS = (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))


class TopFrame(BaseModel):
    """One look at the cluster; `-o json` prints it as it is."""

    at: float = Field(description="when it was fetched")
    server: str
    nodes: list[NodeInfo]
    jobs: list[RunningJobUsage] = Field(description="jobs holding resources, by id")


def bar(percent: float | None, width: int = BAR_WIDTH) -> Text:
    """A meter of `width` cells, coloured by how full it is; all dim when nothing is known."""
    if percent is None:
        return Text("░" * width, style="dim")
    percent = min(max(percent, 0.0), 100.0)
    filled = round(percent / 100 * width)
    style = "green" if percent < 50 else "yellow" if percent < 80 else "red"
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="dim")


def meter(percent: float | None, label: str) -> Text:
    return bar(percent) + Text(f" {label}")


def bytes_pair(used: int, total: int) -> str:
    """`12.3/62.8 GiB`: both in the unit of the total, so the two read side by side."""
    for unit, size in _UNITS:
        if total >= size:
            return f"{used / size:.1f}/{total / size:.1f} {unit}"
    return f"{used}/{total} B"


def rate(value: float) -> str:
    return f"{format_bytes(round(value))}/s"


def current(node: NodeInfo, now: float) -> NodeUsage | None:
    usage = node.usage
    return usage if usage is not None and now - usage.at <= USAGE_STALE_SECONDS else None


def gpu_line(gpu: GpuUsage) -> Text:
    memory = ""
    if gpu.memory_used_bytes is not None and gpu.memory_total_bytes:
        memory = f" {bytes_pair(gpu.memory_used_bytes, gpu.memory_total_bytes)}"
    utilization = "-" if gpu.utilization_percent is None else f"{gpu.utilization_percent:.0f}%"
    return Text(f"{gpu.index} ") + bar(gpu.utilization_percent, 6) + Text(f" {utilization:>4}{memory}")


def node_cells(node: NodeInfo, now: float) -> list[RenderableType]:
    usage = current(node, now)
    cores = f"cpu {node.allocated_cpus}/{len(node.cpu_ids)}"
    held = [cores, f"mem {bytes_pair(node.allocated_memory_bytes, node.memory_bytes)}"]
    if node.gpus:
        held.insert(1, f"gpu {node.allocated_gpus}/{len(node.gpus)}")
    allocation = Text("\n".join(held))
    name = Text(node.name, style="bold")
    if node.inventory is not None:
        name.append(f"\n{node.inventory.cpu_model[:32]}", style="dim")
    if usage is None:
        idle = Text("no sample in the last minute", style="dim")
        return [name, idle, Text("-"), Text("-" if not node.gpus else f"{len(node.gpus)} GPUs, no figures"),
                Text("-"), Text("-"), allocation]
    cpu = meter(usage.cpu_percent, f"{usage.cpu_percent:3.0f}%")
    load = " ".join(f"{value:.2f}" for value in usage.load_average)
    cpu.append(f"\nload {load}", style="dim")
    memory_percent = 100 * usage.memory_used_bytes / usage.memory_total_bytes if usage.memory_total_bytes else None
    memory = meter(memory_percent, bytes_pair(usage.memory_used_bytes, usage.memory_total_bytes))
    gpus = Text("\n").join(gpu_line(gpu) for gpu in usage.gpus) if usage.gpus else Text("-")
    network = Text(f"rx {rate(usage.net_rx_bytes_per_second)}\ntx {rate(usage.net_tx_bytes_per_second)}")
    disk = Text(f"r {rate(usage.disk_read_bytes_per_second)}\nw {rate(usage.disk_write_bytes_per_second)}")
    return [name, cpu, memory, gpus, network, disk, allocation]


def nodes_table(nodes: Sequence[NodeInfo], now: float) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
    for column in ("NODE", "CPU", "MEMORY", "GPUS (util, memory)", "NETWORK", "DISK", "ALLOCATED"):
        table.add_column(column, no_wrap=True)
    for node in nodes:
        table.add_row(*node_cells(node, now), end_section=True)
    return table


def job_cells(job: RunningJobUsage, now: float) -> list[RenderableType]:
    runtime = duration(now - job.launched_at) if job.launched_at is not None else "-"
    if job.cpu_percent is None:
        cpu: RenderableType = Text("-", style="dim")
    else:
        # The bar is against the cores it holds: a job idling on its allocation shows at a glance.
        share = 100 * job.cpu_percent / (job.cpus * 100) if job.cpus else None
        cpu = meter(share, f"{job.cpu_percent:4.0f}% of {job.cpus:g}")
    memory = "-" if job.memory_bytes is None else format_bytes(job.memory_bytes)
    gpu_memory = "-" if job.gpu_memory_bytes is None or not (job.gpus or job.gpu_memory_bytes) else format_bytes(
        job.gpu_memory_bytes)
    return [str(job.job_id), escape(job.name), escape(job.user or "-"), escape(job.queue), status_text(job.status),
            str(job.replicas), runtime, cpu, memory, gpu_memory, escape(",".join(job.nodes))]


def jobs_table(jobs: Sequence[RunningJobUsage], now: float) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
    for column in ("ID", "NAME", "USER", "QUEUE", "STATUS", "REPLICAS", "RUNTIME", "CPU (cores held)", "MEMORY",
                   "GPU MEM", "NODES"):
        table.add_column(column, no_wrap=True,
                         justify="right" if column in ("ID", "REPLICAS", "MEMORY", "GPU MEM") else "left")
    for job in jobs:
        table.add_row(*job_cells(job, now))
    return table


def render(frame: TopFrame, *, error: str | None = None, keys: bool = False) -> RenderableType:
    """`error`: why the frame is not fresh (the server stopped answering); `keys`: mention `q`."""
    moment = time.strftime("%H:%M:%S", time.localtime(frame.at))
    header = Text.assemble(("mlyard top", "bold"), f"  {frame.server}  {moment}  ",
                           f"{len(frame.nodes)} node{'s' * (len(frame.nodes) != 1)} · "
                           f"{len(frame.jobs)} job{'s' * (len(frame.jobs) != 1)} holding resources")
    if keys:
        header.append("  (q quits)", style="dim")
    parts: list[RenderableType] = [header]
    if error is not None:
        parts.append(Text(f"not refreshed: {error}", style="red"))
    parts.append(Text())
    parts.append(nodes_table(frame.nodes, frame.at) if frame.nodes else Text("no nodes", style="dim"))
    parts.append(Text())
    parts.append(jobs_table(frame.jobs, frame.at) if frame.jobs else Text("no job holds resources", style="dim"))
    return Group(*parts)
