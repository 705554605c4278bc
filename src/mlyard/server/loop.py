"""The one loop helper every background thread of the server runs on.

A `Loop` is a daemon thread that calls `step()` until stopped; `step` returns how long to wait
before the next call, and `wake()` cuts the wait short. A step that raises is logged and
retried after `retry_seconds`, so a bad pass never ends a loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("mlyard.loop")


class Loop:
    def __init__(self, name: str, step: Callable[[], float], *, retry_seconds: float,
                 failure: str = "pass failed"):
        self.name = name
        self.step = step
        self.retry_seconds = retry_seconds
        self.failure = failure
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def alive(self) -> bool:
        """Whether its thread still runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 30) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                delay = self.step()
            except Exception:  # the next pass retries
                log.exception("%s: %s", self.name, self.failure)
                delay = self.retry_seconds
            if self._stopping.is_set():
                return
            self._wake.wait(timeout=max(0.0, delay))
            self._wake.clear()
