"""Distributed PyTorch jobs whose replicas never met: the pure reading of connection tables,
then `ConnectionWatch` on crafted connection tables in a real database (the warning, its event
and its clearing come once, only after the grace, only for what could be looked at)."""

from __future__ import annotations

import socket
from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from sqlalchemy import select

from mlyard.api.jobs import NOT_CONNECTED
from mlyard.errors import MlyardError
from mlyard.monitor.processes import Root
from mlyard.paths import Paths
from mlyard.server.auth import Principal
from mlyard.server.lifecycle import switch_status
from mlyard.server.services.jobs import CONNECTION_CHECKS_OFF, get_job, list_jobs
from mlyard.server.settings import ServerSettings
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobEventRow, JobRow, ReplicaRow
from mlyard.server.workers import connections
from mlyard.server.workers.connections import ConnectionWatch, ReplicaView, reaches, verdict
from mlyard.spec import JobStatus

ADMIN = Principal(name="admin", user_id=None, is_admin=True)
NODE = "node-a"
NOW = 1_800_000_000.0
PORT = 29500
GRACE = 120.0


# psutil's shapes: `Process.net_connections()` gives these, with `raddr` () where there is none.
addr = namedtuple("addr", "ip port")
pconn = namedtuple("pconn", "fd family type laddr raddr status")


def tcp(local_port: int, remote_port: int | None, status: str = psutil.CONN_ESTABLISHED) -> pconn:
    remote = addr("127.0.0.1", remote_port) if remote_port is not None else ()
    return pconn(fd=3, family=socket.AF_INET, type=socket.SOCK_STREAM, laddr=addr("127.0.0.1", local_port),
                 raddr=remote, status=status)


TO_RANK_0 = tcp(41000, PORT)


# ----------------------------------------------------------------- the pure part
def test_only_an_established_connection_to_master_port_reaches_rank_0() -> None:
    assert reaches([tcp(41000, 8000), TO_RANK_0], PORT)
    assert not reaches([], PORT)
    assert not reaches([tcp(41000, 8000)], PORT)  # the API, say
    assert not reaches([tcp(PORT, None, psutil.CONN_LISTEN)], PORT)  # listening on it is rank 0's part
    assert not reaches([tcp(PORT, 41000)], PORT)  # accepted from another: rank 0's side
    assert not reaches([tcp(41000, PORT, psutil.CONN_SYN_SENT)], PORT)  # still trying
    assert not reaches([tcp(41000, PORT, psutil.CONN_TIME_WAIT)], PORT)
    assert reaches([pconn(fd=4, family=socket.AF_INET6, type=socket.SOCK_STREAM, laddr=addr("::1", 41000),
                          raddr=addr("::ffff:10.0.0.5", PORT), status=psutil.CONN_ESTABLISHED)], PORT)


def view(name: str = "worker-1", *, connected: bool = False, looked: bool = True, due_at: float = NOW) -> ReplicaView:
    return ReplicaView(name=name, connected=connected, looked=looked, due_at=due_at)


def judge(*views: ReplicaView, warned: bool = False, now: float = NOW) -> str | None:
    return verdict(views, warned=warned, now=now, master_port=PORT, grace=GRACE)


def test_the_verdict_warns_after_the_grace_about_replicas_never_seen_connected() -> None:
    warning = judge(view())
    assert warning == f"{NOT_CONNECTED} (worker-1 has not connected to MASTER_PORT {PORT} in 2m)"
    assert judge(view(due_at=NOW + 1)) is None  # within its grace
    assert judge(view(connected=True)) is None
    assert judge(view(looked=False)) is None  # gone or unreadable: no reason for a warning
    both = judge(view(), view("worker-2"), view("worker-3", connected=True))
    assert both.startswith(NOT_CONNECTED) and "(worker-1, worker-2 have not connected" in both
    assert judge(view(), view("worker-2", due_at=NOW + 5)).startswith(f"{NOT_CONNECTED} (worker-1 has")
    assert judge() is None


def test_a_warning_is_cleared_once_every_replica_was_seen_connected() -> None:
    assert judge(view(connected=True), warned=True) == f"replicas are connected to rank 0 (MASTER_PORT {PORT})"
    assert judge(view(connected=True), view("worker-2"), warned=True) is None
    assert judge(view(), warned=True) is None  # warned already: nothing new


