"""The pages: the jobs table and a job's page. Every read and action goes through the
services with the caller's principal, which authorize it as they do for the API."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Path, Query, Request, status
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from mlyard.api.jobs import JobDetail
from mlyard.errors import MlyardError
from mlyard.server.services import jobs
from mlyard.spec import JobStatus
from mlyard.web.templating import page
from mlyard.web.session import ChangingPrincipal, PagePrincipal
from mlyard.web.spec_text import spec_yaml

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 25
MAX_PAGE = 100_000
JobId = Annotated[int, Path(ge=1, le=2**31 - 1)]
ACTIVE = "active"
STATUS_CHOICES = ["", ACTIVE, *(status.value for status in JobStatus)]
"""The filter's options: every job, the unfinished ones, or one status."""


def _error(request: Request, error: MlyardError, principal=None) -> Response:
    return page(request, "error.html", status_code=error.http_status, error=error, principal=principal)


QUERY_NAMES = {"search": "q"}


@dataclass(frozen=True)
class JobFilters:
    """The jobs table's filters, as query parameters so that a filtered view can be bookmarked."""

    status: str = ""
    queue: str = ""
    owner: str = ""
    search: str = ""

    def query(self, **changes: object) -> str:
        """The query string of these filters (with `changes`), empty values left out."""
        values = {**asdict(self), **changes}
        return urlencode({QUERY_NAMES.get(key, key): value for key, value in values.items() if value not in ("", None)})


def job_filters(status_filter: Annotated[str, Query(alias="status", max_length=32)] = "",
                queue: Annotated[str, Query(max_length=63)] = "", owner: Annotated[str, Query(max_length=128)] = "",
                search: Annotated[str, Query(alias="q", max_length=63)] = "") -> JobFilters:
    return JobFilters(status=status_filter if status_filter in STATUS_CHOICES else "", queue=queue.strip(),
                      owner=owner.strip(), search=search.strip())


Filters = Annotated[JobFilters, Depends(job_filters)]
PageNumber = Annotated[int, Query(alias="page", ge=1, le=MAX_PAGE)]


def _jobs_listing(request: Request, principal, filters: JobFilters, page_number: int) -> dict:
    statuses = [JobStatus(filters.status)] if filters.status not in ("", ACTIVE) else []
    # One row more than a page tells whether a next page exists without counting the table.
    rows = jobs.list_jobs(request.app.state.database, principal, statuses=statuses,
                          include_finished=filters.status != ACTIVE, limit=PAGE_SIZE + 1,
                          offset=(page_number - 1) * PAGE_SIZE, queue=filters.queue or None,
                          owner=filters.owner or None, search=filters.search or None)
    return {"jobs": rows[:PAGE_SIZE], "has_next": len(rows) > PAGE_SIZE, "page_number": page_number,
            "filters": filters, "filtered": any(asdict(filters).values()), "status_choices": STATUS_CHOICES,
            "principal": principal}


@router.get("/")
def home() -> Response:
    return RedirectResponse("/overview", status_code=status.HTTP_303_SEE_OTHER)


@router.get("/jobs")
def jobs_page(request: Request, principal: PagePrincipal, filters: Filters, page_number: PageNumber = 1) -> Response:
    try:
        listing = _jobs_listing(request, principal, filters, page_number)
    except MlyardError as error:
        return _error(request, error, principal)
    return page(request, "jobs.html", nav="jobs", **listing)


@router.get("/jobs/table")
def jobs_table(request: Request, principal: PagePrincipal, filters: Filters, page_number: PageNumber = 1) -> Response:
    """The table alone, which the jobs page polls."""
    try:
        listing = _jobs_listing(request, principal, filters, page_number)
    except MlyardError as error:
        return _error(request, error)
    return page(request, "jobs_table.html", **listing)


def _replica_tabs(job: JobDetail) -> list[tuple[str, str]]:
    """(query value, label) per replica of the latest attempt; by rank before any attempt exists."""
    if job.attempts:
        return [(replica.name, f"{replica.name} (rank {replica.rank})") for replica in job.attempts[-1].replicas]
    return [(str(rank), f"rank {rank}") for rank in range(job.replica_count)]


def _job_number(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and len(value) < 10 else None


@router.get("/jobs/{job_id}")
def job_page(request: Request, principal: PagePrincipal, job_id: JobId) -> Response:
    try:
        job = jobs.get_job(request.app.state.database, principal, job_id)
    except MlyardError as error:
        return _error(request, error, principal)
    spec = spec_yaml(job.spec)
    return page(request, "job.html", nav="jobs", job=job, spec_yaml=spec, tabs=_replica_tabs(job),
                principal=principal, notice=request.query_params.get("notice"),
                resubmitted_from=_job_number(request.query_params.get("from")))


@router.get("/jobs/{job_id}/summary")
def job_summary(request: Request, principal: PagePrincipal, job_id: JobId) -> Response:
    """Status, events, attempts and replicas, which the job page polls until the job ends."""
    try:
        job = jobs.get_job(request.app.state.database, principal, job_id)
    except MlyardError as error:
        return _error(request, error)
    return page(request, "job_summary.html", job=job)


@router.post("/jobs/{job_id}/cancel")
def cancel_job(request: Request, principal: ChangingPrincipal, job_id: JobId) -> Response:
    try:
        jobs.cancel(request.app.state.database, principal, job_id, wake=request.app.state.controller.wake)
    except MlyardError as error:
        return _error(request, error, principal)
    return RedirectResponse(f"/jobs/{job_id}?notice=cancel-requested", status_code=status.HTTP_303_SEE_OTHER)
