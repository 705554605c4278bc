"""A job's charts: the training metrics it reported (`mlyard.sdk.report`) and what its
processes used (`resources.job_resources`), refreshed until the job ends.

The page learns which metrics exist from a small table of their latest values that polls
itself; when a new name shows up, it fires `metrics-changed` and the chart panel is rendered
again with one chart per name. Charts put time on x (charts.js draws time series); the table
gives each metric's first and latest step.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from mlyard.api.jobs import JobDetail
from mlyard.api.metrics import MetricPoint
from mlyard.api.nodes import NodeUsage
from mlyard.errors import MlyardError, NotFound
from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.services import jobs, metrics, resources
from mlyard.server.settings import DEFAULT_RAW_SAMPLE_RETENTION
from mlyard.web.charts import chart_response
from mlyard.web.nodes import (
    RAW_UP_TO,
    Timed,
    chart_lines,
    gpu_columns,
    raw_period,
    window_rows,
)
from mlyard.web.pages import JobId
from mlyard.web.templating import page
from mlyard.web.session import PagePrincipal

router = APIRouter(include_in_schema=False)

MAX_DRAWN = 2000
"""Points per line sent to the browser; a longer history is averaged in consecutive buckets."""
MAX_READ_PAGES = math.ceil(metrics.MAX_POINTS_PER_JOB / metrics.PAGE_SIZE) + 1
"""Enough pages for all a job may store: a chart that stopped early would lose the latest points."""
INDEX_CAPACITY = 256
"""Jobs whose metric names the index remembers (LRU)."""
STOP_POLLING = 286
"""The status that tells htmx to stop polling (the job has ended)."""
RESOURCE_CHARTS = ("cpu", "memory", "gpu-memory", "gpu-utilization")
MetricName = Annotated[str, Query(min_length=1, max_length=128)]


# ----------------------------------------------------------------- metric names and latest values
@dataclass(frozen=True)
class MetricSummary:
    name: str
    count: int
    first: MetricPoint
    last: MetricPoint


@dataclass
class _Seen:
    after: int = 0
    metrics: dict[str, MetricSummary] = field(default_factory=dict)


def summarize(summaries: dict[str, MetricSummary], points: Sequence[MetricPoint]) -> dict[str, MetricSummary]:
    """`summaries` brought up to date with `points` (newer than every point they count)."""
    result = dict(summaries)
    for point in points:
        known = result.get(point.name)
        result[point.name] = (MetricSummary(point.name, 1, point, point) if known is None
                              else replace(known, count=known.count + 1, last=point))
    return result


class MetricIndex:
    """The metric names of each job and their latest points, kept current by reading only what
    was stored since the last look: polling a job that reported a million values stays cheap.
    Every look goes through `metrics.read`, which checks that the caller may read the job."""

    def __init__(self, capacity: int = INDEX_CAPACITY) -> None:
        self._jobs: OrderedDict[int, _Seen] = OrderedDict()
        self._lock = threading.Lock()
        self._capacity = capacity

    def look(self, database: Database, principal: auth.Principal, job_id: int) -> list[MetricSummary]:
        with self._lock:
            seen = self._jobs.get(job_id) or _Seen()
        after, summaries = seen.after, seen.metrics
        while True:
            chunk = metrics.read(database, principal, job_id, after=after)
            summaries = summarize(summaries, chunk.points)
            after = chunk.next_after
            if len(chunk.points) < metrics.PAGE_SIZE:
                break
        with self._lock:
            current = self._jobs.get(job_id)
            if current is None or current.after <= after:  # a concurrent look may have gone further
                self._jobs[job_id] = _Seen(after, summaries)
            self._jobs.move_to_end(job_id)
            while len(self._jobs) > self._capacity:
                self._jobs.popitem(last=False)
        return sorted(summaries.values(), key=lambda summary: summary.name)


def _index(request: Request) -> MetricIndex:
    # One per app: a test process may run several apps on different databases.
    state = request.app.state
    if getattr(state, "web_metric_index", None) is None:
        state.web_metric_index = MetricIndex()
    return state.web_metric_index


def names_digest(summaries: Sequence[MetricSummary]) -> str:
    """Short enough for a URL however many names a job reports."""
    return hashlib.sha256("\n".join(summary.name for summary in summaries).encode()).hexdigest()[:16]


# ----------------------------------------------------------------- shaping (pure)
def metric_lines(points: Sequence[MetricPoint]) -> tuple[list[float], dict[str, list[float | None]]]:
    """One metric's points as time-series lines: one x per (attempt, step), at its first report,
    so the ranks that report the same step line up; one line per rank (the metric's name when
    only one rank reports). A step reported again in the same attempt keeps its latest value."""
    ranks = sorted({point.rank for point in points})
    label = {rank: (points[0].name if len(ranks) == 1 else f"rank {rank}") for rank in ranks}
    steps: dict[tuple[int, int], tuple[float, dict[int, float]]] = {}
    for point in points:
        key = (point.attempt, point.step)
        at, values = steps.get(key, (point.at, {}))
        values[point.rank] = point.value
        steps[key] = (min(at, point.at), values)
    ordered = sorted(steps.values(), key=lambda entry: entry[0])
    times = [at for at, _ in ordered]
    lines = {label[rank]: [values.get(rank) for _, values in ordered] for rank in ranks}
    return thin(times, lines, MAX_DRAWN)


def _mean(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None


def thin(times: Sequence[float], lines: dict[str, list[float | None]], most: int
         ) -> tuple[list[float], dict[str, list[float | None]]]:
    """At most `most` points: consecutive buckets averaged (at the bucket's last time), the
    latest point kept as it is, since it is the one a reader looks for."""
    if len(times) <= most:
        return list(times), lines
    size = math.ceil((len(times) - 1) / (most - 1))
    starts = range(0, len(times) - 1, size)
    thinned_times = [times[min(start + size, len(times) - 1) - 1] for start in starts] + [times[-1]]
    thinned = {label: [_mean(values[start:min(start + size, len(values) - 1)]) for start in starts] + [values[-1]]
               for label, values in lines.items()}
    return thinned_times, thinned


def _read_metric(database: Database, principal: auth.Principal, job_id: int, name: str) -> list[MetricPoint]:
    points: list[MetricPoint] = []
    after = 0
    for _ in range(MAX_READ_PAGES):
        chunk = metrics.read(database, principal, job_id, names=[name], after=after)
        points.extend(chunk.points)
        after = chunk.next_after
        if len(chunk.points) < metrics.PAGE_SIZE:
            break
    return points


# ----------------------------------------------------------------- resources
def gpu_nodes(job: JobDetail) -> dict[str, list[int]]:
    """Node → the GPU indices the latest attempt's replicas hold there."""
    held: dict[str, list[int]] = {}
    if job.attempts:
        for replica in job.attempts[-1].replicas:
            if replica.gpu_ids:
                held.setdefault(replica.node, []).extend(replica.gpu_ids)
    return {node: sorted(set(indices)) for node, indices in held.items()}


def _span(request: Request, start: float, end: float, now: float) -> tuple[float, bool]:
    """(since, minutes?) for `window_rows`: raw samples while they cover all of start..end and
    the span is short enough to draw them all, minute averages otherwise."""
    settings = getattr(request.app.state, "settings", None)
    retention = getattr(settings, "raw_sample_retention_seconds", DEFAULT_RAW_SAMPLE_RETENTION)
    since = start - 2 * raw_period(request)
    return since, not (end - start <= RAW_UP_TO and since > now - retention)


def _job_rows(request: Request, principal: auth.Principal, job: JobDetail, now: float) -> list[Timed]:
    since, minutes = _span(request, job.started_at or job.submitted_at, job.finished_at or now, now)

    def read(after: float, resolution: str) -> list:
        return resources.job_resources(request.app.state.database, principal, job.id, since=after,
                                        resolution=resolution).points

    return window_rows(read, since, minutes=minutes, raw=raw_period(request))


def _gpu_rows(request: Request, principal: auth.Principal, job: JobDetail, node: str, now: float) -> list[Timed]:
    attempt = job.attempts[-1]
    start = attempt.running_at or attempt.launched_at or attempt.created_at
    since, minutes = _span(request, start, attempt.finished_at or now, now)
    until = attempt.finished_at

    def read(after: float, resolution: str) -> list[NodeUsage]:
        samples = resources.node_samples(request.app.state.database, principal, node, since=after,
                                          resolution=resolution).samples
        return [sample for sample in samples if until is None or sample.at <= until + raw_period(request)]

    return window_rows(read, since, minutes=minutes, raw=raw_period(request))


def _resource_lines(request: Request, principal: auth.Principal, job: JobDetail, chart: str, node: str | None
                    ) -> tuple[list[float], dict[str, list[float | None]]]:
    now = time.time()
    if chart == "gpu-utilization":
        held = gpu_nodes(job)
        if node not in held:
            raise NotFound(f"job {job.id} holds no GPUs on node {node!r}; it holds GPUs on: "
                           f"{', '.join(held) or 'no node'}", field="node")
        items = _gpu_rows(request, principal, job, node, now)
        samples = [item.row for item in items]
        return chart_lines(items, gpu_columns(samples, "utilization_percent", only=held[node]))
    items = _job_rows(request, principal, job, now)
    if chart == "cpu":
        return chart_lines(items, {"CPU": lambda point: point.cpu_percent})
    if chart == "gpu-memory":
        return chart_lines(items, {"GPU memory": lambda point: point.gpu_memory_bytes})
    return chart_lines(items, {"used": lambda point: point.memory_bytes})


# ----------------------------------------------------------------- routes
def _error(request: Request, error: MlyardError, principal: auth.Principal | None = None) -> Response:
    return page(request, "error.html", status_code=error.http_status, error=error, principal=principal)


def _panel_context(request: Request, principal: auth.Principal, job_id: int) -> dict:
    job = jobs.get_job(request.app.state.database, principal, job_id)
    summaries = _index(request).look(request.app.state.database, principal, job_id)
    return {"job": job, "summaries": summaries, "digest": names_digest(summaries), "ended": job.status.is_terminal}


@router.get("/jobs/{job_id}/charts/metrics")
def metrics_panel(request: Request, principal: PagePrincipal, job_id: JobId) -> Response:
    """One chart per metric name and the table of latest values."""
    try:
        context = _panel_context(request, principal, job_id)
    except MlyardError as error:
        return _error(request, error, principal)
    return page(request, "job_charts_metrics.html", **context)


@router.get("/jobs/{job_id}/charts/metrics/latest")
def latest_metrics(request: Request, principal: PagePrincipal, job_id: JobId,
                   seen: Annotated[str, Query(max_length=64)] = "") -> Response:
    """The latest value of each metric; when the names differ from those the page shows
    (`seen`, a digest), the page is told to render its charts again."""
    try:
        context = _panel_context(request, principal, job_id)
    except MlyardError as error:
        return _error(request, error, principal)
    response = page(request, "job_charts_latest.html", status_code=STOP_POLLING if context["ended"] else 200,
                    **context)
    if context["digest"] != seen:
        response.headers["HX-Trigger"] = "metrics-changed"
    return response


@router.get("/jobs/{job_id}/charts/metric.json")
def metric_chart(request: Request, principal: PagePrincipal, job_id: JobId, name: MetricName) -> Response:
    try:
        job = jobs.get_job(request.app.state.database, principal, job_id)
        points = _read_metric(request.app.state.database, principal, job_id, name)
    except MlyardError as error:
        return _error(request, error, principal)
    times, lines = metric_lines(points) if points else ([], {name: []})
    return chart_response(times, lines, final=job.status.is_terminal)


@router.get("/jobs/{job_id}/charts/{chart}.json")
def resource_chart(request: Request, principal: PagePrincipal, job_id: JobId,
                   chart: Annotated[str, Path(max_length=32)],
                   node: Annotated[str | None, Query(max_length=255)] = None) -> Response:
    try:
        if chart not in RESOURCE_CHARTS:
            raise NotFound(f"there is no chart {chart!r}; charts: metric, {', '.join(RESOURCE_CHARTS)}", field="chart")
        job = jobs.get_job(request.app.state.database, principal, job_id)
        times, lines = _resource_lines(request, principal, job, chart, node)
    except MlyardError as error:
        return _error(request, error, principal)
    return chart_response(times, lines, final=job.status.is_terminal)