def test_checks_come_every_few_seconds_and_follow_the_grace(tmp_path: Path) -> None:
    def interval(**values) -> float:
        return connections.check_interval(ServerSettings(paths=Paths(tmp_path), **values))
    assert interval() == 5.0
    assert interval(sample_interval_seconds=1.0, connection_grace_seconds=4.0) == 1.0
    assert interval(sample_interval_seconds=0.2, connection_grace_seconds=2.0) == 0.5
    assert interval(sample_interval_seconds=30.0) == 30.0
    assert interval(connection_grace_seconds=0.0) == connections.OFF_CHECK_INTERVAL


def test_the_grace_is_a_duration_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLYARD_CONNECTION_GRACE", raising=False)
    assert ServerSettings.from_environment().connection_grace_seconds == 120.0
    for value, seconds in (("30s", 30.0), ("5m", 300.0), ("0", 0.0)):
        monkeypatch.setenv("MLYARD_CONNECTION_GRACE", value)
        assert ServerSettings.from_environment().connection_grace_seconds == seconds
    monkeypatch.setenv("MLYARD_CONNECTION_GRACE", "a while")
    with pytest.raises(MlyardError, match="MLYARD_CONNECTION_GRACE"):
        ServerSettings.from_environment()


# ----------------------------------------------------------------- in a database
@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    opened = Database.open(database_url)
    yield opened
    opened.close()


def settings(tmp_path: Path, **values) -> ServerSettings:
    return ServerSettings(paths=Paths(tmp_path), **{"connection_grace_seconds": GRACE, **values})


def add_job(database: Database, job_id: int, *, replicas: int = 2, framework: str = "pytorch",
            running_since: float = NOW, node: str = NODE) -> None:
    """A RUNNING job whose attempt runs since `running_since`, replica r with pid 100 * job + r."""
    with database.transaction() as session:
        session.add(JobRow(id=job_id, name=f"job-{job_id}", project="default", queue="default", priority=0,
                           spec={"name": f"job-{job_id}", "command": ["python", "train.py"], "framework": framework,
                                 "roles": [{"name": "worker", "replicas": replicas}]},
                           status="RUNNING", attempt_count=1, submitted_at=running_since, updated_at=running_since,
                           started_at=running_since))
        session.add(JobEventRow(job_id=job_id, at=running_since, from_status="STARTING", to_status="RUNNING"))
        attempt = AttemptRow(job_id=job_id, number=1, created_at=running_since, launched_at=running_since,
                             running_at=running_since, master_port=PORT)
        session.add(attempt)
        session.flush()
        for rank in range(replicas):
            session.add(ReplicaRow(attempt_id=attempt.id, job_id=job_id, role="worker", index=rank, rank=rank,
                                   node=node, cpu_ids=[rank], gpu_ids=[], memory_bytes=1 << 30,
                                   directory="/nonexistent", state="running", pid=100 * job_id + rank,
                                   started_at=running_since))


class Tables:
    """Crafted connection tables by pid (None: cannot be read), and the pids asked about."""

    def __init__(self) -> None:
        self.by_pid: dict[int, list | None] = {}
        self.asked: list[int] = []

    def __call__(self, root: Root) -> list | None:
        self.asked.append(root.pid)
        return self.by_pid.get(root.pid, [])


def events(database: Database, job_id: int) -> list[str]:
    with database.reading() as session:
        return [message or "" for message in session.scalars(
            select(JobEventRow.message).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id))]


def test_replicas_that_never_connect_are_warned_about_once_and_cleared_when_they_connect(
        tmp_path: Path, database: Database) -> None:
    add_job(database, 1)
    tables = Tables()
    watch, config = ConnectionWatch(NODE, connections=tables), settings(tmp_path)
    assert watch.check(database, config, NOW).warned == []  # the first check, as it starts running
    assert tables.asked == [101]  # rank 0 is never asked
    assert watch.check(database, config, NOW + GRACE - 1).warned == []  # within the grace
    assert watch.check(database, config, NOW + GRACE).warned == [1]
    assert watch.check(database, config, NOW + GRACE + 5).warned == []  # still not connected: nothing new
    warning = f"{NOT_CONNECTED} (worker-1 has not connected to MASTER_PORT {PORT} in 2m)"
    assert events(database, 1)[-1] == warning and events(database, 1).count(warning) == 1
    [listed] = list_jobs(database, ADMIN)
    assert listed.warning == warning
    detail = get_job(database, ADMIN, 1)
    assert detail.warning == warning and detail.events[-1].to_status is JobStatus.RUNNING

    tables.by_pid[101] = [tcp(41000, 8000), TO_RANK_0]
    assert watch.check(database, config, NOW + GRACE + 10).cleared == [1]
    assert events(database, 1)[-1] == f"replicas are connected to rank 0 (MASTER_PORT {PORT})"
    assert get_job(database, ADMIN, 1).warning is None
    asked = len(tables.asked)
    tables.by_pid[101] = []  # what it does after it was seen connected does not matter
    assert watch.check(database, config, NOW + 2 * GRACE) == connections.Changes()
    assert len(tables.asked) == asked  # a settled attempt is not looked at again


