"""Jobs: submission, queries and cancellation (statuses change through `lifecycle.switch_status`).

Everything here only reads and writes rows; starting and stopping processes is the
controller's work, which `submit` and `cancel` wake through the `wake` callback.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from mlyard.api.jobs import NOT_CONNECTED, AttemptInfo, EventInfo, JobDetail, JobInfo, ReplicaInfo
from mlyard.errors import (
    Conflict,
    InvalidRequest,
    Unschedulable,
)
from mlyard.scheduler import unschedulable_reason
from mlyard.server import auth
from mlyard.server.store import logfiles
from mlyard.server.lifecycle import attempt_run_time, service_rate, switch_status
from mlyard.server.scheduler_terms import DEFAULT_QUEUE, scheduler_node, smallest_gang
from mlyard.server.store.db import Database
from mlyard.server.store.rows import (
    AttemptRow,
    IdempotencyKeyRow,
    JobEventRow,
    JobRow,
    NodeRow,
    QueueRow,
    UserRow,
)
from mlyard.server.job_secrets import SecretBox
from mlyard.server.services import environments, job_specs, project_storage, projects, snapshots
from mlyard.spec import JobSpec, JobStatus

LOG_TAIL_LINES = 20
IDEMPOTENCY_KEY_LIFETIME = 24 * 3600.0
"""A retry later than this with the same key creates a new job."""
CONNECTED = "replicas are connected to rank 0"
"""The start of the event that clears a `NOT_CONNECTED` warning (`workers/connections.py`)."""
CONNECTION_CHECKS_OFF = "connection warnings are switched off"
"""The event that clears a `NOT_CONNECTED` warning once the server no longer gives them."""


@dataclass(frozen=True)
class Submission:
    job: JobInfo
    replayed: bool
    """True when an earlier request with the same Idempotency-Key created the job."""


def _caller(principal: auth.Principal) -> str:
    if principal.job_id is not None:
        return f"job:{principal.job_id}"
    return f"user:{principal.user_id}" if principal.user_id is not None else f"principal:{principal.name}"


def _replay(session: Session, principal: auth.Principal, caller: str, key: str, digest: str) -> JobInfo | None:
    """The job an earlier request with this key created, if any."""
    earlier = session.scalar(select(IdempotencyKeyRow).where(
        IdempotencyKeyRow.caller == caller, IdempotencyKeyRow.key == key,
        IdempotencyKeyRow.created_at >= time.time() - IDEMPOTENCY_KEY_LIFETIME))
    if earlier is None:
        return None
    if earlier.request_sha256 != digest:
        raise Conflict(f"Idempotency-Key {key!r} was used for a different job (job {earlier.job_id}); "
                       "use a new key for a new submission", field="headers.Idempotency-Key")
    return job_info(session.get(JobRow, earlier.job_id), principal)


def submit(database: Database, principal: auth.Principal, spec: JobSpec, *, wake: Callable[[], None],
           check_image: Callable[[str], str | None] | None = None, secrets: SecretBox | None = None) -> JobInfo:
    """Stores the job QUEUED; it is durable once this returns. `secrets` seals its `env_secrets`."""
    auth.authorize(principal, auth.Action.WRITE)
    job_specs.refuse_shown_values(spec)
    _check_image(spec, check_image)
    info = _insert(database, principal, job_specs.sealed_spec(spec, secrets), None)
    wake()
    return info


def submit_with_key(
    database: Database, principal: auth.Principal, spec: JobSpec, idempotency_key: str, *, wake: Callable[[], None],
    check_image: Callable[[str], str | None] | None = None, secrets: SecretBox | None = None, sealed: bool = False,
) -> Submission:
    """`submit`, except that a retry of the same request (same caller, key and spec) returns
    the job the first one created instead of creating another. `sealed`: the spec's secrets are
    already encrypted (a stored spec submitted again)."""
    auth.authorize(principal, auth.Action.WRITE)
    if not sealed:
        job_specs.refuse_shown_values(spec)
    caller = _caller(principal)
    digest = hashlib.sha256(job_specs.request_text(spec, None if sealed else secrets).encode()).hexdigest()
    with database.transaction() as session:
        replayed = _replay(session, principal, caller, idempotency_key, digest)
    if replayed is not None:  # a retry gets the first answer, whatever the engine holds now
        return Submission(job=replayed, replayed=True)
    _check_image(spec, check_image)
    stored = spec if sealed else job_specs.sealed_spec(spec, secrets)
    try:
        info = _insert(database, principal, stored, (caller, idempotency_key, digest))
    except IntegrityError:
        # A concurrent request with the same key committed first (PostgreSQL lets both get this far).
        with database.transaction() as session:
            replayed = _replay(session, principal, caller, idempotency_key, digest)
        if replayed is None:
            raise
        return Submission(job=replayed, replayed=True)
    wake()
    return Submission(job=info, replayed=False)


def _check_image(spec: JobSpec, check_image: Callable[[str], str | None] | None) -> None:
    """A job whose image the backend cannot run (no engine, an image it lacks) is refused now,
    not found failing later; asked outside any transaction, since it may ask the engine."""
    if spec.image is None or check_image is None:
        return
    problem = check_image(spec.image)
    if problem is not None:
        raise InvalidRequest(problem, field="image")


def _insert(database: Database, principal: auth.Principal, spec: JobSpec,
            key: tuple[str, str, str] | None) -> JobInfo:
    with database.transaction() as session:
        # A shared lock: a queue deleted meanwhile (which locks the row) cannot end up holding this job.
        queue = session.scalar(select(QueueRow).where(QueueRow.name == spec.queue).with_for_update(read=True))
        if spec.queue != DEFAULT_QUEUE and queue is None:
            names = sorted({DEFAULT_QUEUE, *session.scalars(select(QueueRow.name))})
            raise InvalidRequest(f"queue {spec.queue!r} does not exist; the queues are: {', '.join(names)}",
                                 field="queue")
        if queue is not None and "project" not in spec.model_fields_set:
            # A job that names a queue but no project belongs to the queue's project.
            spec = spec.model_copy(update={"project": queue.project})
        projects.ensure_project(session, principal, spec.project)
        auth.require_role(principal, spec.project, auth.Role.MEMBER, f"submit jobs to project {spec.project!r}")
        if spec.snapshot is not None:
            snapshot = snapshots.require_usable(session, principal, spec.snapshot, spec.project)
            project_storage.charge(session, spec.project, spec.snapshot, snapshot.size)
        if spec.environment is not None:
            environments.check_for_job(session, spec.environment, spec.project)
        # The default project's queues are shared; any other queue takes its own project's jobs.
        if queue is not None and queue.project not in (projects.DEFAULT_PROJECT, spec.project):
            raise InvalidRequest(f"queue {spec.queue!r} belongs to project {queue.project!r}; a job of project "
                                 f"{spec.project!r} cannot use it", field="queue")
        nodes = [scheduler_node(row) for row in session.scalars(select(NodeRow))]
        reason = unschedulable_reason(tuple(nodes), smallest_gang(spec), same_node=spec.placement.same_node,
                                      same_topology=spec.placement.same_topology)
        if reason is not None:
            raise Unschedulable(f"job {spec.name!r} can never run here: {reason}", field="roles")
        now = time.time()
        job = JobRow(
            name=spec.name,
            project=spec.project,
            queue=spec.queue,
            priority=spec.priority,
            owner_id=principal.user_id,
            spec=spec.model_dump(mode="json"),
            snapshot=spec.snapshot,
            status=JobStatus.QUEUED.value,
            attempt_count=0,
            submitted_at=now,
            updated_at=now,
        )
        session.add(job)
        session.flush()
        session.add(JobEventRow(job_id=job.id, at=now, from_status=None, to_status=JobStatus.QUEUED.value,
                                message=f"submitted by {principal.name}"))
        if key is not None:
            caller, value, digest = key
            # An expired row would make the unique (caller, key) pair refuse a legitimate reuse.
            session.execute(delete(IdempotencyKeyRow).where(
                IdempotencyKeyRow.created_at < now - IDEMPOTENCY_KEY_LIFETIME))
            session.add(IdempotencyKeyRow(caller=caller, key=value, request_sha256=digest, job_id=job.id,
                                          created_at=now))
        info = job_info(job, principal)
    return info


def resubmit(database: Database, principal: auth.Principal, job_id: int, idempotency_key: str, *,
             wake: Callable[[], None], check_image: Callable[[str], str | None] | None = None) -> Submission:
    """The job's spec as stored (its env values and sealed secrets kept) as a new job, for a
    caller who may see those values (`job_specs.check_resubmission`)."""
    auth.authorize(principal, auth.Action.READ, job_id=job_id)
    with database.transaction() as session:
        job = auth.visible_job(principal, session.get(JobRow, job_id), job_id)
        spec = JobSpec.model_validate(job.spec)
        job_specs.check_resubmission(principal, job, spec)
    return submit_with_key(database, principal, spec, idempotency_key, wake=wake, check_image=check_image,
                           sealed=True)


def list_jobs(
    database: Database, principal: auth.Principal, *, statuses: Sequence[JobStatus] = (), include_finished: bool = False,
    limit: int = 200, offset: int = 0, queue: str | None = None, project: str | None = None, owner: str | None = None,
    search: str | None = None,
) -> list[JobInfo]:
    """Newest first. `search` matches part of the name, ignoring case; the other filters match exactly."""
    auth.authorize(principal, auth.Action.READ)
    query = (select(JobRow).order_by(JobRow.id.desc()).limit(limit).offset(offset)
             .options(selectinload(JobRow.attempts).selectinload(AttemptRow.replicas), selectinload(JobRow.owner)))
    if statuses:
        query = query.where(JobRow.status.in_([status.value for status in statuses]))
    elif not include_finished:
        terminal = [status.value for status in JobStatus if status.is_terminal]
        query = query.where(JobRow.status.not_in(terminal))
    if queue:
        query = query.where(JobRow.queue == queue)
    if project:
        query = query.where(JobRow.project == project)
    if owner:
        query = query.where(JobRow.owner.has(UserRow.name == owner))
    if search:
        # Names are lowercase letters, digits and dashes, so lowering the pattern is enough; the
        # wildcards of LIKE are escaped so that they match themselves.
        escaped = search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(JobRow.name.like(f"%{escaped}%", escape="\\"))
    if principal.job_id is not None:
        query = query.where(JobRow.id == principal.job_id)
    if (visible := principal.visible_projects()) is not None:
        query = query.where(JobRow.project.in_(sorted(visible)))
    with database.transaction() as session:
        rows = list(session.scalars(query))
        warnings = connection_warnings(session, rows)
        return [job_info(row, principal, warning=warnings.get(row.id)) for row in rows]


def get_job(database: Database, principal: auth.Principal, job_id: int) -> JobDetail:
    auth.authorize(principal, auth.Action.READ, job_id=job_id)
    with database.transaction() as session:
        job = session.scalar(
            select(JobRow)
            .where(JobRow.id == job_id)
            .options(selectinload(JobRow.attempts).selectinload(AttemptRow.replicas), selectinload(JobRow.events))
        )
        job = auth.visible_job(principal, job, job_id)
        detail = JobDetail(
            **job_info(job, principal, warning=connection_warnings(session, [job]).get(job.id)).model_dump(),
            attempts=[attempt_info(attempt) for attempt in job.attempts],
            events=[
                EventInfo(at=event.at, from_status=event.from_status, to_status=event.to_status, message=event.message)
                for event in job.events
            ],
        )
        latest = job.attempts[-1] if job.attempts else None
    if latest is not None:
        detail.log_tail = {
            replica.name: logfiles.tail(replica.directory, LOG_TAIL_LINES) for replica in latest.replicas
        }
    return detail


def cancel(database: Database, principal: auth.Principal, job_id: int, *, wake: Callable[[], None]) -> JobInfo:
    """A queued job is cancelled at once; an active one is marked, and the controller stops
    its replicas (SIGTERM, grace period, SIGKILL) before it becomes CANCELLED."""
    auth.authorize(principal, auth.Action.WRITE, job_id=job_id)
    with database.transaction() as session:
        job = auth.visible_job(principal, session.get(JobRow, job_id, with_for_update=True), job_id)
        # One's own job needs the member role; anyone's, the maintainer role.
        own = principal.user_id is not None and job.owner_id == principal.user_id
        needed = auth.Role.MEMBER if own else auth.Role.MAINTAINER
        auth.require_role(principal, job.project, needed, f"cancel job {job_id}" + ("" if own else " of another user"))
        status = JobStatus(job.status)
        if status.is_terminal:
            raise Conflict(f"job {job_id} has already ended ({status.value})")
        if status in (JobStatus.QUEUED, JobStatus.PREEMPTED, JobStatus.RESTARTING):
            switch_status(session, job, JobStatus.CANCELLED, message=f"cancelled by {principal.name}")
        elif job.cancel_requested_at is None:
            job.cancel_requested_at = time.time()
            job.updated_at = job.cancel_requested_at
        info = job_info(job, principal, warning=connection_warnings(session, [job]).get(job.id))
    wake()
    return info


def job_info(job: JobRow, viewer: auth.Principal, *, now: float | None = None, warning: str | None = None) -> JobInfo:
    """The job as the API shows it to `viewer` (`job_specs.shown_spec`); attained service and
    time include the attempt running now. `warning`: its standing warning (`connection_warnings`)."""
    spec = JobSpec.model_validate(job.spec)
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
