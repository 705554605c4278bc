from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, status
from starlette.concurrency import run_in_threadpool

from mlyard.api.datasets import BlobInfo, MissingBlobs, MissingBlobsRequest
from mlyard.api.errors import ErrorBody
from mlyard.errors import InvalidRequest, PayloadTooLarge
from mlyard.server import auth
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services import blobs
from mlyard.storage import SnapshotError, SnapshotTooLarge, format_megabytes

router = APIRouter(prefix="/blobs", tags=["datasets"])
Digest = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$")]
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 413: {"model": ErrorBody}, 422: {"model": ErrorBody}}
_WRITE_BATCH = 4 * 1024 * 1024
"""Bytes gathered from the request before a worker thread writes them: the event loop never
waits on the disk, and a thread is not asked for every 64 KiB."""


@router.post(":missing", response_model=MissingBlobs, responses=ERRORS)
def missing_blobs(request: MissingBlobsRequest, http: Request, database: DatabaseDependency,
                  caller: PrincipalDependency) -> MissingBlobs:
    """Which of these digests the caller must upload before a manifest may name them: those not
    in the store, and those they neither uploaded nor may read in a version. At most 5,000 a call."""
    return MissingBlobs(missing=blobs.missing(database, http.app.state.blobs, caller, request.digests))


@router.put("/{digest}", status_code=status.HTTP_201_CREATED, response_model=BlobInfo, responses=ERRORS)
async def upload_blob(digest: Digest, request: Request, caller: PrincipalDependency) -> BlobInfo:
    """Stores one file of a dataset (or a manifest) under its sha256, streamed to disk and
    published only once its bytes match the digest; the caller may then name it in a manifest.
    Bytes the store has already are not kept twice."""
    auth.authorize(caller, auth.Action.WRITE)
    limit = request.app.state.settings.max_blob_bytes
    if int(request.headers.get("content-length") or 0) > limit:
        raise PayloadTooLarge(f"the file is over the server's {format_megabytes(limit)} limit (MLYARD_MAX_BLOB)")
    writer = request.app.state.blobs.receive(max_bytes=limit)
    try:
        gathered: list[bytes] = []
        held = 0
        async for chunk in request.stream():
            gathered.append(chunk)
            held += len(chunk)
            if held >= _WRITE_BATCH:
                await run_in_threadpool(writer.write, b"".join(gathered))
                gathered, held = [], 0
        await run_in_threadpool(writer.write, b"".join(gathered))
        stored, size = await run_in_threadpool(writer.commit, digest)
    except SnapshotTooLarge as error:
        raise PayloadTooLarge(f"{error} (MLYARD_MAX_BLOB)") from error
    except SnapshotError as error:
        raise InvalidRequest(str(error), field="digest") from error
    finally:
        writer.discard()  # nothing left behind however the upload ended (a no-op once committed)
    await run_in_threadpool(blobs.record_upload, request.app.state.database, caller, stored, size)
    return BlobInfo(digest=stored, size=size)
