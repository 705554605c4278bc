"""Resource samples: a simulated day of them, fed through the monitoring service with synthetic
times and compacted as the server does, keeps the tables bounded, and the minute averages are
the averages of the samples they replace."""

from __future__ import annotations

import itertools
import time

import pytest
from sqlalchemy import func, select

from mlyard.api.nodes import GpuUsage, NodeUsage
from mlyard.api.resources import ReplicaUsage
from mlyard.errors import NotFound
from mlyard.server.auth import Principal
from mlyard.server.store.db import Database
from mlyard.server.store.rows import (
    MINUTE_PERIOD,
    RAW_PERIOD,
    JobRow,
    JobSampleRow,
    NodeRow,
    NodeSampleRow,
)
from mlyard.server.services import resources

NODE = "node-a"
START = 1_767_225_600.0  # 2026-01-01 00:00 UTC, a minute's start
STEP = 15.0  # four samples a minute
RAW_KEEP = 2 * 3600.0
MINUTE_KEEP = 6 * 3600.0
BATCH = 120  # half an hour of samples per transaction
ADMIN = Principal(name="admin", user_id=None, is_admin=True)


def node_usage(i: int) -> NodeUsage:
    minute, within = divmod(i, 4)
    return NodeUsage(
        at=START + i * STEP, cpu_percent=minute % 50 + within, cpu_per_core=[within, 2 * within],
        load_average=[1.0, 2.0, within], memory_used_bytes=1000 + 100 * within, memory_total_bytes=10_000,
        disk_read_bytes_per_second=10 * within, net_tx_bytes_per_second=4.0,
        gpus=[GpuUsage(index=0, utilization_percent=25 * within, memory_used_bytes=100 * within,
                       memory_total_bytes=1000, temperature_celsius=40, power_watts=None)],
    )


def replica_usage(job_id: int, i: int) -> list[ReplicaUsage]:
    at, within = START + i * STEP, i % 4
    return [ReplicaUsage(job_id=job_id, attempt=1, replica=f"worker-{rank}", rank=rank, node=NODE, at=at,
                         cpu_percent=100.0 * (rank + 1) + within, memory_bytes=(rank + 1) << 20,
                         gpu_memory_bytes=1000 * within, processes=2) for rank in range(2)]


def counts(database: Database) -> dict[tuple[str, int], int]:
    with database.transaction() as session:
        return {(table.__tablename__, period): session.scalar(
                    select(func.count()).select_from(table).where(table.period == period))
                for table in (NodeSampleRow, JobSampleRow) for period in (RAW_PERIOD, MINUTE_PERIOD)}


@pytest.fixture
def database(database_url: str):
    opened = Database.open(database_url)
    with opened.transaction() as session:
        session.add(NodeRow(name=NODE, backend="local", address="127.0.0.1", cpu_ids=[0, 1], memory_bytes=10_000,
                            gpus=[], labels={}, notes=[], updated_at=START))
        session.add(JobRow(id=1, name="busy", project="default", queue="default", priority=0, spec={},
                           status="RUNNING", attempt_count=1, submitted_at=START, updated_at=START))
    yield opened
    opened.close()


