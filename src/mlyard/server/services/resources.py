"""Resource samples of nodes and jobs: stored, rolled up into minute averages, expired, read.

Whatever measures a node (the leader's sampling thread in embedded mode, a per-node agent
later) hands its figures to `record`; `compact` runs every minute or so and keeps the tables
bounded: raw samples live `raw_retention` seconds, minute averages `minute_retention`.
A minute is rolled up once it ended `SETTLE_SECONDS` ago; samples that arrive for a minute
already rolled up stay raw until they expire.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, selectinload

from mlyard.api.nodes import GpuUsage, NodeInventory, NodeUsage
from mlyard.api.resources import (
    JobResources,
    JobUsagePoint,
    NodeSamples,
    ReplicaUsage,
    RunningJobUsage,
    SampleResolution,
)
from mlyard.errors import NotFound
from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.store.rows import (
    MINUTE_PERIOD,
    RAW_PERIOD,
    AttemptRow,
    JobRow,
    JobSampleRow,
    NodeRow,
    NodeSampleRow,
    UserRow,
)

SETTLE_SECONDS = 10.0
"""How long after a minute ends its samples are taken to be all in."""
MAX_ROLL_SECONDS = 6 * 3600.0
"""At most this much of a node's raw samples is rolled up per call, so catching up after a long
stop stays a bounded transaction; the next call goes on."""
DEFAULT_WINDOW = {"raw": 3600.0, "1m": 24 * 3600.0}
"""What a read without `since` covers."""
MAX_POINTS = 20_000
PERIODS = {"raw": RAW_PERIOD, "1m": MINUTE_PERIOD}
CURRENT_SECONDS = 60.0
"""A replica's figures older than this are not what it uses now (its sampler stopped)."""


# ----------------------------------------------------------------- writing
def record(database: Database, node: str, samples: Sequence[NodeUsage], replicas: Sequence[ReplicaUsage] = ()) -> None:
    """Stores a node's samples and its replicas' figures in one transaction. Figures of a job
    the database does not know are dropped (a job from another database, or a stale agent)."""
    with database.transaction() as session:
        session.add_all(_node_row(node, RAW_PERIOD, sample) for sample in samples)
        wanted = {usage.job_id for usage in replicas}
        known = set(session.scalars(select(JobRow.id).where(JobRow.id.in_(wanted)))) if wanted else set()
        session.add_all(
            JobSampleRow(job_id=usage.job_id, attempt=usage.attempt, replica=usage.replica, rank=usage.rank,
                         node=usage.node, period=RAW_PERIOD, at=usage.at, samples=1, replicas=1,
                         processes=usage.processes, cpu_percent=usage.cpu_percent, memory_bytes=usage.memory_bytes,
                         gpu_memory_bytes=usage.gpu_memory_bytes)
            for usage in replicas if usage.job_id in known
        )


def record_inventory(database: Database, node: str, inventory: NodeInventory) -> None:
    with database.transaction() as session:
        row = session.get(NodeRow, node)
        if row is not None:
            row.inventory = inventory.model_dump(mode="json")


def _node_row(node: str, period: int, usage: NodeUsage) -> NodeSampleRow:
    load = list(usage.load_average)
    return NodeSampleRow(
        node=node, period=period, at=usage.at, samples=usage.samples, cpu_percent=usage.cpu_percent,
        cpu_per_core=list(usage.cpu_per_core), load_1=load[0], load_5=load[1], load_15=load[2],
        memory_used=usage.memory_used_bytes, memory_total=usage.memory_total_bytes,
        disk_read_rate=usage.disk_read_bytes_per_second, disk_write_rate=usage.disk_write_bytes_per_second,
        net_rx_rate=usage.net_rx_bytes_per_second, net_tx_rate=usage.net_tx_bytes_per_second,
        gpus=[gpu.model_dump(mode="json") for gpu in usage.gpus],
    )


def _usage(row: NodeSampleRow) -> NodeUsage:
    return NodeUsage(
        at=row.at, cpu_percent=row.cpu_percent, cpu_per_core=list(row.cpu_per_core),
        load_average=[row.load_1, row.load_5, row.load_15], memory_used_bytes=row.memory_used,
        memory_total_bytes=row.memory_total, disk_read_bytes_per_second=row.disk_read_rate,
        disk_write_bytes_per_second=row.disk_write_rate, net_rx_bytes_per_second=row.net_rx_rate,
        net_tx_bytes_per_second=row.net_tx_rate, gpus=[GpuUsage(**gpu) for gpu in row.gpus], samples=row.samples,
    )


# ----------------------------------------------------------------- compaction
@dataclass(frozen=True)
class Compaction:
    minutes: int
    """Minute rows written (node and job rows together)."""
    deleted: int


