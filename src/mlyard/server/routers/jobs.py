from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request, Response, status

from mlyard.api.accounts import USER_NAME_PATTERN
from mlyard.api.errors import ErrorBody
from mlyard.api.jobs import (
    DEFAULT_PAGE_JOBS,
    IDEMPOTENCY_KEY_HELP,
    IDEMPOTENCY_KEY_PATTERN,
    MAX_PAGE_JOBS,
    JobBatch,
    JobBatchResult,
    JobDetail,
    JobInfo,
    LogChunk,
    SubmittedJob,
)
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
TOTAL_HEADER = "X-Total-Count"
NEXT_HEADER = "X-Next-After"
ERRORS = {401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}}
PAGE_HEADERS = {
    TOTAL_HEADER: {"description": "jobs matching the filters, whatever the page", "schema": {"type": "integer"}},
    NEXT_HEADER: {"description": "while jobs are left: the `after` of the next page", "schema": {"type": "integer"}},
    "Link": {"description": 'while jobs are left: `<URL of the next page>; rel="next"`', "schema": {"type": "string"}},
}


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
        min_length=1, max_length=255, pattern=IDEMPOTENCY_KEY_PATTERN,
        description=f"{IDEMPOTENCY_KEY_HELP}; a replayed answer carries the header Idempotent-Replayed: true",
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


# ":batch" cannot clash with "/{job_id}" routes: it follows "/jobs" without a slash.
@router.post(":batch", status_code=status.HTTP_201_CREATED, response_model=JobBatchResult,
             responses={**ERRORS, 403: {"model": ErrorBody}, 409: {"model": ErrorBody}, 507: {"model": ErrorBody}})
def submit_jobs(
    batch: JobBatch,
    database: DatabaseDependency,
    caller: PrincipalDependency,
    wake: WakeDependency,
    check_image: ImageCheckDependency,
    secrets: SecretsDependency,
) -> JobBatchResult:
    """Queues up to 1,000 jobs at once: each is checked as `POST /jobs` checks one, and all are
    stored in one transaction, or none. An error names the failing item and field
    (`jobs.3.spec.roles.0.resources.cpu`). An item with an `idempotency_key` that the caller
    already used for the same spec gets the job that request created (`replayed`), so the
    whole batch may be sent again after a lost answer; the answer lists the items in order."""
    submissions = jobs.submit_batch(database, caller, [(item.spec, item.idempotency_key) for item in batch.jobs],
                                    wake=wake, check_image=check_image, secrets=secrets)
    return JobBatchResult(items=[SubmittedJob(job=submission.job, replayed=submission.replayed)
                                 for submission in submissions])


@router.get("", response_model=list[JobInfo], responses={**ERRORS, 200: {"headers": PAGE_HEADERS}})
def list_jobs(
    request: Request,
    response: Response,
    database: DatabaseDependency,
    caller: PrincipalDependency,
    status_filter: Annotated[list[JobStatus] | None, Query(alias="status")] = None,
    include_finished: Annotated[bool, Query(alias="all")] = False,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_JOBS)] = DEFAULT_PAGE_JOBS,
    after: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="only jobs with a smaller id: the "
                                       f"{NEXT_HEADER} of the previous page")] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="jobs to skip; `after` pages more "
                                 "reliably")] = 0,
    queue: Annotated[str | None, Query(pattern=NAME_PATTERN, description="only this queue's jobs")] = None,
    project: Annotated[str | None, Query(pattern=NAME_PATTERN, description="only this project's jobs")] = None,
    owner: Annotated[str | None, Query(pattern=USER_NAME_PATTERN, description="only jobs this user submitted")] = None,
    search: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9-]{1,63}$", description="part of the job's name, any case")
                      ] = None,
) -> list[JobInfo]:
    """Jobs newest first (by id); unfinished ones unless `all` or a `status` filter is given.
    `X-Total-Count` says how many match the filters in all; while more are left,
    `X-Next-After` (and a `Link` with rel="next") gives the `after` of the next page."""
    page = jobs.page_jobs(database, caller, statuses=status_filter or (), include_finished=include_finished,
                          limit=limit, offset=offset, after=after, queue=queue, project=project, owner=owner,
                          search=search)
    response.headers[TOTAL_HEADER] = str(page.total)
    if page.next_after is not None:
        response.headers[NEXT_HEADER] = str(page.next_after)
        following = request.url.remove_query_params("offset").include_query_params(after=page.next_after)
        response.headers["Link"] = f'<{following}>; rel="next"'
    return page.jobs


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
