"""What the overview and queues pages show, read from the database and shaped for the
templates: the cluster's utilization over a window, job counts per status, the latest status
changes, and usage-against-quota bars of the queues.

Everything here only reads (`Database.reading`), so a page left open never holds up the
controller. The shaping functions are pure and take plain rows, so they are tested without a
database.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, select

from mlyard.api.queues import QueueInfo
from mlyard.errors import InvalidRequest
from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.store.rows import (
    MINUTE_PERIOD,
    RAW_PERIOD,
    JobEventRow,
    JobRow,
    NodeRow,
    NodeSampleRow,
)
from mlyard.spec import TERMINAL_STATUSES, JobStatus

RECENT_EVENTS = 12


# ----------------------------------------------------------------- windows
@dataclass(frozen=True)
class Window:
    key: str
    label: str
    seconds: float
    bucket: float
    """Seconds one point of the chart stands for: a few hundred points whatever the window."""
    refresh: int
    """Seconds between the chart's refreshes: a week's chart gains nothing from asking every 5 s."""

    @property
    def prefers_raw(self) -> bool:
        # Raw samples (every few seconds) only pay off when a point is shorter than a minute.
        return self.bucket < MINUTE_PERIOD


WINDOWS = {window.key: window for window in (
    Window("1h", "1 h", 3600.0, 10.0, 5),
    Window("6h", "6 h", 6 * 3600.0, 60.0, 30),
    Window("24h", "24 h", 24 * 3600.0, 300.0, 60),
    Window("7d", "7 d", 7 * 24 * 3600.0, 1800.0, 300),
)}
DEFAULT_WINDOW = "1h"


def parse_window(value: str | None) -> Window:
    key = (value or DEFAULT_WINDOW).strip()
    if key not in WINDOWS:
        raise InvalidRequest(f"window must be one of {', '.join(WINDOWS)}, not {key[:40]!r}", field="window")
    return WINDOWS[key]


# ----------------------------------------------------------------- utilization
@dataclass(frozen=True)
class Sample:
    """A node sample row, reduced to what the utilization chart needs."""

    node: str
    period: int
    at: float
    samples: int
    cpu_percent: float
    memory_used: int
    memory_total: int
    gpus: Sequence[dict] = ()


def _minute(at: float) -> float:
    return math.floor(at / 60) * 60.0


def pick_samples(rows: Iterable[Sample], *, prefer_raw: bool) -> list[Sample]:
    """One kind of row per node and minute: raw samples and the minute average made of them
    describe the same time, and counting both would weigh that minute twice. The preferred kind
    wins; the other fills the minutes it leaves empty (raw rows expired, or not rolled up yet)."""
    rows = list(rows)
    raw_minutes = {(row.node, _minute(row.at)) for row in rows if row.period == RAW_PERIOD}
    averaged = {(row.node, row.at) for row in rows if row.period == MINUTE_PERIOD}
    if prefer_raw:
        return [row for row in rows if row.period == RAW_PERIOD or (row.node, row.at) not in raw_minutes]
    return [row for row in rows if row.period == MINUTE_PERIOD or (row.node, _minute(row.at)) not in averaged]


@dataclass
class _NodeBucket:
    weight: int = 0
    cpu: float = 0.0
    memory_used: float = 0.0
    memory_total: float = 0.0
    # GPU index → [utilization × weight, its weight, memory used × weight, its weight, memory total]
    gpus: dict[int, list[float]] = field(default_factory=dict)

    def add(self, sample: Sample) -> None:
        weight = sample.samples
        self.weight += weight
        self.cpu += sample.cpu_percent * weight
        self.memory_used += sample.memory_used * weight
        self.memory_total += sample.memory_total * weight
        for gpu in sample.gpus:
            entry = self.gpus.setdefault(int(gpu.get("index", 0)), [0.0, 0, 0.0, 0, 0.0])
            if gpu.get("utilization_percent") is not None:
                entry[0] += gpu["utilization_percent"] * weight
                entry[1] += weight
            if gpu.get("memory_used_bytes") is not None and gpu.get("memory_total_bytes"):
                entry[2] += gpu["memory_used_bytes"] * weight
                entry[3] += weight
                entry[4] = gpu["memory_total_bytes"]


@dataclass(frozen=True)
class Utilization:
    """Cluster-wide percentages per time bucket; None where no node reported."""

    times: list[float]
    cpu: list[float | None]
    memory: list[float | None]
    gpu: list[float | None]
    gpu_memory: list[float | None]


def bucket_times(now: float, window: Window) -> list[float]:
    start = math.floor((now - window.seconds) / window.bucket) * window.bucket
    count = math.floor((now - start) / window.bucket) + 1
    return [start + index * window.bucket for index in range(count)]


def aggregate(samples: Iterable[Sample], cores: dict[str, int], times: Sequence[float],
              bucket: float) -> Utilization:
    """The nodes' samples as cluster percentages per bucket of `times`: CPU weighs each node by
    its cores (busy cores over all cores), memory adds bytes up, GPU averages every GPU alike.
    A node that did not report in a bucket is left out of it rather than counted as idle."""
    if not times:
        return Utilization([], [], [], [], [])
    start = times[0]
    buckets: dict[int, dict[str, _NodeBucket]] = defaultdict(lambda: defaultdict(_NodeBucket))
    for sample in samples:
        index = math.floor((sample.at - start) / bucket)
        if 0 <= index < len(times):
            buckets[index][sample.node].add(sample)
    result = Utilization(list(times), [], [], [], [])
    for index in range(len(times)):
        nodes = buckets.get(index, {})
        busy = total_cores = used = total = 0.0
        gpu_busy, gpu_count, gpu_used, gpu_total = 0.0, 0, 0.0, 0.0
        for name, node in nodes.items():
            if not node.weight:
                continue
            weight = max(1, cores.get(name, 1))
            busy += node.cpu / node.weight * weight
            total_cores += weight
            used += node.memory_used / node.weight
            total += node.memory_total / node.weight
            for utilization, utilization_weight, memory, memory_weight, memory_total in node.gpus.values():
                if utilization_weight:
                    gpu_busy += utilization / utilization_weight
                    gpu_count += 1
                if memory_weight:
                    gpu_used += memory / memory_weight
                    gpu_total += memory_total
        result.cpu.append(busy / total_cores if total_cores else None)
        result.memory.append(100.0 * used / total if total else None)
        result.gpu.append(gpu_busy / gpu_count if gpu_count else None)
        result.gpu_memory.append(100.0 * gpu_used / gpu_total if gpu_total else None)
    return result


MIN_BUCKETS = 12
"""Trimming keeps at least this many: a chart of one time stamp has no time axis to speak of."""


def trim_leading(result: Utilization) -> Utilization:
    """Without the buckets before the first sample: a cluster younger than the window (or one
    whose older samples expired) fills the chart with what it has instead of a sliver at its
    right edge. Gaps after the first sample stay: they are time nobody measured."""
    lines = (result.cpu, result.memory, result.gpu, result.gpu_memory)
    first = next((index for index in range(len(result.times)) if any(line[index] is not None for line in lines)),
                 None)
    if first is None:
        return result
    first = min(first, max(0, len(result.times) - MIN_BUCKETS))
    if not first:
        return result
    return Utilization(result.times[first:], *(line[first:] for line in lines))


# ----------------------------------------------------------------- capacity
@dataclass(frozen=True)
class Capacity:
    nodes: int = 0
    cpus: int = 0
    """Cores offered to jobs: what queue quotas are measured against."""
    memory: int = 0
    gpus: int = 0
    cores: dict[str, int] = field(default_factory=dict)
    """Each node's logical CPUs as its sampler found them: a node's CPU percentage is of all of them."""


def capacity(database: Database) -> Capacity:
    with database.reading() as session:
        rows = session.execute(select(NodeRow.name, NodeRow.cpu_ids, NodeRow.memory_bytes, NodeRow.gpus,
                                      NodeRow.inventory)).all()
    cores = {}
    for name, cpu_ids, _, _, inventory in rows:
        cores[name] = int((inventory or {}).get("cpu_count") or len(cpu_ids) or 1)
    return Capacity(nodes=len(rows), cpus=sum(len(row.cpu_ids) for row in rows),
                    memory=sum(row.memory_bytes for row in rows), gpus=sum(len(row.gpus) for row in rows), cores=cores)


_SAMPLE_COLUMNS = (NodeSampleRow.node, NodeSampleRow.period, NodeSampleRow.at, NodeSampleRow.samples,
                   NodeSampleRow.cpu_percent, NodeSampleRow.memory_used, NodeSampleRow.memory_total, NodeSampleRow.gpus)


def _samples(result) -> list[Sample]:
    return [Sample(*row) for row in result]


def load_samples(database: Database, window: Window, now: float) -> list[Sample]:
    """The rows `pick_samples` chooses from, without reading a day of raw samples that minute
    averages already cover: for long windows only each node's raw tail not yet rolled up."""
    since = now - window.seconds
    with database.reading() as session:
        if window.prefers_raw:
            return _samples(session.execute(select(*_SAMPLE_COLUMNS).where(
                NodeSampleRow.period.in_([RAW_PERIOD, MINUTE_PERIOD]), NodeSampleRow.at > since - MINUTE_PERIOD,
            ).order_by(NodeSampleRow.at)))
        rows = _samples(session.execute(select(*_SAMPLE_COLUMNS).where(
            NodeSampleRow.period == MINUTE_PERIOD, NodeSampleRow.at > since - MINUTE_PERIOD,
        ).order_by(NodeSampleRow.at)))
        rolled: dict[str, float] = {}
        for row in rows:
            rolled[row.node] = max(rolled.get(row.node, 0.0), row.at + MINUTE_PERIOD)
        nodes = set(rolled) | set(session.scalars(select(NodeRow.name)))
        for node in sorted(nodes):
            rows.extend(_samples(session.execute(select(*_SAMPLE_COLUMNS).where(
                NodeSampleRow.node == node, NodeSampleRow.period == RAW_PERIOD,
                NodeSampleRow.at >= max(since, rolled.get(node, since)),
            ))))
        return rows


