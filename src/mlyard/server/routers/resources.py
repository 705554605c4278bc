"""What nodes and jobs use: `GET /nodes/{name}/samples`, `GET /jobs/{id}/resources` and
`GET /resources/jobs`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from mlyard.api.resources import JobResources, NodeSamples, RunningJobUsage, SampleResolution
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.routers.jobs import ERRORS, JobId
from mlyard.server.services import resources

router = APIRouter(tags=["monitoring"])

Since = Annotated[float | None, Query(
    ge=0, allow_inf_nan=False,
    description="only samples after this time (epoch seconds); default: the last hour (raw), the last day (1m)")]
Resolution = Annotated[SampleResolution, Query(description="raw samples, or 1-minute averages (kept longer)")]
Limit = Annotated[int, Query(ge=1, le=resources.MAX_POINTS, description="at most this many points, oldest first")]


@router.get("/nodes/{name}/samples", response_model=NodeSamples, responses=ERRORS)
def node_samples(
    name: Annotated[str, Path(max_length=255, description="the node's name")],
    database: DatabaseDependency,
    caller: PrincipalDependency,
    since: Since = None,
    resolution: Resolution = "raw",
    limit: Limit = resources.MAX_POINTS,
) -> NodeSamples:
    """A node's CPU, load, memory, disk, network and GPU figures over time."""
    return resources.node_samples(database, caller, name, since=since, resolution=resolution, limit=limit)


@router.get("/jobs/{job_id}/resources", response_model=JobResources, responses=ERRORS)
def job_resources(
    job_id: JobId,
    database: DatabaseDependency,
    caller: PrincipalDependency,
    since: Since = None,
    resolution: Resolution = "raw",
    limit: Limit = resources.MAX_POINTS,
) -> JobResources:
    """CPU, memory and GPU memory of a job's processes over time (its replicas added up), and
    the latest figures of each replica."""
    return resources.job_resources(database, caller, job_id, since=since, resolution=resolution, limit=limit)


@router.get("/resources/jobs", response_model=list[RunningJobUsage], responses=ERRORS)
def running_jobs(database: DatabaseDependency, caller: PrincipalDependency) -> list[RunningJobUsage]:
    """Every job holding resources, by id, with the latest CPU, memory and GPU memory of its
    replicas added up (null when none is under a minute old)."""
    return resources.running_jobs(database, caller)
