"""Memory limits and CPU quotas through Linux cgroups (v1 or v2), where the server may create cgroups.

`detect_memory_parent()` finds the memory cgroup the server runs in and checks, by creating
and removing a probe child, that limits can be set below it. When that fails the reason is
reported (and shown by `mlyard nodes`) and replicas run without a memory limit.

`detect_cpu_parent()` does the same for the CPU controller: a replica asking for less than a
core shares one with others and is held near its share by a CPU quota (cpu.cfs_quota_us on
v1, cpu.max on v2); without the controller it shares the core uncapped.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_NAME = "mlyard"


def _own_cgroup(controller: str, marker: str) -> tuple[Path, int] | None:
    """The directory of this process's cgroup of `controller` and the cgroup version. On v1 the
    controller is mounted on its own or beside others (cpu,cpuacct, often linked as cpu); its
    mount holds `marker`."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            for mount in (controllers, controller):
                if (CGROUP_ROOT / mount / marker).exists():
                    return CGROUP_ROOT / mount / path.lstrip("/"), 1
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and controllers == "" and (CGROUP_ROOT / "cgroup.controllers").exists():
            return CGROUP_ROOT / path.lstrip("/"), 2
    return None


def _limit_file(cgroup: Path) -> Path:
    return cgroup / ("memory.limit_in_bytes" if (cgroup / "memory.limit_in_bytes").exists() else "memory.max")


def _detect_parent(controller: str, marker: str, probe_write, what: str) -> tuple[Path | None, str | None]:
    """(parent directory for replica cgroups of `controller`, None), or (None, why not: `what`
    starts the sentence), once a probe cgroup under it took `probe_write`."""
    found = _own_cgroup(controller, marker)
    if found is None:
        return None, f"{what}: no cgroup {controller} controller is mounted"
    own, version = found
    if version == 2:
        controllers = (own.parent / "cgroup.subtree_control") if own != CGROUP_ROOT else (own / "cgroup.subtree_control")
        try:
            if controller not in controllers.read_text().split():
                return None, f"{what}: the cgroup v2 {controller} controller is not delegated here"
        except OSError as error:
            return None, f"{what}: cannot read {controllers}: {error.strerror}"
    parent = own / PARENT_NAME
    probe = parent / f"probe-{os.getpid()}"
    try:
        parent.mkdir(exist_ok=True)
        probe.mkdir(exist_ok=True)
        probe_write(probe)
    except OSError as error:
        return None, f"{what}: cannot create {controller} cgroups under {own} ({error.strerror})"
    finally:
        try:
            probe.rmdir()
        except OSError:
            pass
    return parent, None


def detect_memory_parent() -> tuple[Path | None, str | None]:
    """(parent directory for replica cgroups, None) or (None, why limits cannot be enforced)."""
    return _detect_parent("memory", "memory.limit_in_bytes",
                          lambda probe: _limit_file(probe).write_text(str(64 * 1024 * 1024)),
                          "memory limits not enforced")


CPU_PERIOD_US = 100_000
"""The quota period on cgroup v2 (the kernel's default; v1 keeps the cgroup's own)."""


def _set_cpu_quota(cgroup: Path, millicores: int) -> None:
    """Hold the cgroup's processes to `millicores` thousandths of one CPU, over each period."""
    if (cgroup / "cpu.cfs_quota_us").exists():
        try:
            period = int((cgroup / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            period = CPU_PERIOD_US
        # The kernel takes no quota below 1 ms.
        (cgroup / "cpu.cfs_quota_us").write_text(str(max(1000, millicores * period // 1000)))
    else:
        (cgroup / "cpu.max").write_text(f"{max(1000, millicores * CPU_PERIOD_US // 1000)} {CPU_PERIOD_US}")


def detect_cpu_parent() -> tuple[Path | None, str | None]:
    """(parent directory for replicas' CPU cgroups, None) or (None, why a share of a core is not
    capped): as `detect_memory_parent`, for the CPU controller."""
    return _detect_parent("cpu", "cpu.cfs_quota_us", lambda probe: _set_cpu_quota(probe, 500),
                          "fractional CPUs share cores but are not capped")


def create_cpu_cgroup(parent: Path, name: str, millicores: int) -> Path:
    """A cgroup of the CPU controller whose processes get `millicores` thousandths of a CPU."""
    cgroup = parent / name
    cgroup.mkdir(exist_ok=True)
    _set_cpu_quota(cgroup, millicores)
    return cgroup


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
