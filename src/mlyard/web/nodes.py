"""The nodes: a live table of every node, and a node's page with its live resource charts.

The charts read the samples the monitoring service stores (`resources.node_samples`). A short
window is drawn from raw samples; a long one from minute averages, followed by the raw samples
of the minutes not yet rolled up, so that its right edge is as current as a short window's.
The shaping helpers here are shared with a job's resource charts (`web.job_charts`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from mlyard.api.nodes import JOBS_RUN_AS, NodeInfo, NodeUsage
from mlyard.api.resources import RunningJobUsage
from mlyard.errors import MlyardError, NotFound
from mlyard.server import auth
from mlyard.server.services import resources, nodes
from mlyard.server.settings import DEFAULT_SAMPLE_INTERVAL
from mlyard.web.charts import chart_response
from mlyard.web.templating import page
from mlyard.web.session import PagePrincipal

router = APIRouter(include_in_schema=False)

WINDOWS = {"15m": 15 * 60.0, "1h": 3600.0, "6h": 6 * 3600.0, "24h": 24 * 3600.0}
WINDOW_LABELS = {"15m": "15 min", "1h": "1 hour", "6h": "6 hours", "24h": "24 hours"}
DEFAULT_WINDOW = "1h"
RAW_UP_TO = resources.DEFAULT_WINDOW["raw"]
"""Windows up to this long are drawn from raw samples, longer ones from minute averages, as the
service chooses when no `since` is given."""
MINUTE = 60.0
GAP_PERIODS = 3.0
"""Consecutive points further apart than this many sampling periods are not joined by a line:
the sampler was stopped (or the server down) in between, and a straight line would invent data."""
STALE_PERIODS = 3.0
STALE_AT_LEAST = 60.0
"""A node whose latest sample is older than max(this, STALE_PERIODS sampling periods) is stale."""
NodeName = Annotated[str, Path(max_length=255)]
Window = Annotated[str, Query(max_length=16)]


# ----------------------------------------------------------------- shaping (pure)
def window_seconds(window: str) -> float:
    if window not in WINDOWS:
        raise MlyardError(f"window {window!r} is not one of {', '.join(WINDOWS)}", field="window")
    return WINDOWS[window]


@dataclass(frozen=True)
class Timed:
    """A row of a chart with its time and the spacing of the resolution it came from."""

    at: float
    period: float
    row: Any


def timed(rows: Iterable[Any], period: float) -> list[Timed]:
    return [Timed(row.at, period, row) for row in rows]


def after_minutes(minutes: Sequence[Timed], raw: Iterable[Timed]) -> list[Timed]:
    """Minute averages, then the raw samples of later minutes (those not rolled up yet)."""
    end = minutes[-1].at + MINUTE if minutes else float("-inf")
    return [*minutes, *(item for item in raw if item.at >= end)]


def chart_lines(items: Sequence[Timed], columns: Mapping[str, Callable[[Any], float | None]]
                ) -> tuple[list[float], dict[str, list[float | None]]]:
    """Times and one list of values per label, with a null point in each gap of the sampling
    (longer than GAP_PERIODS periods) so that the line breaks there."""
    times: list[float] = []
    lines: dict[str, list[float | None]] = {label: [] for label in columns}
    previous: Timed | None = None
    for item in sorted(items, key=lambda item: item.at):
        if previous is not None and item.at - previous.at > GAP_PERIODS * max(item.period, previous.period):
            times.append((previous.at + item.at) / 2)
            for values in lines.values():
                values.append(None)
        times.append(item.at)
        for label, value_of in columns.items():
            lines[label].append(value_of(item.row))
        previous = item
    return times, lines


def gpu_indices(samples: Iterable[NodeUsage]) -> list[int]:
    """Every GPU index any sample reports, in order: a GPU that drops out leaves a gap, not a shift."""
    return sorted({gpu.index for sample in samples for gpu in sample.gpus})


def gpu_value(sample: NodeUsage, index: int, field: str) -> float | None:
    for gpu in sample.gpus:
        if gpu.index == index:
            return getattr(gpu, field)
    return None


def gpu_columns(samples: Sequence[NodeUsage], field: str, *, label: str = "GPU {index}",
                only: Iterable[int] | None = None) -> dict[str, Callable[[NodeUsage], float | None]]:
    """One line per GPU of `field` (a GpuUsage attribute), restricted to `only` when given."""
    wanted = None if only is None else set(only)
    return {label.format(index=index): (lambda sample, index=index: gpu_value(sample, index, field))
            for index in gpu_indices(samples) if wanted is None or index in wanted}


NODE_CHARTS: dict[str, Callable[[Sequence[NodeUsage]], dict[str, Callable[[NodeUsage], float | None]]]] = {
    "cpu": lambda samples: {"CPU busy": lambda sample: sample.cpu_percent},
    "load": lambda samples: {"1 min": lambda sample: sample.load_average[0],
                             "5 min": lambda sample: sample.load_average[1],
                             "15 min": lambda sample: sample.load_average[2]},
    "memory": lambda samples: {"used": lambda sample: sample.memory_used_bytes},
    "network": lambda samples: {"receive": lambda sample: sample.net_rx_bytes_per_second,
                                "transmit": lambda sample: sample.net_tx_bytes_per_second},
    "disk": lambda samples: {"read": lambda sample: sample.disk_read_bytes_per_second,
                             "write": lambda sample: sample.disk_write_bytes_per_second},
    "gpu-utilization": lambda samples: gpu_columns(samples, "utilization_percent"),
    "gpu-memory": lambda samples: gpu_columns(samples, "memory_used_bytes"),
    "gpu-temperature": lambda samples: gpu_columns(samples, "temperature_celsius"),
    "gpu-power": lambda samples: gpu_columns(samples, "power_watts"),
}
"""Chart name → the lines it draws from a node's samples."""


