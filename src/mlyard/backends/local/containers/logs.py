"""A container's output, copied from the engine into the replica's `output.log`, so the
server's log service reads containers and processes alike.

A follower thread streams the engine's log from the container's start while it runs. The
engine keeps the whole log until the container is removed, so a copy can always start over:
it skips the bytes `output.log` already holds, which is how a restarted server resumes the
copy of a container it adopted, and how the final copy after an exit completes a log whose
follower was cut short. The log is capped like a process replica's (`launcher.CappedLog`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from mlyard.backends.local.containers.engine import Engine
from mlyard.runtime.launcher import CappedLog

log = logging.getLogger(__name__)
# A follower whose stream has not ended this long after its container exited is given up on;
# the final copy then reads the log once more from the engine.
FOLLOWER_JOIN_TIMEOUT = 5.0


def copy_log(engine: Engine, container: str, path: Path, limit: int, *, follow: bool,
             stopped: threading.Event | None = None) -> None:
    """Appends to `path` what the engine holds of the container's output beyond what `path`
    already has, following it while the container runs when `follow`, until `stopped` is set."""
    output = CappedLog(path, limit)
    try:
        skip = output.size
        if output.size >= limit:
            return
        for chunk in engine.logs(container, follow=follow):
            if stopped is not None and stopped.is_set():
                return
            if skip:
                dropped = min(skip, len(chunk))
                chunk, skip = chunk[dropped:], skip - dropped
            output.write(chunk)
            if output.truncated:
                return
    finally:
        output.file.close()


class LogFollowers:
    """One follower thread per running container, by replica directory."""

    def __init__(self, engine: Engine, limit: int, on_end: Callable[[], None] | None = None):
        self.engine = engine
        self.limit = limit
        self.on_end = on_end
        self._threads: dict[Path, threading.Thread] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def ensure(self, directory: Path, container: str, log_path: Path) -> None:
        """Starts following `container` unless a follower of this server already does."""
        with self._lock:
            thread = self._threads.get(directory)
            if thread is not None and thread.is_alive():
                return
            thread = threading.Thread(target=self._follow, args=(container, log_path),
                                      name=f"logs-{directory.parent.parent.name}-{directory.name}", daemon=True)
            self._threads[directory] = thread
            thread.start()

    def _follow(self, container: str, log_path: Path) -> None:
        try:
            copy_log(self.engine, container, log_path, self.limit, follow=True, stopped=self._closed)
        except Exception as error:  # noqa: BLE001 - the final copy after the exit completes the log
            log.debug("following the log of %s stopped: %s", container, error)
        if self.on_end is not None and not self._closed.is_set():  # most likely exited: observe it now
            self.on_end()

    def finish(self, directory: Path, container: str, log_path: Path) -> None:
        """After the container ended: waits for its follower, then copies whatever it missed."""
        with self._lock:
            thread = self._threads.pop(directory, None)
        if thread is not None:
            thread.join(FOLLOWER_JOIN_TIMEOUT)
            if thread.is_alive():
                # Still streaming: a second copy would interleave with it; the follower ends with
                # the stream, and the log is as complete as it will get.
                return
        try:
            copy_log(self.engine, container, log_path, self.limit, follow=False)
        except Exception as error:  # noqa: BLE001 - an incomplete log must not keep the exit from being recorded
            log.warning("copying the log of %s failed: %s", container, error)

    def close(self) -> None:
        """Followers write nothing more: the server is going away, and whoever observes the
        containers next (a restarted or another server) resumes their logs."""
        self._closed.set()
