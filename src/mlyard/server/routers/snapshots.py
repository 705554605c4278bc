from __future__ import annotations

import os
import tempfile
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status
from starlette.concurrency import run_in_threadpool

from mlyard.api.errors import ErrorBody
from mlyard.api.snapshots import SnapshotInfo
from mlyard.errors import PayloadTooLarge
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services import snapshots
from mlyard.spec import NAME_PATTERN
from mlyard.storage import format_megabytes

router = APIRouter(prefix="/snapshots", tags=["snapshots"])
Digest = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$")]
ProjectQuery = Annotated[str | None, Query(pattern=NAME_PATTERN, description="the project that keeps this code")]


@router.put(
    "/{digest}",
    status_code=status.HTTP_201_CREATED,
    response_model=SnapshotInfo,
    responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 413: {"model": ErrorBody},
               422: {"model": ErrorBody}},
)
async def upload_snapshot(digest: Digest, request: Request, caller: PrincipalDependency,
                          project: ProjectQuery = None) -> SnapshotInfo:
    """Stores a gzip tarball of a code directory under its sha256. The archive is checked
    before it enters the store (no absolute paths, `..`, links out, devices, nothing that
    unpacks past the server's limits). The caller may then name it in their jobs; with
    `project`, the project keeps the code, within its storage limit (403 `quota_exceeded` past it)."""
    limit = request.app.state.settings.max_snapshot_bytes
    too_large = f"the snapshot is over the server's {format_megabytes(limit)} limit (MLYARD_MAX_SNAPSHOT)"
    declared = int(request.headers.get("content-length") or 0)
    if declared > limit:
        raise PayloadTooLarge(too_large)
    await run_in_threadpool(snapshots.admit_upload, request.app.state.database, caller, project, digest, declared)
    # The body is spooled first so the blocking store and the database work off the event loop.
    with tempfile.TemporaryFile() as spool:
        received = 0
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit:
                raise PayloadTooLarge(too_large)
            spool.write(chunk)
        spool.seek(0, os.SEEK_SET)
        chunks = iter(lambda: spool.read(1024 * 1024), b"")
        return await run_in_threadpool(
            snapshots.store_snapshot, request.app.state.database, request.app.state.blobs, caller, chunks,
            expected_digest=digest, max_bytes=limit, project=project,
            limits=request.app.state.settings.snapshot_limits(),
        )


@router.get("/{digest}", response_model=SnapshotInfo, responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})
def get_snapshot(digest: Digest, database: DatabaseDependency, caller: PrincipalDependency,
                 project: ProjectQuery = None) -> SnapshotInfo:
    """The snapshot, if the caller may name it in a job (of `project`, when given): they uploaded
    it, or a project they submit to keeps it. Otherwise 404, and the client uploads it."""
    return snapshots.get_snapshot(database, caller, digest, project)
