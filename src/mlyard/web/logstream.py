"""A replica's log for the browser: live over Server-Sent Events, or whole as a download.

Both read through `services.logs.read_log` with the caller's principal, by byte offset, as
`mlyard logs --follow` does. Each event's id is the attempt and the offset after its text, so a
browser that reconnects (EventSource does so by itself) resumes where it was. The cookie's
session is authenticated again at each relocation (every few seconds), so a logout, a password
change or a revoked token ends an open stream too, and reads use the caller's roles of now.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.responses import Response

from mlyard.api.jobs import LogChunk
from mlyard.errors import MlyardError, TooManyRequests
from mlyard.server import auth
from mlyard.server.services import logs
from mlyard.web.pages import JobId
from mlyard.web.templating import page
from mlyard.web.session import PagePrincipal, page_principal
from mlyard.web.stream_slots import SlotStreamingResponse, StreamSlots

router = APIRouter(include_in_schema=False)

POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0
"""A comment now and then keeps proxies from closing a quiet stream."""
RELOCATE_SECONDS = 5.0
"""How often a stream asks the database whether its replica ended and the caller may still read it."""
WAITING_SECONDS = 1.0
"""As often while the job has no attempt yet, so its first lines show soon after it starts."""
DEFAULT_MAX_STREAMS = 16
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


async def _locate(request: Request, principal: auth.Principal, job_id: int, replica: str | None,
                  attempt: int | None) -> logs.LogLocation:
    return await run_in_threadpool(logs.locate_log, request.app.state.database, principal, job_id, replica=replica,
                                   attempt=attempt)


class SessionEnded(Exception):
    """The stream's session no longer authenticates."""


async def _current_principal(request: Request) -> auth.Principal:
    try:
        return await run_in_threadpool(page_principal, request)
    except HTTPException as error:
        raise SessionEnded from error


async def _events(request: Request, principal: auth.Principal, job_id: int, replica: str | None,
                  attempt: int | None, offset: int) -> AsyncIterator[str]:
    """Polls the file's size in the event loop and asks the database only every few seconds (has
    the replica ended? may the caller still read the job?), so open streams cost the server's
    threads and database almost nothing while their logs are quiet."""
    yield "retry: 2000\n\n"
    started = quiet_since = located_at = time.monotonic()
    try:
        location = await _locate(request, principal, job_id, replica, attempt)
        while not await request.is_disconnected():
            now = time.monotonic()
            if not location.ended and now - located_at > (RELOCATE_SECONDS if location.attempt else WAITING_SECONDS):
                principal = await _current_principal(request)
                location = await _locate(request, principal, job_id, replica, location.attempt or attempt)
                located_at = now
            chunk = None
            if location.ended or logs.located_size(location) > offset:
                chunk = await run_in_threadpool(logs.read_located, job_id, location, offset, EVENT_CHUNK)
            if chunk is not None and chunk.text:
                offset = chunk.next_offset
                quiet_since = now
                yield _event("log", {"text": chunk.text, "attempt": chunk.attempt, "replica": chunk.replica},
                             f"{chunk.attempt}:{offset}")
            if chunk is not None and chunk.complete:
                yield _event("end", {"attempt": chunk.attempt, "replica": chunk.replica})
                return
            if now - started > STREAM_SECONDS:
                return
            if chunk is None or not chunk.text:
                if now - quiet_since > KEEPALIVE_SECONDS:
                    quiet_since = now
                    yield ": keepalive\n\n"
                await asyncio.sleep(POLL_SECONDS)
    except MlyardError as error:
        yield _event("failure", {"message": error.message})
    except SessionEnded:
        yield _event("failure", {"message": "your session has ended; log in again"})


def _slots(request: Request) -> StreamSlots:
    state = request.app.state
    if getattr(state, "log_streams", None) is None:
        settings = getattr(state, "settings", None)
        state.log_streams = StreamSlots(getattr(settings, "max_log_streams_per_user", DEFAULT_MAX_STREAMS))
    return state.log_streams


@router.get("/jobs/{job_id}/logs/stream")
async def stream_log(request: Request, principal: PagePrincipal, job_id: JobId, replica: Replica = None,
                     attempt: Attempt = None, offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                     last_event_id: Annotated[str | None, Header(max_length=64)] = None) -> Response:
    """From `offset` of `attempt` (the latest by default), as a page coming back to a tab asks."""
    resume = RESUME.match(last_event_id or "")
    if resume and int(resume.group(1)) > 0:
        attempt, offset = int(resume.group(1)), int(resume.group(2))
    slots = _slots(request)
    holder = principal.user_id if principal.user_id is not None else principal.name
    try:
        slots.take(holder, principal.name)
    except TooManyRequests as error:
        return Response(error.message, status_code=error.http_status, media_type="text/plain",
                        headers={"Retry-After": str(error.retry_after), "Cache-Control": "no-store"})
    return SlotStreamingResponse(_events(request, principal, job_id, replica, attempt, offset), slots=slots,
                                 holder=holder, media_type="text/event-stream",
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
