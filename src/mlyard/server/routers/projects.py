from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, status

from mlyard.api.accounts import USER_NAME_PATTERN
from mlyard.api.errors import ErrorBody
from mlyard.api.projects import (
    Membership,
    NewProject,
    ProjectChange,
    ProjectInfo,
    ProjectStorage,
)
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services import project_storage, projects
from mlyard.spec import NAME_PATTERN

router = APIRouter(prefix="/projects", tags=["projects"])
ProjectName = Annotated[str, Path(pattern=NAME_PATTERN, description="the project's name")]
Digest = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="the snapshot's sha256")]
UserName = Annotated[str, Path(pattern=USER_NAME_PATTERN, description="the user's name")]
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}}


@router.get("", response_model=list[ProjectInfo], responses=ERRORS)
def list_projects(database: DatabaseDependency, caller: PrincipalDependency) -> list[ProjectInfo]:
    """The projects the caller belongs to (every project for an administrator)."""
    return projects.list_projects(database, caller)


@router.post("", response_model=ProjectInfo, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def create_project(project: NewProject, database: DatabaseDependency, caller: PrincipalDependency) -> ProjectInfo:
    """Creates a project (administrators)."""
    return projects.create_project(database, caller, project)


@router.get("/{name}", response_model=ProjectInfo, responses=ERRORS)
def get_project(name: ProjectName, database: DatabaseDependency, caller: PrincipalDependency) -> ProjectInfo:
    return projects.get_project(database, caller, name)


@router.patch("/{name}", response_model=ProjectInfo, responses=ERRORS)
def change_project(name: ProjectName, change: ProjectChange, database: DatabaseDependency,
                   caller: PrincipalDependency) -> ProjectInfo:
    """The description (maintainers) or the limits (administrators); fields left out keep their value."""
    return projects.change_project(database, caller, name, change)


@router.put("/{name}/members/{user}", response_model=ProjectInfo, responses=ERRORS)
def set_member(name: ProjectName, user: UserName, membership: Membership, database: DatabaseDependency,
               caller: PrincipalDependency) -> ProjectInfo:
    """Adds a member or changes their role (the project's maintainers, administrators)."""
    return projects.set_member(database, caller, name, user, membership)


@router.delete("/{name}/members/{user}", response_model=ProjectInfo, responses=ERRORS)
def remove_member(name: ProjectName, user: UserName, database: DatabaseDependency,
                  caller: PrincipalDependency) -> ProjectInfo:
    return projects.remove_member(database, caller, name, user)


@router.get("/{name}/snapshots", response_model=ProjectStorage, responses=ERRORS)
def project_storage_of(name: ProjectName, database: DatabaseDependency, caller: PrincipalDependency) -> ProjectStorage:
    """What the project keeps against its storage limit, each blob once: its code snapshots and
    its datasets (the bytes each keeps), with the total."""
    return project_storage.get_storage(database, caller, name)


@router.delete("/{name}/snapshots/{digest}", response_model=ProjectStorage,
               responses={**ERRORS, 409: {"model": ErrorBody}})
def release_snapshot(name: ProjectName, digest: Digest, request: Request, database: DatabaseDependency,
                     caller: PrincipalDependency) -> ProjectStorage:
    """Stops the project keeping a snapshot no unfinished job of it uses (maintainers); the
    code is deleted when no project keeps it."""
    return project_storage.release(database, request.app.state.blobs, caller, name, digest)
