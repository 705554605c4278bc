"""Scheduling rounds that cost what changed: the waiting jobs kept in memory between passes,
with a real database and a fake at the backend boundary."""

from __future__ import annotations

import gc
import random
import time
from pathlib import Path

import pytest
from controller_support import FakeBackend
from sqlalchemy import event, func, select
from sqlalchemy.orm import selectinload

from mlyard.paths import Paths
from mlyard.scheduler import ClusterSnapshot, Decisions, decide
from mlyard.server import auth
from mlyard.server.control.attempts import schedulable
from mlyard.server.control.controller import Controller
from mlyard.server.control.scheduler_input import pending_job
from mlyard.server.services import jobs
from mlyard.server.services.nodes import record_nodes
from mlyard.server.settings import ServerSettings
from mlyard.server.store.db import READ_ONLY, Database
from mlyard.server.store.rows import JobRow
from mlyard.spec import JobSpec, JobStatus
from mlyard.storage import BlobStore

ADMIN = auth.Principal(name="admin", user_id=None, is_admin=True)


def make_world(tmp_path: Path, database_url: str, cpus: int = 2, **settings_fields) -> tuple[Database, FakeBackend,
                                                                                             Controller]:
    # No periodic recheck within a test unless asked: every round here comes from a change.
    settings = ServerSettings(paths=Paths(tmp_path), database_url=database_url,
                              **{"idle_tick_seconds": 3600, "pass_gap_seconds": 0, **settings_fields})
    database = Database.open(settings.effective_database_url)
    backend = FakeBackend(cpus=cpus)
    record_nodes(database, backend.name, backend.nodes())
    return database, backend, Controller(database=database, backend=backend, settings=settings,
                                         blobs=BlobStore(tmp_path / "b"))


def submit(database: Database, **fields) -> int:
    spec = JobSpec.model_validate({"name": "job", "command": ["train"], "roles": [{"replicas": 2}], **fields})
    return jobs.submit(database, ADMIN, spec, wake=lambda: None).id


def status(database: Database, job_id: int) -> JobStatus:
    with database.reading() as session:
        return JobStatus(session.get(JobRow, job_id).status)


