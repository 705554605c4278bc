"""Distributed PyTorch jobs whose replicas never met get a warning.

A job of several PyTorch replicas whose code never forms a process group (no
`init_process_group`, a world size of 1, a rendezvous of its own) does not fail: each replica
trains alone on its share of the resources, and the job looks healthy. Every rank of a PyTorch
world connects to the store rank 0 serves at MASTER_PORT (torchrun's rendezvous too, at
PET_MASTER_PORT, the same port) and keeps that connection while the world lives, so the sign is a
replica of rank > 0 none of whose processes has an ESTABLISHED connection to that port.

The leader's sampling thread calls `ConnectionWatch.check` every few seconds (`check_interval`),
like `idleness.check`, because only that server sees the local replicas' processes. For each
RUNNING job of framework `pytorch` with more than one replica, all on this machine, whose attempt
has no stop requested, it looks at the TCP connections of the process tree of every replica of
rank > 0 not yet seen connected (`monitor.processes.tree_connections`). A replica seen connected
once counts as connected for the rest of the attempt (what it did meanwhile does not matter), so
an attempt whose replicas have all been seen is not looked at again. `verdict` reads what was seen:
- the warning: a replica that could be looked at and was never seen connected once its grace
  (`MLYARD_CONNECTION_GRACE`, 2 minutes, from the latest of the attempt's `running_at`, the
  replica's start and the moment this server began watching the attempt) is over adds a job event
  starting with `api.jobs.NOT_CONNECTED`, naming those replicas;
- the clearing: a warned job whose replicas of rank > 0 have all been seen connected gets an event
  starting with `services.jobs.CONNECTED`.
A replica whose processes cannot be read (gone, a pid reused, not readable) is never the reason
for a warning. The events are the record: `services.jobs.connection_warnings` reads the standing
warning from them (a change of status after the warning leaves it behind), so every server
shows the same and a new leader knows what the last one warned about. What was seen connected is
kept in memory only: a new leader watches each attempt afresh, and gives it the grace again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import psutil
from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from mlyard.api.jobs import NOT_CONNECTED
from mlyard.monitor.processes import Root, tree_connections
from mlyard.server.services.jobs import CONNECTED, CONNECTION_CHECKS_OFF, connection_warnings
from mlyard.server.settings import ServerSettings
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobEventRow, JobRow, ReplicaRow
from mlyard.server.workers.idleness import span
from mlyard.spec import JobStatus

log = logging.getLogger("mlyard.connections")

MAX_CHECK_INTERVAL = 5.0
OFF_CHECK_INTERVAL = 60.0
"""With the check switched off, how often warnings given before are looked for (to clear them)."""
WATCHED_STATES = ("pending", "running")

Connections = Callable[[Root], list | None]
"""A replica's process tree → its TCP connections, None where they cannot be known."""


def check_interval(settings: ServerSettings) -> float:
    """Every few seconds (a quarter of the grace where that is shorter), never more often than
    samples are taken."""
    grace = settings.connection_grace_seconds
    if grace <= 0:
        return OFF_CHECK_INTERVAL
    return max(settings.sample_interval_seconds, min(MAX_CHECK_INTERVAL, grace / 4))


def reaches(connections: Iterable, master_port: int) -> bool:
    """Whether one of a process tree's TCP connections is an established one to MASTER_PORT.
    The remote address is not compared: on the local backend rank 0 is this machine, which it
    may reach by any of its addresses, and the port was reserved for the attempt."""
    return any(connection.status == psutil.CONN_ESTABLISHED and connection.raddr
               and connection.raddr[1] == master_port for connection in connections)


@dataclass(frozen=True)
class ReplicaView:
    """What was seen of a replica of rank > 0."""

    name: str
    connected: bool
    """Seen with a connection to MASTER_PORT at some check of this attempt."""
    looked: bool
    """Its processes could be read at this check."""
    due_at: float
    """When its grace ends."""


def verdict(replicas: Sequence[ReplicaView], *, warned: bool, now: float, master_port: int,
            grace: float) -> str | None:
    """The event an attempt's replicas of rank > 0 call for: the warning, its clearing, or None
    (nothing changes)."""
    if not replicas:
        return None
    if warned:
        return f"{CONNECTED} (MASTER_PORT {master_port})" if all(view.connected for view in replicas) else None
    alone = [view.name for view in replicas if view.looked and not view.connected and now >= view.due_at]
    if not alone:
        return None
    verb = "has" if len(alone) == 1 else "have"
    return f"{NOT_CONNECTED} ({', '.join(alone)} {verb} not connected to MASTER_PORT {master_port} in {span(grace)})"


@dataclass
class Changes:
    """Job ids, for the log and for tests."""

    warned: list[int] = field(default_factory=list)
    cleared: list[int] = field(default_factory=list)


@dataclass
class _Watched:
    since: float
    """When this server first watched the attempt."""
    connected: set[int] = field(default_factory=set)
    """Replica ids seen connected."""
    settled: bool = False
    """Every replica seen connected and no warning standing: nothing is left to look at."""


@dataclass(frozen=True)
class _Attempt:
    job_id: int
    attempt_id: int
    master_port: int
    running_at: float
    warned: bool
    replicas: tuple[ReplicaRow, ...]
    """Of rank > 0."""


