from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status
from fastapi.responses import FileResponse, JSONResponse

from mlyard.api.datasets import (
    ALIAS_PATTERN,
    DEFAULT_FILES_PAGE,
    MAX_FILES_PAGE,
    TAG_PATTERN,
    AccessRequestCreate,
    AccessRequestInfo,
    AliasInfo,
    AliasRequest,
    Answer,
    ClaimCreate,
    ClaimInfo,
    DatasetInfo,
    DatasetRequest,
    GrantInfo,
    RegisterRequest,
    TransferCreate,
    VersionCreated,
    VersionDiff,
    VersionFiles,
    VersionInfo,
    VersionRequest,
)
from mlyard.api.errors import ErrorBody
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services.datasets import aliases, catalog, claims, registration, removal, sharing, versions
from mlyard.spec import NAME_PATTERN

router = APIRouter(prefix="/datasets", tags=["datasets"])
Project = Annotated[str, Path(pattern=NAME_PATTERN, description="the dataset's project")]
Name = Annotated[str, Path(pattern=NAME_PATTERN, description="the dataset's name")]
REFERENCE = r"^(v[1-9][0-9]{0,8}|[a-z][a-z0-9-]{0,62})$"
NO_NUL = r"^[^\x00]*$"
"""PostgreSQL holds no NUL in text, not even to compare with: such a parameter is a 422."""
Reference = Annotated[str, Path(pattern=REFERENCE, description="vN or an alias (latest, …)")]
Alias = Annotated[str, Path(pattern=ALIAS_PATTERN)]
# 413: any body past MLYARD_MAX_REQUEST_BYTES (a description may hold 100,000 characters).
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody}, 413: {"model": ErrorBody},
          422: {"model": ErrorBody}}
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


@router.delete(DATASET + "/versions/{version}", status_code=status.HTTP_204_NO_CONTENT,
               responses={**ERRORS, 409: {"model": ErrorBody}})
def remove_version(project: Project, name: Name, version: Reference, http: Request, database: DatabaseDependency,
                   caller: PrincipalDependency) -> Response:
    """Removes a version (its owner, the project's maintainers): refused while an alias other than
    `latest` names it, a later version has it as parent, or an unfinished job reads it. The files
    no other version or code snapshot keeps are deleted."""
    removal.remove_version(database, http.app.state.blobs, http.app.state.settings.paths, caller, project, name,
                           version)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete(DATASET, status_code=status.HTTP_204_NO_CONTENT, responses={**ERRORS, 409: {"model": ErrorBody}})
