"""The controller's decisions, with a real database (SQLite and PostgreSQL) and a fake at the
backend boundary."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for
from controller_support import FakeBackend
from sqlalchemy import select

from mlyard.backends.base import AttemptLaunch, ReplicaObservation
from mlyard.paths import Paths
from mlyard.errors import Conflict, InvalidRequest, InvalidTransition
from mlyard.scheduler import (
    Amounts,
    ClusterSnapshot,
    Decisions,
    Preempt,
    ReplicaPlacement,
    Resize,
    StartJob,
)
from mlyard.server import auth
from mlyard.server.control.controller import Controller
from mlyard.server.store.db import Database
from mlyard.server.store.rows import (
    ApiTokenRow,
    AttemptRow,
    EnvironmentRow,
    JobEventRow,
    JobRow,
    NodeRow,
    ProjectRow,
    QueueRow,
    UserRow,
)
from mlyard.server.services import jobs, logs
from mlyard.server.services.nodes import record_nodes
from mlyard.server.settings import ServerSettings
from mlyard.spec import JobSpec, JobStatus
from mlyard.storage import BlobStore

ADMIN = auth.Principal(name="admin", user_id=None, is_admin=True)


@pytest.fixture
def world(tmp_path: Path, database_url: str):
    settings = ServerSettings(paths=Paths(tmp_path), database_url=database_url, stop_grace_seconds=60, pass_gap_seconds=0)
    database = Database.open(settings.effective_database_url)
    backend = FakeBackend()
    record_nodes(database, backend.name, backend.nodes())
    controller = Controller(database=database, backend=backend, settings=settings, blobs=BlobStore(tmp_path / "b"))
    yield database, backend, controller
    database.close()


def submit(database: Database, replicas: int = 2, **fields: Any) -> int:
    spec = JobSpec(name="job", command=["train"], roles=[{"replicas": replicas}], framework="pytorch", **fields)
    return jobs.submit(database, ADMIN, spec, wake=lambda: None).id


def status(database: Database, job_id: int) -> JobStatus:
    with database.transaction() as session:
        return JobStatus(session.get(JobRow, job_id).status)


def test_a_job_is_launched_whole_with_rendezvous_settings(world) -> None:
    database, backend, controller = world
    job_id = submit(database)
    controller.reconcile_once()
    assert status(database, job_id) is JobStatus.STARTING
    (launch,) = backend.launches
    assert [r.rank for r in launch.replicas] == [0, 1]
    assert sorted(cpu for r in launch.replicas for cpu in r.cpu_ids) == [0, 1]
    environments = [r.env for r in launch.replicas]
    assert {e["RANK"] for e in environments} == {"0", "1"}
    assert {(e["WORLD_SIZE"], e["MASTER_ADDR"], e["MASTER_PORT"]) for e in environments} == {("2", "10.0.0.1", "20000")}
    controller.reconcile_once()
    assert status(database, job_id) is JobStatus.RUNNING


def test_a_job_that_does_not_fit_waits_and_never_half_starts(world) -> None:
    database, backend, controller = world
    first, second = submit(database), submit(database)
    controller.reconcile_once()
    controller.reconcile_once()
    assert len(backend.launches) == 1 and status(database, second) is JobStatus.QUEUED
    backend.exit(backend.launches[0], 0, 0)
    controller.reconcile_once()
    assert len(backend.launches) == 1, "one replica still holds its core"
    backend.exit(backend.launches[0], 1, 0)
    controller.reconcile_once()
    assert status(database, first) is JobStatus.SUCCEEDED
    assert len(backend.launches) == 2 and len(backend.launches[1].replicas) == 2
    assert status(database, second) is JobStatus.STARTING


def test_a_failing_replica_stops_the_others_and_fails_the_job(world) -> None:
    database, backend, controller = world
    job_id = submit(database)
    controller.reconcile_once()
    controller.reconcile_once()
    launch = backend.launches[0]
    backend.exit(launch, 1, 3)
    controller.reconcile_once()
    assert backend.stops[-1] == ([launch.replicas[0].replica_id], False)
    assert status(database, job_id) is JobStatus.RUNNING, "FAILED only once nothing is left"
    backend.exit(launch, 0, 143)
    controller.reconcile_once()
    with database.transaction() as session:
        job = session.get(JobRow, job_id)
        assert (job.status, job.exit_code) == ("FAILED", 3)
        assert "worker-1 (rank 1) exited with code 3" in job.message
        tokens = session.scalars(select(ApiTokenRow).where(ApiTokenRow.job_id == job_id)).all()
        assert tokens and all(token.revoked_at is not None for token in tokens)


def test_what_the_backend_says_about_a_replica_reaches_events_the_failure_and_the_api(world) -> None:
    database, backend, controller = world
    job_id = submit(database, replicas=1)
    controller.reconcile_once()
    (launch,) = backend.launches
    replica_id = launch.replicas[0].replica_id
    backend.states[replica_id] = ReplicaObservation(state="pending", reason="unschedulable: 0/3 nodes have a GPU")
    controller.reconcile_once()
    controller.reconcile_once()  # said once, not on every pass
    backend.states[replica_id] = ReplicaObservation(state="exited", exit_code=137,
                                                    reason="out of memory: over its 1.0 GiB limit")
    controller.reconcile_once()
    with database.transaction() as session:
        messages = [event.message for event in session.scalars(
            select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id))]
        job = session.get(JobRow, job_id)
        assert job.status == "FAILED"
        assert job.message == ("replica worker-0 (rank 0) exited with code 137 "
                               "(out of memory: over its 1.0 GiB limit)")
    assert messages.count("replica worker-0: unschedulable: 0/3 nodes have a GPU") == 1
    (replica,) = jobs.get_job(database, ADMIN, job_id).attempts[-1].replicas
    assert replica.reason == "out of memory: over its 1.0 GiB limit"


def test_a_lost_replica_with_a_reason_is_reported_as_lost_for_it(world) -> None:
    database, backend, controller = world
    job_id = submit(database, replicas=1)
    controller.reconcile_once()
    (launch,) = backend.launches
    backend.states[launch.replicas[0].replica_id] = ReplicaObservation(state="lost", reason="node n1 is gone")
    controller.reconcile_once()
    controller.reconcile_once()
    with database.transaction() as session:
        assert session.get(JobRow, job_id).message == "replica worker-0 (rank 0) was lost: node n1 is gone"


def test_nodes_of_a_backend_whose_nodes_change_are_recorded_again(world) -> None:
    database, backend, controller = world
    backend.node_refresh_seconds = 0.0
    backend.cpus = 6
    controller.reconcile_once()
    with database.transaction() as session:
        (node,) = session.scalars(select(NodeRow)).all()
        assert len(node.cpu_ids) == 6


def ready_environment(database: Database, name: str, kind: str, built: str) -> None:
    with database.transaction() as session:
        session.add(EnvironmentRow(name=name, base="python:3.11-slim", apt=[], kind=kind, content_hash="h" * 64,
                                   status="ready", image=built, cached=False, created_at=1.0))


def test_a_virtualenv_environment_comes_first_on_path_and_an_image_one_becomes_the_image(world) -> None:
    database, backend, controller = world
    ready_environment(database, "venv-env", "virtualenv", "/envs/abc")
    ready_environment(database, "image-env", "image", "localhost/mlyard-env:abc")
    submit(database, replicas=1, environment="venv-env")
    controller.reconcile_once()
    (replica,) = backend.launches[-1].replicas
    assert replica.env["PATH"].startswith("/envs/abc/bin:") and replica.env["VIRTUAL_ENV"] == "/envs/abc"
    assert replica.image is None
    backend.exit(backend.launches[-1], 0, 0)
    controller.reconcile_once()
    submit(database, replicas=1, environment="image-env", env={"PATH": "/mine"})
    controller.reconcile_once()
    (replica,) = backend.launches[-1].replicas
    assert replica.image == "localhost/mlyard-env:abc" and replica.env["PATH"] == "/mine"


def test_a_job_whose_environment_stopped_being_ready_fails_without_starting(world) -> None:
    database, backend, controller = world
    ready_environment(database, "gone-env", "virtualenv", "/envs/gone")
    job_id = submit(database, replicas=1, environment="gone-env")
    with database.transaction() as session:
        session.get(EnvironmentRow, "gone-env").status = "failed"
    controller.reconcile_once()
    assert backend.launches == []
    with database.transaction() as session:
        job = session.get(JobRow, job_id)
        assert job.status == "FAILED" and job.message == "environment 'gone-env' is no longer ready to run it"


def test_sigterm_goes_out_once_per_stop(world) -> None:
    database, backend, controller = world
    job_id = submit(database, replicas=1)
    controller.reconcile_once()
    jobs.cancel(database, ADMIN, job_id, wake=lambda: None)
    for _ in range(5):
        controller.reconcile_once()
    assert [force for _, force in backend.stops] == [False], "a checkpointing handler is not interrupted"


def test_a_stop_escalates_to_sigkill_after_the_grace_period(world) -> None:
    database, backend, controller = world
    controller.settings = ServerSettings(paths=controller.settings.paths, stop_grace_seconds=0, pass_gap_seconds=0)
    job_id = submit(database, replicas=1)
    controller.reconcile_once()
    jobs.cancel(database, ADMIN, job_id, wake=lambda: None)
    controller.reconcile_once()
    controller.reconcile_once()
    assert backend.stops[-1][1] is True
    backend.exit(backend.launches[0], 0, None)
    controller.reconcile_once()
    assert status(database, job_id) is JobStatus.CANCELLED


def test_cancelling_a_queued_job_needs_no_controller(world) -> None:
    database, backend, controller = world
    blocker, queued = submit(database), submit(database)
    controller.reconcile_once()
    info = jobs.cancel(database, ADMIN, queued, wake=lambda: None)
    assert info.status is JobStatus.CANCELLED
    controller.reconcile_once()
    assert len(backend.launches) == 1 and backend.launches[0].job_id == blocker


def test_a_failed_launch_fails_the_job_with_the_reason(world) -> None:
    database, backend, controller = world
    backend.fail_launch = True
    job_id = submit(database)
    controller.reconcile_once()
    with database.transaction() as session:
        job = session.get(JobRow, job_id)
        assert job.status == "FAILED" and "could not start: no such image" in job.message
        attempt = session.scalars(select(AttemptRow)).one()
        assert attempt.finished_at is not None
        assert {replica.state for replica in attempt.replicas} == {"lost"}
    chunk = logs.read_log(database, ADMIN, job_id)
    assert chunk.complete, "following the log of a job that never ran ends"


def test_a_failed_launch_of_a_cancelled_job_ends_cancelled(world) -> None:
    database, backend, controller = world
    backend.fail_launch = True
    job_id = submit(database)
    original_launch = backend.launch

    def cancel_then_fail(launch):
        jobs.cancel(database, ADMIN, job_id, wake=lambda: None)
        return original_launch(launch)

    backend.launch = cancel_then_fail
    controller.reconcile_once()
    assert status(database, job_id) is JobStatus.CANCELLED


def test_max_runtime_fails_the_job(world) -> None:
    database, backend, controller = world
    job_id = submit(database, replicas=1, max_runtime=0.001)
    controller.reconcile_once()
    controller.reconcile_once()
    backend.exit(backend.launches[0], 0, 143)
    controller.reconcile_once()
    with database.transaction() as session:
        job = session.get(JobRow, job_id)
        assert job.status == "FAILED" and "max_runtime" in job.message


def test_an_attempt_left_unlaunched_by_a_stopped_server_fails_at_start(world) -> None:
    database, _backend, controller = world
    job_id = submit(database)
    with database.transaction() as session:
        job = session.get(JobRow, job_id)
        session.add(AttemptRow(job_id=job_id, number=1, created_at=1.0))
        jobs.switch_status(session, job, JobStatus.SCHEDULED)
    controller._settle_unlaunched_attempts()
    assert status(database, job_id) is JobStatus.FAILED


def test_switch_status_checks_the_transition_and_records_an_event(world) -> None:
    database, _backend, _controller = world
    job_id = submit(database)
    with database.transaction() as session:
        job = session.get(JobRow, job_id)
        with pytest.raises(InvalidTransition):
            jobs.switch_status(session, job, JobStatus.SUCCEEDED)
        jobs.switch_status(session, job, JobStatus.CANCELLED, message="because")
    with database.transaction() as session:
        events = session.scalars(select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id)).all()
        assert [(e.from_status, e.to_status) for e in events] == [(None, "QUEUED"), ("QUEUED", "CANCELLED")]
        assert session.get(JobRow, job_id).finished_at is not None


def test_request_handlers_and_the_controller_write_concurrently_without_errors(world) -> None:
    import threading

    database, backend, controller = world
    failures: list[BaseException] = []
    stop = threading.Event()

    def controller_loop() -> None:
        while not stop.is_set():
            try:
                controller.reconcile_once()
                for launch in list(backend.launches):
                    for rank in range(len(launch.replicas)):
                        backend.exit(launch, rank, 0)
            except BaseException as error:  # noqa: BLE001 - collected for the assertion
                failures.append(error)

    def client(index: int) -> None:
        try:
            for _ in range(10):
                job_id = submit(database, replicas=1)
                if index % 2:
                    try:
                        jobs.cancel(database, ADMIN, job_id, wake=lambda: None)
                    except Conflict:  # it may have run and ended already: a fair answer
                        pass
        except BaseException as error:  # noqa: BLE001
            failures.append(error)

    loop = threading.Thread(target=controller_loop)
    loop.start()
    clients = [threading.Thread(target=client, args=(index,)) for index in range(6)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()

    def all_ended() -> bool:
        with database.transaction() as session:
            return all(JobStatus(job.status).is_terminal for job in session.scalars(select(JobRow)))

    ended = wait_for(all_ended, timeout=30)
    stop.set()
    loop.join()
    assert failures == []
    assert ended, "every job reached a terminal status"


# ----------------------------------------------------------------- scheduler decisions
class Script:
    """Stands in for the scheduler: plays the rounds a test queued, then the real policy."""

    def __init__(self, controller: Controller, *rounds: Decisions):
        self.real = controller.decide
        self.rounds = list(rounds)
        self.snapshots: list[ClusterSnapshot] = []
        controller.decide = self
        controller.rounds.every_pass = True

    def __call__(self, snapshot: ClusterSnapshot, now: float) -> Decisions:
        self.snapshots.append(snapshot)
        return self.rounds.pop(0) if self.rounds else self.real(snapshot, now)


def attempt_row(database: Database, job_id: int, number: int = 1) -> AttemptRow:
    with database.transaction() as session:
        return session.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == number)).one()


def events(database: Database, job_id: int) -> list[tuple[str, str | None]]:
    with database.transaction() as session:
        rows = session.scalars(select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id))
        return [(row.to_status, row.message) for row in rows]


def requeue_events(database: Database, job_id: int) -> list[tuple[str, str | None]]:
    """The PREEMPTED event and the one after it (the real policy may start the job again at once)."""
    history = events(database, job_id)
    at = [to for to, _ in history].index("PREEMPTED")
    return history[at:at + 2]


def job_row(database: Database, job_id: int) -> JobRow:
    with database.transaction() as session:
        return session.get(JobRow, job_id)


def exit_all(backend: FakeBackend, launch: AttemptLaunch, code: int | None = 143) -> None:
    for rank in range(len(launch.replicas)):
        backend.exit(launch, rank, code)


def running_low_job(database: Database, backend: FakeBackend, controller: Controller, **fields: Any) -> int:
    low = submit(database, **fields)
    controller.reconcile_once()
    controller.reconcile_once()
    assert status(database, low) is JobStatus.RUNNING
    return low


def test_a_preempted_job_gets_its_own_grace_then_is_queued_again_and_resumes(world) -> None:
    database, backend, controller = world
    low = running_low_job(database, backend, controller, preemption_grace="30s")
    high = submit(database)
    Script(controller, Decisions(preemptions=(Preempt(low, "preempted by a job of higher priority", for_job=high),)))
    controller.reconcile_once()
    attempt = attempt_row(database, low)
    assert attempt.stop_outcome == "PREEMPTED" and f"job {high}" in attempt.stop_reason
    assert attempt.stop_deadline - attempt.stop_requested_at == pytest.approx(30)

    for _ in range(3):
        controller.reconcile_once()
    first = backend.launches[0]
    assert backend.stops == [([r.replica_id for r in first.replicas], False)], "SIGTERM once, no SIGKILL yet"
    assert status(database, low) is JobStatus.RUNNING, "QUEUED only once nothing of it is left"

    exit_all(backend, first)
    controller.reconcile_once()
    job = job_row(database, low)
    assert job.preemption_count == 1 and job.queued_since is not None
    assert job.attained_time > 0 and job.attained_service == pytest.approx(2 * job.attained_time)
    assert requeue_events(database, low) == [
        ("PREEMPTED", attempt.stop_reason), ("QUEUED", "requeued; resumes from its checkpoint"),
    ]
    with database.transaction() as session:
        tokens = session.scalars(select(ApiTokenRow).where(ApiTokenRow.job_id == low)).all()
        assert tokens[0].revoked_at is not None, "the preempted attempt's token died with it"

    for _ in range(10):  # whatever runs now ends, until the low job runs its second attempt
        if len([launch for launch in backend.launches if launch.job_id == low]) == 2:
            break
        exit_all(backend, backend.launches[-1], 0)
        controller.reconcile_once()
    second = [launch for launch in backend.launches if launch.job_id == low][1]
    assert second.attempt == 2
    assert second.replicas[0].env["MLYARD_CHECKPOINT_DIR"] == first.replicas[0].env["MLYARD_CHECKPOINT_DIR"]
    info = jobs.get_job(database, ADMIN, low)
    assert info.preemption_count == 1 and info.attempts[0].stop_outcome is JobStatus.PREEMPTED
    # The scheduler sees the count, which the preemption budget is weighed against.
    script = Script(controller)
    controller.reconcile_once()
    [again] = [run for run in script.snapshots[-1].running if run.job_id == low]
    assert again.preemptions == 1


@pytest.mark.parametrize("signalled", [False, True], ids=["before-sigterm", "after-sigterm"])
def test_a_cancel_during_a_preemption_wins(world, signalled: bool) -> None:
    database, backend, controller = world
    low = running_low_job(database, backend, controller)
    Script(controller, Decisions(preemptions=(Preempt(low, "preempted"),)))
    controller.reconcile_once()
    if signalled:
        controller.reconcile_once()
    jobs.cancel(database, ADMIN, low, wake=lambda: None)
    controller.reconcile_once()
    exit_all(backend, backend.launches[0])
    controller.reconcile_once()
    assert status(database, low) is JobStatus.CANCELLED
    assert job_row(database, low).preemption_count == 0


def test_a_job_that_ends_on_its_own_before_the_preemption_signal_keeps_its_outcome(world) -> None:
    database, backend, controller = world
    low = running_low_job(database, backend, controller)
    Script(controller, Decisions(preemptions=(Preempt(low, "preempted"),)))
    controller.reconcile_once()
    exit_all(backend, backend.launches[0], 0)
    controller.reconcile_once()
    assert status(database, low) is JobStatus.SUCCEEDED
    assert backend.stops == []


def test_a_resize_restarts_the_job_through_the_queue(world) -> None:
    database, backend, controller = world
    elastic = running_low_job(database, backend, controller, elastic={"min_replicas": 1, "max_replicas": 2})
    (launch,) = backend.launches
    assert len(launch.replicas) == 2 and {r.env["WORLD_SIZE"] for r in launch.replicas} == {"2"}
    first = launch.replicas[0]
    keep = (ReplicaPlacement(role="worker", index=0, node=first.node, cpu_ids=first.cpu_ids, gpu_ids=(),
                             memory_bytes=first.memory_bytes),)
    Script(controller, Decisions(resizes=(Resize(elastic, keep, "shrinks to make room for job 9"),)),
           Decisions())
    controller.reconcile_once()
    controller.reconcile_once()
    exit_all(backend, launch)
    controller.reconcile_once()
    assert requeue_events(database, elastic) == [
        ("PREEMPTED", "resize to 1 replica: shrinks to make room for job 9"),
        ("QUEUED", "requeued; resumes from its checkpoint"),
    ]
    assert job_row(database, elastic).preemption_count == 0, "a resize is no preemption"
    controller.reconcile_once()
    assert backend.launches[-1].job_id == elastic and backend.launches[-1].attempt == 2


def test_wait_reasons_are_stored_shown_and_cleared_when_the_job_starts(world) -> None:
    database, backend, controller = world
    blocker = running_low_job(database, backend, controller)
    waiting = submit(database)
    Script(controller, Decisions(waiting={waiting: "needs 2 CPUs; 0 are free"}))
    controller.reconcile_once()
    assert jobs.get_job(database, ADMIN, waiting).wait_reason == "needs 2 CPUs; 0 are free"
    controller.reconcile_once()  # the real policy explains in its own words
    assert jobs.get_job(database, ADMIN, waiting).wait_reason, "the scheduler says why the job waits"
    exit_all(backend, backend.launches[0], 0)
    controller.reconcile_once()
    assert status(database, blocker) is JobStatus.SUCCEEDED
    assert status(database, waiting) is JobStatus.STARTING
    assert job_row(database, waiting).wait_reason is None


def test_a_start_reason_goes_into_the_scheduled_event(world) -> None:
    database, _backend, controller = world
    job_id = submit(database, replicas=1)
    placement = ReplicaPlacement(role="worker", index=0, node="n1", cpu_ids=(1,), gpu_ids=(), memory_bytes=1 << 30)
    Script(controller, Decisions(starts=(StartJob(job_id, (placement,), reason="backfilled: ends before job 4 starts"),)))
    controller.reconcile_once()
    scheduled = [message for to, message in events(database, job_id) if to == "SCHEDULED"]
    assert scheduled == ["backfilled: ends before job 4 starts; placed worker-0 on n1 cpus 1"]


def test_an_elastic_job_starts_with_what_fits_and_its_world_size_follows(world) -> None:
    database, backend, controller = world
    job_id = submit(database, replicas=1, elastic={"min_replicas": 1, "max_replicas": 4})
    controller.reconcile_once()
    (launch,) = backend.launches
    assert len(launch.replicas) == 2, "both cores of the node, not the 4 it would like"
    assert {r.env["WORLD_SIZE"] for r in launch.replicas} == {"2"}
    scheduled = [message for to, message in events(database, job_id) if to == "SCHEDULED"]
    assert "2 of 4 replicas placed" in scheduled[0]


def test_the_snapshot_carries_queues_owners_service_and_stops(world) -> None:
    database, _backend, controller = world
    with database.transaction() as session:
        alice = UserRow(name="alice", is_admin=False, created_at=1.0)
        session.add(alice)
        session.add(QueueRow(name="team", project="vision", quota_cpu=2, borrow_cpu=1, weight=2.0,
                             created_at=1.0, updated_at=1.0))
        session.add(ProjectRow(name="vision", created_at=1.0))
        session.flush()
        alice_id = alice.id
    principal = auth.Principal(name="alice", user_id=alice_id, roles={"vision": auth.Role.MEMBER})
    spec = JobSpec(name="el", command=["x"], queue="team", max_runtime="1h",
                   roles=[{"replicas": 1}], elastic={"min_replicas": 1, "max_replicas": 3})
    running = jobs.submit(database, principal, spec, wake=lambda: None).id
    script = Script(controller)
    controller.reconcile_once()
    queued = jobs.submit(database, principal, spec.model_copy(update={"elastic": None}), wake=lambda: None).id
    jobs.cancel(database, ADMIN, running, wake=lambda: None)
    controller.reconcile_once()
    snapshot = script.snapshots[-1]
    queues = {queue.name: queue for queue in snapshot.queues}
    assert queues["default"].quota is None and queues["default"].borrow_limit is None
    team = queues["team"]
    assert (team.project, team.weight) == ("vision", 2.0)
    assert team.quota == Amounts(gpu=0, cpu=2, memory=0)
    assert team.borrow_limit.cpu == 1 and team.borrow_limit.gpu == float("inf")
    (held,) = snapshot.running
    assert held.stopping and held.user == "alice" and held.max_runtime == 3600
    assert held.min_replicas == 1 and [r.index for r in held.grow_replicas] == [2]
    (pending,) = snapshot.pending
    assert (pending.job_id, pending.user, pending.queue, pending.min_replicas) == (queued, "alice", "team", None)


def test_submitting_to_a_queue_that_does_not_exist_names_the_field_and_the_queues(world) -> None:
    database, _backend, _controller = world
    with database.transaction() as session:
        session.add(QueueRow(name="team", project="default", weight=1.0, created_at=1.0, updated_at=1.0))
    with pytest.raises(InvalidRequest) as raised:
        submit(database, queue="nope")
    assert raised.value.field == "queue" and "default, team" in raised.value.message
    submit(database, queue="team")


def fail_rank(database: Database, backend: FakeBackend, controller: Controller, launch: AttemptLaunch,
              rank: int, code: int | None) -> None:
    """A replica fails; the others stop on SIGTERM; the controller sees everything gone."""
    backend.exit(launch, rank, code)
    controller.reconcile_once()
    for other in range(len(launch.replicas)):
        if other != rank:
            backend.exit(launch, other, 143)
    controller.reconcile_once()


def end_backoff(database: Database, job_id: int) -> None:
    with database.transaction() as session:
        session.get(JobRow, job_id).restart_at = 0.0


@pytest.mark.parametrize("code", [137, None], ids=["exit-137", "lost"])
def test_a_failed_attempt_restarts_the_whole_gang_after_its_backoff(world, code: int | None) -> None:
    database, backend, controller = world
    job_id = submit(database, restart_policy={"max_restarts": 2, "backoff_seconds": 30})
    controller.reconcile_once()
    controller.reconcile_once()
    first = backend.launches[0]
    assert first.replicas[0].env["MLYARD_RESTART_COUNT"] == "0"
    fail_rank(database, backend, controller, first, 1, code)
    job = job_row(database, job_id)
    assert job.status == "RESTARTING" and job.restart_count == 1
    assert job.restart_at == pytest.approx(job.updated_at + 30)
    assert "restart 1 of 2, after a backoff of 30s" in job.message
    controller.reconcile_once()
    assert len(backend.launches) == 1, "the backoff is waited out"
    with database.transaction() as session:
        session.get(JobRow, job_id).restart_at = time.time() + 0.3
    assert controller.reconcile_once() <= 0.3, "the loop wakes when the backoff ends, not on its idle tick"

    end_backoff(database, job_id)
    controller.reconcile_once()
    second = backend.launches[1]
    assert (second.job_id, second.attempt, len(second.replicas)) == (job_id, 2, 2)
    assert {r.env["MLYARD_RESTART_COUNT"] for r in second.replicas} == {"1"}
    assert second.replicas[0].env["MLYARD_CHECKPOINT_DIR"] == first.replicas[0].env["MLYARD_CHECKPOINT_DIR"]
    assert status(database, job_id) is JobStatus.STARTING
    info = jobs.get_job(database, ADMIN, job_id)
    assert info.attempts[0].stop_outcome is JobStatus.RESTARTING
    assert info.attempts[0].exit_code == (137 if code else 143)
    assert info.restart_count == 1 and info.restart_at is None


def test_a_job_fails_once_its_restarts_are_used_and_backoff_doubles(world) -> None:
    database, backend, controller = world
    job_id = submit(database, replicas=1, restart_policy={"max_restarts": 1, "backoff_seconds": 4})
    controller.reconcile_once()
    fail_rank(database, backend, controller, backend.launches[0], 0, 1)
    assert job_row(database, job_id).status == "RESTARTING"
    end_backoff(database, job_id)
    controller.reconcile_once()
    fail_rank(database, backend, controller, backend.launches[1], 0, 2)
    job = job_row(database, job_id)
    assert (job.status, job.exit_code, job.restart_count) == ("FAILED", 2, 1)
    assert "no restarts left (1 used)" in job.message
    policy = JobSpec(name="x", command=["x"], restart_policy={"max_restarts": 9, "backoff_seconds": 4}).restart_policy
    assert [policy.backoff(n) for n in range(4)] == [4, 8, 16, 32]
    assert policy.backoff(100) == 600, "the doubling is capped"


def test_a_restarting_job_is_cancelled_at_once_and_a_timeout_is_never_restarted(world) -> None:
    database, backend, controller = world
    job_id = submit(database, replicas=1, restart_policy={"max_restarts": 3, "backoff_seconds": 60})
    controller.reconcile_once()
    fail_rank(database, backend, controller, backend.launches[0], 0, 1)
    assert jobs.cancel(database, ADMIN, job_id, wake=lambda: None).status is JobStatus.CANCELLED
    end_backoff(database, job_id)
    controller.reconcile_once()
    assert len(backend.launches) == 1

    timed = submit(database, replicas=1, max_runtime=0.001, restart_policy={"max_restarts": 3})
    controller.reconcile_once()
    controller.reconcile_once()
    backend.exit(backend.launches[-1], 0, 143)
    controller.reconcile_once()
    job = job_row(database, timed)
    assert job.status == "FAILED" and "max_runtime" in job.message and job.restart_count == 0


def test_an_image_is_checked_at_submission_but_a_retry_gets_its_first_answer(world) -> None:
    database, _, _ = world
    spec = JobSpec(name="job", command=["train"], roles=[{"replicas": 1}], image="lab/torch:1")
    refusals: list[str] = []

    def engine_lacks(image: str) -> str:
        refusals.append(image)
        return f"the container engine has no image {image!r}"

    with pytest.raises(InvalidRequest, match="no image 'lab/torch:1'") as refused:
        jobs.submit(database, ADMIN, spec, wake=lambda: None, check_image=engine_lacks)
    assert refused.value.field == "image"
    first = jobs.submit_with_key(database, ADMIN, spec, "k-1", wake=lambda: None, check_image=lambda image: None)
    # The image is gone by the time the client retries: the retry still gets the job it made.
    retry = jobs.submit_with_key(database, ADMIN, spec, "k-1", wake=lambda: None, check_image=engine_lacks)
    assert (retry.replayed, retry.job.id) == (True, first.job.id)
    assert refusals == ["lab/torch:1"]
    with pytest.raises(InvalidRequest):
        jobs.submit_with_key(database, ADMIN, spec, "k-2", wake=lambda: None, check_image=engine_lacks)


def submit_chief_and_worker(database: Database, **fields: Any) -> int:
    spec = JobSpec(name="ps", command=["train"], framework="tensorflow",
                   roles=[{"name": "chief"}, {"name": "worker"}], **fields)
    return jobs.submit(database, ADMIN, spec, wake=lambda: None).id


def test_a_met_success_policy_stops_the_replicas_still_serving_and_succeeds(world) -> None:
    database, backend, controller = world
    job_id = submit_chief_and_worker(database)
    controller.reconcile_once()
    controller.reconcile_once()
    launch = backend.launches[0]
    backend.exit(launch, 0, 0)  # the chief finished; the worker serves on, as a TF server joins forever
    controller.reconcile_once()
    assert backend.stops[-1] == ([launch.replicas[1].replica_id], False), "SIGTERM to the worker"
    assert status(database, job_id) is JobStatus.RUNNING, "SUCCEEDED once nothing is left"
    backend.exit(launch, 1, 143)
    controller.reconcile_once()
    detail = jobs.get_job(database, ADMIN, job_id)
    assert (detail.status, detail.exit_code) == (JobStatus.SUCCEEDED, 0)
    assert detail.attempts[0].exit_code == 0, "the stopped worker's 143 does not count"


def test_a_worker_failure_seen_before_the_chiefs_exit_zero_still_succeeds(world) -> None:
    database, backend, controller = world
    job_id = submit_chief_and_worker(database, restart_policy={"max_restarts": 2, "backoff_seconds": 0})
    controller.reconcile_once()
    controller.reconcile_once()
    launch = backend.launches[0]
    backend.exit(launch, 1, 1)  # the worker died of the chief's end and is seen first
    controller.reconcile_once()
    backend.exit(launch, 0, 0)
    controller.reconcile_once()
    detail = jobs.get_job(database, ADMIN, job_id)
    assert (detail.status, detail.exit_code) == (JobStatus.SUCCEEDED, 0)
    assert len(backend.launches) == 1, "not restarted"
    assert "chief-0 exited 0" in detail.attempts[0].stop_reason
