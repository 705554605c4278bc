"""Prometheus metrics of one server, served at `GET /metrics`.

What the database knows (jobs by status and queue, how long jobs waited and ran, node capacity
and allocation) is computed from it at every scrape, so it is right after a restart and the
same whichever of the servers sharing a database is scraped. What only a process sees (its API
requests, the scheduling rounds of the controller it leads) is observed in that process. Each
app has a registry of its own, so several apps in one process do not share or clash.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence

from fastapi import FastAPI, Request, Response
from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from sqlalchemy import Select, and_, case, func, select
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlyard.server.scheduler_terms import DEFAULT_QUEUE
from mlyard.server.store import job_counts as kept_counts
from mlyard.server.store.db import Database
from mlyard.server.store.rows import (
    RAW_PERIOD,
    AttemptRow,
    JobRow,
    NodeRow,
    NodeSampleRow,
    QueueRow,
    ReplicaRow,
)
from mlyard.spec import TERMINAL_STATUSES, JobStatus

METRICS_PATH = "/metrics"
UNMATCHED_ROUTE = "unmatched"
"""The route label of a request no route matched: its raw path would make a series per URL."""

# Bounds in seconds, from a quick `true` to jobs that wait or run for a week.
QUEUE_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 43200, 86400, 172800, 604800)
JOB_DURATION_BUCKETS = (1, 10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800, 345600, 604800)
SCHEDULER_CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

FAMILIES: dict[str, str] = {
    "mlyard_jobs": "gauge",
    "mlyard_job_queue_wait_seconds": "histogram",
    "mlyard_job_duration_seconds": "histogram",
    "mlyard_scheduler_cycle_duration_seconds": "histogram",
    "mlyard_http_request_duration_seconds": "histogram",
    "mlyard_node_cpus": "gauge",
    "mlyard_node_cpus_allocated": "gauge",
    "mlyard_node_memory_bytes": "gauge",
    "mlyard_node_memory_allocated_bytes": "gauge",
    "mlyard_node_gpus": "gauge",
    "mlyard_node_gpus_allocated": "gauge",
}
"""Every mlyard family this module exports, with its type (a test holds it to what a scrape shows)."""

SAMPLER_FAMILIES: dict[str, str] = {
    "mlyard_node_cpu_utilization_ratio": "gauge",
    "mlyard_node_memory_used_bytes": "gauge",
    "mlyard_gpu_utilization_ratio": "gauge",
    "mlyard_gpu_memory_used_bytes": "gauge",
    "mlyard_gpu_temperature_celsius": "gauge",
    "mlyard_gpu_power_watts": "gauge",
}
"""Live node and GPU gauges from each node's latest sample (`node_usage`); a node that has no
recent sample, or no GPUs, has none of them."""

STALE_SAMPLE_SECONDS = 300.0
"""An older sample describes a node nobody measures any more: it is left out, not repeated."""

Source = Callable[[Session], Iterable[Metric]]
"""Families from one read of the database; every source of a scrape shares one transaction."""


# ----------------------------------------------------------------- from the database
def job_counts(session: Session) -> Iterable[Metric]:
    counts = kept_counts.by_status_and_queue(session)  # kept by triggers: no count over every job
    queues = {DEFAULT_QUEUE, *session.scalars(select(QueueRow.name)), *(queue for _, queue in counts)}
    family = GaugeMetricFamily("mlyard_jobs", "Jobs by status and queue.", labels=["status", "queue"])
    # Every status of every queue, zeros too: a status whose series vanished would show "no data", not 0.
    for queue in sorted(queues):
        for status in JobStatus:
            family.add_metric([status.value, queue], counts.get((status.value, queue), 0))
    yield family


def _histogram(session: Session, family: HistogramMetricFamily, observations: Select,
               bounds: Sequence[float]) -> Metric:
    """`observations` selects the family's label columns and then `value`, a row per
    observation. SQL puts each row in its first bucket and counts them (one query per family,
    one comparison chain per row); only the running totals are added up here."""
    rows = observations.subquery()
    labels = [column for column in rows.columns if column.name != "value"]
    placed = select(*labels, rows.c.value, case(*((rows.c.value <= bound, position)
                                                  for position, bound in enumerate(bounds)),
                                                else_=len(bounds)).label("bucket")).subquery()
    grouped = [placed.c[column.name] for column in labels]
    counts: dict[tuple[str, ...], list[int]] = {}
    sums: dict[tuple[str, ...], float] = {}
    for *label_values, bucket, count, total in session.execute(
            select(*grouped, placed.c.bucket, func.count(), func.sum(placed.c.value))
            .group_by(*grouped, placed.c.bucket)):
        key = tuple(str(value) for value in label_values)
        counts.setdefault(key, [0] * (len(bounds) + 1))[bucket] += count
        sums[key] = sums.get(key, 0.0) + (total or 0.0)
    for key in sorted(counts):
        cumulative = list(itertools.accumulate(counts[key]))
        buckets = [(floatToGoString(bound), below) for bound, below in zip(bounds, cumulative, strict=False)]
        family.add_metric(list(key), [*buckets, ("+Inf", cumulative[-1])], sums[key])
    return family


def queue_waits(session: Session) -> Iterable[Metric]:
    family = HistogramMetricFamily(
        "mlyard_job_queue_wait_seconds",
        "From submission until the scheduler first started the job (its first attempt), by queue.",
        labels=["queue"])
    yield _histogram(session, family, select(JobRow.queue, (AttemptRow.created_at - JobRow.submitted_at).label("value"))
                     .join(AttemptRow, and_(AttemptRow.job_id == JobRow.id, AttemptRow.number == 1)),
                     QUEUE_WAIT_BUCKETS)


def job_durations(session: Session) -> Iterable[Metric]:
    family = HistogramMetricFamily(
        "mlyard_job_duration_seconds",
        "How long finished jobs ran: wall seconds of their attempts' processes, by queue and final status.",
        labels=["queue", "status"])
    ended = [status.value for status in sorted(TERMINAL_STATUSES)]
    # A job cancelled while queued never ran: it is no observation of a run time.
    yield _histogram(session, family, select(JobRow.queue, JobRow.status, JobRow.attained_time.label("value"))
                     .where(JobRow.status.in_(ended), JobRow.attempt_count > 0), JOB_DURATION_BUCKETS)


def node_resources(session: Session) -> Iterable[Metric]:
    """Capacity as the backend reported it, and what holding attempts' replicas hold of it."""
    held: dict[str, list[float]] = {}
    for node, cpu_ids, gpu_ids, memory, share in session.execute(
            select(ReplicaRow.node, ReplicaRow.cpu_ids, ReplicaRow.gpu_ids, ReplicaRow.memory_bytes,
                   ReplicaRow.cpu_millicores)
            .join(AttemptRow, ReplicaRow.attempt_id == AttemptRow.id).where(AttemptRow.finished_at.is_(None))):
        totals = held.setdefault(node, [0, 0, 0])
        totals[0] += share / 1000 if share else len(cpu_ids)  # a share of a core: its fraction
        totals[1] += memory
        totals[2] += len(gpu_ids)
    families = [
        GaugeMetricFamily("mlyard_node_cpus", "Cores the node offers to jobs.", labels=["node"]),
        GaugeMetricFamily("mlyard_node_cpus_allocated", "Cores held by replicas of unfinished attempts.",
                          labels=["node"]),
        GaugeMetricFamily("mlyard_node_memory_bytes", "Memory the node offers to jobs.", labels=["node"]),
        GaugeMetricFamily("mlyard_node_memory_allocated_bytes", "Memory held by replicas of unfinished attempts.",
                          labels=["node"]),
        GaugeMetricFamily("mlyard_node_gpus", "GPUs the node offers to jobs.", labels=["node"]),
        GaugeMetricFamily("mlyard_node_gpus_allocated", "GPUs held by replicas of unfinished attempts.",
                          labels=["node"]),
    ]
    for row in session.scalars(select(NodeRow).order_by(NodeRow.name)):
        cpus, memory, gpus = held.get(row.name, (0, 0, 0))
        for family, value in zip(families, (len(row.cpu_ids), cpus, row.memory_bytes, memory, len(row.gpus), gpus),
                                 strict=True):
            family.add_metric([row.name], value)
    yield from families


