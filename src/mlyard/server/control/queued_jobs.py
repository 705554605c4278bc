"""The jobs that wait to be scheduled, kept in memory between the controller's passes.

The database stays the truth: the first `refresh` loads every queued (and restarting) job,
and each later one reads only the jobs whose revision passed the highest it has seen
(`store/revisions.py`), so a pass costs what changed, not what waits. A job's spec is parsed
once, when it is first seen, into what the scheduler needs (its `PendingJob` and the smallest
gang a project limit counts), and then dropped: a waiting job costs a few hundred bytes.
Equal replica requests and strings are shared between jobs for the same reason.

Only the controller's thread uses an instance.
"""

from __future__ import annotations

import json
import sys
from bisect import insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.scheduler import PendingJob, ReplicaRequest
from mlyard.scheduler.predictions import DurationHistory
from mlyard.server import heap
from mlyard.server.control import run_times
from mlyard.server.control.run_times import RerunKey
from mlyard.server.scheduler_terms import replica_requests, smallest_gang
from mlyard.server.store.rows import JobRevisionRow, JobRow, UserRow
from mlyard.spec import TERMINAL_STATUSES, JobSpec, JobStatus

_DEMAND_FIELDS = ("roles", "elastic", "placement", "max_runtime")
"""The parts of a stored spec that `replica_requests` and the scheduler read."""
WAITING = (JobStatus.QUEUED.value, JobStatus.RESTARTING.value)
_ENDED = frozenset(status.value for status in TERMINAL_STATUSES)
_RUNNING_PREDICTIONS = 100_000
"""Jobs whose prediction at start is kept at most: those that started and have not ended."""
_CHUNK = 500
SETTLE_AFTER = 1000
"""Waiting jobs that, once kept, are frozen out of garbage collections (`server/heap.py`); again
each time their number doubles."""
_COLUMNS = (JobRow.id, JobRow.revision, JobRow.status, JobRow.restart_at, JobRow.project, JobRow.queue,
            JobRow.priority, JobRow.submitted_at, JobRow.attained_service, JobRow.attained_time,
            JobRow.queued_since, JobRow.wait_reason, UserRow.name)


@dataclass(frozen=True, slots=True)
class Gang:
    """What a job's smallest gang holds once started: what a project's limits count."""

    gpu: float
    cpu: float
    memory: int


@dataclass(frozen=True, slots=True)
class _Demand:
    replicas: tuple[ReplicaRequest, ...]
    max_runtime: float | None
    min_replicas: int | None
    same_node: bool
    same_topology: str | None
    gang: Gang


@dataclass(slots=True)
class QueuedJob:
    pending: PendingJob
    project: str
    status: str
    restart_at: float | None
    wait_reason: str | None
    """As stored: the controller writes a reason only when it differs."""
    gang: Gang
    rerun: RerunKey
    """Whose finished runs predict its run time (`run_times.rerun_key`)."""

    @property
    def job_id(self) -> int:
        return self.pending.job_id


def _submission_order(job: QueuedJob) -> tuple[float, int]:
    return job.pending.submitted_at, job.job_id


