"""Queues: their quotas and borrowing limits (administrators and the maintainers of a queue's
project change them), and what each holds and keeps waiting right now. Every queue is listed;
its waiting jobs are named only to those who may see their project.

The `default` queue always exists: without a row it has no quota. A queue only jobs name
(submitted before queues had to exist) is shown as implicit too, so nothing waits unseen.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from mlyard.api.queues import QueueAmounts, QueueInfo, QueueSettings, QueueUsage, WaitingJob
from mlyard.errors import Conflict, NotFound
from mlyard.server import auth
from mlyard.server.scheduler_terms import DEFAULT_QUEUE
from mlyard.server.store.db import Database, insert_if_absent
from mlyard.server.store.rows import AttemptRow, JobRow, QueueRow
from mlyard.server.services import projects
from mlyard.spec import TERMINAL_STATUSES, JobStatus

_UNFINISHED = [status.value for status in JobStatus if status not in TERMINAL_STATUSES]


@dataclass
class _Load:
    """What one queue's jobs hold and which of them wait."""

    gpu: int = 0
    cpu: float = 0.0
    memory: int = 0
    running: set[int] = field(default_factory=set)
    waiting: list[WaitingJob] = field(default_factory=list)
    hidden_waiting: int = 0
    """Waiting jobs of projects the caller may not see: counted, not listed."""


def _loads(session: Session, visible: frozenset[str] | None = None) -> dict[str, _Load]:
    """`visible`: the projects whose waiting jobs may be listed (others are only counted)."""
    loads: dict[str, _Load] = defaultdict(_Load)
    holding = session.scalars(
        select(AttemptRow)
        .where(AttemptRow.finished_at.is_(None))
        .options(selectinload(AttemptRow.replicas), selectinload(AttemptRow.job))
    )
    for attempt in holding:
        load = loads[attempt.job.queue]
        load.running.add(attempt.job_id)
        for replica in attempt.replicas:
            load.gpu += len(replica.gpu_ids)
            load.cpu += replica.cpu
            load.memory += replica.memory_bytes
    queued = session.scalars(
        select(JobRow).where(JobRow.status == JobStatus.QUEUED.value).order_by(JobRow.submitted_at, JobRow.id)
    )
    for job in queued:
        if visible is not None and job.project not in visible:
            loads[job.queue].hidden_waiting += 1
            continue
        loads[job.queue].waiting.append(WaitingJob(
            id=job.id, name=job.name, priority=job.priority, reason=job.wait_reason,
            waiting_since=job.queued_since if job.queued_since is not None else job.submitted_at,
        ))
    return loads


def _info(name: str, row: QueueRow | None, load: _Load) -> QueueInfo:
    if row is None:
        quota, borrow, project, weight = QueueAmounts(), QueueAmounts(), "default", 1.0
    else:
        quota = QueueAmounts(gpu=_whole(row.quota_gpu), cpu=row.quota_cpu, memory=row.quota_memory)
        borrow = QueueAmounts(gpu=_whole(row.borrow_gpu), cpu=row.borrow_cpu, memory=row.borrow_memory)
        project, weight = row.project, row.weight
    return QueueInfo(
        name=name, project=project, quota=quota, borrow_limit=borrow, weight=weight,
        usage=QueueUsage(gpu=load.gpu, cpu=load.cpu, memory=load.memory),
        running=len(load.running), waiting=len(load.waiting) + load.hidden_waiting, waiting_jobs=load.waiting,
        implicit=row is None,
        created_at=row.created_at if row is not None else None,
        updated_at=row.updated_at if row is not None else None,
    )


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def _names_in_use(session: Session) -> set[str]:
    return set(session.scalars(select(JobRow.queue).where(JobRow.status.in_(_UNFINISHED)).distinct()))


def list_queues(database: Database, principal: auth.Principal) -> list[QueueInfo]:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        rows = {row.name: row for row in session.scalars(select(QueueRow))}
        loads = _loads(session, principal.visible_projects())
        names = sorted({DEFAULT_QUEUE, *rows, *_names_in_use(session)})
        return [_info(name, rows.get(name), loads.get(name, _Load())) for name in names]


def get_queue(database: Database, principal: auth.Principal, name: str) -> QueueInfo:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        row = session.get(QueueRow, name)
        if row is None and name != DEFAULT_QUEUE and name not in _names_in_use(session):
            raise NotFound(f"queue {name!r} does not exist")
        return _info(name, row, _loads(session, principal.visible_projects()).get(name, _Load()))


def _may_change(principal: auth.Principal, project: str, name: str) -> None:
    """Administrators, and the maintainers of the queue's project, change its queues."""
    auth.require_role(principal, project, auth.Role.MAINTAINER, f"change queue {name!r}")


def set_queue(database: Database, principal: auth.Principal, name: str, settings: QueueSettings,
              *, wake: Callable[[], None]) -> QueueInfo:
    """Creates the queue or updates the fields `settings` names (see `QueueSettings`)."""
    given = settings.model_fields_set
    with database.transaction() as session:
        existing = session.get(QueueRow, name)
        if name == DEFAULT_QUEUE or existing is not None:
            _may_change(principal, existing.project if existing is not None else projects.DEFAULT_PROJECT, name)
        if existing is None or "project" in given:
            projects.ensure_project(session, principal, settings.project)
            _may_change(principal, settings.project, name)
        now = time.time()
        # Created, if new, and locked before it is read: two administrators setting one queue at
        # once on PostgreSQL then apply their changes one after the other instead of one failing.
        insert_if_absent(session, QueueRow, name=name, project=settings.project, weight=settings.weight,
                         created_at=now, updated_at=now)
        row = session.get(QueueRow, name, with_for_update=True)
        if "project" in given:
            row.project = settings.project
        if "weight" in given:
            row.weight = settings.weight
        for section, prefix in (("quota", "quota"), ("borrow_limit", "borrow")):
            if section not in given:
                continue
            amounts = getattr(settings, section)
            for resource in ("gpu", "cpu", "memory"):
                if amounts is None or resource in amounts.model_fields_set:
                    setattr(row, f"{prefix}_{resource}", None if amounts is None else getattr(amounts, resource))
        row.updated_at = now
        session.flush()
        info = _info(name, row, _loads(session, principal.visible_projects()).get(name, _Load()))
    wake()  # a new quota or limit may let waiting jobs start, or call for a preemption
    return info


def delete_queue(database: Database, principal: auth.Principal, name: str, *, wake: Callable[[], None]) -> None:
    if name == DEFAULT_QUEUE:
        _may_change(principal, projects.DEFAULT_PROJECT, name)
        raise Conflict("the default queue cannot be deleted; change its quota with PUT instead")
    with database.transaction() as session:
        # Locked while its jobs are counted, so a concurrent set_queue waits for the answer.
        row = session.get(QueueRow, name, with_for_update=True)
        if row is None:
            raise NotFound(f"queue {name!r} does not exist")
        _may_change(principal, row.project, name)
        jobs = session.scalars(
            select(JobRow.id).where(JobRow.queue == name, JobRow.status.in_(_UNFINISHED)).order_by(JobRow.id)
        ).all()
        if jobs:
            shown = ", ".join(map(str, jobs[:10])) + (", …" if len(jobs) > 10 else "")
            raise Conflict(f"queue {name!r} still has {len(jobs)} unfinished job(s) ({shown}); "
                           "cancel them or let them end first")
        session.delete(row)
    wake()