def utilization(database: Database, principal: auth.Principal, window: Window,
                now: float | None = None) -> tuple[Utilization, Capacity]:
    auth.authorize(principal, auth.Action.READ)
    now = time.time() if now is None else now
    cluster = capacity(database)
    samples = pick_samples(load_samples(database, window, now), prefer_raw=window.prefers_raw)
    return trim_leading(aggregate(samples, cluster.cores, bucket_times(now, window), window.bucket)), cluster


# ----------------------------------------------------------------- jobs
@dataclass(frozen=True)
class StatusCount:
    status: JobStatus
    count: int

    @property
    def active(self) -> bool:
        return self.status not in TERMINAL_STATUSES


@dataclass(frozen=True)
class JobCounts:
    statuses: list[StatusCount]

    @property
    def total(self) -> int:
        return sum(entry.count for entry in self.statuses)

    @property
    def active(self) -> int:
        return sum(entry.count for entry in self.statuses if entry.active)

    @property
    def queued(self) -> int:
        return self.of(JobStatus.QUEUED)

    @property
    def running(self) -> int:
        return self.of(JobStatus.RUNNING)

    def of(self, status: JobStatus) -> int:
        return next((entry.count for entry in self.statuses if entry.status is status), 0)


def count_statuses(pairs: Iterable[tuple[str, int]]) -> JobCounts:
    """Every status in lifecycle order, zeros included, so the tiles keep their places."""
    found = {JobStatus(status): count for status, count in pairs}
    return JobCounts([StatusCount(status, found.get(status, 0)) for status in JobStatus])