class QueuedJobs:
    def __init__(self) -> None:
        self._jobs: dict[int, QueuedJob] = {}
        self._settled_at = 0
        """How many jobs were kept when they were last frozen out of collections: a queue that
        drains and fills again to the same size is not frozen again (nor is one read again by
        `clear`), since each freeze keeps for good any cycle among what it froze."""
        self._seen: int | None = None
        """The highest revision read; None: nothing loaded yet."""
        self._order: list[QueuedJob] | None = None
        """Every job, oldest submission first; None: to be sorted again."""
        self._restarting_jobs: dict[int, QueuedJob] = {}
        """The RESTARTING ones among them: few, so backoffs are looked at without a walk over all."""
        self._added: list[QueuedJob] = []
        self._shared: dict[object, object] = {}
        self._demands: dict[str, _Demand] = {}
        self.history = DurationHistory()
        """Run times of the jobs that succeeded (`run_times.py`), loaded by the first refresh."""
        self._waiting_reruns: dict[RerunKey, set[int]] = {}
        """The waiting jobs of each rerun key, whose predictions a run of it that ends refreshes."""
        self._running_predictions: dict[int, float | None] = {}
        """What the key of each job that left the queue to run predicted for it then (trusted or
        not): its run, once it succeeds, is checked against that. Kept until the job ends."""
        self.version = 0
        """Grows whenever a job comes, goes or changes: equal versions, equal jobs."""
        self.rows_read = 0
        self.specs_parsed = 0
        """Counters of the work done so far (the tests read them); specs are parsed once per
        distinct demand."""

    def __len__(self) -> int:
        return len(self._jobs)

    def clear(self) -> None:
        """Forgets everything: the next `refresh` loads every waiting job again."""
        self._jobs.clear()
        self._restarting_jobs.clear()
        self._demands.clear()
        self._waiting_reruns.clear()
        self._running_predictions.clear()
        self._seen = None
        self._order = None
        self.version += 1

    def refresh(self, session: Session) -> None:
        """Catches up with the database: every waiting job the first time, then the changed ones."""
        if self._seen is None:
            # Read the revision first: a change committed after it is read again next time.
            self._seen = session.scalar(select(JobRevisionRow.value).where(JobRevisionRow.id == 1)) or 0
            self.history = run_times.load(session, self._seen)
            rows = session.execute(self._select().where(JobRow.status.in_(WAITING))
                                   .execution_options(yield_per=2000))
        else:
            rows = session.execute(self._select().where(JobRow.revision > self._seen).order_by(JobRow.revision))
        changed, new, succeeded = False, [], []
        for row in rows:
            self.rows_read += 1
            self._seen = max(self._seen, row.revision)
            if row.status not in WAITING:
                changed |= self._drop(row.id, row.status)
                if row.status == JobStatus.SUCCEEDED.value:
                    succeeded.append(row)
            elif row.id in self._jobs:
                self._update(self._jobs[row.id], row)
                self._track(self._jobs[row.id])
                changed = True
            else:
                new.append(row)
                if len(new) == _CHUNK:  # a first load holds no more rows than a chunk at once
                    self._add(session, new)
                    new = []
        self._add(session, new)
        changed |= self._learn(session, succeeded)
        if changed:
            self._order = None
        elif self._order is not None:  # only new jobs: each goes to its place, mostly the end
            for job in self._added:
                insort(self._order, job, key=_submission_order)
        if changed or self._added:
            self.version += 1
            self._added = []

    def _add(self, session: Session, rows: list) -> None:
        if not rows:
            return
        ids = [row.id for row in rows]
        specs = dict(session.execute(select(JobRow.id, JobRow.spec).where(JobRow.id.in_(ids))).all())
        for row in rows:
            if row.id in specs:
                job = self._jobs[row.id] = self._entry(row, self._demand(specs[row.id]),
                                                       self._share(run_times.rerun_key(row.name, specs[row.id])))
                self._waiting_reruns.setdefault(job.rerun, set()).add(job.job_id)
                self._track(job)
                self._added.append(job)

    def _learn(self, session: Session, rows: list) -> bool:
        """Adds the run times of jobs that succeeded to the history and gives the waiting reruns
        of each key that learned something their new prediction; whether any changed."""
        learned: set[RerunKey] = set()
        for start in range(0, len(rows), _CHUNK):
            chunk = rows[start:start + _CHUNK]
            specs = dict(session.execute(select(JobRow.id, JobRow.spec).where(JobRow.id.in_([row.id for row in chunk]))
                                         ).all())
            for row in chunk:
                if row.id in specs:
                    key = run_times.rerun_key(row.name, specs[row.id])
                    predicted = self._running_predictions.pop(row.id, self.history.predict(key))
                    run_times.record(self.history, key, row.attained_time, predicted)
                    learned.add(key)
        changed = False
        for key in learned:
            trusted = self.history.trusted_prediction(key)
            for job_id in self._waiting_reruns.get(key, ()):
                job = self._jobs[job_id]
                seconds = run_times.capped(trusted, job.pending.max_runtime)
                if seconds != job.pending.predicted_duration:
                    job.pending = replace(job.pending, predicted_duration=seconds)
                    changed = True
        return changed

    def _drop(self, job_id: int, status: str | None = None) -> bool:
        """Forgets a job that left the queue (for `status`, where known). One that left it to run
        keeps what its key predicted for it, until it ends: a run that succeeds is checked
        against it (`_learn`)."""
        job = self._jobs.pop(job_id, None)
        self._restarting_jobs.pop(job_id, None)
        if status in _ENDED and status != JobStatus.SUCCEEDED.value:
            self._running_predictions.pop(job_id, None)
        if job is None:
            return False
        if status is not None and status not in _ENDED and len(self._running_predictions) < _RUNNING_PREDICTIONS:
            self._running_predictions[job_id] = self.history.predict(job.rerun)
        reruns = self._waiting_reruns.get(job.rerun)
        if reruns is not None:
            reruns.discard(job_id)
            if not reruns:
                del self._waiting_reruns[job.rerun]
        return True

    def settle(self) -> None:
        """Freezes the kept jobs out of garbage collections (`server/heap.py`) once their number
        reached `SETTLE_AFTER`, and again each time it doubles: a queue filled to 100,000 is
        settled a few times only. Called outside any transaction, so that no session is frozen."""
        if len(self._jobs) >= max(SETTLE_AFTER, 2 * self._settled_at):
            heap.settle(f"{len(self._jobs):,} waiting jobs")
            self._settled_at = len(self._jobs)

    def forget(self, job_id: int) -> None:
        """A job found gone (deleted) when it was to start."""
        if self._drop(job_id):
            self._order = None
            self.version += 1

    def schedulable(self, now: float) -> list[QueuedJob]:
        """Queued jobs and restarting ones whose backoff is over, oldest submission first."""
        if self._order is None:
            self._order = sorted(self._jobs.values(), key=_submission_order)
        if not self._restarting_jobs:  # all of them QUEUED
            return list(self._order)
        return [job for job in self._order
                if job.status == JobStatus.QUEUED.value or (job.restart_at is not None and job.restart_at <= now)]

    def next_restart(self, now: float) -> float | None:
        """When the next backoff still running ends."""
        return min((at for at in self._restarting() if at > now), default=None)

    def restarts_due(self, now: float) -> int:
        """How many restarting jobs may be scheduled again: it grows with time alone."""
        return sum(at <= now for at in self._restarting())

    def _restarting(self) -> list[float]:
        return [job.restart_at for job in self._restarting_jobs.values() if job.restart_at is not None]

    def _track(self, job: QueuedJob) -> None:
        if job.status == JobStatus.RESTARTING.value:
            self._restarting_jobs[job.job_id] = job
        else:
            self._restarting_jobs.pop(job.job_id, None)

    def changed_reasons(self, reasons: Mapping[int, str]) -> list[tuple[int, str]]:
        """The (job, reason) pairs that differ from what is stored."""
        return [(job_id, reason) for job_id, reason in reasons.items()
                if job_id in self._jobs and self._jobs[job_id].wait_reason != reason]

    def stored_reasons(self, written: Iterable[tuple[int, str]]) -> None:
        for job_id, reason in written:
            if job_id in self._jobs:
                self._jobs[job_id].wait_reason = self._share(reason)

    # ----------------------------------------------------------------- rows to entries
    @staticmethod
    def _select():
        return select(*_COLUMNS).outerjoin(UserRow, JobRow.owner_id == UserRow.id)

    def _share(self, value):
        """One object for every equal value (names, reasons, replica requests, gangs)."""
        if value is None:
            return None
        if isinstance(value, str):
            return sys.intern(value)
        return self._shared.setdefault(value, value)

    def _demand(self, stored: dict) -> _Demand:
        """What the scheduler reads of a stored spec. Specs are stored as validated, so equal
        parts mean equal demands: jobs that differ only in their commands or settings (the
        trials of a sweep, the steps of a workflow) share one, parsed once."""
        key = json.dumps([stored.get(name) for name in _DEMAND_FIELDS], sort_keys=True)
        demand = self._demands.get(key)
        if demand is None:
            spec = JobSpec.model_validate(stored)
            self.specs_parsed += 1
            gang = smallest_gang(spec)
            demand = self._demands[key] = _Demand(
                replicas=tuple(self._share(request) for request in replica_requests(spec)),
                max_runtime=spec.max_runtime,
                min_replicas=spec.elastic.min_replicas if spec.elastic is not None else None,
                same_node=spec.placement.same_node, same_topology=spec.placement.same_topology,
                gang=Gang(gpu=sum(request.gpu for request in gang), cpu=sum(request.shape[1] for request in gang),
                          memory=sum(request.memory_bytes for request in gang)),
            )
        return demand

    def _entry(self, row, demand: _Demand, rerun: RerunKey) -> QueuedJob:
        pending = PendingJob(
            job_id=row.id, submitted_at=row.submitted_at, replicas=demand.replicas,
            queue=self._share(row.queue), priority=row.priority, user=self._share(row.name or ""),
            attained_service=row.attained_service, attained_time=row.attained_time, queued_since=row.queued_since,
            max_runtime=demand.max_runtime, predicted_duration=run_times.predicted(self.history, rerun,
                                                                                  demand.max_runtime),
            min_replicas=demand.min_replicas, same_node=demand.same_node, same_topology=demand.same_topology,
        )
        return QueuedJob(pending=pending, project=self._share(row.project), status=self._share(row.status),
                         restart_at=row.restart_at, wait_reason=self._share(row.wait_reason), gang=demand.gang,
                         rerun=rerun)

    def _update(self, job: QueuedJob, row) -> None:
        pending = job.pending
        values = {"submitted_at": row.submitted_at, "queue": self._share(row.queue), "priority": row.priority,
                  "user": self._share(row.name or ""), "attained_service": row.attained_service,
                  "attained_time": row.attained_time, "queued_since": row.queued_since}
        if any(getattr(pending, name) != value for name, value in values.items()):
            job.pending = replace(pending, **values)
        job.project = self._share(row.project)
        job.status = self._share(row.status)
        job.restart_at = row.restart_at
        job.wait_reason = self._share(row.wait_reason)

