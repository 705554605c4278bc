from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from mlyard.api.errors import ErrorBody
from mlyard.api.metrics import MetricsPage, MetricsReport
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.routers.jobs import ERRORS, JobId
from mlyard.server.services import metrics

router = APIRouter(prefix="/jobs", tags=["metrics"])


@router.post("/{job_id}/metrics", status_code=status.HTTP_201_CREATED, response_model=dict[str, int],
             responses={**ERRORS, 403: {"model": ErrorBody}, 409: {"model": ErrorBody}, 413: {"model": ErrorBody}})
def report_metrics(job_id: JobId, report: MetricsReport, database: DatabaseDependency,
                   caller: PrincipalDependency) -> dict[str, int]:
    """Stores the values of one training step; replicas report with their job's token."""
    return {"stored": metrics.record(database, caller, job_id, report)}


@router.get("/{job_id}/metrics", response_model=MetricsPage, responses=ERRORS)
def job_metrics(
    job_id: JobId,
    database: DatabaseDependency,
    caller: PrincipalDependency,
    name: Annotated[list[str] | None, Query(max_length=64, description="only these metrics")] = None,
    # Ids are INTEGER columns (32 bits on PostgreSQL): a larger cursor is a 422, not a driver error.
    after: Annotated[int, Query(ge=0, le=2**31 - 1, description="the next_after of the previous page")] = 0,
    limit: Annotated[int, Query(ge=1, le=metrics.PAGE_SIZE)] = metrics.PAGE_SIZE,
) -> MetricsPage:
    """Reported values oldest first; follow by asking again with `after=next_after`."""
    return metrics.read(database, caller, job_id, names=name, after=after, limit=limit)
