"""The job and attempt state machine: the only code that writes `jobs.status` and ends attempts.

Words (see `spec.JobStatus` for each status and what sets it):
- an attempt is *holding* while `attempts.finished_at` is unset: its replicas may exist and its
  resources are not free;
- a *stop request* on an attempt (`request_stop`: `stop_requested_at`, `stop_deadline`,
  `stop_outcome`, `stop_reason`) asks the controller to send SIGTERM once, SIGKILL after the
  deadline, and to give the job `stop_outcome` once no replica is left (`finish_stop`);
- a job's tokens for its replicas die with the attempt that got them: `switch_status` revokes
  them whenever the job leaves its attempt behind (a terminal status, RESTARTING, PREEMPTED).

The only writers: `switch_status` of `jobs.status` (checked against
`job_status.ALLOWED_TRANSITIONS`, stamped, with a `job_events` row); `request_stop` of an attempt's
stop columns (and `finish_stop`, once, when a success policy turns out met after all); `end_attempt` of `attempts.finished_at` and the job's attained service. Callers
hold the job's row lock (a transaction of the controller, or a request handler's).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from sqlalchemy.orm import Session

from mlyard.errors import InvalidTransition
from mlyard.server import auth
from mlyard.server.store.rows import AttemptRow, JobEventRow, JobRow, ReplicaRow
from mlyard.spec import JobSpec, JobStatus, can_transition

GONE = ("exited", "lost")
"""Replica states after which nothing of the replica runs."""
REQUEUED = "requeued; resumes from its checkpoint"
RESIZE_REASON = "resize to "
"""How the stop of a resize begins its reason: it goes the way of a preemption, but is not counted
as one (`preemption_count`, weighed against the scheduler's preemption budget)."""
CANCELLED_BY_REQUEST = "cancelled by request"
_ATTEMPT_LEFT_BEHIND = frozenset({JobStatus.RESTARTING, JobStatus.PREEMPTED})


def switch_status(
    session: Session, job: JobRow, target: JobStatus, *, message: str | None = None, now: float | None = None
) -> None:
    """The only place a job's status changes: checks the transition, stamps the times,
    records an event, and revokes the job's tokens when it leaves its attempt behind."""
    current = JobStatus(job.status)
    if not can_transition(current, target):
        raise InvalidTransition(f"job {job.id}: {current.value} → {target.value} is not allowed")
    now = time.time() if now is None else now
    job.status = target.value
    job.updated_at = now
    job.message = message  # the reason for the latest change; none for a plain step forward
    if target is JobStatus.RUNNING and job.started_at is None:
        job.started_at = now
    if target is not JobStatus.RUNNING:  # an idle warning is about the attempt running now
        job.idle_since = job.idle_reason = None
    if target.is_terminal:
        job.finished_at = now
    if target.is_terminal or target in _ATTEMPT_LEFT_BEHIND:  # the next attempt gets a token of its own
        auth.revoke_job_tokens(session, job.id)
    session.add(JobEventRow(job_id=job.id, at=now, from_status=current.value, to_status=target.value, message=message))


def request_stop(attempt: AttemptRow, outcome: JobStatus, reason: str, now: float, *, grace: float) -> None:
    """Asks the controller to stop the attempt: it sends SIGTERM on its next pass, SIGKILL after
    `grace`, and gives the job `outcome` once no replica is left."""
    attempt.stop_requested_at = now
    attempt.stop_deadline = now + grace
    attempt.stop_outcome = outcome.value
    attempt.stop_reason = reason


def preemption_unsignalled(attempt: AttemptRow) -> bool:
    """A scheduler's stop whose SIGTERM has not gone out yet gives way to whatever the attempt
    does on its own (fail, succeed, be cancelled)."""
    return attempt.stop_outcome == JobStatus.PREEMPTED.value and attempt.stop_signalled_at is None


def service_rate(replicas: Iterable[ReplicaRow]) -> float:
    """Service units per second of run time: the GPUs held, or the cores if no GPU is held (a
    share of a core as its fraction)."""
    held = list(replicas)
    gpus = sum(len(replica.gpu_ids) for replica in held)
    return float(gpus if gpus else sum(replica.cpu for replica in held))


def attempt_started_at(attempt: AttemptRow) -> float:
    return attempt.launched_at if attempt.launched_at is not None else attempt.created_at


def attempt_run_time(attempt: AttemptRow, now: float) -> float:
    """Wall seconds the attempt's processes have existed (0 for one that was never launched)."""
    if attempt.launched_at is None:
        return 0.0
    return max(0.0, (attempt.finished_at or now) - attempt.launched_at)


def end_attempt(attempt: AttemptRow, now: float) -> None:
    """Marks the attempt finished and adds what it consumed to its job's attained service."""
    attempt.finished_at = now
    run_time = attempt_run_time(attempt, now)
    job = attempt.job
    job.attained_time = (job.attained_time or 0.0) + run_time
    job.attained_service = (job.attained_service or 0.0) + service_rate(attempt.replicas) * run_time


def succeed(session: Session, attempt: AttemptRow, now: float) -> None:
    """Every replica exited 0."""
    end_attempt(attempt, now)
    attempt.job.exit_code = 0
    switch_status(session, attempt.job, JobStatus.SUCCEEDED, now=now)


def finish_stop(session: Session, attempt: AttemptRow, spec: JobSpec, now: float, *,
                succeeded: str | None = None) -> None:
    """No replica of a stopping attempt is left: the job takes the stop's outcome. A
    preempted job is queued again and a failed one with restarts left waits out its
    backoff, unless it was cancelled meanwhile (the cancel wins). `succeeded`: why the
    attempt met its success policy after all (`judge.succeeded_before_failure`), which turns
    a stop for a failure into SUCCEEDED."""
    end_attempt(attempt, now)
    job = attempt.job
    outcome, reason = JobStatus(attempt.stop_outcome), attempt.stop_reason
    if succeeded is not None and outcome in (JobStatus.RESTARTING, JobStatus.FAILED):
        outcome, reason = JobStatus.SUCCEEDED, succeeded
        attempt.stop_outcome, attempt.stop_reason = outcome.value, reason  # what `mlyard show` tells of it
    if outcome in (JobStatus.PREEMPTED, JobStatus.RESTARTING) and job.cancel_requested_at is not None:
        outcome, reason = JobStatus.CANCELLED, CANCELLED_BY_REQUEST
    if outcome is JobStatus.RESTARTING:
        delay = spec.restart_policy.backoff(job.restart_count or 0)
        job.restart_count = (job.restart_count or 0) + 1
        job.restart_at = now + delay
        job.wait_reason = None
        switch_status(session, job, JobStatus.RESTARTING, message=f"{reason}, after a backoff of {delay:g}s", now=now)
    elif outcome is JobStatus.PREEMPTED:
        switch_status(session, job, JobStatus.PREEMPTED, message=reason, now=now)
        switch_status(session, job, JobStatus.QUEUED, message=REQUEUED, now=now)
        job.queued_since = now
        if not (reason or "").startswith(RESIZE_REASON):  # a resize restarts the job but preempts nothing
            job.preemption_count = (job.preemption_count or 0) + 1
        job.wait_reason = None
    else:
        if outcome is JobStatus.SUCCEEDED:  # the success policy was met: the others' codes do not count
            job.exit_code = 0
        switch_status(session, job, outcome, message=reason, now=now)


def abandon(session: Session, attempt: AttemptRow, reason: str, now: float) -> None:
    """Ends an attempt that never ran: its replicas count as lost and its job fails (or is
    cancelled, if that was asked)."""
    end_attempt(attempt, now)
    for replica in attempt.replicas:
        if replica.state not in GONE:
            replica.state, replica.finished_at = "lost", now
    job = attempt.job
    if JobStatus(job.status).is_terminal:
        return
    outcome = JobStatus.CANCELLED if job.cancel_requested_at is not None else JobStatus.FAILED
    switch_status(session, job, outcome, message=reason, now=now)