def compact(database: Database, now: float, *, raw_retention: float, minute_retention: float) -> Compaction:
    """Rolls each node's finished minutes up into averages, then deletes expired rows."""
    horizon = _minute(now - SETTLE_SECONDS)
    with database.transaction() as session:
        nodes = list(session.scalars(select(NodeRow.name)))
    written = 0
    for node in nodes:
        with database.transaction() as session:
            written += _roll_up(session, node, horizon)
    deleted = 0
    with database.transaction() as session:
        for table in (NodeSampleRow, JobSampleRow):
            for period, keep in ((RAW_PERIOD, raw_retention), (MINUTE_PERIOD, minute_retention)):
                result = session.execute(delete(table).where(table.period == period, table.at < now - keep))
                deleted += result.rowcount or 0
    return Compaction(minutes=written, deleted=deleted)


def _minute(at: float) -> float:
    return math.floor(at / 60) * 60.0


def _roll_up(session: Session, node: str, horizon: float) -> int:
    rolled = session.scalar(select(func.max(NodeSampleRow.at)).where(
        NodeSampleRow.node == node, NodeSampleRow.period == MINUTE_PERIOD))
    lower = rolled + 60 if rolled is not None else 0.0
    first = session.scalar(select(func.min(NodeSampleRow.at)).where(
        NodeSampleRow.node == node, NodeSampleRow.period == RAW_PERIOD, NodeSampleRow.at >= lower))
    if first is None:
        return 0
    start = max(lower, _minute(first))
    end = min(horizon, start + MAX_ROLL_SECONDS)
    if start >= end:
        return 0
    by_minute: dict[float, list[NodeSampleRow]] = defaultdict(list)
    for row in session.scalars(select(NodeSampleRow).where(
            NodeSampleRow.node == node, NodeSampleRow.period == RAW_PERIOD,
            NodeSampleRow.at >= start, NodeSampleRow.at < end)):
        by_minute[_minute(row.at)].append(row)
    minute_rows: list[NodeSampleRow | JobSampleRow] = [
        _node_row(node, MINUTE_PERIOD, _average_node(minute, rows)) for minute, rows in by_minute.items()]
    jobs: dict[tuple[int, int, float], list[JobSampleRow]] = defaultdict(list)
    for row in session.scalars(select(JobSampleRow).where(
            JobSampleRow.period == RAW_PERIOD, JobSampleRow.at >= start, JobSampleRow.at < end,
            JobSampleRow.node == node)):
        jobs[(row.job_id, row.attempt, _minute(row.at))].append(row)
    minute_rows.extend(_average_job(node, key, rows) for key, rows in jobs.items())
    session.add_all(minute_rows)
    return len(minute_rows)


def _mean(values: Iterable[float | None], weights: Iterable[int] | None = None) -> float | None:
    weights = itertools.repeat(1) if weights is None else weights
    pairs = [(value, weight) for value, weight in zip(values, weights, strict=False) if value is not None]
    total = sum(weight for _, weight in pairs)
    return sum(value * weight for value, weight in pairs) / total if total else None


def _average_node(minute: float, rows: list[NodeSampleRow]) -> NodeUsage:
    weights = [row.samples for row in rows]

    def mean(values: Iterable[float | None]) -> float:
        return _mean(values, weights) or 0.0

    cores = max(len(row.cpu_per_core) for row in rows)
    per_core = [_mean((row.cpu_per_core[i] if i < len(row.cpu_per_core) else None for row in rows), weights) or 0.0
                for i in range(cores)]
    gpus: dict[int, list[tuple[dict, int]]] = defaultdict(list)
    for row in rows:
        for gpu in row.gpus:
            gpus[gpu["index"]].append((gpu, row.samples))
    gpu_usage = []
    for index, entries in sorted(gpus.items()):
        values = {}
        for name in ("utilization_percent", "memory_used_bytes", "temperature_celsius", "power_watts"):
            values[name] = _mean((gpu.get(name) for gpu, _ in entries), (weight for _, weight in entries))
        if values["memory_used_bytes"] is not None:
            values["memory_used_bytes"] = round(values["memory_used_bytes"])
        gpu_usage.append(GpuUsage(index=index, memory_total_bytes=entries[-1][0].get("memory_total_bytes"), **values))
    return NodeUsage(
        at=minute, samples=sum(weights), cpu_percent=mean(row.cpu_percent for row in rows), cpu_per_core=per_core,
        load_average=[mean(row.load_1 for row in rows), mean(row.load_5 for row in rows),
                      mean(row.load_15 for row in rows)],
        memory_used_bytes=round(mean(row.memory_used for row in rows)), memory_total_bytes=rows[-1].memory_total,
        disk_read_bytes_per_second=mean(row.disk_read_rate for row in rows),
        disk_write_bytes_per_second=mean(row.disk_write_rate for row in rows),
        net_rx_bytes_per_second=mean(row.net_rx_rate for row in rows),
        net_tx_bytes_per_second=mean(row.net_tx_rate for row in rows), gpus=gpu_usage,
    )


