"""Attempts as the controller reads and ends them: which ones hold resources, which jobs may
be started, the locks a pass takes, and the bookkeeping when an attempt ends."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session, selectinload

from mlyard.backends.base import ReplicaRef
from mlyard.scheduler import StartJob
from mlyard.server.control.scheduler_input import attempt_run_time, service_rate
from mlyard.server.store.rows import AttemptRow, JobRow, ReplicaRow
from mlyard.spec import JobSpec, JobStatus

GONE = ("exited", "lost")


def replica_reference(replica: ReplicaRow) -> ReplicaRef:
    return ReplicaRef(replica_id=replica.id, node=replica.node, directory=Path(replica.directory),
                      pid=replica.pid, pid_started_at=replica.pid_started_at)


def start_text(decision: StartJob, spec: JobSpec) -> str:
    """The SCHEDULED event: why the scheduler chose the job (if it said) and where it runs."""
    parts = []
    for placement in decision.placements:
        text = f"{placement.role}-{placement.index} on {placement.node} cpus {','.join(map(str, placement.cpu_ids))}"
        if placement.gpu_ids:
            text += f" gpus {','.join(map(str, placement.gpu_ids))}"
        parts.append(text)
    placed = "placed " + "; ".join(parts)
    if spec.elastic is not None:
        placed = f"{len(decision.placements)} of {spec.elastic.max_replicas} replicas {placed}"
    return f"{decision.reason}; {placed}" if decision.reason else placed


def end_attempt(attempt: AttemptRow, now: float) -> None:
    """Marks the attempt finished and adds what it consumed to its job's attained service."""
    attempt.finished_at = now
    run_time = attempt_run_time(attempt, now)
    job = attempt.job
    job.attained_time = (job.attained_time or 0.0) + run_time
    job.attained_service = (job.attained_service or 0.0) + service_rate(attempt.replicas) * run_time


def request_stop(attempt: AttemptRow, outcome: JobStatus, reason: str, now: float, *, grace: float) -> None:
    """Asks the controller to stop the attempt: it sends SIGTERM on its next pass, SIGKILL after
    `grace`, and gives the job `outcome` once no replica is left."""
    attempt.stop_requested_at = now
    attempt.stop_deadline = now + grace
    attempt.stop_outcome = outcome.value
    attempt.stop_reason = reason


def scheduler_stop_unsignalled(attempt: AttemptRow) -> bool:
    return attempt.stop_outcome == JobStatus.PREEMPTED.value and attempt.stop_signalled_at is None


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
                        .with_for_update().execution_options(populate_existing=True)).all()


def holding_attempts(session: Session) -> list[AttemptRow]:
    return list(
        session.scalars(
            select(AttemptRow)
            .where(AttemptRow.finished_at.is_(None))
            .options(selectinload(AttemptRow.replicas), selectinload(AttemptRow.job).selectinload(JobRow.owner))
            .order_by(AttemptRow.id)
        )
    )
