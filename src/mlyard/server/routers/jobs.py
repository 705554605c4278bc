from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response, status

from mlyard.api.accounts import USER_NAME_PATTERN
from mlyard.api.errors import ErrorBody
from mlyard.api.jobs import JobDetail, JobInfo, LogChunk
from mlyard.server.routers.dependencies import (
    DatabaseDependency,
    ImageCheckDependency,
    PrincipalDependency,
    SecretsDependency,
    WakeDependency,
)
from mlyard.server.services import jobs, logs
from mlyard.spec import NAME_PATTERN, JobSpec, JobStatus

router = APIRouter(prefix="/jobs", tags=["jobs"])
# Bounded so an absurd id or offset is a 422, not an overflow deep in the database driver: job
# ids are INTEGER columns, 32 bits on PostgreSQL.
JobId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the job's id")]
MAX_OFFSET = 2**62
ERRORS = {401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobInfo,
             responses={**ERRORS, 409: {"model": ErrorBody}, 507: {"model": ErrorBody}})
def submit_job(
    spec: JobSpec,
    database: DatabaseDependency,
    caller: PrincipalDependency,
    wake: WakeDependency,
    check_image: ImageCheckDependency,
    secrets: SecretsDependency,
    response: Response,
    idempotency_key: Annotated[str | None, Header(
        min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$",
        description="makes retries safe: a repeated request with the same key (and spec) returns the job the "
        "first created, with the header Idempotent-Replayed: true; keys are kept 24 hours",
    )] = None,
) -> JobInfo:
    """Queues a job. It starts when the scheduler finds room for all its replicas at once.
    The job is stored durably before the answer is sent. `env_secrets` values are stored encrypted
    and never shown again."""
    if idempotency_key is None:
        return jobs.submit(database, caller, spec, wake=wake, check_image=check_image, secrets=secrets)
    submission = jobs.submit_with_key(database, caller, spec, idempotency_key, wake=wake, check_image=check_image,
                                      secrets=secrets)
    if submission.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return submission.job


@router.get("", response_model=list[JobInfo], responses=ERRORS)
def list_jobs(
    database: DatabaseDependency,
    caller: PrincipalDependency,
    status_filter: Annotated[list[JobStatus] | None, Query(alias="status")] = None,
    include_finished: Annotated[bool, Query(alias="all")] = False,
    limit: Annotated[int, Query(ge=1, le=10000)] = 200,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    queue: Annotated[str | None, Query(pattern=NAME_PATTERN, description="only this queue's jobs")] = None,
    project: Annotated[str | None, Query(pattern=NAME_PATTERN, description="only this project's jobs")] = None,
    owner: Annotated[str | None, Query(pattern=USER_NAME_PATTERN, description="only jobs this user submitted")] = None,
    search: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9-]{1,63}$", description="part of the job's name, any case")
                      ] = None,
) -> list[JobInfo]:
    """Jobs newest first; unfinished ones unless `all` or a `status` filter is given."""
    return jobs.list_jobs(database, caller, statuses=status_filter or (), include_finished=include_finished, limit=limit,
                          offset=offset, queue=queue, project=project, owner=owner, search=search)


@router.get("/{job_id}", response_model=JobDetail, responses=ERRORS)
def get_job(job_id: JobId, database: DatabaseDependency, caller: PrincipalDependency) -> JobDetail:
    return jobs.get_job(database, caller, job_id)


@router.post("/{job_id}/cancel", response_model=JobInfo, responses={**ERRORS, 409: {"model": ErrorBody}})
def cancel_job(job_id: JobId, database: DatabaseDependency, caller: PrincipalDependency, wake: WakeDependency) -> JobInfo:
    """A queued job ends at once; a running one gets SIGTERM, a grace period, then SIGKILL."""
    return jobs.cancel(database, caller, job_id, wake=wake)


@router.get("/{job_id}/logs", response_model=LogChunk, responses=ERRORS)
def job_logs(
    job_id: JobId,
    database: DatabaseDependency,
    caller: PrincipalDependency,
    replica: str | None = None,
    attempt: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=1024 * 1024)] = 1024 * 1024,
) -> LogChunk:
    """A replica's combined stdout/stderr from `offset`; follow by asking again from `next_offset`."""
    return logs.read_log(database, caller, job_id, replica=replica, attempt=attempt, offset=offset, limit=limit)
