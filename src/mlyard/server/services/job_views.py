"""Jobs as the API shows them: `job_info` (a row to a `JobInfo`), attempts, and the standing
connection warning of a running job. Only reads rows; shared by queries and submission."""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from mlyard.api.jobs import NOT_CONNECTED, AttemptInfo, JobInfo, ReplicaInfo
from mlyard.server import auth
from mlyard.server.lifecycle import attempt_run_time, service_rate
from mlyard.server.services import job_specs
from mlyard.server.store.rows import AttemptRow, JobEventRow, JobRow
from mlyard.spec import JobSpec, JobStatus

CONNECTED = "replicas are connected to rank 0"
"""The start of the event that clears a `NOT_CONNECTED` warning (`workers/connections.py`)."""
CONNECTION_CHECKS_OFF = "connection warnings are switched off"
"""The event that clears a `NOT_CONNECTED` warning once the server no longer gives them."""


def job_info(job: JobRow, viewer: auth.Principal, *, now: float | None = None, warning: str | None = None,
             spec: JobSpec | None = None) -> JobInfo:
    """The job as the API shows it to `viewer` (`job_specs.shown_spec`); attained service and
    time include the attempt running now. `warning`: its standing warning (`connection_warnings`).
    `spec`: the job's parsed spec where the caller has it (`Database.specs`), else parsed here."""
    spec = JobSpec.model_validate(job.spec) if spec is None else spec
    now = time.time() if now is None else now
    service, run_time = job.attained_service or 0.0, job.attained_time or 0.0
    for attempt in job.attempts:
        if attempt.finished_at is None:
            service += service_rate(attempt.replicas) * attempt_run_time(attempt, now)
            run_time += attempt_run_time(attempt, now)
    return JobInfo(
        id=job.id,
        name=job.name,
        project=job.project,
        queue=job.queue,
        priority=job.priority,
        owner=job.owner.name if job.owner is not None else None,
        status=JobStatus(job.status),
        message=job.message,
        exit_code=job.exit_code,
        replica_count=spec.replica_count,
        attempt_count=job.attempt_count,
        snapshot=job.snapshot,
        submitted_at=job.submitted_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        wait_reason=job.wait_reason if job.status in (JobStatus.QUEUED.value, JobStatus.RESTARTING.value) else None,
        attained_service=service,
        attained_time=run_time,
        preemption_count=job.preemption_count or 0,
        restart_count=job.restart_count or 0,
        restart_at=job.restart_at if job.status == JobStatus.RESTARTING.value else None,
        idle_since=job.idle_since if job.status == JobStatus.RUNNING.value else None,
        idle_reason=job.idle_reason if job.status == JobStatus.RUNNING.value else None,
        warning=warning if job.status == JobStatus.RUNNING.value else None,
        spec=job_specs.shown_spec(spec, env_visible=job_specs.may_read_env(viewer, job)),
    )


def _settles_connection_warning():
    """Events after which a job's connection warning stands or not: changes of status (a job
    leaving RUNNING, or running a new attempt, leaves the warning behind), the warning, and what
    clears it."""
    same_status = JobEventRow.from_status == JobEventRow.to_status
    return or_(JobEventRow.from_status.is_(None), JobEventRow.from_status != JobEventRow.to_status,
               same_status & JobEventRow.message.startswith(NOT_CONNECTED, autoescape=True),
               same_status & JobEventRow.message.startswith(CONNECTED, autoescape=True),
               same_status & (JobEventRow.message == CONNECTION_CHECKS_OFF))


def connection_warnings(session: Session, jobs: Sequence[JobRow]) -> dict[int, str]:
    """The standing `NOT_CONNECTED` warning of each RUNNING job of `jobs`, by job id: the
    message of the warning's event where it is the latest of the events that settle it. The
    events are the record (`workers/connections.py` adds them), so any server reads the same."""
    running = [job.id for job in jobs if job.status == JobStatus.RUNNING.value]
    if not running:
        return {}
    latest = (select(func.max(JobEventRow.id)).where(JobEventRow.job_id.in_(running), _settles_connection_warning())
              .group_by(JobEventRow.job_id))
    found = session.execute(select(JobEventRow.job_id, JobEventRow.from_status, JobEventRow.to_status,
                                   JobEventRow.message).where(JobEventRow.id.in_(latest.scalar_subquery())))
    return {job_id: message for job_id, from_status, to_status, message in found
            if from_status == to_status and message and message.startswith(NOT_CONNECTED)}


def _attempt_exit_code(attempt: AttemptRow) -> int | None:
    """The code of the replica that failed first (the others mostly die of the stop that
    followed), or 0 when every replica exited 0 or the attempt met its success policy (the
    replicas stopped after it do not count)."""
    if attempt.stop_outcome == JobStatus.SUCCEEDED.value:
        return 0
    ended = [replica for replica in attempt.replicas if replica.exit_code is not None]
    failed = [replica for replica in ended if replica.exit_code != 0]
    if failed:
        return min(failed, key=lambda replica: (replica.finished_at or float("inf"), replica.rank)).exit_code
    return 0 if ended and len(ended) == len(attempt.replicas) else None


def attempt_info(attempt: AttemptRow) -> AttemptInfo:
    return AttemptInfo(
        number=attempt.number,
        created_at=attempt.created_at,
        launched_at=attempt.launched_at,
        running_at=attempt.running_at,
        finished_at=attempt.finished_at,
        stop_reason=attempt.stop_reason,
        stop_outcome=JobStatus(attempt.stop_outcome) if attempt.stop_outcome else None,
        master_port=attempt.master_port,
        exit_code=_attempt_exit_code(attempt),
        replicas=[
            ReplicaInfo(
                name=replica.name,
                role=replica.role,
                index=replica.index,
                rank=replica.rank,
                node=replica.node,
                state=replica.state,
                pid=replica.pid,
                exit_code=replica.exit_code,
                cpu_ids=list(replica.cpu_ids),
                cpu_millicores=replica.cpu_millicores or 0,
                gpu_ids=list(replica.gpu_ids),
                memory_bytes=replica.memory_bytes,
                started_at=replica.started_at,
                finished_at=replica.finished_at,
                reason=replica.reason,
            )
            for replica in attempt.replicas
        ],
    )
