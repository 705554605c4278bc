"""`resources.running_jobs` (`GET /resources/jobs`, what `mlyard top` lists): every job with a
holding attempt, with the latest recent figures of each replica of that attempt added up."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mlyard.api.resources import ReplicaUsage
from mlyard.errors import Forbidden
from mlyard.server.auth import Principal
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobRow, ReplicaRow, UserRow
from mlyard.server.services import resources

ADMIN = Principal(name="admin", user_id=None, is_admin=True)
GIB = 1 << 30


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    opened = Database.open(database_url)
    yield opened
    opened.close()


def add_job(database: Database, job_id: int, *, attempts: int = 1, replicas: int = 1, finished: bool = False,
            owner: int | None = None, gpus: int = 0) -> None:
    now = time.time()
    with database.transaction() as session:
        session.add(JobRow(id=job_id, name=f"job-{job_id}", project="vision", queue="research", priority=0, spec={},
                           status="RUNNING", attempt_count=attempts, submitted_at=now, updated_at=now,
                           owner_id=owner))
        for number in range(1, attempts + 1):
            current = number == attempts
            attempt = AttemptRow(job_id=job_id, number=number, created_at=now, launched_at=now - 100,
                                 finished_at=now if finished or not current else None)
            session.add(attempt)
            session.flush()
            for rank in range(replicas):
                session.add(ReplicaRow(
                    attempt_id=attempt.id, job_id=job_id, role="worker", index=rank, rank=rank,
                    node=f"node-{rank % 2}", cpu_ids=[2 * rank, 2 * rank + 1], gpu_ids=list(range(gpus)),
                    memory_bytes=GIB, directory="/nonexistent", state="running", pid=None))


def figures(job_id: int, attempt: int, rank: int, at: float, cpu: float) -> ReplicaUsage:
    return ReplicaUsage(job_id=job_id, attempt=attempt, replica=f"worker-{rank}", rank=rank, node=f"node-{rank % 2}",
                        at=at, cpu_percent=cpu, memory_bytes=GIB, gpu_memory_bytes=2 * GIB, processes=2)


def test_each_holding_job_with_its_replicas_latest_figures(database: Database) -> None:
    now = time.time()
    with database.transaction() as session:
        session.add(UserRow(id=1, name="ada", is_admin=False, created_at=now))
    add_job(database, 1, attempts=2, replicas=2, owner=1, gpus=1)  # measured, after a restart
    add_job(database, 2)  # holding, not measured yet
    add_job(database, 3, finished=True)  # its attempt ended: holds nothing
    add_job(database, 4)  # measured, but not for over a minute
    resources.record(database, "node-0", [], [
        figures(1, 1, 0, now - 30, 400.0),  # the earlier attempt's
        figures(1, 2, 0, now - 8, 10.0), figures(1, 2, 0, now - 3, 90.0),
        figures(1, 2, 1, now - 4, 60.0),  # a replica measured by another pass
        figures(3, 1, 0, now - 3, 100.0),
        figures(4, 1, 0, now - 120, 100.0),
    ])
    found = {job.job_id: job for job in resources.running_jobs(database, ADMIN, now=now)}
    assert sorted(found) == [1, 2, 4]

    busy = found[1]
    assert (busy.name, busy.user, busy.project, busy.queue, busy.status.value) == (
        "job-1", "ada", "vision", "research", "RUNNING")
    assert (busy.replicas, busy.nodes, busy.cpus, busy.gpus, busy.measured) == (2, ["node-0", "node-1"], 4, 2, 2)
    assert busy.launched_at == pytest.approx(now - 100, abs=5)
    assert busy.cpu_percent == pytest.approx(150.0) and busy.at == pytest.approx(now - 3)
    assert (busy.memory_bytes, busy.gpu_memory_bytes) == (2 * GIB, 4 * GIB)

    for quiet in (found[2], found[4]):
        assert quiet.user is None and quiet.measured == 0
        assert (quiet.at, quiet.cpu_percent, quiet.memory_bytes, quiet.gpu_memory_bytes) == (None, None, None, None)


def test_a_job_token_lists_no_running_jobs(database: Database) -> None:
    add_job(database, 1)
    add_job(database, 2)
    with pytest.raises(Forbidden):
        resources.running_jobs(database, Principal(name="job-2", user_id=None, job_id=2))
    assert [job.job_id for job in resources.running_jobs(database, ADMIN)] == [1, 2]


def test_nothing_running_is_an_empty_list(database: Database) -> None:
    assert resources.running_jobs(database, ADMIN) == []
