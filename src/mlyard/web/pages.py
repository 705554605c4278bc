"""The pages: the jobs table and a job's page. Every read and action goes through the
services with the caller's principal, which authorize it as they do for the API."""

from __future__ import annotations

from typing import Annotated

import yaml
from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from mlyard.api_models import JobDetail
from mlyard.errors import MlyardError
from mlyard.server.services import jobs
from mlyard.spec import JobStatus
from mlyard.web.render import page
from mlyard.web.session import PagePrincipal

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 25
MAX_PAGE = 100_000
JobId = Annotated[int, Path(ge=1, le=2**31 - 1)]
ACTIVE = "active"
STATUS_CHOICES = ["", ACTIVE, *(status.value for status in JobStatus)]
"""The filter's options: every job, the unfinished ones, or one status."""


def _error(request: Request, error: MlyardError) -> Response:
    return page(request, "error.html", status_code=error.http_status, error=error)


def _jobs_listing(request: Request, principal, status_filter: str, page_number: int) -> dict:
    if status_filter not in STATUS_CHOICES:
        status_filter = ""
    statuses = [JobStatus(status_filter)] if status_filter not in ("", ACTIVE) else []
    # One row more than a page tells whether a next page exists without counting the table.
    rows = jobs.list_jobs(request.app.state.database, principal, statuses=statuses,
                          include_finished=status_filter != ACTIVE, limit=PAGE_SIZE + 1,
                          offset=(page_number - 1) * PAGE_SIZE)
    return {"jobs": rows[:PAGE_SIZE], "has_next": len(rows) > PAGE_SIZE, "page_number": page_number,
            "status_filter": status_filter, "status_choices": STATUS_CHOICES, "principal": principal}


@router.get("/")
def home() -> Response:
    return RedirectResponse("/jobs", status_code=status.HTTP_303_SEE_OTHER)


@router.get("/jobs")
def jobs_page(request: Request, principal: PagePrincipal, status_filter: Annotated[str, Query(alias="status")] = "",
              page_number: Annotated[int, Query(alias="page", ge=1, le=MAX_PAGE)] = 1) -> Response:
    try:
        listing = _jobs_listing(request, principal, status_filter, page_number)
    except MlyardError as error:
        return _error(request, error)
    return page(request, "jobs.html", nav="jobs", **listing)


@router.get("/jobs/table")
def jobs_table(request: Request, principal: PagePrincipal, status_filter: Annotated[str, Query(alias="status")] = "",
               page_number: Annotated[int, Query(alias="page", ge=1, le=MAX_PAGE)] = 1) -> Response:
    """The table alone, which the jobs page polls."""
    try:
        listing = _jobs_listing(request, principal, status_filter, page_number)
    except MlyardError as error:
        return _error(request, error)
    return page(request, "jobs_table.html", **listing)


def _replica_tabs(job: JobDetail) -> list[tuple[str, str]]:
    """(query value, label) per replica of the latest attempt; by rank before any attempt exists."""
    if job.attempts:
        return [(replica.name, f"{replica.name} (rank {replica.rank})") for replica in job.attempts[-1].replicas]
    return [(str(rank), f"rank {rank}") for rank in range(job.replica_count)]


@router.get("/jobs/{job_id}")
def job_page(request: Request, principal: PagePrincipal, job_id: JobId) -> Response:
    try:
        job = jobs.get_job(request.app.state.database, principal, job_id)
    except MlyardError as error:
        return _error(request, error)
    spec = yaml.safe_dump(job.spec.model_dump(mode="json", exclude_none=True), sort_keys=False)
    return page(request, "job.html", nav="jobs", job=job, spec_yaml=spec, tabs=_replica_tabs(job),
                principal=principal, notice=request.query_params.get("notice"))


@router.get("/jobs/{job_id}/summary")
def job_summary(request: Request, principal: PagePrincipal, job_id: JobId) -> Response:
    """Status, events, attempts and replicas, which the job page polls until the job ends."""
    try:
        job = jobs.get_job(request.app.state.database, principal, job_id)
    except MlyardError as error:
        return _error(request, error)
    return page(request, "job_summary.html", job=job)


@router.post("/jobs/{job_id}/cancel")
def cancel_job(request: Request, principal: PagePrincipal, job_id: JobId) -> Response:
    try:
        jobs.cancel(request.app.state.database, principal, job_id, wake=request.app.state.controller.wake)
    except MlyardError as error:
        return _error(request, error)
    return RedirectResponse(f"/jobs/{job_id}?notice=cancel-requested", status_code=status.HTTP_303_SEE_OTHER)