@dataclass(frozen=True)
class Health:
    label: str
    tone: str
    """A colour family of the stylesheet (tone-*)."""
    detail: str


def node_health(node: NodeInfo, interval: float, now: float) -> Health:
    """Whether the node's sampler is reporting: the only liveness a node has in the database."""
    usage = node.usage
    if usage is None:
        detail = ("sampling is off (MLYARD_SAMPLE_INTERVAL=0)" if interval <= 0
                  else "no resource sample recorded yet")
        return Health("no samples", "waiting", detail)
    stale_after = max(STALE_AT_LEAST, STALE_PERIODS * interval)
    if now - usage.at > stale_after:
        return Health("stale", "warning", f"no sample for {int(now - usage.at)}s: its sampler has stopped")
    return Health("up", "success", "sampled regularly")


def node_notes(node: NodeInfo) -> list[str]:
    """What the backend and the sampler say is missing or not enforced on the node."""
    return [note for note in (*node.notes, *(node.inventory.notes if node.inventory else []))
            if not note.startswith(JOBS_RUN_AS)]


def jobs_run_as(node: NodeInfo) -> str | None:
    """The backend's line saying which OS account the node's replicas run as."""
    return next((note for note in node.notes if note.startswith(JOBS_RUN_AS)), None)


def current_usage(node: NodeInfo, interval: float, now: float) -> NodeUsage | None:
    """The latest sample while it still says what the node does now."""
    if node.usage is None or node_health(node, interval, now).label == "stale":
        return None
    return node.usage


@dataclass(frozen=True)
class NodeView:
    """A node with what the pages show about it besides its own fields."""

    node: NodeInfo
    health: Health
    usage: NodeUsage | None
    notes: list[str]
    jobs_run_as: str | None = None


def node_view(node: NodeInfo, interval: float, now: float) -> NodeView:
    return NodeView(node, node_health(node, interval, now), current_usage(node, interval, now), node_notes(node),
                    jobs_run_as(node))


# ----------------------------------------------------------------- reading
def _interval(request: Request) -> float:
    settings = getattr(request.app.state, "settings", None)
    return getattr(settings, "sample_interval_seconds", DEFAULT_SAMPLE_INTERVAL)


def raw_period(request: Request) -> float:
    """The spacing of raw samples; with sampling off, the default is as good a guess as any."""
    interval = _interval(request)
    return interval if interval > 0 else DEFAULT_SAMPLE_INTERVAL


