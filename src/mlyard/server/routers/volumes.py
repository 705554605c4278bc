"""Project volumes (`services/volumes.py`): read-write directories with a size quota that jobs mount."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status

from mlyard.api.errors import ErrorBody
from mlyard.api.volumes import VolumeInfo, VolumeRequest
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services import volumes
from mlyard.spec import NAME_PATTERN

router = APIRouter(prefix="/volumes", tags=["volumes"])
Project = Annotated[str, Path(pattern=NAME_PATTERN, description="the volume's project")]
Name = Annotated[str, Path(pattern=NAME_PATTERN, description="the volume's name")]
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody}, 413: {"model": ErrorBody},
          422: {"model": ErrorBody}}
VOLUME = "/{project}/{name}"


@router.post("", response_model=VolumeInfo, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def create_volume(request: VolumeRequest, http: Request, database: DatabaseDependency,
                  caller: PrincipalDependency) -> VolumeInfo:
    """A new, empty volume of a project (its members); its quota counts against the project's storage limit."""
    return volumes.create_volume(database, caller, request, http.app.state.backend)


@router.get("", response_model=list[VolumeInfo], responses=ERRORS)
def list_volumes(database: DatabaseDependency, caller: PrincipalDependency,
                 project: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None) -> list[VolumeInfo]:
    """The volumes of the caller's projects, with their quotas and what they hold as last measured."""
    return volumes.list_volumes(database, caller, project=project)


@router.get(VOLUME, response_model=VolumeInfo, responses=ERRORS)
def get_volume(project: Project, name: Name, database: DatabaseDependency, caller: PrincipalDependency) -> VolumeInfo:
    return volumes.get_volume(database, caller, project, name)


@router.delete(VOLUME, status_code=status.HTTP_204_NO_CONTENT, responses={**ERRORS, 409: {"model": ErrorBody}})
def remove_volume(project: Project, name: Name, http: Request, database: DatabaseDependency,
                  caller: PrincipalDependency) -> Response:
    """Removes a volume and everything in it (who made it, the project's maintainers); refused while an
    unfinished job mounts it."""
    volumes.remove_volume(database, caller, project, name, http.app.state.backend.remove_volume)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
