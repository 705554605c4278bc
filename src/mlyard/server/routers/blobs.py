from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Path, Request, status
from starlette.concurrency import run_in_threadpool

from mlyard.api.datasets import BlobInfo, MissingBlobs, MissingBlobsRequest, PackedBlobs
from mlyard.api.errors import ErrorBody
from mlyard.errors import InvalidRequest, PayloadTooLarge
from mlyard.server import auth
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services import blobs
from mlyard.storage import SnapshotError, SnapshotTooLarge, format_megabytes, packs

router = APIRouter(prefix="/blobs", tags=["datasets"])
Digest = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$")]
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 413: {"model": ErrorBody}, 422: {"model": ErrorBody}}
_WRITE_BATCH = 4 * 1024 * 1024
"""Bytes gathered from the request before a worker thread writes them: the event loop never
waits on the disk, and a thread is not asked for every 64 KiB."""
_PACK_BATCH = 1024 * 1024
"""The same for a pack, whose small members each cost a file's creation: less at once, so that
reading the body and writing the members overlap."""
MAX_PACK_BYTES = 256 << 20
MAX_PACK_MEMBERS = 10_000


async def _stream_into(request: Request, consume: Callable[[bytes], None], batch: int) -> None:
    """Hands the body to `consume` on a worker thread in pieces of about `batch` bytes, one piece
    at a time, while the event loop reads the next: the network, the hashing and the disk overlap.
    Returns once every piece is consumed; whatever happens, no piece is still being consumed."""
    pending: asyncio.Future | None = None
    gathered: list[bytes] = []
    held = 0
    try:
        async for chunk in request.stream():
            gathered.append(chunk)
            held += len(chunk)
            if held >= batch:
                if pending is not None:
                    await pending
                pending = asyncio.ensure_future(run_in_threadpool(consume, b"".join(gathered)))
                gathered, held = [], 0
        if pending is not None:
            await pending
        pending = None
        await run_in_threadpool(consume, b"".join(gathered))
    finally:
        if pending is not None and not pending.done():  # the body broke off: let the piece finish
            await asyncio.wait([pending])
        if pending is not None and pending.done() and not pending.cancelled():
            pending.exception()  # retrieved: its error, if any, is not the one to report


@router.post(":missing", response_model=MissingBlobs, responses=ERRORS)
def missing_blobs(request: MissingBlobsRequest, http: Request, database: DatabaseDependency,
                  caller: PrincipalDependency) -> MissingBlobs:
    """Which of these digests the caller must upload before a manifest may name them: those not
    in the store, and those they neither uploaded nor may read in a version. At most 5,000 a call."""
    return MissingBlobs(missing=blobs.missing(database, http.app.state.blobs, caller, request.digests))


PACK_DESCRIPTION = f"""Stores many files of a dataset in one request (a client sends files under 1 MiB
this way), each as `PUT /blobs/{{digest}}` would: the caller may then name them in a manifest.

The body (`Content-Type: {packs.MEDIA_TYPE}`) is a pack: the 8 bytes `MLYPACK1`, the number of
members as 4 bytes big-endian, then for each member its sha256 as 32 raw bytes, its size as 8
bytes big-endian and that many bytes; nothing after the last member. At most
{MAX_PACK_MEMBERS:,} members and {MAX_PACK_BYTES >> 20} MiB a pack (and MLYARD_MAX_BLOB a member).

The body is streamed to disk, each member hashed; the members are synced to disk together and
published once the whole pack is read. A pack is stored whole or not at all: a member whose
bytes do not match its digest (or whose declared size is wrong) answers 422 naming it, a body
cut short or malformed 422, a pack over the limits 413; nothing of it is kept then. Answers
the (digest, size) of each member, in order."""


@router.put("/pack", response_model=PackedBlobs, responses=ERRORS, description=PACK_DESCRIPTION,
            summary="Upload many small blobs in one request")
async def upload_pack(request: Request, caller: PrincipalDependency) -> PackedBlobs:
    auth.authorize(caller, auth.Action.WRITE)
    member_limit = request.app.state.settings.max_blob_bytes
    if int(request.headers.get("content-length") or 0) > MAX_PACK_BYTES:
        raise PayloadTooLarge(f"the pack is over the server's {format_megabytes(MAX_PACK_BYTES)} limit of a pack")
    receiver = packs.PackReceiver(request.app.state.blobs, max_member=min(member_limit, MAX_PACK_BYTES),
                                  max_total=MAX_PACK_BYTES, max_members=MAX_PACK_MEMBERS)
    try:
        await _stream_into(request, receiver.feed, _PACK_BATCH)
        stored = await run_in_threadpool(receiver.finish)
    except SnapshotTooLarge as error:
        raise PayloadTooLarge(str(error)) from error
    except packs.PackError as error:
        raise InvalidRequest(str(error), field="digest" if error.digest else "body") from error
    finally:
        await run_in_threadpool(receiver.discard)  # nothing left behind however the upload ended
    await run_in_threadpool(blobs.record_uploads, request.app.state.database, caller, stored)
    return PackedBlobs(blobs=[BlobInfo(digest=digest, size=size) for digest, size in stored])


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
        await _stream_into(request, writer.write, _WRITE_BATCH)
        stored, size = await run_in_threadpool(writer.commit, digest)
    except SnapshotTooLarge as error:
        raise PayloadTooLarge(f"{error} (MLYARD_MAX_BLOB)") from error
    except SnapshotError as error:
        raise InvalidRequest(str(error), field="digest") from error
    finally:
        writer.discard()  # nothing left behind however the upload ended (a no-op once committed)
    await run_in_threadpool(blobs.record_upload, request.app.state.database, caller, stored, size)
    return BlobInfo(digest=stored, size=size)
