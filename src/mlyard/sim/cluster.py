"""Turning a trace into what the scheduler sees: nodes, gangs of replicas and queues.

A synthetic cluster is homogeneous (``gpus_per_node`` GPUs per node) with enough
cores and memory for any replica of the trace, so that GPUs are what binds, as
on the clusters the traces came from. Nodes are grouped into racks (label
``rack``) because multi-node gangs prefer nodes of one rack and a flat cluster
would hide that part of placement.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlyard.scheduler import Amounts, Node, Queue, ReplicaRequest, whole_cores

from .traces import TraceJob, TraceNode

GIB = 1 << 30
CORES_PER_GPU = 8
MEMORY_PER_GPU = 64 * GIB
RACK_SIZE = 4
QUOTA_MODES = ("none", "equal")


class ClusterError(ValueError):
    """A cluster description the simulator cannot build (e.g. GPUs not a multiple of the node size)."""


def synthetic_nodes(jobs: Sequence[TraceJob], gpus: int, gpus_per_node: int = 8) -> tuple[Node, ...]:
    """``gpus / gpus_per_node`` identical nodes, each big enough for any replica of ``jobs``.

    Cores and memory are ``CORES_PER_GPU`` and ``MEMORY_PER_GPU`` per GPU, raised to
    the largest single replica (openb pods ask for up to 120 cores) so no job is
    rejected for a resource the trace's own cluster evidently had.
    """
    if gpus_per_node < 1:
        raise ClusterError(f"--gpus-per-node must be at least 1, not {gpus_per_node}")
    if gpus < 1:
        raise ClusterError(f"--gpus must be at least 1, not {gpus}")
    if gpus % gpus_per_node:
        raise ClusterError(f"--gpus {gpus} is not a multiple of --gpus-per-node {gpus_per_node}")
    shapes = {(job.gpus, job.cpu, job.memory_bytes): job for job in jobs}  # 82,247 Philly jobs, 10 shapes
    largest = [replica for job in shapes.values() for replica in gang(job, gpus_per_node)]
    cores = max([CORES_PER_GPU * gpus_per_node, *(replica.cores for replica in largest)])
    memory = max([MEMORY_PER_GPU * gpus_per_node, *(replica.memory_bytes for replica in largest)])
    return tuple(
        _node(index, cores, memory, gpus_per_node, "") for index in range(gpus // gpus_per_node)
    )


def trace_nodes(nodes: Sequence[TraceNode]) -> tuple[Node, ...]:
    """The trace's own machines, in file order, racked ``RACK_SIZE`` at a time."""
    return tuple(
        _node(index, whole_cores(node.cpu), node.memory_bytes, node.gpus, node.gpu_model, name=node.name)
        for index, node in enumerate(nodes)
    )


def _node(index: int, cores: int, memory: int, gpus: int, model: str, name: str = "") -> Node:
    name = name or f"node-{index:04d}"
    return Node(name, f"10.{index // 65536}.{index // 256 % 256}.{index % 256}", tuple(range(cores)), memory,
                tuple(range(gpus)), {"rack": f"rack-{index // RACK_SIZE:03d}"}, gpu_model=model)


def gang(job: TraceJob, gpus_per_node: int) -> tuple[ReplicaRequest, ...]:
    """One replica per node-worth of GPUs (plus a remainder), cores and memory split in proportion.

    A job of 20 GPUs on 8-GPU nodes becomes replicas of 8, 8 and 4 GPUs: the
    usual data-parallel layout of one process group per machine. A job without
    GPUs is one replica with its cores and memory.
    """
    if job.gpus == 0:
        return (ReplicaRequest("worker", 0, job.cpu, job.memory_bytes),)
    sizes = [gpus_per_node] * (job.gpus // gpus_per_node)
    if job.gpus % gpus_per_node:
        sizes.append(job.gpus % gpus_per_node)
    return tuple(
        ReplicaRequest("worker", index, job.cpu * size / job.gpus, job.memory_bytes * size // job.gpus, size,
                       job.gpu_models)
        for index, size in enumerate(sizes)
    )


def queues(tenants: Sequence[str], nodes: Sequence[Node], mode: str) -> tuple[Queue, ...]:
    """One queue per tenant; ``equal`` gives each an equal nominal quota and unlimited borrowing.

    With ``none`` queues have no quota, so only fair share separates tenants.
    """
    if mode not in QUOTA_MODES:
        raise ClusterError(f"--quotas must be one of {', '.join(QUOTA_MODES)}, not {mode!r}")
    names = sorted(set(tenants))
    if mode == "none":
        return tuple(Queue(name, project=name) for name in names)
    total = Amounts(
        float(sum(len(node.gpu_ids) for node in nodes)),
        float(sum(len(node.cpu_ids) for node in nodes)),
        float(sum(node.memory_bytes for node in nodes)),
    )
    share = Amounts(total.gpu / len(names), total.cpu / len(names), total.memory / len(names))
    return tuple(Queue(name, project=name, quota=share) for name in names)


def node_types(nodes: Sequence[Node]) -> list[list]:
    """Distinct ``[gpus, cores, memory, model, count]`` of ``nodes``; a real cluster has a handful."""
    counts: dict[tuple[int, int, int, str], int] = {}
    for node in nodes:
        key = (len(node.gpu_ids), len(node.cpu_ids), node.memory_bytes, node.gpu_model)
        counts[key] = counts.get(key, 0) + 1
    return [[*key, count] for key, count in sorted(counts.items())]


def fits_on_distinct_nodes(replicas: Sequence[ReplicaRequest], types: Sequence[Sequence]) -> bool:
    """True if the gang fits an empty cluster with each replica on a node of its own.

    A sufficient test only (replicas could also share nodes), but cheap, so admitting a
    trace's jobs needs the scheduler's exhaustive ``unschedulable_reason`` only for the
    few that fail it; with 1,213 openb nodes that is the difference between a second and
    minutes.
    """
    left = [list(kind) for kind in types]  # smallest nodes first: best fit keeps big ones
    for replica in sorted(replicas, key=lambda r: (r.gpu, r.cores, r.memory_bytes), reverse=True):
        wanted_cores = replica.cores or (1 if replica.millicores else 0)  # a share takes a core of an empty node
        for kind in left:
            gpus, cores, memory, model, count = kind
            if count and gpus >= replica.gpu and cores >= wanted_cores and memory >= replica.memory_bytes and (
                    not replica.gpu or not replica.gpu_models or model in replica.gpu_models):
                kind[4] -= 1
                break
        else:
            return False
    return True