def window_rows(read: Callable[[float, str], Sequence[Any]], since: float, *, minutes: bool, raw: float
                ) -> list[Timed]:
    """`read(since, resolution)` from `since` on: raw samples, or minute averages then raw."""
    if not minutes:
        return timed(read(since, "raw"), raw)
    averages = timed(read(since, "1m"), MINUTE)
    # `since` is exclusive in the service; a raw sample stamped on the minute boundary belongs after.
    tail_since = averages[-1].at + MINUTE - 1e-3 if averages else since
    return after_minutes(averages, timed(read(tail_since, "raw"), raw))


def _node(request: Request, principal, name: str) -> NodeInfo:
    for node in nodes.list_nodes(request.app.state.database, principal):
        if node.name == name:
            return node
    raise NotFound(f"node {name!r} does not exist", field="name")


def _error(request: Request, error: MlyardError, principal: auth.Principal | None = None) -> Response:
    return page(request, "error.html", status_code=error.http_status, error=error, principal=principal)


def _listing(request: Request, principal) -> dict:
    now = time.time()
    interval = _interval(request)
    rows = nodes.list_nodes(request.app.state.database, principal)
    return {"views": [node_view(node, interval, now) for node in rows], "principal": principal}


@router.get("/nodes")
def nodes_page(request: Request, principal: PagePrincipal, fragment: Annotated[str, Query(max_length=16)] = ""
               ) -> Response:
    """The page, or with `fragment=table` the table alone, which the page polls."""
    try:
        listing = _listing(request, principal)
    except MlyardError as error:
        return _error(request, error, principal)
    if fragment == "table":
        return page(request, "nodes_table.html", **listing)
    return page(request, "nodes.html", nav="nodes", **listing)


def _jobs_on(request: Request, principal, name: str) -> list[RunningJobUsage]:
    return [job for job in resources.running_jobs(request.app.state.database, principal) if name in job.nodes]


def _node_context(request: Request, principal, name: str) -> dict:
    now = time.time()
    interval = _interval(request)
    view = node_view(_node(request, principal, name), interval, now)
    return {"view": view, "node": view.node, "jobs": _jobs_on(request, principal, name), "principal": principal}


def _refresh_seconds(seconds: float) -> int:
    return 5 if seconds <= RAW_UP_TO else 15


@router.get("/nodes/{name}")
def node_page(request: Request, principal: PagePrincipal, name: NodeName, window: Window = DEFAULT_WINDOW) -> Response:
    try:
        seconds = window_seconds(window)
        context = _node_context(request, principal, name)
    except MlyardError as error:
        return _error(request, error, principal)
    node = context["node"]
    latest = node.usage.gpus if node.usage else []
    return page(request, "node.html", nav="nodes", window=window, windows=WINDOW_LABELS, refresh=_refresh_seconds(seconds),
                has_gpus=bool(node.gpus or latest), gpu_temperature=any(gpu.temperature_celsius is not None for gpu in latest),
                gpu_power=any(gpu.power_watts is not None for gpu in latest), **context)


@router.get("/nodes/{name}/summary")
def node_summary(request: Request, principal: PagePrincipal, name: NodeName) -> Response:
    """The node's facts, current figures and jobs, which its page polls."""
    try:
        context = _node_context(request, principal, name)
    except MlyardError as error:
        return _error(request, error, principal)
    return page(request, "node_summary.html", **context)


@router.get("/nodes/{name}/charts/{chart}.json")
def node_chart(request: Request, principal: PagePrincipal, name: NodeName,
               chart: Annotated[str, Path(max_length=32)], window: Window = DEFAULT_WINDOW) -> Response:
    try:
        if chart not in NODE_CHARTS:
            raise NotFound(f"there is no chart {chart!r}; charts: {', '.join(NODE_CHARTS)}", field="chart")
        seconds = window_seconds(window)

        def read(since: float, resolution: str) -> list[NodeUsage]:
            return resources.node_samples(request.app.state.database, principal, name, since=since,
                                           resolution=resolution).samples

        items = window_rows(read, time.time() - seconds, minutes=seconds > RAW_UP_TO, raw=raw_period(request))
    except MlyardError as error:
        return _error(request, error, principal)
    times, lines = chart_lines(items, NODE_CHARTS[chart]([item.row for item in items]))
    return chart_response(times, lines)
