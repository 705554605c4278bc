"""A replica's log for the browser: live over Server-Sent Events, or whole as a download.

Both read through `services.logs.read_log` with the caller's principal, by byte offset, as
`mlyard logs --follow` does. Each event's id is the attempt and the offset after its text, so a
browser that reconnects (EventSource does so by itself) resumes where it was, and its token is
checked again then.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.responses import Response

from mlyard.api.jobs import LogChunk
from mlyard.errors import MlyardError
from mlyard.server import auth
from mlyard.server.services import logs
from mlyard.web.pages import JobId
from mlyard.web.templating import page
from mlyard.web.session import PagePrincipal

router = APIRouter(include_in_schema=False)

POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0
"""A comment now and then keeps proxies from closing a quiet stream."""
STREAM_SECONDS = 300.0
"""A stream ends after this and the browser reconnects, so a revoked token stops it soon."""
EVENT_CHUNK = 64 * 1024
DOWNLOAD_CHUNK = 1024 * 1024
RESUME = re.compile(r"^(\d{1,7}):(\d{1,19})$")
Replica = Annotated[str | None, Query(max_length=200)]
Attempt = Annotated[int | None, Query(ge=1, le=1_000_000)]


def _event(kind: str, data: object, event_id: str | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data)}\n\n"


async def _read(request: Request, principal: auth.Principal, job_id: int, replica: str | None,
                attempt: int | None, offset: int, limit: int) -> LogChunk:
    return await run_in_threadpool(logs.read_log, request.app.state.database, principal, job_id, replica=replica,
                                   attempt=attempt, offset=offset, limit=limit)


async def _events(request: Request, principal: auth.Principal, job_id: int, replica: str | None,
                  attempt: int | None, offset: int) -> AsyncIterator[str]:
    yield "retry: 2000\n\n"
    started = quiet_since = time.monotonic()
    while not await request.is_disconnected():
        try:
            chunk = await _read(request, principal, job_id, replica, attempt, offset, EVENT_CHUNK)
        except MlyardError as error:
            yield _event("failure", {"message": error.message})
            return
        if attempt is None and chunk.attempt:
            attempt = chunk.attempt  # offsets belong to one attempt's file
        if chunk.text:
            offset = chunk.next_offset
            quiet_since = time.monotonic()
            yield _event("log", {"text": chunk.text, "attempt": chunk.attempt, "replica": chunk.replica},
                         f"{chunk.attempt}:{offset}")
        if chunk.complete:
            yield _event("end", {"attempt": chunk.attempt, "replica": chunk.replica})
            return
        now = time.monotonic()
        if now - started > STREAM_SECONDS:
            return
        if not chunk.text:
            if now - quiet_since > KEEPALIVE_SECONDS:
                quiet_since = now
                yield ": keepalive\n\n"
            await asyncio.sleep(POLL_SECONDS)


@router.get("/jobs/{job_id}/logs/stream")
async def stream_log(request: Request, principal: PagePrincipal, job_id: JobId, replica: Replica = None,
                     attempt: Attempt = None, offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                     last_event_id: Annotated[str | None, Header(max_length=64)] = None) -> Response:
    """From `offset` of `attempt` (the latest by default), as a page coming back to a tab asks."""
    resume = RESUME.match(last_event_id or "")
    if resume and int(resume.group(1)) > 0:
        attempt, offset = int(resume.group(1)), int(resume.group(2))
    return StreamingResponse(_events(request, principal, job_id, replica, attempt, offset),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.get("/jobs/{job_id}/logs/download")
async def download_log(request: Request, principal: PagePrincipal, job_id: JobId, replica: Replica = None,
                       attempt: Attempt = None) -> Response:
    try:
        first = await _read(request, principal, job_id, replica, attempt, 0, DOWNLOAD_CHUNK)
    except MlyardError as error:
        return page(request, "error.html", status_code=error.http_status, error=error)

    async def body() -> AsyncIterator[bytes]:
        chunk = first
        yield chunk.text.encode()
        while chunk.next_offset > chunk.offset:
            chunk = await _read(request, principal, job_id, chunk.replica, chunk.attempt, chunk.next_offset,
                                DOWNLOAD_CHUNK)
            yield chunk.text.encode()

    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"job-{job_id}-{first.replica or 'log'}-attempt-{first.attempt}.log")
    return StreamingResponse(body(), media_type="text/plain; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="{name}"'})
