"""CPU, memory and GPU memory of process trees: a replica is its launcher and everything below it.

The launcher is a child subreaper, so a process of the job that left its parent (torchrun's
workers start sessions of their own) is re-parented to the launcher and stays in the tree.
Process objects are kept from one measurement to the next: a process's CPU figure is the CPU
time it used since the previous measurement over the wall time between them, and a process
seen for the first time is measured over its life so far.
"""

from __future__ import annotations

import os
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import psutil

START_TIME_TOLERANCE = 1.0
"""A pid is the recorded process only if it started then (pids are reused); start times move a
little when the clock is stepped."""

Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True)
class Root:
    pid: int
    started_at: float | None = None
    """The process's start time as recorded (epoch seconds); None: trust the pid."""


@dataclass(frozen=True)
class TreeFigures:
    cpu_percent: float
    """Of one core: 250 means two and a half cores busy."""
    rss_bytes: int
    """Resident memory summed over the tree (pages processes share count once per process)."""
    gpu_memory_bytes: int
    processes: int


@dataclass
class _Tracked:
    process: psutil.Process
    cpu_seconds: float
    at: float


def _children_file_works() -> bool:
    me = os.getpid()
    return os.path.exists(f"/proc/{me}/task/{me}/children")


class ProcessTrees:
    def __init__(self) -> None:
        self._known: dict[int, _Tracked] = {}
        # /proc/PID/task/TID/children lists a thread's children: walking it costs what the tree
        # holds, where asking psutil for children reads every process of the machine.
        self._children_files = _children_file_works()

    def measure(self, roots: Mapping[Key, Root], gpu_memory: Mapping[int, int] | None = None) -> dict[Key, TreeFigures]:
        """Figures for each root that is still the recorded process; others are left out."""
        gpu_memory = gpu_memory or {}
        now = time.time()
        seen: dict[int, _Tracked] = {}
        result = {}
        for key, root in roots.items():
            pids = self._tree(root)
            if not pids:
                continue
            cpu, rss, gpu, count = 0.0, 0, 0, 0
            for pid in pids:
                measured = self._measure(pid, now, seen)
                if measured is None:
                    continue
                cpu += measured[0]
                rss += measured[1]
                gpu += gpu_memory.get(pid, 0)
                count += 1
            if count:
                result[key] = TreeFigures(cpu_percent=cpu, rss_bytes=rss, gpu_memory_bytes=gpu, processes=count)
        self._known = seen  # processes no tree holds any more are forgotten
        return result

    def _tree(self, root: Root) -> list[int]:
        try:
            process = self._known[root.pid].process if root.pid in self._known else psutil.Process(root.pid)
            if root.started_at is not None and abs(process.create_time() - root.started_at) > START_TIME_TOLERANCE:
                return []
        except psutil.Error:
            return []
        if not self._children_files:
            try:
                return [root.pid, *(child.pid for child in process.children(recursive=True))]
            except psutil.Error:
                return []
        pids: dict[int, None] = {}  # in walking order; a pid reused while we walked must not loop
        queue = [root.pid]
        while queue:
            pid = queue.pop()
            if pid not in pids:
                pids[pid] = None
                queue.extend(_children(pid))
        return list(pids)

    def _measure(self, pid: int, now: float, seen: dict[int, _Tracked]) -> tuple[float, int] | None:
        """(CPU % of one core, RSS bytes) of one process, or None when it is gone."""
        if pid in seen:  # in two trees (a root below another): counted in the first only
            return None
        tracked = self._known.get(pid)
        try:
            process = tracked.process if tracked is not None else psutil.Process(pid)
            with process.oneshot():
                times = process.cpu_times()
                rss = process.memory_info().rss
            cpu_seconds = times.user + times.system
            if tracked is None or cpu_seconds < tracked.cpu_seconds:  # new, or the pid was reused
                since, used = process.create_time(), cpu_seconds
            else:
                since, used = tracked.at, cpu_seconds - tracked.cpu_seconds
        except psutil.Error:
            return None
        seen[pid] = _Tracked(process=process, cpu_seconds=cpu_seconds, at=now)
        elapsed = now - since
        return (100.0 * used / elapsed if elapsed > 0 else 0.0), rss


def tree_connections(root: Root) -> list | None:
    """The TCP connections (psutil's, with `raddr` and `status`) of every process of the root's
    tree, or None where they cannot be known: the root is gone or is not the recorded process, or
    a process of it may not be read. Sockets of the server's network namespace only, which the
    local backend's replicas share (containers run on the host's network)."""
    pids = ProcessTrees()._tree(root)
    if not pids:
        return None
    found = []
    for pid in pids:
        try:
            found.extend(psutil.Process(pid).net_connections(kind="tcp"))
        except (psutil.NoSuchProcess, psutil.ZombieProcess):  # ended since the walk: nothing of its own left
            continue
        except psutil.Error:
            return None
    return found


def _children(pid: int) -> list[int]:
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found = []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children", encoding="ascii") as handle:
                found.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return found
