from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status

from mlyard.api.errors import ErrorBody
from mlyard.api.environments import EnvironmentInfo, EnvironmentRequest
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services import environments
from mlyard.spec import NAME_PATTERN

router = APIRouter(prefix="/environments", tags=["environments"])
EnvironmentName = Annotated[str, Path(pattern=NAME_PATTERN, description="the environment's name")]
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}}


@router.post("", response_model=EnvironmentInfo, status_code=status.HTTP_202_ACCEPTED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def build_environment(request: EnvironmentRequest, response: Response, http: Request, database: DatabaseDependency,
                      caller: PrincipalDependency) -> EnvironmentInfo:
    """Queues a build on the leading server (202), or answers 200 when the environment exists
    with these inputs: nothing is built twice. Poll `GET /environments/{name}` for its status.
    Maintainers of the project (and administrators) build."""
    settings = http.app.state.settings
    built = environments.request_build(database, caller, request, settings.environment_builds,
                                       settings.paths.environment_log(request.name))
    if built.status == "ready":
        response.status_code = status.HTTP_200_OK
    return built


@router.get("", response_model=list[EnvironmentInfo], responses=ERRORS)
def list_environments(database: DatabaseDependency, caller: PrincipalDependency,
                      project: Annotated[str | None, Query(pattern=NAME_PATTERN,
                                                           description="only this project's")] = None,
                      ) -> list[EnvironmentInfo]:
    """The environments of the projects the caller is in."""
    return environments.list_environments(database, caller, project)


@router.get("/{name}", response_model=EnvironmentInfo, responses=ERRORS)
def get_environment(name: EnvironmentName, request: Request, database: DatabaseDependency,
                    caller: PrincipalDependency) -> EnvironmentInfo:
    """The environment with the last lines of its build's output."""
    log = request.app.state.settings.paths.environment_log(name)
    return environments.get_environment(database, caller, name, log)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, responses={**ERRORS, 409: {"model": ErrorBody}})
def remove_environment(name: EnvironmentName, request: Request, database: DatabaseDependency,
                       caller: PrincipalDependency) -> None:
    """Removes it (maintainers of its project, administrators); refused while unfinished jobs name it."""
    environments.remove_environment(database, caller, name, request.app.state.settings.paths.environment_log(name))
