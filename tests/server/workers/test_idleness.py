"""Utilization policies on crafted samples in a real database: a job is judged by exactly the
GPUs it holds (its CPU without GPUs), only where samples cover the window; the warning and its
events come once and go when the job is busy again; interactive jobs are stopped, batch jobs
never."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, select

from mlyard.paths import Paths
from mlyard.errors import MlyardError
from mlyard.server.workers import idleness
from mlyard.server.auth import Principal
from mlyard.server.store.db import MIGRATIONS, Database, make_engine
from mlyard.server.store.rows import (
    RAW_PERIOD,
    AttemptRow,
    JobEventRow,
    JobRow,
    JobSampleRow,
    NodeSampleRow,
    ReplicaRow,
)
from mlyard.server.lifecycle import switch_status
from mlyard.server.services.jobs import get_job, list_jobs
from mlyard.server.settings import ServerSettings
from mlyard.spec import JobStatus

ADMIN = Principal(name="admin", user_id=None, is_admin=True)
NODE = "node-a"
NOW = 1_800_000_000.0
STEP = 5.0  # the sample interval of the crafted samples
GAP = 15.0


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    opened = Database.open(database_url)
    yield opened
    opened.close()


def settings(tmp_path: Path, **values) -> ServerSettings:
    values = {"sample_interval_seconds": STEP, "idle_after_seconds": 60.0, "idle_gpu_utilization": 10.0,
              "interactive_idle_timeout_seconds": 0.0, **values}
    return ServerSettings(paths=Paths(tmp_path), **values)


def add_job(database: Database, job_id: int, *, gpus: list[list[int]] | None = None, replicas: int = 1,
            running_since: float = NOW - 600, **spec) -> None:
    """A RUNNING job whose attempt runs since `running_since`: one replica per entry of `gpus`
    (its GPU indices on NODE), or `replicas` replicas without GPUs."""
    gpus = gpus if gpus is not None else [[] for _ in range(replicas)]
    with database.transaction() as session:
        session.add(JobRow(id=job_id, name=f"job-{job_id}", project="default", queue="default", priority=0,
                           spec={"name": f"job-{job_id}", "command": ["sleep", "1000"], **spec}, status="RUNNING",
                           attempt_count=1, submitted_at=running_since, updated_at=running_since,
                           started_at=running_since))
        attempt = AttemptRow(job_id=job_id, number=1, created_at=running_since, launched_at=running_since,
                             running_at=running_since)
        session.add(attempt)
        session.flush()
        for rank, indices in enumerate(gpus):
            session.add(ReplicaRow(attempt_id=attempt.id, job_id=job_id, role="worker", index=rank, rank=rank,
                                   node=NODE, cpu_ids=[rank], gpu_ids=indices, memory_bytes=1 << 30,
                                   directory="/nonexistent", state="running", pid=100 + rank))


def add_node_samples(database: Database, start: float, end: float, utilization: dict[int, float | None]) -> None:
    """A node sample every STEP seconds in [start, end] with these GPU utilizations."""
    with database.transaction() as session:
        at = start
        while at <= end:
            session.add(NodeSampleRow(
                node=NODE, period=RAW_PERIOD, at=at, samples=1, cpu_percent=50.0, cpu_per_core=[50.0], load_1=1.0,
                load_5=1.0, load_15=1.0, memory_used=1 << 30, memory_total=1 << 34, disk_read_rate=0.0,
                disk_write_rate=0.0, net_rx_rate=0.0, net_tx_rate=0.0,
                gpus=[{"index": index, "utilization_percent": value, "memory_used_bytes": 0,
                       "memory_total_bytes": 1 << 34} for index, value in utilization.items()]))
            at += STEP


def add_job_samples(database: Database, job_id: int, start: float, end: float, cpu: list[float]) -> None:
    """A sample of each replica (`cpu`: percent of a core of each) every STEP seconds."""
    with database.transaction() as session:
        at = start
        while at <= end:
            for rank, value in enumerate(cpu):
                session.add(JobSampleRow(job_id=job_id, attempt=1, replica=f"worker-{rank}", rank=rank, node=NODE,
                                         period=RAW_PERIOD, at=at, samples=1, replicas=1, processes=2,
                                         cpu_percent=value, memory_bytes=1 << 20, gpu_memory_bytes=0))
            at += STEP


def measure(database: Database, job_id: int, start: float = NOW - 60, end: float = NOW) -> idleness.Utilization | None:
    with database.reading() as session:
        attempt = session.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id)).one()
        return idleness.measure(session, attempt, start, end, gpu_threshold=10.0, gap=GAP)


def events(database: Database, job_id: int) -> list[str]:
    with database.reading() as session:
        return list(session.scalars(select(JobEventRow.message).where(JobEventRow.job_id == job_id)
                                    .order_by(JobEventRow.id)))


def attempt_of(database: Database, job_id: int) -> AttemptRow:
    with database.reading() as session:
        return session.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id)).one()


# ----------------------------------------------------------------- the verdict
def test_a_job_is_judged_by_exactly_the_gpus_it_holds(database: Database) -> None:
    add_job(database, 1, gpus=[[0, 2]])
    add_node_samples(database, NOW - 300, NOW, {0: 1.0, 1: 90.0, 2: 1.0, 3: 0.0})
    usage = measure(database, 1)
    assert usage is not None and usage.resource == "GPUs"
    assert (usage.mean, usage.peak, usage.idle, usage.quiet) == (1.0, 1.0, True, True)
    assert usage.samples == 2 * 13  # two GPUs, a sample every 5 s over 60 s


def test_gpus_busy_for_part_of_the_window_are_idle_on_average_but_not_quiet(database: Database) -> None:
    add_job(database, 1, gpus=[[0], [2]])
    add_node_samples(database, NOW - 60, NOW - 35, {0: 0.0, 1: 0.0, 2: 0.0})
    add_node_samples(database, NOW - 30, NOW, {0: 100.0, 1: 0.0, 2: 0.0})
    usage = measure(database, 1)
    assert usage.mean == pytest.approx(100 * 7 / 26) and usage.peak == 100.0
    assert not usage.idle and not usage.quiet
    assert measure(database, 1, start=NOW - 120, end=NOW - 35) is None  # samples begin 60 s into it


def test_a_gap_in_the_samples_or_a_gpu_without_figures_gives_no_verdict(database: Database) -> None:
    add_job(database, 1, gpus=[[0]])
    add_node_samples(database, NOW - 60, NOW - 40, {0: 0.0})
    add_node_samples(database, NOW - 20, NOW, {0: 0.0})  # nothing for 20 s
    assert measure(database, 1) is None
    assert measure(database, 1, start=NOW - 20) is not None
    add_job(database, 2, gpus=[[1]])  # NVML gave no utilization for GPU 1
    with database.transaction() as session:
        for row in session.scalars(select(NodeSampleRow)):
            row.gpus = [*row.gpus, {"index": 1, "utilization_percent": None}]
    assert measure(database, 2, start=NOW - 20) is None
    add_job(database, 3, gpus=[[3]])  # a GPU the samples do not have at all
    assert measure(database, 3, start=NOW - 20) is None


def test_a_job_without_gpus_is_judged_by_its_cpu_per_replica(database: Database) -> None:
    add_job(database, 1, replicas=2)
    add_job_samples(database, 1, NOW - 60, NOW, [6.0, 1.0])  # 3.5% of a core per replica
    usage = measure(database, 1)
    assert usage.resource == "CPU" and usage.threshold == idleness.IDLE_CPU_PERCENT
    assert (usage.mean, usage.peak, usage.idle) == (3.5, 3.5, True)
    add_job(database, 2)
    add_job_samples(database, 2, NOW - 60, NOW, [100.0])
    assert not measure(database, 2).idle
    add_job(database, 3)  # never sampled
    assert measure(database, 3) is None


# ----------------------------------------------------------------- the warning
def test_the_warning_and_its_event_come_once_and_go_when_the_job_is_busy_again(tmp_path: Path,
                                                                                database: Database) -> None:
    add_job(database, 1, gpus=[[0, 2]])
    add_node_samples(database, NOW - 300, NOW, {0: 2.0, 1: 90.0, 2: 2.0})
    config = settings(tmp_path)
    assert idleness.check(database, config, NOW).idle == [1]
    assert idleness.check(database, config, NOW + 1).idle == []  # still idle: nothing new
    assert events(database, 1) == ["GPUs idle: under 10% for 1m (mean 2%)"]
    [listed] = list_jobs(database, ADMIN)
    assert (listed.idle_since, listed.idle_reason) == (NOW - 60, "GPUs idle: under 10% for 1m (mean 2%)")
    assert get_job(database, ADMIN, 1).events[-1].to_status is JobStatus.RUNNING
    assert attempt_of(database, 1).stop_requested_at is None  # a batch job is only warned

    add_node_samples(database, NOW + STEP, NOW + 60, {0: 80.0, 1: 90.0, 2: 80.0})
    changes = idleness.check(database, config, NOW + 60)
    assert changes.busy == [1] and changes.idle == []
    assert events(database, 1)[-1] == "GPUs busy again: mean 74% over the last 1m"
    assert list_jobs(database, ADMIN)[0].idle_since is None


def test_a_job_that_has_not_run_for_the_window_yet_is_not_judged(tmp_path: Path, database: Database) -> None:
    add_job(database, 1, gpus=[[0]], running_since=NOW - 30)
    add_node_samples(database, NOW - 300, NOW, {0: 0.0})
    assert idleness.check(database, settings(tmp_path), NOW).idle == []
    assert idleness.check(database, settings(tmp_path, idle_after_seconds=0.0), NOW).idle == []


def test_the_warning_ends_with_the_running_attempt(tmp_path: Path, database: Database) -> None:
    add_job(database, 1)
    add_job_samples(database, 1, NOW - 60, NOW, [0.5])
    assert idleness.check(database, settings(tmp_path), NOW).idle == [1]
    with database.transaction() as session:
        switch_status(session, session.get(JobRow, 1), JobStatus.CANCELLED, now=NOW + 1)
    with database.reading() as session:
        job = session.get(JobRow, 1)
        assert (job.idle_since, job.idle_reason) == (None, None)


# ----------------------------------------------------------------- interactive jobs
def test_an_idle_interactive_job_is_stopped_and_a_busy_or_batch_one_is_not(tmp_path: Path,
                                                                           database: Database) -> None:
    add_job(database, 1, interactive=True, idle_timeout=120)
    add_job_samples(database, 1, NOW - 300, NOW, [0.5])
    add_job(database, 2, interactive=True, idle_timeout=120)  # one burst of work 100 s ago
    add_job_samples(database, 2, NOW - 300, NOW, [0.5])
    with database.transaction() as session:
        session.scalars(select(JobSampleRow).where(JobSampleRow.job_id == 2, JobSampleRow.at == NOW - 100)).one() \
            .cpu_percent = 100.0
    add_job(database, 3)  # batch
    add_job_samples(database, 3, NOW - 300, NOW, [0.5])
    add_job(database, 4, interactive=True, idle_timeout=0)  # never stopped
    add_job_samples(database, 4, NOW - 300, NOW, [0.5])
    add_job(database, 5, interactive=True)  # the server's timeout, below
    add_job_samples(database, 5, NOW - 300, NOW, [0.5])

    changes = idleness.check(database, settings(tmp_path, stop_grace_seconds=7.0), NOW)
    assert changes.stopped == [1]
    assert changes.idle == [1, 2, 3, 4, 5]  # each of them is idle on average over the last minute
    stopped = attempt_of(database, 1)
    assert (stopped.stop_outcome, stopped.stop_requested_at, stopped.stop_deadline) == ("CANCELLED", NOW, NOW + 7)
    assert stopped.stop_reason == "stopped for being idle: CPU under 5% of a core per replica for 2m (peak 0.5%)"
    for job_id in (2, 3, 4, 5):
        assert attempt_of(database, job_id).stop_requested_at is None

    config = settings(tmp_path, interactive_idle_timeout_seconds=240.0)
    assert idleness.check(database, config, NOW).stopped == [5]
    assert idleness.check(database, config, NOW).stopped == []  # a stop is requested once


def test_a_cancelled_interactive_job_keeps_its_cancellation(tmp_path: Path, database: Database) -> None:
    add_job(database, 1, interactive=True, idle_timeout=60)
    add_job_samples(database, 1, NOW - 60, NOW, [0.0])
    with database.transaction() as session:
        session.get(JobRow, 1).cancel_requested_at = NOW - 1
    assert idleness.check(database, settings(tmp_path), NOW).stopped == []


# ----------------------------------------------------------------- settings
def test_the_check_runs_about_once_a_minute_and_more_often_for_short_windows(tmp_path: Path) -> None:
    assert idleness.check_interval(settings(tmp_path, idle_after_seconds=1800.0)) == 60.0
    assert idleness.check_interval(settings(tmp_path, idle_after_seconds=20.0)) == 5.0
    assert idleness.check_interval(settings(tmp_path, idle_after_seconds=4.0, sample_interval_seconds=2.0)) == 2.0
    assert idleness.check_interval(settings(tmp_path, idle_after_seconds=0.0)) == 60.0


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("MLYARD_IDLE_GPU_UTILIZATION", "MLYARD_IDLE_AFTER", "MLYARD_INTERACTIVE_IDLE_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLYARD_HOME", str(tmp_path))
    return monkeypatch


@pytest.mark.parametrize(("variables", "expected"), [
    ({}, (10.0, 1800.0, 3600.0)),
    ({"MLYARD_IDLE_GPU_UTILIZATION": "25%", "MLYARD_IDLE_AFTER": "0", "MLYARD_INTERACTIVE_IDLE_TIMEOUT": "0s"},
     (25.0, 0.0, 0.0)),
    ({"MLYARD_IDLE_GPU_UTILIZATION": "2.5", "MLYARD_IDLE_AFTER": "10m", "MLYARD_INTERACTIVE_IDLE_TIMEOUT": "2h"},
     (2.5, 600.0, 7200.0)),
])
def test_the_idle_settings_come_from_the_environment(environment, variables: dict[str, str], expected) -> None:
    for name, value in variables.items():
        environment.setenv(name, value)
    settings = ServerSettings.from_environment()
    assert (settings.idle_gpu_utilization, settings.idle_after_seconds,
            settings.interactive_idle_timeout_seconds) == expected


@pytest.mark.parametrize(("variable", "value"), [
    ("MLYARD_IDLE_GPU_UTILIZATION", "low"), ("MLYARD_IDLE_GPU_UTILIZATION", "120"),
    ("MLYARD_IDLE_GPU_UTILIZATION", "-1"), ("MLYARD_IDLE_GPU_UTILIZATION", "nan"),
    ("MLYARD_IDLE_AFTER", "a while"), ("MLYARD_INTERACTIVE_IDLE_TIMEOUT", "-5m"),
])
def test_a_bad_idle_setting_is_refused_naming_the_variable(environment, variable: str, value: str) -> None:
    environment.setenv(variable, value)
    with pytest.raises(MlyardError, match=variable):
        ServerSettings.from_environment()


def test_the_samples_of_a_live_check_are_read_up_to_now(tmp_path: Path, database: Database) -> None:
    now = time.time()
    add_job(database, 1, running_since=now - 120)
    add_job_samples(database, 1, now - 70, now, [0.0])
    assert idleness.check(database, settings(tmp_path)).idle == [1]


def test_the_idle_columns_come_with_migration_0006_and_go_with_its_downgrade(database_url: str) -> None:
    Database.open(database_url).close()
    engine = make_engine(database_url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    try:
        assert {"idle_since", "idle_reason"} <= {column["name"] for column in inspect(engine).get_columns("jobs")}
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0005")
        assert not {"idle_since", "idle_reason"} & {column["name"] for column in inspect(engine).get_columns("jobs")}
    finally:
        engine.dispose()