class Counted:
    """The real policy, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, snapshot: ClusterSnapshot, now: float) -> Decisions:
        self.calls += 1
        return decide(snapshot, now)


def settle(controller: Controller) -> None:
    """A pass, and another once a round that waits out its gap after the last is due."""
    controller.reconcile_once()
    if controller.rounds.come_back_at is not None:
        time.sleep(max(0.0, controller.rounds.come_back_at - time.monotonic()))
        controller.reconcile_once()


def count_write_transactions(database: Database) -> list[int]:
    writes = [0]

    def begun(connection) -> None:
        if not connection.get_execution_options().get(READ_ONLY):
            writes[0] += 1
    event.listen(database.engine, "begin", begun)
    return writes


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_ten_thousand_waiting_jobs_cost_an_idle_pass_no_scheduling_work(tmp_path: Path, database_url: str) -> None:
    database, backend, controller = make_world(tmp_path, database_url)
    counted = controller.decide = Counted()
    blocker = submit(database)  # both cores, so that nothing else can start
    controller.reconcile_once()
    controller.reconcile_once()
    assert status(database, blocker) is JobStatus.RUNNING
    template = JobSpec.model_validate({"name": "waits", "command": ["train"], "roles": [{"replicas": 1}]})
    now = time.time()
    with database.transaction() as session:
        session.add_all(JobRow(name=f"waits-{n}", project="default", queue="default", priority=n % 3,
                               spec=template.model_dump(mode="json"), status=JobStatus.QUEUED.value,
                               attempt_count=0, submitted_at=now + n * 1e-4, updated_at=now) for n in range(10_000))
    controller.reconcile_once()
    queued = controller.rounds.queued
    assert counted.calls == 3 and len(queued) == 10_000 and queued.rows_read >= 10_000
    assert queued.specs_parsed <= 2, "one parse per distinct demand, not per job"
    # Loaded once and kept until they start: later collections no longer walk them (server/heap.py).
    first = queued.schedulable(time.time())[0].pending
    try:
        assert gc.get_freeze_count() > 0 and all(thing is not first for thing in gc.get_objects())
    finally:
        gc.unfreeze()
    with database.reading() as session:
        assert session.scalar(select(func.count()).where(JobRow.wait_reason.is_not(None))) == 10_000

    calls, rows, writes = counted.calls, queued.rows_read, count_write_transactions(database)
    for _ in range(5):
        controller.reconcile_once()
    assert (counted.calls, queued.rows_read) == (calls, rows), "an idle pass neither decides nor reads jobs"
    assert writes[0] <= 5, "only observing the running job writes, once a pass"

    newcomer = submit(database)
    settle(controller)
    assert (counted.calls, queued.rows_read) == (calls + 1, rows + 1)
    assert jobs.get_job(database, ADMIN, newcomer).wait_reason
    jobs.cancel(database, ADMIN, newcomer, wake=lambda: None)
    settle(controller)
    settle(controller)
    assert (counted.calls, queued.rows_read, len(queued)) == (calls + 2, rows + 2, 10_000)
    database.close()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("policy", "asked_again"), [("fifo", False), ("las", True)])
def test_only_a_policy_that_weighs_time_is_asked_again_while_nothing_changes(
        tmp_path: Path, database_url: str, policy: str, asked_again: bool) -> None:
    # LAS orders by attained service, which grows while jobs run; FIFO's order never changes.
    database, backend, controller = make_world(tmp_path, database_url, idle_tick_seconds=0.01,
                                               scheduler_policy=policy)
    counted = controller.decide = Counted()
    running = submit(database)  # both cores
    submit(database)  # waits behind it
    settle(controller)
    settle(controller)
    assert status(database, running) is JobStatus.RUNNING
    calls = counted.calls
    for _ in range(4):
        time.sleep(0.1)  # past the recheck interval: the idle tick, or 50 rounds' time
        controller.reconcile_once()
    assert (counted.calls > calls) is asked_again
    database.close()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_start_that_failed_is_decided_again_at_the_next_pass(tmp_path: Path, database_url: str) -> None:
    database, backend, controller = make_world(tmp_path, database_url, scheduler_policy="fifo")
    job = submit(database)
    reserve_ports, failures = backend.reserve_ports, []

    def failing(node: str, count: int) -> list[int]:
        failures.append(node)
        raise RuntimeError("the node did not answer")
    backend.reserve_ports = failing
    with pytest.raises(RuntimeError):
        controller.reconcile_once()
    assert failures and status(database, job) is JobStatus.QUEUED
    backend.reserve_ports = reserve_ports
    settle(controller)  # nothing changed since the round, yet it is decided again
    assert status(database, job) is not JobStatus.QUEUED
    database.close()


def test_an_idle_server_with_nothing_running_opens_no_write_transaction(tmp_path: Path, database_url: str) -> None:
    database, backend, controller = make_world(tmp_path, database_url)
    counted = controller.decide = Counted()
    waiting = submit(database, roles=[{"replicas": 1, "resources": {"cpu": 2}}], placement={"same_node": True})
    backend.cpus = 1
    record_nodes(database, backend.name, backend.nodes())  # the node shrank under it: it waits
    controller.reconcile_once()
    assert status(database, waiting) is JobStatus.QUEUED and counted.calls == 1
    writes = count_write_transactions(database)
    for _ in range(3):
        controller.reconcile_once()
    assert writes[0] == 0 and counted.calls == 1
    backend.cpus = 2
    record_nodes(database, backend.name, backend.nodes())
    settle(controller)
    assert counted.calls == 2 and status(database, waiting) is JobStatus.STARTING, "new capacity is a change"
    database.close()


def fresh_pending(database: Database, now: float) -> tuple:
    """The waiting jobs as a round built them before they were kept in memory: from the rows."""
    with database.reading() as session:
        rows = session.scalars(select(JobRow).where(schedulable(now)).options(selectinload(JobRow.owner))
                               .order_by(JobRow.submitted_at, JobRow.id)).all()
        return tuple(pending_job(row, JobSpec.model_validate(row.spec)) for row in rows)


def test_rounds_see_the_same_waiting_jobs_as_the_rows_say(tmp_path: Path, database_url: str) -> None:
    """Random submissions, cancellations, exits, failures with restarts and preemptions: every
    round's waiting jobs equal those read from the rows at that moment, so decisions do too."""
    database, backend, controller = make_world(tmp_path, database_url, cpus=4)
    compared = []

    def checked(snapshot: ClusterSnapshot, now: float) -> Decisions:
        assert snapshot.pending == fresh_pending(database, now)
        compared.append(len(snapshot.pending))
        return decide(snapshot, now)
    controller.decide = checked
    controller.rounds.every_pass = True
    rng = random.Random(19)
    for _ in range(60):
        action = rng.random()
        if action < 0.45:
            submit(database, roles=[{"replicas": rng.choice([1, 2]), "resources": {"cpu": rng.choice([0.5, 1, 2])}}],
                   priority=rng.choice([0, 0, 5]),
                   restart_policy={"max_restarts": 1, "backoff_seconds": 0} if rng.random() < 0.5 else {})
        elif action < 0.6:
            with database.reading() as session:
                unfinished = session.scalars(select(JobRow.id).where(JobRow.status.in_(
                    ["QUEUED", "RUNNING", "RESTARTING", "STARTING"]))).all()
            if unfinished:
                jobs.cancel(database, ADMIN, rng.choice(unfinished), wake=lambda: None)
        elif backend.launches:
            launch = rng.choice(backend.launches)
            backend.exit(launch, rng.randrange(len(launch.replicas)), rng.choice([0, 1, None]))
        controller.reconcile_once()
    assert len(compared) > 40 and max(compared) > 3, f"the rounds had waiting jobs to compare: {compared}"
    database.close()


def test_passes_keep_the_gap_after_the_last_one(tmp_path: Path, database_url: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Woken by every submission of a stream, a pass waits out `pass_gap_seconds` after the last
    one ended (or as long as the last one took, when that is longer); the first waits for nothing."""
    database, _backend, controller = make_world(tmp_path, database_url)
    controller.settings = ServerSettings(paths=Paths(tmp_path), database_url=database_url, idle_tick_seconds=3600,
                                         pass_gap_seconds=30)
    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)
    for _ in range(3):
        submit(database)
        controller.reconcile_once()
    assert waits[0] == 0.0 and all(29 < wait <= 30 for wait in waits[1:]), waits
    database.close()