def job_counts(database: Database, principal: auth.Principal) -> JobCounts:
    auth.authorize(principal, auth.Action.READ)
    query = select(JobRow.status, func.count()).group_by(JobRow.status)
    if principal.job_id is not None:
        query = query.where(JobRow.id == principal.job_id)
    if (visible := principal.visible_projects()) is not None:
        query = query.where(JobRow.project.in_(sorted(visible)))
    with database.reading() as session:
        return count_statuses(session.execute(query).all())


@dataclass(frozen=True)
class RecentEvent:
    id: int
    job_id: int
    job_name: str
    at: float
    from_status: JobStatus | None
    to_status: JobStatus
    message: str | None


def recent_events(database: Database, principal: auth.Principal, limit: int = RECENT_EVENTS) -> list[RecentEvent]:
    """The latest status changes, newest first (by id: the order they were written in)."""
    auth.authorize(principal, auth.Action.READ)
    query = (select(JobEventRow.id, JobEventRow.job_id, JobRow.name, JobEventRow.at, JobEventRow.from_status, JobEventRow.to_status,
                    JobEventRow.message).join(JobRow, JobRow.id == JobEventRow.job_id)
             .order_by(JobEventRow.id.desc()).limit(limit))
    if principal.job_id is not None:
        query = query.where(JobEventRow.job_id == principal.job_id)
    if (visible := principal.visible_projects()) is not None:
        query = query.where(JobRow.project.in_(sorted(visible)))
    with database.reading() as session:
        return [RecentEvent(event_id, job_id, name, at, JobStatus(before) if before else None, JobStatus(after),
                            message)
                for event_id, job_id, name, at, before, after, message in session.execute(query)]