class ConnectionWatch:
    """What the leader saw of the attempts it watches, from one check to the next."""

    def __init__(self, node: str, *, connections: Connections = tree_connections):
        self.node = node
        self._connections = connections
        self._watched: dict[int, _Watched] = {}

    def check(self, database: Database, settings: ServerSettings, now: float | None = None) -> Changes:
        """Looks at the replicas of the attempts to watch and records what changed. Rows are
        read in one transaction, processes looked at outside any, and each event written under
        the job's lock after checking the job still runs the attempt that was judged."""
        now = time.time() if now is None else now
        grace = settings.connection_grace_seconds
        changes = Changes()
        if grace <= 0:
            self._watched.clear()
            with database.reading() as session:
                running = list(session.scalars(select(JobRow).where(JobRow.status == JobStatus.RUNNING.value)
                                               .options(defer(JobRow.spec))))
                warned = sorted(connection_warnings(session, running))
            if warned:
                with database.transaction() as session:
                    for job_id in warned:
                        self._apply(session, job_id, None, CONNECTION_CHECKS_OFF, now, changes)
            return changes
        plans = [(attempt, event) for attempt in self._read(database, now)
                 if (event := self._judge(attempt, now, grace)) is not None]
        if plans:
            with database.transaction() as session:
                for attempt, event in plans:
                    self._apply(session, attempt.job_id, attempt.attempt_id, event, now, changes)
        return changes

    def _read(self, database: Database, now: float) -> list[_Attempt]:
        """The attempts to look at: those watched and not settled, of the jobs this check is for."""
        with database.reading() as session:
            running = session.execute(
                select(JobRow, AttemptRow).join(AttemptRow, AttemptRow.job_id == JobRow.id)
                .where(JobRow.status == JobStatus.RUNNING.value, AttemptRow.finished_at.is_(None),
                       AttemptRow.running_at.is_not(None), AttemptRow.stop_requested_at.is_(None),
                       AttemptRow.master_port.is_not(None))
                .options(defer(JobRow.spec)).order_by(JobRow.id)).all()
            specs = database.specs.load(session, [job for job, _ in running])
            pytorch = [(job, attempt) for job, attempt in running if specs[job.id].framework == "pytorch"]
            # Attempts that end are forgotten; a new one is watched from the first check that sees it.
            self._watched = {attempt.id: self._watched.get(attempt.id) or _Watched(since=now)
                             for _, attempt in pytorch}
            unsettled = [(job, attempt) for job, attempt in pytorch if not self._watched[attempt.id].settled]
            if not unsettled:
                return []
            replicas: dict[int, list[ReplicaRow]] = {}
            for replica in session.scalars(select(ReplicaRow).where(
                    ReplicaRow.attempt_id.in_([attempt.id for _, attempt in unsettled])).order_by(ReplicaRow.rank)):
                replicas.setdefault(replica.attempt_id, []).append(replica)
            warned = connection_warnings(session, [job for job, _ in unsettled])
            found = []
            for job, attempt in unsettled:
                rows = replicas.get(attempt.id, [])
                if len(rows) < 2 or any(row.node != self.node for row in rows):
                    self._watched[attempt.id].settled = True  # not this check's: a single replica, another node
                    continue
                found.append(_Attempt(job_id=job.id, attempt_id=attempt.id, master_port=attempt.master_port,
                                      running_at=attempt.running_at, warned=job.id in warned,
                                      replicas=tuple(row for row in rows if row.rank > 0)))
            return found

    def _judge(self, attempt: _Attempt, now: float, grace: float) -> str | None:
        watched = self._watched[attempt.attempt_id]
        views = []
        for replica in attempt.replicas:
            looked = False
            if (replica.id not in watched.connected and replica.pid is not None
                    and replica.state in WATCHED_STATES):
                found = self._connections(Root(pid=replica.pid, started_at=replica.pid_started_at))
                if found is not None:
                    looked = True
                    if reaches(found, attempt.master_port):
                        watched.connected.add(replica.id)
            due_at = max(attempt.running_at, replica.started_at or attempt.running_at, watched.since) + grace
            views.append(ReplicaView(name=replica.name, connected=replica.id in watched.connected, looked=looked,
                                     due_at=due_at))
        event = verdict(views, warned=attempt.warned, now=now, master_port=attempt.master_port, grace=grace)
        if all(view.connected for view in views):  # a warning standing is cleared by this event
            watched.settled = True
        return event

    def _apply(self, session: Session, job_id: int, attempt_id: int | None, event: str, now: float,
               changes: Changes) -> None:
        job = session.get(JobRow, job_id, with_for_update=True, populate_existing=True)
        if job is None or job.status != JobStatus.RUNNING.value:
            return  # it moved on while the processes were looked at
        if attempt_id is not None:
            attempt = session.get(AttemptRow, attempt_id, populate_existing=True)
            if attempt is None or attempt.finished_at is not None or attempt.stop_requested_at is not None:
                return
        warning = event.startswith(NOT_CONNECTED)
        if (job.id in connection_warnings(session, [job])) == warning:
            return  # already so
        job.updated_at = now
        session.add(JobEventRow(job_id=job.id, at=now, from_status=job.status, to_status=job.status, message=event))
        (changes.warned if warning else changes.cleared).append(job.id)
        log.info("job %s: %s", job.id, event)