def _average_job(node: str, key: tuple[int, int, float], rows: list[JobSampleRow]) -> JobSampleRow:
    """The replicas' sum at each sample time, averaged over the minute."""
    job_id, attempt, minute = key
    points = _sum_by_time(rows)
    count = len(points)
    return JobSampleRow(
        job_id=job_id, attempt=attempt, replica=None, rank=None, node=node, period=MINUTE_PERIOD, at=minute,
        samples=count, replicas=max(point.replicas for point in points),
        processes=round(sum(point.processes for point in points) / count),
        cpu_percent=sum(point.cpu_percent for point in points) / count,
        memory_bytes=round(sum(point.memory_bytes for point in points) / count),
        gpu_memory_bytes=round(sum(point.gpu_memory_bytes for point in points) / count),
    )


@dataclass
class _Point:
    at: float
    cpu_percent: float = 0.0
    memory_bytes: int = 0
    gpu_memory_bytes: int = 0
    replicas: int = 0
    processes: int = 0
    samples: int = 1


def _sum_by_time(rows: Iterable[JobSampleRow]) -> list[_Point]:
    """Rows of one time (a sampling pass stamps all its rows alike) added up, oldest first."""
    points: dict[float, _Point] = {}
    for row in rows:
        point = points.setdefault(row.at, _Point(at=row.at, samples=row.samples))
        point.cpu_percent += row.cpu_percent
        point.memory_bytes += row.memory_bytes
        point.gpu_memory_bytes += row.gpu_memory_bytes
        point.replicas += row.replicas
        point.processes += row.processes
        point.samples = max(point.samples, row.samples)
    return sorted(points.values(), key=lambda point: point.at)


# ----------------------------------------------------------------- reading
def latest_usage(session: Session, node: str) -> NodeUsage | None:
    row = session.scalars(select(NodeSampleRow).where(NodeSampleRow.node == node, NodeSampleRow.period == RAW_PERIOD)
                          .order_by(NodeSampleRow.at.desc()).limit(1)).first()
    return _usage(row) if row is not None else None


def inventory_of(row: NodeRow) -> NodeInventory | None:
    return NodeInventory.model_validate(row.inventory) if row.inventory else None


def node_samples(database: Database, principal: auth.Principal, node: str, *, since: float | None = None,
                 resolution: SampleResolution = "raw", limit: int = MAX_POINTS) -> NodeSamples:
    """A node's samples after `since` (default: the last hour raw, the last day in minutes),
    oldest first; ask again with `since` set to the last one's `at` for more."""
    auth.authorize(principal, auth.Action.READ)
    since = time.time() - DEFAULT_WINDOW[resolution] if since is None else since
    with database.reading() as session:
        rows = session.scalars(select(NodeSampleRow).where(
            NodeSampleRow.node == node, NodeSampleRow.period == PERIODS[resolution], NodeSampleRow.at > since,
        ).order_by(NodeSampleRow.at).limit(limit)).all()
        if not rows and session.get(NodeRow, node) is None:
            raise NotFound(f"node {node!r} does not exist", field="name")
        return NodeSamples(node=node, resolution=resolution, samples=[_usage(row) for row in rows])


def job_resources(database: Database, principal: auth.Principal, job_id: int, *, since: float | None = None,
                  resolution: SampleResolution = "raw", limit: int = MAX_POINTS) -> JobResources:
    """A job's replicas together over time after `since` (default as `node_samples`), oldest
    first, and the latest figures of each replica of its latest attempt."""
    auth.authorize(principal, auth.Action.READ, job_id=job_id)
    since = time.time() - DEFAULT_WINDOW[resolution] if since is None else since
    period = PERIODS[resolution]
    with database.reading() as session:
        job = auth.visible_job(principal, session.get(JobRow, job_id), job_id)
        times = session.scalars(select(JobSampleRow.at).distinct().where(
            JobSampleRow.job_id == job_id, JobSampleRow.period == period, JobSampleRow.at > since,
        ).order_by(JobSampleRow.at).limit(limit)).all()
        points = []
        if times:
            rows = session.scalars(select(JobSampleRow).where(
                JobSampleRow.job_id == job_id, JobSampleRow.period == period,
                JobSampleRow.at >= times[0], JobSampleRow.at <= times[-1]))
            points = [JobUsagePoint(at=point.at, cpu_percent=point.cpu_percent, memory_bytes=point.memory_bytes,
                                    gpu_memory_bytes=point.gpu_memory_bytes, replicas=point.replicas,
                                    samples=point.samples) for point in _sum_by_time(rows)]
        return JobResources(job_id=job_id, resolution=resolution, points=points,
                            replicas=_latest_replicas(session, job_id, job.attempt_count))