def test_a_day_of_samples_stays_bounded_and_minutes_hold_the_averages(database: Database) -> None:
    day = int(24 * 3600 / STEP)
    largest: dict[tuple[str, int], int] = {}
    for first in range(0, day, BATCH):
        batch = range(first, first + BATCH)
        resources.record(database, NODE, [node_usage(i) for i in batch],
                          [usage for i in batch for usage in replica_usage(1, i)])
        now = START + (first + BATCH) * STEP
        resources.compact(database, now, raw_retention=RAW_KEEP, minute_retention=MINUTE_KEEP)
        for key, count in counts(database).items():
            largest[key] = max(largest.get(key, 0), count)

    raw_bound = RAW_KEEP / STEP + 1
    minute_bound = MINUTE_KEEP / 60 + 1
    assert largest[("node_samples", RAW_PERIOD)] <= raw_bound
    assert largest[("job_samples", RAW_PERIOD)] <= 2 * raw_bound  # a raw row per replica
    assert largest[("node_samples", MINUTE_PERIOD)] <= minute_bound
    assert largest[("job_samples", MINUTE_PERIOD)] <= minute_bound  # one per job and minute
    # …and none of them was left empty: a day held more than any bound.
    assert counts(database)[("node_samples", MINUTE_PERIOD)] >= minute_bound - 2

    now = START + day * STEP
    nodes = resources.node_samples(database, ADMIN, NODE, since=now - 3 * 3600, resolution="1m").samples
    assert nodes and all(sample.at >= now - MINUTE_KEEP for sample in nodes)
    assert [b.at - a.at for a, b in itertools.pairwise(nodes)] == [60.0] * (len(nodes) - 1)
    for sample in nodes:
        minute = int((sample.at - START) // 60)
        assert sample.samples == 4
        assert sample.cpu_percent == pytest.approx(minute % 50 + 1.5)  # mean of +0, +1, +2, +3
        assert sample.cpu_per_core == pytest.approx([1.5, 3.0])
        assert sample.load_average == pytest.approx([1.0, 2.0, 1.5])
        assert sample.memory_used_bytes == 1150
        assert sample.disk_read_bytes_per_second == pytest.approx(15.0)
        assert sample.net_tx_bytes_per_second == pytest.approx(4.0)
        assert len(sample.gpus) == 1
        gpu = sample.gpus[0]
        assert (gpu.utilization_percent, gpu.memory_used_bytes, gpu.memory_total_bytes) == (37.5, 150, 1000)
        assert (gpu.temperature_celsius, gpu.power_watts) == (40.0, None)

    figures = resources.job_resources(database, ADMIN, 1, since=now - 3 * 3600, resolution="1m")
    assert len(figures.points) == len(nodes)
    for point in figures.points:
        # Two replicas at 100+k and 200+k summed (300 + 2k), averaged over k = 0..3.
        assert point.cpu_percent == pytest.approx(303.0)
        assert point.memory_bytes == 3 << 20
        assert point.gpu_memory_bytes == 3000  # 2 × mean(0, 1000, 2000, 3000)
        assert (point.replicas, point.samples) == (2, 4)

    raw = resources.job_resources(database, ADMIN, 1, since=now - 120, resolution="raw")  # after `since`
    assert len(raw.points) == 7 and raw.points[-1].at == now - STEP
    assert raw.points[-1].cpu_percent == pytest.approx(300 + 2 * 3)
    assert [(replica.replica, replica.at) for replica in raw.replicas] == [("worker-0", now - STEP),
                                                                           ("worker-1", now - STEP)]


def test_an_unfinished_minute_is_not_rolled_up_and_late_samples_stay_raw(database: Database) -> None:
    resources.record(database, NODE, [node_usage(i) for i in range(6)])  # 1.5 minutes
    resources.compact(database, START + 90, raw_retention=RAW_KEEP, minute_retention=MINUTE_KEEP)
    minutes = resources.node_samples(database, ADMIN, NODE, since=0, resolution="1m").samples
    assert [(sample.at, sample.samples) for sample in minutes] == [(START, 4)]

    resources.record(database, NODE, [node_usage(i) for i in range(6, 8)])
    late = node_usage(2).model_copy(update={"at": START + 59})  # the first minute was rolled already
    resources.record(database, NODE, [late])
    resources.compact(database, START + 200, raw_retention=RAW_KEEP, minute_retention=MINUTE_KEEP)
    minutes = resources.node_samples(database, ADMIN, NODE, since=0, resolution="1m").samples
    assert [(sample.at, sample.samples) for sample in minutes] == [(START, 4), (START + 60, 4)]
    assert len(resources.node_samples(database, ADMIN, NODE, since=0).samples) == 9


def test_a_catch_up_after_a_long_gap_goes_on_past_the_gap(database: Database) -> None:
    resources.record(database, NODE, [node_usage(0)])
    later = START + 10 * 3600  # beyond a single call's roll-up window
    resources.record(database, NODE, [node_usage(0).model_copy(update={"at": later})])
    keep = 10 * 24 * 3600.0
    for _ in range(3):
        resources.compact(database, later + 120, raw_retention=keep, minute_retention=keep)
    minutes = resources.node_samples(database, ADMIN, NODE, since=0, resolution="1m").samples
    assert [sample.at for sample in minutes] == [START, later]


def test_figures_of_unknown_jobs_are_dropped_and_unknown_names_are_not_found(database: Database) -> None:
    resources.record(database, NODE, [node_usage(0)], [*replica_usage(1, 0), *replica_usage(99, 0)])
    assert counts(database)[("job_samples", RAW_PERIOD)] == 2
    with pytest.raises(NotFound):
        resources.node_samples(database, ADMIN, "elsewhere")
    with pytest.raises(NotFound):
        resources.job_resources(database, ADMIN, 99)
    assert resources.job_resources(database, ADMIN, 1, since=time.time()).points == []
