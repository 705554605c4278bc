from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import FileResponse, JSONResponse

from mlyard.api.datasets import (
    ALIAS_PATTERN,
    DEFAULT_FILES_PAGE,
    MAX_FILES_PAGE,
    TAG_PATTERN,
    AliasInfo,
    AliasRequest,
    DatasetInfo,
    DatasetRequest,
    VersionCreated,
    VersionDiff,
    VersionFiles,
    VersionInfo,
    VersionRequest,
)
from mlyard.api.errors import ErrorBody
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services.datasets import aliases, catalog, versions
from mlyard.spec import NAME_PATTERN

router = APIRouter(prefix="/datasets", tags=["datasets"])
Project = Annotated[str, Path(pattern=NAME_PATTERN, description="the dataset's project")]
Name = Annotated[str, Path(pattern=NAME_PATTERN, description="the dataset's name")]
REFERENCE = r"^(v[1-9][0-9]{0,8}|[a-z][a-z0-9-]{0,62})$"
NO_NUL = r"^[^\x00]*$"
"""PostgreSQL holds no NUL in text, not even to compare with: such a parameter is a 422."""
Reference = Annotated[str, Path(pattern=REFERENCE, description="vN or an alias (latest, …)")]
Alias = Annotated[str, Path(pattern=ALIAS_PATTERN)]
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}}
DATASET = "/{project}/{name}"


@router.post("", response_model=DatasetInfo, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def create_dataset(request: DatasetRequest, database: DatabaseDependency, caller: PrincipalDependency) -> DatasetInfo:
    """A new, empty dataset of a project, owned by the caller (members of the project create them)."""
    return catalog.create_dataset(database, caller, request)


@router.get("", response_model=list[DatasetInfo], responses=ERRORS)
def list_datasets(database: DatabaseDependency, caller: PrincipalDependency,
                  project: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
                  q: Annotated[str | None, Query(max_length=200, pattern=NO_NUL,
                                                 description="words of the name or description")] = None,
                  tag: Annotated[str | None, Query(pattern=TAG_PATTERN)] = None,
                  owner: Annotated[str | None, Query(max_length=128, pattern=NO_NUL)] = None) -> list[DatasetInfo]:
    """The datasets of the caller's projects and the catalog's cards."""
    return catalog.list_datasets(database, caller, project=project, search=q, tag=tag, owner=owner)


@router.get(DATASET, response_model=DatasetInfo, responses=ERRORS)
def get_dataset(project: Project, name: Name, database: DatabaseDependency,
                caller: PrincipalDependency) -> DatasetInfo:
    return catalog.get_dataset(database, caller, project, name)


@router.post(DATASET + "/versions", response_model=VersionCreated, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 200: {"model": VersionCreated}})
def create_version(project: Project, name: Name, request: VersionRequest, http: Request,
                   database: DatabaseDependency, caller: PrincipalDependency) -> VersionCreated:
    """A new version from an uploaded manifest (members of the project). With the files of its
    parent it makes none and answers 200 with the parent."""
    created = versions.create_version(database, http.app.state.blobs, caller, project, name, request)
    if not created.created:
        return JSONResponse(created.model_dump(mode="json"), status_code=status.HTTP_200_OK)
    return created


@router.get(DATASET + "/versions", response_model=list[VersionInfo], responses=ERRORS)
def list_versions(project: Project, name: Name, database: DatabaseDependency,
                  caller: PrincipalDependency) -> list[VersionInfo]:
    return versions.list_versions(database, caller, project, name)


@router.get(DATASET + "/versions/{version}", response_model=VersionInfo, responses=ERRORS)
def get_version(project: Project, name: Name, version: Reference, database: DatabaseDependency,
                caller: PrincipalDependency) -> VersionInfo:
    return versions.get_version(database, caller, project, name, version)


@router.get(DATASET + "/versions/{version}/files", response_model=VersionFiles, responses=ERRORS)
def list_files(project: Project, name: Name, version: Reference, database: DatabaseDependency,
               caller: PrincipalDependency,
               after: Annotated[str | None, Query(max_length=1024, pattern=NO_NUL,
                                                  description="the last path of the page before")] = None,
               prefix: Annotated[str | None, Query(max_length=1024, pattern=NO_NUL,
                                                   description="only paths that start so")] = None,
               limit: Annotated[int, Query(ge=1, le=MAX_FILES_PAGE)] = DEFAULT_FILES_PAGE) -> VersionFiles:
    """The version's files in path order, a page at a time (readers of the dataset)."""
    return versions.list_files(database, caller, project, name, version, after=after, limit=limit, prefix=prefix)


@router.get(DATASET + "/versions/{version}/file", response_class=FileResponse,
            responses={**ERRORS, 200: {"content": {"application/octet-stream": {}}}})
def read_file(project: Project, name: Name, version: Reference, http: Request, database: DatabaseDependency,
              caller: PrincipalDependency,
              path: Annotated[str, Query(min_length=1, max_length=1024, pattern=NO_NUL,
                                         description="its path in the version")],
              ) -> FileResponse:
    """One file's bytes (readers of the dataset); its sha256 is the ETag. The path is a query
    parameter: as a path segment, every router would have its own idea of `..` and `%2F`."""
    blob, file = versions.file_blob(database, http.app.state.blobs, caller, project, name, version, path)
    return FileResponse(blob, media_type=file.media_type or "application/octet-stream",
                        headers={"ETag": f'"{file.sha256}"'})


@router.get(DATASET + "/diff", response_model=VersionDiff, responses=ERRORS)
def diff_versions(project: Project, name: Name, database: DatabaseDependency, caller: PrincipalDependency,
                  before: Annotated[str, Query(pattern=REFERENCE, description="vN or an alias")],
                  after: Annotated[str, Query(pattern=REFERENCE, description="vN or an alias")]) -> VersionDiff:
    """The files added, removed and changed from one version to another."""
    return versions.diff(database, caller, project, name, before, after)


@router.get(DATASET + "/aliases", response_model=list[AliasInfo], responses=ERRORS)
def list_aliases(project: Project, name: Name, database: DatabaseDependency,
                 caller: PrincipalDependency) -> list[AliasInfo]:
    """Each alias, the version it names and every move it made."""
    return aliases.list_aliases(database, caller, project, name)


@router.put(DATASET + "/aliases/{alias}", response_model=AliasInfo, responses=ERRORS)
def set_alias(project: Project, name: Name, alias: Alias, request: AliasRequest, database: DatabaseDependency,
              caller: PrincipalDependency) -> AliasInfo:
    """Points the alias at a version (members of the project); the move is recorded."""
    return aliases.set_alias(database, caller, project, name, alias, request.version)