def _latest_replicas(session: Session, job_id: int, attempt: int) -> list[ReplicaUsage]:
    latest = (select(JobSampleRow.replica, func.max(JobSampleRow.at).label("at"))
              .where(JobSampleRow.job_id == job_id, JobSampleRow.period == RAW_PERIOD, JobSampleRow.attempt == attempt)
              .group_by(JobSampleRow.replica).subquery())
    rows = session.scalars(select(JobSampleRow).join(
        latest, (JobSampleRow.replica == latest.c.replica) & (JobSampleRow.at == latest.c.at),
    ).where(JobSampleRow.job_id == job_id, JobSampleRow.period == RAW_PERIOD, JobSampleRow.attempt == attempt)).all()
    return sorted((ReplicaUsage(job_id=row.job_id, attempt=row.attempt, replica=row.replica, rank=row.rank or 0,
                                node=row.node, at=row.at, cpu_percent=row.cpu_percent, memory_bytes=row.memory_bytes,
                                gpu_memory_bytes=row.gpu_memory_bytes, processes=row.processes) for row in rows),
                  key=lambda usage: usage.rank)


def running_jobs(database: Database, principal: auth.Principal, *, now: float | None = None) -> list[RunningJobUsage]:
    """Every job with a holding attempt, by id, with the latest figures of each of its replicas
    (from the last `CURRENT_SECONDS`) added up: what `mlyard top` shows, in one query rather
    than one request per job."""
    auth.authorize(principal, auth.Action.READ)
    now = time.time() if now is None else now
    query = (select(JobRow, AttemptRow, UserRow.name).join(AttemptRow, AttemptRow.job_id == JobRow.id)
             .outerjoin(UserRow, UserRow.id == JobRow.owner_id).where(AttemptRow.finished_at.is_(None))
             .options(selectinload(AttemptRow.replicas)).order_by(JobRow.id, AttemptRow.number))
    if principal.job_id is not None:
        query = query.where(JobRow.id == principal.job_id)
    if (visible := principal.visible_projects()) is not None:
        query = query.where(JobRow.project.in_(sorted(visible)))
    with database.reading() as session:
        # A job has one holding attempt; should an older one linger unfinished, the newest speaks for it.
        holding = {job.id: (job, attempt, user) for job, attempt, user in session.execute(query)}
        figures: dict[tuple[int, int], list[JobSampleRow]] = defaultdict(list)
        if holding:
            latest = (select(JobSampleRow.job_id, JobSampleRow.attempt, JobSampleRow.replica,
                             func.max(JobSampleRow.at).label("at"))
                      .where(JobSampleRow.job_id.in_(holding), JobSampleRow.period == RAW_PERIOD,
                             JobSampleRow.at > now - CURRENT_SECONDS)
                      .group_by(JobSampleRow.job_id, JobSampleRow.attempt, JobSampleRow.replica).subquery())
            for row in session.scalars(select(JobSampleRow).join(latest, (JobSampleRow.job_id == latest.c.job_id)
                                                                  & (JobSampleRow.attempt == latest.c.attempt)
                                                                  & (JobSampleRow.replica == latest.c.replica)
                                                                  & (JobSampleRow.at == latest.c.at))
                                       .where(JobSampleRow.period == RAW_PERIOD)):
                figures[(row.job_id, row.attempt)].append(row)
        return [_running_job(job, attempt, user, figures.get((job.id, attempt.number), []))
                for job, attempt, user in holding.values()]


def _running_job(job: JobRow, attempt: AttemptRow, user: str | None, rows: list[JobSampleRow]) -> RunningJobUsage:
    replicas = sorted(attempt.replicas, key=lambda replica: replica.rank)
    usage = RunningJobUsage(
        job_id=job.id, name=job.name, user=user, project=job.project, queue=job.queue, status=job.status,
        replicas=len(replicas), nodes=list(dict.fromkeys(replica.node for replica in replicas)),
        cpus=sum(replica.cpu for replica in replicas), gpus=sum(len(replica.gpu_ids) for replica in replicas),
        launched_at=attempt.launched_at, measured=len(rows),
    )
    if rows:
        usage.at = max(row.at for row in rows)
        usage.cpu_percent = sum(row.cpu_percent for row in rows)
        usage.memory_bytes = sum(row.memory_bytes for row in rows)
        usage.gpu_memory_bytes = sum(row.gpu_memory_bytes for row in rows)
    return usage