def node_usage(session: Session) -> Iterable[Metric]:
    """The node sampler's latest raw sample of each node."""
    latest = (select(NodeSampleRow.node, func.max(NodeSampleRow.at).label("at"))
              .where(NodeSampleRow.period == RAW_PERIOD, NodeSampleRow.at >= time.time() - STALE_SAMPLE_SECONDS)
              .group_by(NodeSampleRow.node).subquery())
    rows = session.scalars(select(NodeSampleRow).join(latest, and_(
        NodeSampleRow.node == latest.c.node, NodeSampleRow.at == latest.c.at, NodeSampleRow.period == RAW_PERIOD))
        .order_by(NodeSampleRow.node))
    cpu = GaugeMetricFamily("mlyard_node_cpu_utilization_ratio", "Busy share of all the node's cores, 0-1.",
                            labels=["node"])
    memory = GaugeMetricFamily("mlyard_node_memory_used_bytes", "Memory in use on the node.", labels=["node"])
    per_gpu = {
        "utilization_percent": GaugeMetricFamily("mlyard_gpu_utilization_ratio", "Busy share of the GPU, 0-1.",
                                                 labels=["node", "gpu"]),
        "memory_used_bytes": GaugeMetricFamily("mlyard_gpu_memory_used_bytes", "GPU memory in use.",
                                               labels=["node", "gpu"]),
        "temperature_celsius": GaugeMetricFamily("mlyard_gpu_temperature_celsius", "GPU temperature.",
                                                 labels=["node", "gpu"]),
        "power_watts": GaugeMetricFamily("mlyard_gpu_power_watts", "GPU power draw.", labels=["node", "gpu"]),
    }
    seen: set[str] = set()
    for row in rows:
        if row.node in seen:  # two samples of one node at the very same time: the first will do
            continue
        seen.add(row.node)
        cpu.add_metric([row.node], row.cpu_percent / 100)
        memory.add_metric([row.node], row.memory_used)
        for gpu in row.gpus:
            labels = [row.node, str(gpu["index"])]
            for key, family in per_gpu.items():
                value = gpu.get(key)
                if value is not None:
                    family.add_metric(labels, value / 100 if key == "utilization_percent" else value)
    yield cpu
    yield memory
    for family in per_gpu.values():
        if family.samples:
            yield family


