"""Attempts as the controller reads them: which ones hold resources, which jobs may be
started, the locks a pass takes. Ending an attempt is `lifecycle.py`'s."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session, defer, selectinload

from mlyard.backends.base import ReplicaRef
from mlyard.scheduler import StartJob
from mlyard.server.store.rows import AttemptRow, JobRow, ReplicaRow
from mlyard.spec import JobSpec, JobStatus


def replica_reference(replica: ReplicaRow) -> ReplicaRef:
    return ReplicaRef(replica_id=replica.id, node=replica.node, directory=Path(replica.directory),
                      pid=replica.pid, pid_started_at=replica.pid_started_at)


def start_text(decision: StartJob, spec: JobSpec) -> str:
    """The SCHEDULED event: why the scheduler chose the job (if it said) and where it runs."""
    parts = []
    for placement in decision.placements:
        if placement.cpu_millicores:
            cpus = f"{placement.cpu_millicores / 1000:g} of cpu {','.join(map(str, placement.cpu_ids))}"
        else:
            cpus = f"cpus {','.join(map(str, placement.cpu_ids))}"
        text = f"{placement.role}-{placement.index} on {placement.node} {cpus}"
        if placement.gpu_ids:
            text += f" gpus {','.join(map(str, placement.gpu_ids))}"
        parts.append(text)
    placed = "placed " + "; ".join(parts)
    if spec.elastic is not None:
        placed = f"{len(decision.placements)} of {spec.elastic.max_replicas} replicas {placed}"
    return f"{decision.reason}; {placed}" if decision.reason else placed








def schedulable(now: float) -> ColumnElement[bool]:
    """Jobs the scheduler may start: queued ones, and restarting ones whose backoff is over."""
    return or_(JobRow.status == JobStatus.QUEUED.value,
               and_(JobRow.status == JobStatus.RESTARTING.value, JobRow.restart_at <= now))


def lock_jobs(session: Session, job_ids: set[int]) -> None:
    """PostgreSQL runs a cancel beside a pass: the jobs a pass may change are locked and read
    again under the lock, so a cancel committed meanwhile is seen, not overwritten. (SQLite's
    BEGIN IMMEDIATE already serializes the two.)"""
    if job_ids:
        session.scalars(select(JobRow).where(JobRow.id.in_(sorted(job_ids))).order_by(JobRow.id)
                        .options(defer(JobRow.spec))  # read again without the spec: `Database.specs` has it
                        .with_for_update().execution_options(populate_existing=True)).all()


def holding_attempts(session: Session) -> list[AttemptRow]:
    """Every attempt that may hold resources, with its replicas and job (whose spec is left out:
    ask `Database.specs`)."""
    return list(
        session.scalars(
            select(AttemptRow)
            .where(AttemptRow.finished_at.is_(None))
            .options(selectinload(AttemptRow.replicas),
                     selectinload(AttemptRow.job).options(defer(JobRow.spec), selectinload(JobRow.owner)))
            .order_by(AttemptRow.id)
        )
    )
