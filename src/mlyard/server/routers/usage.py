from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request

from mlyard.api.errors import ErrorBody
from mlyard.api.jobs import TensorBoardInfo
from mlyard.api.usage import UsageReport
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.routers.jobs import ERRORS, JobId
from mlyard.server.services import tensorboard, usage

router = APIRouter(tags=["usage"])
# Bounded so an absurd moment is a 422 rather than an overflow when it is turned into a date.
Moment = Annotated[float | None, Query(ge=0, le=253402300799, description="UTC seconds since the epoch")]


@router.get("/usage", response_model=UsageReport, responses={**ERRORS, 403: {"model": ErrorBody}})
def get_usage(
    database: DatabaseDependency,
    caller: PrincipalDependency,
    since: Moment = None,
    until: Moment = None,
    by: Annotated[Literal["user", "project"], Query(description="what a row is")] = "user",
) -> UsageReport:
    """GPU-hours and CPU-hours per user (or project) and per UTC day in [since, until); by
    default the last 7 days. Administrators see everyone's jobs, other users their own."""
    return usage.report(database, caller, since=since, until=until, by=by)


@router.get("/jobs/{job_id}/tensorboard", response_model=TensorBoardInfo,
            responses={**ERRORS, 403: {"model": ErrorBody}}, tags=["jobs"])
def job_tensorboard(job_id: JobId, request: Request, database: DatabaseDependency,
                    caller: PrincipalDependency) -> TensorBoardInfo:
    """The job's TensorBoard log directory (its replicas' MLYARD_TENSORBOARD_DIR)."""
    return tensorboard.directory(database, caller, request.app.state.settings.paths, job_id)