DATABASE_SOURCES: tuple[Source, ...] = (job_counts, queue_waits, job_durations, node_resources, node_usage)


class DatabaseCollector(Collector):
    """Runs `sources` in one read transaction per scrape. Nothing comes from it while the app
    has no database (before its lifespan opened it, after it closed)."""

    def __init__(self, database: Callable[[], Database | None], sources: Sequence[Source] = DATABASE_SOURCES):
        self._database = database
        self.sources = list(sources)

    def describe(self) -> Iterable[Metric]:
        # Registering must not query a database that may not be open yet.
        return []

    def collect(self) -> Iterable[Metric]:
        database = self._database()
        if database is None:
            return []
        # All families are read before any is yielded: the transaction ends before formatting.
        # One snapshot: a job that starts during the scrape is in both its counts and its cores, or in neither.
        with database.reading(one_snapshot=True) as session:
            return [family for source in self.sources for family in source(session)]


# ----------------------------------------------------------------- observed in this process
class RequestTimer:
    """ASGI middleware: the latency of every HTTP request by method, route template (the
    route's path such as `/api/v1/jobs/{job_id}`, never the raw path) and status code."""

    def __init__(self, app: ASGIApp, histogram: Histogram):
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the outermost middleware answers when the app raises

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        began = time.perf_counter()
        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            self.histogram.labels(scope["method"], route_template(scope), str(status)).observe(
                time.perf_counter() - began)


def route_template(scope: Scope) -> str:
    """The template of the route the router chose for this request (it writes the route into
    the same scope). A route of an included router knows only its own part of the path, so
    the router's prefix is taken as what precedes the part it matched; prefixes here are
    static (`/api/v1`), so no raw value becomes a label."""
    route = scope.get("route")
    template, pattern = getattr(route, "path_format", None), getattr(route, "path_regex", None)
    if not template or pattern is None:
        return UNMATCHED_ROUTE
    path = scope["path"]
    for start, character in enumerate(path):
        if character == "/" and pattern.match(path[start:]):
            return path[:start] + template
    return template


class Telemetry:
    """One app's registry and the instruments that are observed in its process."""

    def __init__(self, database: Callable[[], Database | None]):
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            "mlyard_http_request_duration_seconds", "API request latency by method, route template and status code.",
            ["method", "route", "status_code"], buckets=REQUEST_BUCKETS, registry=self.registry)
        self.scheduler_cycles = Histogram(
            "mlyard_scheduler_cycle_duration_seconds",
            "One scheduling round of the controller this server leads: reading the cluster, deciding, "
            "recording the decisions (not the launches that follow).",
            ["policy"], buckets=SCHEDULER_CYCLE_BUCKETS, registry=self.registry)
        self.database = DatabaseCollector(database)
        self.registry.register(self.database)
        ProcessCollector(registry=self.registry)

    def observe_scheduler_cycle(self, policy: str, seconds: float) -> None:
        self.scheduler_cycles.labels(policy).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def install(app: FastAPI) -> Telemetry:
    """Times the app's requests and serves `GET /metrics`, which needs no token (see
    docs/architecture.md, "Prometheus metrics"). The database is the one the lifespan opens."""
    telemetry = Telemetry(lambda: getattr(app.state, "database", None))
    app.state.telemetry = telemetry
    app.add_middleware(RequestTimer, histogram=telemetry.requests)

    @app.get(METRICS_PATH, include_in_schema=False)
    def prometheus_metrics(request: Request) -> Response:
        return Response(request.app.state.telemetry.exposition(), media_type=CONTENT_TYPE_PLAIN_0_0_4)

    return telemetry
