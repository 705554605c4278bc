"""A ceiling on the size of request bodies (MLYARD_MAX_REQUEST_BYTES), for the API and the web UI.

An ASGI middleware rather than a check in each route, so that no route can read an oversized
body into memory before it looks at it, including the parsers FastAPI runs before a route's
code. A declared Content-Length over the limit is refused before any of the body is read; a
body without one (chunked) is counted as it arrives and refused at the first chunk past the
limit, the rest left unread by the app. Either way the answer is a 413 with the usual
`ErrorBody`. The HTTP server then discards what is left of the body as it arrives (no memory
grows) and keeps the connection: closing it on unread data would reset it, and a client still
sending could lose the answer.

Routes with a ceiling of their own (the code snapshot upload, MLYARD_MAX_SNAPSHOT) are exempt.
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlyard.api.errors import ErrorBody
from mlyard.errors import PayloadTooLarge
from mlyard.runtime.launcher import format_bytes

SETTING = "MLYARD_MAX_REQUEST_BYTES"


class _BodyTooLarge(Exception):
    """Raised into the app from `receive` once a streamed body passes the limit."""


def too_large(limit: int, declared: int | None = None) -> PayloadTooLarge:
    size = f"the request body ({format_bytes(declared)})" if declared is not None else "the request body"
    return PayloadTooLarge(f"{size} is over the server's {format_bytes(limit)} limit; "
                           f"the server's {SETTING} setting raises it")


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int, exempt: Iterable[tuple[str, str]] = ()):
        self.app = app
        self.limit = limit
        self.exempt = tuple(exempt)
        """(method, path prefix) pairs that are let through whatever their size."""

    def _is_exempt(self, scope: Scope) -> bool:
        return any(scope["method"] == method and scope["path"].startswith(prefix) for method, prefix in self.exempt)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._is_exempt(scope):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.limit:
                await _refuse(too_large(self.limit, declared), scope, receive, send)
            else:  # the HTTP server delivers no more than the declared length
                await self.app(scope, receive, send)
            return
        await self._counted(scope, receive, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0
        exceeded = answered = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    exceeded = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal answered
            # What the app answers to a body cut short (FastAPI turns the error into a 400) is
            # replaced by the 413 below.
            if exceeded and not answered:
                return
            if message["type"] == "http.response.start":
                answered = True
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not exceeded or answered:
                raise
        if exceeded and not answered:
            await _refuse(too_large(self.limit), scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:  # the HTTP server refuses these first; counting is the safe side
                return None
    return None


async def _refuse(error: PayloadTooLarge, scope: Scope, receive: Receive, send: Send) -> None:
    body = ErrorBody(error=error.code, message=error.message, details=[])
    response = JSONResponse(status_code=error.http_status, content=body.model_dump())
    await response(scope, receive, send)


def install(app: FastAPI, limit: int, *, exempt: Iterable[tuple[str, str]] = ()) -> None:
    app.add_middleware(BodyLimit, limit=limit, exempt=tuple(exempt))
