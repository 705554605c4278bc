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
                 failure: str = "pass failed", first_delay: float = 0.0):
        self.name = name
        self.step = step
        self.retry_seconds = retry_seconds
        self.failure = failure
        self.first_delay = first_delay
        """How long the thread waits before its first step."""
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
        if self.first_delay > 0 and self._wait(self.first_delay):
            return
        while not self._stopping.is_set():
            try:
                delay = self.step()
            except Exception:  # the next pass retries
                log.exception("%s: %s", self.name, self.failure)
                delay = self.retry_seconds
            if self._wait(delay):
                return

    def _wait(self, seconds: float) -> bool:
        """Waits until woken or `seconds` passed; True when the loop is to stop."""
        if self._stopping.is_set():
            return True
        self._wake.wait(timeout=max(0.0, seconds))
        self._wake.clear()
        return self._stopping.is_set()
