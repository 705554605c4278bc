"""Cleaning reports of dataset versions and cleaning (`services/datasets/checks.py`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status

from mlyard.api.dataset_checks import CheckInfo, CheckReport, CheckRequest, CleanRequest
from mlyard.api.datasets import VersionCreated
from mlyard.api.errors import ErrorBody
from mlyard.server.routers.datasets import ERRORS, Name, Project, Reference
from mlyard.server.routers.dependencies import (
    DatabaseDependency,
    ImageCheckDependency,
    PrincipalDependency,
    WakeDependency,
)
from mlyard.server.services.datasets import checks

router = APIRouter(prefix="/datasets", tags=["datasets"])
VERSION = "/{project}/{name}/versions/{version}"
CheckId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the report's id")]


@router.post(VERSION + "/checks", response_model=CheckInfo, status_code=status.HTTP_202_ACCEPTED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def start_check(project: Project, name: Name, version: Reference, request: CheckRequest,
                database: DatabaseDependency, caller: PrincipalDependency, wake: WakeDependency,
                check_image: ImageCheckDependency) -> CheckInfo:
    """Queues the job that makes the version's cleaning report (members of the dataset's project)."""
    return checks.start_check(database, caller, project, name, version, request, wake=wake, check_image=check_image)


@router.get(VERSION + "/checks", response_model=list[CheckInfo], responses=ERRORS)
def list_checks(project: Project, name: Name, version: Reference, database: DatabaseDependency,
                caller: PrincipalDependency) -> list[CheckInfo]:
    """The version's cleaning reports, newest first, with their counts."""
    return checks.list_checks(database, caller, project, name, version)


@router.get("/checks/{check_id}/report", response_model=CheckReport, responses=ERRORS)
def get_check(check_id: CheckId, database: DatabaseDependency, caller: PrincipalDependency) -> CheckReport:
    """A cleaning report with its groups of files (those who may read the version's files)."""
    return checks.get_check(database, caller, check_id)


@router.post(VERSION + "/clean", response_model=VersionCreated, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 200: {"model": VersionCreated}, 409: {"model": ErrorBody}})
def clean(project: Project, name: Name, version: Reference, request: CleanRequest, http: Request,
          response: Response, database: DatabaseDependency, caller: PrincipalDependency) -> VersionCreated:
    """A child version without the files the newest report finds wrong in the kinds asked; 200
    with the version itself when none of its files would go."""
    created = checks.clean(database, http.app.state.blobs, caller, project, name, version, request)
    if not created.created:
        response.status_code = status.HTTP_200_OK
    return created