# ----------------------------------------------------------------- queue bars
RESOURCES = (("gpu", "GPUs"), ("cpu", "CPU cores"), ("memory", "Memory"))


@dataclass(frozen=True)
class Bar:
    """One resource of a queue: what it uses against its quota and its ceiling (quota plus
    borrowing limit), drawn on a scale of the cluster's capacity."""

    resource: str
    label: str
    used: float
    quota: float | None
    """None: nothing guaranteed."""
    ceiling: float | None
    """None: it may borrow without limit."""
    scale: float
    unmanaged: bool = False
    """The queue has neither quota nor borrowing limit: it shares what is free and never counts
    as borrowing (the scheduler does not reclaim from it)."""

    def _percent(self, value: float | None) -> float | None:
        if value is None or self.scale <= 0:
            return None
        return round(min(100.0, 100.0 * value / self.scale), 2)

    @property
    def used_percent(self) -> float:
        return self._percent(self.used) or 0.0

    @property
    def quota_percent(self) -> float | None:
        return self._percent(self.quota) if self.quota else None

    @property
    def ceiling_percent(self) -> float | None:
        return self._percent(self.ceiling)

    @property
    def borrow_limit(self) -> float | None:
        """How far beyond its quota it may go; None: without limit."""
        return None if self.ceiling is None else self.ceiling - (self.quota or 0)

    @property
    def borrowed(self) -> float:
        return 0.0 if self.unmanaged else max(0.0, self.used - (self.quota or 0))

    @property
    def state(self) -> str:
        """within its quota, borrowing beyond it, or over its ceiling (after the ceiling was lowered)."""
        if self.unmanaged:
            return "unlimited"
        if self.ceiling is not None and self.used > self.ceiling:
            return "over"
        return "borrowing" if self.borrowed > 0 else "within"

    def amount(self, value: float | None) -> str:
        if value is None:
            return "–"
        if self.resource == "memory":
            return _bytes(value)
        return f"{value:g}"

    @property
    def summary(self) -> str:
        """The bar in words, for its label and for screen readers."""
        parts = [f"{self.amount(self.used)} used"]
        if self.unmanaged:
            return " · ".join([*parts, "no quota or borrowing limit"])
        parts.append(f"quota {self.amount(self.quota)}" if self.quota else "no quota")
        if self.ceiling is None:
            parts.append("borrows without limit")
        elif self.ceiling == (self.quota or 0):
            parts.append("no borrowing")
        else:
            parts.append(f"may borrow {self.amount(self.borrow_limit)}")
        if self.borrowed:
            parts.append(f"borrowing {self.amount(self.borrowed)}")
        return " · ".join(parts)


def _bytes(size: float) -> str:
    for unit, scale in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g}{unit}"
    return f"{size:g}B"


def queue_bars(queue: QueueInfo, cluster: Capacity) -> list[Bar]:
    """A bar per resource the queue or the cluster has; GPUs are left out where neither has any."""
    bars = []
    unmanaged = all(getattr(amounts, resource) is None for amounts in (queue.quota, queue.borrow_limit)
                    for resource, _ in RESOURCES)
    for resource, label in RESOURCES:
        used = float(getattr(queue.usage, resource))
        quota = getattr(queue.quota, resource)
        borrow = getattr(queue.borrow_limit, resource)
        ceiling = None if borrow is None else (quota or 0) + borrow
        available = {"gpu": cluster.gpus, "cpu": cluster.cpus, "memory": cluster.memory}[resource]
        if resource == "gpu" and not (available or quota or used or (ceiling or 0)):
            continue
        scale = max(available, used, quota or 0, ceiling or 0)
        bars.append(Bar(resource, label, used, None if quota is None else float(quota),
                        None if ceiling is None else float(ceiling), float(scale), unmanaged))
    return bars
