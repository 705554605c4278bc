"""Memory limits through Linux cgroups (v1 or v2), where the server may create cgroups.

`detect_memory_parent()` finds the memory cgroup the server runs in and checks, by creating
and removing a probe child, that limits can be set below it. When that fails the reason is
reported (and shown by `mlyard nodes`) and replicas run without a memory limit.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_NAME = "mlyard"


def _own_memory_cgroup() -> tuple[Path, int] | None:
    """The directory of this process's memory cgroup and the cgroup version."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") and (CGROUP_ROOT / "memory").is_dir():
            return CGROUP_ROOT / "memory" / path.lstrip("/"), 1
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and controllers == "" and (CGROUP_ROOT / "cgroup.controllers").exists():
            return CGROUP_ROOT / path.lstrip("/"), 2
    return None


def _limit_file(cgroup: Path) -> Path:
    return cgroup / ("memory.limit_in_bytes" if (cgroup / "memory.limit_in_bytes").exists() else "memory.max")


def detect_memory_parent() -> tuple[Path | None, str | None]:
    """(parent directory for replica cgroups, None) or (None, why limits cannot be enforced)."""
    found = _own_memory_cgroup()
    if found is None:
        return None, "memory limits not enforced: no memory cgroup controller is mounted"
    own, version = found
    if version == 2:
        controllers = (own.parent / "cgroup.subtree_control") if own != CGROUP_ROOT else (own / "cgroup.subtree_control")
        try:
            if "memory" not in controllers.read_text().split():
                return None, "memory limits not enforced: the cgroup v2 memory controller is not delegated here"
        except OSError as error:
            return None, f"memory limits not enforced: cannot read {controllers}: {error.strerror}"
    parent = own / PARENT_NAME
    probe = parent / f"probe-{os.getpid()}"
    try:
        parent.mkdir(exist_ok=True)
        probe.mkdir(exist_ok=True)
        _limit_file(probe).write_text(str(64 * 1024 * 1024))
    except OSError as error:
        return None, f"memory limits not enforced: cannot create cgroups under {own} ({error.strerror})"
    finally:
        try:
            probe.rmdir()
        except OSError:
            pass
    return parent, None


def create_memory_cgroup(parent: Path, name: str, limit_bytes: int) -> Path:
    cgroup = parent / name
    cgroup.mkdir(exist_ok=True)
    _limit_file(cgroup).write_text(str(limit_bytes))
    return cgroup


def oom_kills(cgroup: Path) -> int:
    """How many processes of the cgroup the kernel killed for passing its memory limit
    (`oom_kill` of memory.events on v2, of memory.oom_control on v1); 0 when unknown."""
    for name in ("memory.events", "memory.oom_control"):
        try:
            lines = (cgroup / name).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return 0


def add_process(cgroup: Path, pid: int) -> None:
    (cgroup / "cgroup.procs").write_text(str(pid))


def processes(cgroup: Path) -> list[int]:
    try:
        return [int(line) for line in (cgroup / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def kill_all(cgroup: Path, *, except_pid: int | None = None) -> None:
    """SIGKILL to every process in the cgroup, including those that left the process group."""
    for pid in processes(cgroup):
        if pid != except_pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def remove_cgroup(cgroup: Path, *, keep_pid: int | None = None, timeout: float = 2.0) -> None:
    """Kills what is left in the cgroup, moves `keep_pid` back to the parent, removes it.

    A killed process leaves the cgroup only once it has exited, which takes a moment; until
    then rmdir fails with EBUSY, so it is retried for up to `timeout` seconds."""
    kill_all(cgroup, except_pid=keep_pid)
    if keep_pid is not None:
        try:
            add_process(cgroup.parent, keep_pid)
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    while True:
        try:
            cgroup.rmdir()
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() >= deadline:
                return
        time.sleep(0.01)
        kill_all(cgroup, except_pid=keep_pid)
