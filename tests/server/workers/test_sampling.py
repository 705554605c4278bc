"""The leader's sampling thread against a real database and real processes: it measures the
replicas of holding attempts on its node, by their recorded pid and start time, and nothing
else; it runs only where the backend's node is this machine, and stops with its controller."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import favour, wait_until

from mlyard.backends.local.processes import LocalBackend
from mlyard.paths import Paths
from mlyard.errors import MlyardError
from mlyard.server.auth import Principal
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobRow, ReplicaRow
from mlyard.server.workers.sampling import NodeMonitor
from mlyard.server.services import resources
from mlyard.server.services.nodes import list_nodes, record_nodes
from mlyard.server.settings import ServerSettings

ADMIN = Principal(name="admin", user_id=None, is_admin=True)
NODE = "node-a"


@pytest.fixture
def processes() -> Iterator[dict[str, subprocess.Popen]]:
    started = {name: subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
               for name, code in (("busy", "while True: pass"), ("idle", "import time; time.sleep(600)"))}
    favour(started["busy"].pid)
    yield started
    for process in started.values():
        process.kill()
        process.wait()


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    opened = Database.open(database_url)
    yield opened
    opened.close()


def add_job(database: Database, job_id: int, *, pid: int, started_at: float | None, node: str = NODE,
            finished: bool = False) -> None:
    now = time.time()
    with database.transaction() as session:
        session.add(JobRow(id=job_id, name=f"job-{job_id}", project="default", queue="default", priority=0, spec={},
                           status="RUNNING", attempt_count=1, submitted_at=now, updated_at=now))
        attempt = AttemptRow(job_id=job_id, number=1, created_at=now, launched_at=now,
                             finished_at=now if finished else None)
        session.add(attempt)
        session.flush()
        session.add(ReplicaRow(attempt_id=attempt.id, job_id=job_id, role="worker", index=0, rank=0, node=node,
                               cpu_ids=[0], gpu_ids=[], memory_bytes=1 << 30, directory="/nonexistent",
                               state="running", pid=pid, pid_started_at=started_at))


def test_it_measures_the_replicas_of_holding_attempts_on_its_node(tmp_path: Path, database: Database,
                                                                   processes) -> None:
    busy, idle = processes["busy"].pid, processes["idle"].pid
    created = {pid: psutil.Process(pid).create_time() for pid in (busy, idle)}
    add_job(database, 1, pid=busy, started_at=created[busy])
    add_job(database, 2, pid=idle, started_at=created[idle])
    add_job(database, 3, pid=busy, started_at=created[busy], node="elsewhere")  # not this node's process
    add_job(database, 4, pid=busy, started_at=created[busy], finished=True)  # its attempt ended
    add_job(database, 5, pid=idle, started_at=created[idle] - 100)  # the pid now belongs to another process
    settings = ServerSettings(paths=Paths(tmp_path), sample_interval_seconds=1.0)
    monitor = NodeMonitor(database, NODE, settings)  # passes by hand: no thread
    try:
        monitor.sample_once()
        time.sleep(2.0)
        sample = monitor.sample_once()
    finally:
        monitor.stop()
    assert {key[0] for key in sample.trees} == {1, 2}
    now = time.time()
    busy_figures = resources.job_resources(database, ADMIN, 1, since=now - 60)
    idle_figures = resources.job_resources(database, ADMIN, 2, since=now - 60)
    assert busy_figures.points[-1].cpu_percent >= 80, busy_figures
    assert idle_figures.points[-1].cpu_percent <= 10, idle_figures
    assert [(replica.replica, replica.rank, replica.node) for replica in busy_figures.replicas] == [
        ("worker-0", 0, NODE)]
    assert busy_figures.replicas[0].memory_bytes > 1 << 20
    for job_id in (3, 4, 5):
        assert resources.job_resources(database, ADMIN, job_id, since=0).points == []
    assert resources.node_samples(database, ADMIN, NODE, since=now - 60).samples


def test_the_monitor_of_the_local_node_runs_until_stopped_and_fills_the_node_listing(
        tmp_path: Path, database: Database) -> None:
    backend = LocalBackend(cpus=1)
    record_nodes(database, backend.name, backend.nodes())
    settings = ServerSettings(paths=Paths(tmp_path), sample_interval_seconds=0.2)
    monitor = NodeMonitor.start_for(database, backend, settings)
    assert monitor is not None
    try:
        node = wait_until(lambda: next((node for node in list_nodes(database, ADMIN) if node.usage), None), 30,
                          "a node sample")
    finally:
        monitor.stop()
    assert not monitor.alive
    assert node.name == backend.node_name
    assert node.usage.memory_total_bytes == psutil.virtual_memory().total
    assert node.inventory is not None and node.inventory.cpu_count == psutil.cpu_count()
    assert NodeMonitor.start_for(database, backend, ServerSettings(paths=Paths(tmp_path),
                                                                   sample_interval_seconds=0)) is None


@pytest.mark.parametrize(("variables", "expected"), [
    ({}, (5.0, 86400.0, 30 * 86400.0)),
    ({"MLYARD_SAMPLE_INTERVAL": "0"}, (0.0, 86400.0, 30 * 86400.0)),
    ({"MLYARD_SAMPLE_INTERVAL": "2s", "MLYARD_SAMPLE_RETENTION": "12h", "MLYARD_SAMPLE_RETENTION_1M": "7d"},
     (2.0, 12 * 3600.0, 7 * 86400.0)),
])
def test_the_interval_and_the_retention_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                   variables: dict[str, str], expected) -> None:
    monkeypatch.setenv("MLYARD_HOME", str(tmp_path))
    for name in ("MLYARD_SAMPLE_INTERVAL", "MLYARD_SAMPLE_RETENTION", "MLYARD_SAMPLE_RETENTION_1M"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    settings = ServerSettings.from_environment()
    assert (settings.sample_interval_seconds, settings.raw_sample_retention_seconds,
            settings.minute_sample_retention_seconds) == expected


@pytest.mark.parametrize("variable", ["MLYARD_SAMPLE_INTERVAL", "MLYARD_SAMPLE_RETENTION", "MLYARD_SAMPLE_RETENTION_1M"])
def test_a_bad_interval_or_retention_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                    variable: str) -> None:
    monkeypatch.setenv("MLYARD_HOME", str(tmp_path))
    monkeypatch.setenv(variable, "often")
    with pytest.raises(MlyardError, match=variable):
        ServerSettings.from_environment()