def remove_dataset(project: Project, name: Name, database: DatabaseDependency,
                   caller: PrincipalDependency) -> Response:
    """Removes a dataset that has no version left (its owner, the project's maintainers)."""
    removal.remove_dataset(database, caller, project, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


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


# ---------------------------------------------------------------- sharing, claiming, registering
Grantee = Annotated[str, Path(pattern=NAME_PATTERN, description="the project granted read")]
RequestId = Annotated[int, Path(ge=1, le=2**63 - 1)]
ClaimId = Annotated[int, Path(ge=1, le=2**63 - 1)]


def _status(value: str) -> str | None:
    return None if value == "all" else value


@router.post(":register", response_model=DatasetInfo, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def register_dataset(request: RegisterRequest, http: Request, database: DatabaseDependency,
                     caller: PrincipalDependency) -> DatasetInfo:
    """Administrators: a directory under MLYARD_DATA_ROOTS becomes v1 of a dataset nobody owns
    (hashed into the store on a worker thread); users then claim it."""
    settings = http.app.state.settings
    return registration.register(database, http.app.state.blobs, caller, settings.data_roots, request,
                                 max_bytes=settings.max_blob_bytes)


@router.get("/requests", response_model=list[AccessRequestInfo], responses=ERRORS)
def list_all_requests(database: DatabaseDependency, caller: PrincipalDependency,
                      mine: Annotated[bool, Query(description="the caller's own requests and their answers")] = False,
                      state: Annotated[str | None, Query(alias="status", pattern=r"^(pending|granted|refused|all)$")]
                      = None) -> list[AccessRequestInfo]:
    """Access requests the caller may answer (pending by default), or with `mine` those they made (all)."""
    chosen = state or ("all" if mine else "pending")
    return sharing.list_all_requests(database, caller, mine=mine, status=_status(chosen))


@router.get("/claims", response_model=list[ClaimInfo], responses=ERRORS)
def list_claims(database: DatabaseDependency, caller: PrincipalDependency,
                mine: Annotated[bool, Query(description="what the caller asked, with the answers")] = False,
                state: Annotated[str | None, Query(alias="status", pattern=r"^(pending|approved|refused|all)$")]
                = None) -> list[ClaimInfo]:
    """Claims and transfers the caller may decide (pending by default), or with `mine` those they asked."""
    chosen = state or ("all" if mine else "pending")
    return claims.list_claims(database, caller, mine=mine, status=_status(chosen))


@router.post("/claims/{claim_id}/approve", response_model=ClaimInfo, responses={**ERRORS, 409: {"model": ErrorBody}})
def approve_claim(claim_id: ClaimId, database: DatabaseDependency, caller: PrincipalDependency,
                  request: Answer | None = None) -> ClaimInfo:
    """The dataset moves to the claimed project and owner (claims: administrators; transfers:
    the receiving project's maintainers)."""
    return claims.decide(database, caller, claim_id, approve=True, message=request.message if request else "")


@router.post("/claims/{claim_id}/refuse", response_model=ClaimInfo, responses={**ERRORS, 409: {"model": ErrorBody}})
def refuse_claim(claim_id: ClaimId, database: DatabaseDependency, caller: PrincipalDependency,
                 request: Answer | None = None) -> ClaimInfo:
    return claims.decide(database, caller, claim_id, approve=False, message=request.message if request else "")


@router.get(DATASET + "/grants", response_model=list[GrantInfo], responses=ERRORS)
def list_grants(project: Project, name: Name, database: DatabaseDependency,
                caller: PrincipalDependency) -> list[GrantInfo]:
    """The other projects whose readers read it (its readers)."""
    return sharing.list_grants(database, caller, project, name)


@router.put(DATASET + "/grants/{grantee_project}", response_model=GrantInfo, responses=ERRORS)
def share(project: Project, name: Name, grantee_project: Grantee, database: DatabaseDependency,
          caller: PrincipalDependency) -> GrantInfo:
    """Lets the viewers and up of another project read its files (its owner and its project's maintainers)."""
    return sharing.share(database, caller, project, name, grantee_project)


@router.delete(DATASET + "/grants/{grantee_project}", status_code=status.HTTP_204_NO_CONTENT, responses=ERRORS)
def unshare(project: Project, name: Name, grantee_project: Grantee, database: DatabaseDependency,
            caller: PrincipalDependency) -> Response:
    sharing.unshare(database, caller, project, name, grantee_project)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(DATASET + "/requests", response_model=AccessRequestInfo, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 200: {"model": AccessRequestInfo}, 409: {"model": ErrorBody}})
def request_access(project: Project, name: Name, request: AccessRequestCreate, database: DatabaseDependency,
                   caller: PrincipalDependency) -> AccessRequestInfo:
    """Asks for a project of the caller's to read it; a pending request of that project answers 200 as it is."""
    made, new = sharing.request_access(database, caller, project, name, request)
    if not new:
        return JSONResponse(made.model_dump(mode="json"), status_code=status.HTTP_200_OK)
    return made


@router.get(DATASET + "/requests", response_model=list[AccessRequestInfo], responses=ERRORS)
def list_requests(project: Project, name: Name, database: DatabaseDependency, caller: PrincipalDependency,
                  state: Annotated[str, Query(alias="status", pattern=r"^(pending|granted|refused|all)$")]
                  = "pending") -> list[AccessRequestInfo]:
    """Its access requests, newest first (its owner and its project's maintainers)."""
    return sharing.list_requests(database, caller, project, name, status=_status(state))


@router.post(DATASET + "/requests/{request_id}/grant", response_model=AccessRequestInfo,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def grant_request(project: Project, name: Name, request_id: RequestId, database: DatabaseDependency,
                  caller: PrincipalDependency, request: Answer | None = None) -> AccessRequestInfo:
    """Grants the request: its project reads the dataset from now on."""
    return sharing.answer_request(database, caller, project, name, request_id, grant=True,
                                  message=request.message if request else "")


@router.post(DATASET + "/requests/{request_id}/refuse", response_model=AccessRequestInfo,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def refuse_request(project: Project, name: Name, request_id: RequestId, database: DatabaseDependency,
                   caller: PrincipalDependency, request: Answer | None = None) -> AccessRequestInfo:
    return sharing.answer_request(database, caller, project, name, request_id, grant=False,
                                  message=request.message if request else "")


@router.post(DATASET + "/claims", response_model=ClaimInfo, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def claim(project: Project, name: Name, request: ClaimCreate, database: DatabaseDependency,
          caller: PrincipalDependency) -> ClaimInfo:
    """Asks for a dataset nobody owns, for a project of the caller's; an administrator decides."""
    return claims.claim(database, caller, project, name, request)


@router.post(DATASET + "/transfers", response_model=ClaimInfo, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def transfer(project: Project, name: Name, request: TransferCreate, database: DatabaseDependency,
             caller: PrincipalDependency) -> ClaimInfo:
    """Asks to move the dataset to another project or owner (its owner and its project's
    maintainers); a maintainer of the receiving project decides."""
    return claims.transfer(database, caller, project, name, request)
