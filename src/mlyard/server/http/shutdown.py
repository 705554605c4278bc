"""503 instead of 500 while the server stops.

On SIGTERM uvicorn lets running requests finish for its graceful timeout, then cancels the
rest and would answer each of those 500; an upload still arriving or being validated is one
of them. `ShutdownGuard` answers such a request, and any request that arrives or fails once
the application has begun to stop, 503 with Retry-After, so a client retries against the
next server. The lifespan calls `Stopping.begin` and then waits, briefly, for those answers to
go out before it closes the database.
"""

from __future__ import annotations

import asyncio
import json
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

RETRY_AFTER_SECONDS = 5
_BODY = json.dumps({"error": "unavailable", "message": "the server is shutting down; retry in a few seconds",
                    "details": []}).encode()


class Stopping:
    """Whether the application has begun to stop, and how many requests are still in it."""

    def __init__(self) -> None:
        self.began = False
        self.in_flight = 0

    def begin(self) -> None:
        self.began = True

    async def drained(self, timeout: float) -> None:
        """Returns once no request is in the application, or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


class ShutdownGuard:
    """Outside every middleware but the security headers and the Host check (whose answers
    come first); see the module's text."""

    def __init__(self, app: ASGIApp, stopping: Stopping) -> None:
        self.app = app
        self.stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.stopping.began:
            await _unavailable(send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        self.stopping.in_flight += 1
        try:
            await self.app(scope, receive, tracking_send)
        except asyncio.CancelledError:
            # Only uvicorn's end of the graceful timeout cancels a request task: it gets an
            # answer rather than uvicorn's 500, and the cancellation goes on.
            if not started:
                await _unavailable(send)
            raise
        except Exception:
            if started or not self.stopping.began:
                raise
            await _unavailable(send)
        finally:
            self.stopping.in_flight -= 1


async def _unavailable(send: Send) -> None:
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(_BODY)).encode()),
        (b"retry-after", str(RETRY_AFTER_SECONDS).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": _BODY})
