"""How many live log streams each user holds open on this server, up to a cap.

A stream holds a slot from its answer's start until its client goes away (or the stream ends),
so one user cannot tie up the server with thousands of open streams. Counted per server
process: servers sharing a database count their own streams.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from mlyard.errors import TooManyRequests

RETRY_AFTER_SECONDS = 10


class StreamSlots:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: Counter[Hashable] = Counter()

    def take(self, holder: Hashable, name: str) -> None:
        """Raises TooManyRequests when `holder` already holds `limit` streams."""
        if self.held[holder] >= self.limit:
            raise TooManyRequests(
                f"{name} already has {self.limit} live log streams open on this server (the most "
                "MLYARD_MAX_LOG_STREAMS_PER_USER allows); close a log tab or page and try again",
                retry_after=RETRY_AFTER_SECONDS)
        self.held[holder] += 1

    def give_back(self, holder: Hashable) -> None:
        self.held[holder] -= 1
        if self.held[holder] <= 0:
            del self.held[holder]


class SlotStreamingResponse(StreamingResponse):
    """A streaming answer that gives its slot back however it ends: finished, failed, or its
    client gone (Starlette cancels the stream then)."""

    def __init__(self, *arguments, slots: StreamSlots, holder: Hashable, **options) -> None:
        super().__init__(*arguments, **options)
        self.slots, self.holder = slots, holder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slots.give_back(self.holder)
