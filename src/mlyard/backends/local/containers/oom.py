"""Noticing that a container's command was killed for running out of memory.

Engines report it as `State.OOMKilled`, but not everywhere: Podman with runc on a cgroup v1
host leaves it false. So while a container runs, a thread of the server waits on its memory
cgroup's OOM notification (cgroup v1: an eventfd registered for `memory.oom_control`) and
marks the replica directory (`oom`) when it comes: the container's cgroup is gone by the time
its exit is seen, so the mark has to be made while it is there. An OOM kill in the first
moments of a container, before the thread registered, is only known from the engine.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from mlyard.runtime.launch_config import OOM_FILE

log = logging.getLogger(__name__)
_MEMORY_HIERARCHY = Path("/sys/fs/cgroup/memory")


def memory_cgroup(pid: int) -> Path | None:
    """The cgroup v1 memory cgroup of a process; None on cgroup v2 or when it is gone."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            cgroup = _MEMORY_HIERARCHY / path.lstrip("/")
            return cgroup if (cgroup / "memory.oom_control").exists() else None
    return None


def oom_kills(cgroup: Path) -> int:
    try:
        for line in (cgroup / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


class OomWatches:
    """One watching thread per running container, by replica directory."""

    def __init__(self) -> None:
        self._threads: dict[Path, threading.Thread] = {}
        self._lock = threading.Lock()

    def ensure(self, directory: Path, pid: int | None) -> None:
        if not pid:
            return
        with self._lock:
            thread = self._threads.get(directory)
            if thread is not None and thread.is_alive():
                return
            cgroup = memory_cgroup(pid)
            if cgroup is None:
                return
            thread = threading.Thread(target=_watch, args=(cgroup, directory / OOM_FILE),
                                      name=f"oom-{directory.parent.parent.name}-{directory.name}", daemon=True)
            self._threads[directory] = thread
            thread.start()

    def forget(self, directory: Path) -> None:
        with self._lock:
            self._threads.pop(directory, None)


def _watch(cgroup: Path, marker: Path) -> None:
    """Blocks until the cgroup has an OOM event or is removed (the kernel signals both)."""
    try:
        event = os.eventfd(0)
    except (AttributeError, OSError):
        return
    try:
        control = os.open(cgroup / "memory.oom_control", os.O_RDONLY)
        try:
            (cgroup / "cgroup.event_control").write_text(f"{event} {control}")
            if oom_kills(cgroup) == 0:
                os.read(event, 8)
                # Removal signals too; an OOM event finds the cgroup still there (the engine
                # removes it only after the container's exit has been handled).
                if not cgroup.exists():
                    return
            marker.write_text("killed for running out of memory\n")
        finally:
            os.close(control)
    except OSError as error:
        log.debug("watching %s for OOM kills stopped: %s", cgroup, error)
    finally:
        os.close(event)
