from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status
from fastapi.responses import FileResponse, JSONResponse

from mlyard.api.datasets import DEFAULT_FILES_PAGE, MAX_FILES_PAGE, TAG_PATTERN, AliasInfo, AliasRequest, VersionFiles
from mlyard.api.errors import ErrorBody
from mlyard.api.models import TASK_PATTERN, ModelInfo, ModelRequest, ModelVersionCreated, ModelVersionInfo, \
    ModelVersionRequest
from mlyard.server.routers.datasets import ERRORS, NO_NUL, Alias, Reference
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services.models import aliases, catalog, from_jobs, removal, versions
from mlyard.spec import NAME_PATTERN

router = APIRouter(prefix="/models", tags=["models"])
Project = Annotated[str, Path(pattern=NAME_PATTERN, description="the model's project")]
Name = Annotated[str, Path(pattern=NAME_PATTERN, description="the model's name")]
MODEL = "/{project}/{name}"


@router.post("", response_model=ModelInfo, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def create_model(request: ModelRequest, database: DatabaseDependency, caller: PrincipalDependency) -> ModelInfo:
    """A new model of a project with no version yet, owned by the caller (members of the project)."""
    return catalog.create_model(database, caller, request)


@router.get("", response_model=list[ModelInfo], responses=ERRORS)
def list_models(database: DatabaseDependency, caller: PrincipalDependency,
                project: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
                q: Annotated[str | None, Query(max_length=200, pattern=NO_NUL,
                                               description="words of the name or description")] = None,
                tag: Annotated[str | None, Query(pattern=TAG_PATTERN)] = None,
                task: Annotated[str | None, Query(max_length=63, pattern=TASK_PATTERN)] = None) -> list[ModelInfo]:
    """The models of the caller's projects."""
    return catalog.list_models(database, caller, project=project, search=q, tag=tag, task=task)


@router.get(MODEL, response_model=ModelInfo, responses=ERRORS)
def get_model(project: Project, name: Name, database: DatabaseDependency, caller: PrincipalDependency) -> ModelInfo:
    return catalog.get_model(database, caller, project, name)


@router.delete(MODEL, status_code=status.HTTP_204_NO_CONTENT, responses={**ERRORS, 409: {"model": ErrorBody}})
def remove_model(project: Project, name: Name, database: DatabaseDependency, caller: PrincipalDependency) -> Response:
    """Removes a model that has no version left (its owner, the project's maintainers)."""
    removal.remove_model(database, caller, project, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(MODEL + "/versions", response_model=ModelVersionCreated, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 200: {"model": ModelVersionCreated}, 409: {"model": ErrorBody}})
def create_version(project: Project, name: Name, request: ModelVersionRequest, http: Request,
                   database: DatabaseDependency, caller: PrincipalDependency) -> ModelVersionCreated:
    """A new version: from an uploaded manifest (members of the project; with the files of
    `latest` and nothing else said it makes none and answers 200 with it), or from the files a
    job left in its checkpoint directory (`job`, `path`: members who may see the job, or the
    job's own token for its own project; the model is made if missing), with the job's lineage
    and metrics. The server stores the bytes and reads only safetensors headers and JSON configs."""
    state = http.app.state
    if request.manifest is None:
        return from_jobs.register(database, state.blobs, state.settings.paths, caller, project, name, request,
                                  max_bytes=state.settings.max_blob_bytes)
    created = versions.create_version(database, state.blobs, caller, project, name, request)
    if not created.created:
        return JSONResponse(created.model_dump(mode="json"), status_code=status.HTTP_200_OK)
    return created


@router.get(MODEL + "/versions", response_model=list[ModelVersionInfo], responses=ERRORS)
def list_versions(project: Project, name: Name, database: DatabaseDependency,
                  caller: PrincipalDependency) -> list[ModelVersionInfo]:
    return versions.list_versions(database, caller, project, name)


@router.get(MODEL + "/versions/{version}", response_model=ModelVersionInfo, responses=ERRORS)
def get_version(project: Project, name: Name, version: Reference, database: DatabaseDependency,
                caller: PrincipalDependency) -> ModelVersionInfo:
    """A version (vN or an alias) with its lineage and the versions fine-tuned from it."""
    return versions.get_version(database, caller, project, name, version)


@router.delete(MODEL + "/versions/{version}", status_code=status.HTTP_204_NO_CONTENT,
               responses={**ERRORS, 409: {"model": ErrorBody}})
def remove_version(project: Project, name: Name, version: Reference, http: Request, database: DatabaseDependency,
                   caller: PrincipalDependency) -> Response:
    """Removes a version (its owner, the project's maintainers): refused while an alias other than
    `latest` names it or another version was fine-tuned from it."""
    removal.remove_version(database, http.app.state.blobs, caller, project, name, version)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(MODEL + "/versions/{version}/files", response_model=VersionFiles, responses=ERRORS)
def list_files(project: Project, name: Name, version: Reference, database: DatabaseDependency,
               caller: PrincipalDependency,
               after: Annotated[str | None, Query(max_length=1024, pattern=NO_NUL,
                                                  description="the last path of the page before")] = None,
               limit: Annotated[int, Query(ge=1, le=MAX_FILES_PAGE)] = DEFAULT_FILES_PAGE) -> VersionFiles:
    """The version's files in path order, a page at a time."""
    return versions.list_files(database, caller, project, name, version, after=after, limit=limit)


@router.get(MODEL + "/versions/{version}/file", response_class=FileResponse,
            responses={**ERRORS, 200: {"content": {"application/octet-stream": {}}}})
def read_file(project: Project, name: Name, version: Reference, http: Request, database: DatabaseDependency,
              caller: PrincipalDependency,
              path: Annotated[str, Query(min_length=1, max_length=1024, pattern=NO_NUL,
                                         description="its path in the version")]) -> FileResponse:
    """One file's bytes, always as application/octet-stream; its sha256 is the ETag."""
    blob, file = versions.file_blob(database, http.app.state.blobs, caller, project, name, version, path)
    return FileResponse(blob, media_type="application/octet-stream", headers={"ETag": f'"{file.sha256}"'})


@router.get(MODEL + "/aliases", response_model=list[AliasInfo], responses=ERRORS)
def list_aliases(project: Project, name: Name, database: DatabaseDependency,
                 caller: PrincipalDependency) -> list[AliasInfo]:
    """Each alias, the version it names and every move it made."""
    return aliases.list_aliases(database, caller, project, name)


@router.put(MODEL + "/aliases/{alias}", response_model=AliasInfo, responses=ERRORS)
def set_alias(project: Project, name: Name, alias: Alias, request: AliasRequest, database: DatabaseDependency,
              caller: PrincipalDependency) -> AliasInfo:
    """Points the alias (production, staging, …) at a version (members of the project); the move
    is recorded."""
    return aliases.set_alias(database, caller, project, name, alias, request.version)