def test_replicas_connected_within_the_grace_are_never_warned_about(tmp_path: Path, database: Database) -> None:
    add_job(database, 1, replicas=3)
    tables = Tables()
    tables.by_pid.update({101: [TO_RANK_0], 102: []})
    watch, config = ConnectionWatch(NODE, connections=tables), settings(tmp_path)
    watch.check(database, config, NOW + 10)
    tables.by_pid[101] = []  # closed since: seen once counts
    tables.by_pid[102] = [TO_RANK_0]
    watch.check(database, config, NOW + 20)
    assert watch.check(database, config, NOW + 10 * GRACE) == connections.Changes()
    assert sorted(tables.asked) == [101, 102, 102]
    assert not any(message.startswith(NOT_CONNECTED) for message in events(database, 1))


def test_only_multi_replica_pytorch_jobs_here_that_can_be_looked_at_are_judged(tmp_path: Path,
                                                                                database: Database) -> None:
    add_job(database, 1, framework="none")
    add_job(database, 2, framework="tensorflow")
    add_job(database, 3, replicas=1)
    add_job(database, 4, node="node-b")
    add_job(database, 5)  # its replicas' processes cannot be read
    add_job(database, 6)
    with database.transaction() as session:
        session.scalars(select(ReplicaRow).where(ReplicaRow.job_id == 6, ReplicaRow.rank == 1)).one().pid = None
    tables = Tables()
    tables.by_pid[501] = None
    watch = ConnectionWatch(NODE, connections=tables)
    assert watch.check(database, settings(tmp_path), NOW + 10 * GRACE) == connections.Changes()
    assert tables.asked == [501]


def test_the_grace_counts_from_when_this_server_began_watching(tmp_path: Path, database: Database) -> None:
    add_job(database, 1, running_since=NOW - 3600)  # running for an hour when a new leader took over
    watch, config = ConnectionWatch(NODE, connections=Tables()), settings(tmp_path)
    assert watch.check(database, config, NOW).warned == []
    assert watch.check(database, config, NOW + GRACE - 1).warned == []
    assert watch.check(database, config, NOW + GRACE).warned == [1]
    # A new leader finds the warning in the events: it does not give it twice, and clears it.
    tables = Tables()
    tables.by_pid[101] = [TO_RANK_0]
    again = ConnectionWatch(NODE, connections=tables)
    assert again.check(database, config, NOW + GRACE + 1) == connections.Changes(cleared=[1])


def test_the_warning_ends_with_the_running_attempt(tmp_path: Path, database: Database) -> None:
    add_job(database, 1)
    watch, config = ConnectionWatch(NODE, connections=Tables()), settings(tmp_path)
    watch.check(database, config, NOW)
    assert watch.check(database, config, NOW + GRACE).warned == [1]
    with database.transaction() as session:
        switch_status(session, session.get(JobRow, 1), JobStatus.RESTARTING, now=NOW + GRACE + 1)
        session.get(JobRow, 1).status = JobStatus.RUNNING.value  # as a new attempt would, without its event
    assert get_job(database, ADMIN, 1).warning is None  # a change of status after the warning leaves it behind


def test_switching_the_check_off_clears_standing_warnings(tmp_path: Path, database: Database) -> None:
    add_job(database, 1)
    add_job(database, 2)
    watch = ConnectionWatch(NODE, connections=Tables())
    watch.check(database, settings(tmp_path), NOW)
    assert watch.check(database, settings(tmp_path), NOW + GRACE).warned == [1, 2]
    with database.transaction() as session:
        switch_status(session, session.get(JobRow, 2), JobStatus.CANCELLED, now=NOW + GRACE + 1)
    off = settings(tmp_path, connection_grace_seconds=0.0)
    assert watch.check(database, off, NOW + GRACE + 2) == connections.Changes(cleared=[1])
    assert events(database, 1)[-1] == CONNECTION_CHECKS_OFF and get_job(database, ADMIN, 1).warning is None
    assert watch.check(database, off, NOW + GRACE + 3) == connections.Changes()
