"""What the scheduler's tests build their snapshots from: nodes, alike workers, and jobs
pending or running with them. Each test passes what its case needs beyond the defaults."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mlyard.scheduler import Node, PendingJob, ReplicaPlacement, ReplicaRequest, RunningJob

GIB = 1 << 30


def node(name: str, cores: int = 8, *, gpus: int = 0, memory_gib: float = 64, model: str = "",
         **labels: str) -> Node:
    """A machine at `name`.local with cores 0 to `cores` - 1 and GPUs 0 to `gpus` - 1, labelled
    with `labels` (`rack="r0"`; none by default)."""
    return Node(name, f"{name}.local", tuple(range(cores)), int(memory_gib * GIB), tuple(range(gpus)), labels, model)


def gpu_node(name: str, gpus: int = 8, *, cores: int = 32, rack: str = "r0", model: str = "") -> Node:
    """A GPU machine with 256 GiB, in a rack."""
    return node(name, cores, gpus=gpus, memory_gib=256, model=model, rack=rack)


def workers(count: int, cpu: float = 1, memory_gib: float = 1, gpu: int = 0) -> list[ReplicaRequest]:
    """`count` replicas of the role "worker", indexes from 0, each asking for the same."""
    return [ReplicaRequest("worker", index, cpu, int(memory_gib * GIB), gpu) for index in range(count)]


def pending_job(job_id: int, at: float, count: int = 1, *, cpu: float = 1, gpu: int = 0,
                **fields: Any) -> PendingJob:
    """A job submitted at `at` whose gang is `count` workers of 1 GiB each."""
    return PendingJob(job_id, at, tuple(workers(count, cpu=cpu, gpu=gpu)), **fields)


def running_job(job_id: int, node: str, cpu_ids: Iterable[int] = (0,), gpu_ids: Iterable[int] = (),
                **fields: Any) -> RunningJob:
    """A job whose one replica, worker 0, holds those cores and GPUs of `node`, and 1 GiB."""
    placement = ReplicaPlacement("worker", 0, node, tuple(cpu_ids), tuple(gpu_ids), GIB)
    return RunningJob(job_id, (placement,), **fields)


def cores_opened(rooms: Iterable[int], shares: Iterable[int]) -> int:
    """The scheduler's model of shared cores, written out independently: wholly free cores that
    join cores in sharing mode (with ``rooms`` millicores left) to hold ``shares``, packed
    biggest first, each onto the tightest core that holds it."""
    left = sorted(room for room in rooms if room)
    opened = 0
    for share in sorted(shares, reverse=True):
        fitting = [room for room in left if room >= share]
        if fitting:
            left.remove(min(fitting))
            left.append(min(fitting) - share)
        else:
            opened += 1
            left.append(1000 - share)
    return opened


def cpu_fits(whole_free: int, rooms: Iterable[int], replicas: Iterable[ReplicaRequest]) -> bool:
    """Whether ``replicas`` fit a node's CPUs together: whole cores of their own, and shares."""
    replicas = list(replicas)
    whole = sum(replica.cores for replica in replicas)
    return whole + cores_opened(rooms, [r.millicores for r in replicas if r.millicores]) <= whole_free
