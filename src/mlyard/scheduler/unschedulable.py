"""Why a gang cannot run, in words: on the empty cluster (``unschedulable_reason``, also what
refuses a job at submission), or keeping its placement constraint on what is free now
(``constraint_reason``, for a wait reason)."""

from __future__ import annotations

from collections.abc import Sequence

from .placement import place_gang
from .resources import FreeResources, NodeFree
from .shares import take_shares
from .snapshot import MILLICORES, Node, ReplicaRequest
from .spread import fits

_GIB = 1 << 30


def unschedulable_reason(nodes: Sequence[Node], replicas: Sequence[ReplicaRequest], *, same_node: bool = False,
                         same_topology: str | None = None) -> str | None:
    """Return None if the gang could be placed on the empty cluster, else why not.

    The message is one line naming the replica (or the job total) and the
    resource that is too big. None here means exactly that ``place_gang`` on
    ``FreeResources.from_nodes(nodes)`` with the same constraints succeeds.
    """
    if not replicas:
        return "the job has no replicas"
    if not nodes:
        return "the cluster has no nodes"
    if same_topology and not any(same_topology in node.labels for node in nodes):
        return f"no node has the label {same_topology}"
    largest_cores = max(len(node.cpu_ids) for node in nodes)
    largest_gpus = max(len(node.gpu_ids) for node in nodes)
    largest_memory = max(node.memory_bytes for node in nodes)
    for replica in replicas:
        prefix = f"replica {replica.name} asks for"
        if replica.cores > largest_cores:
            return f"{prefix} {_cpus(replica)} but the largest node has {largest_cores}"
        if replica.gpu > largest_gpus:
            return f"{prefix} {count_of(replica.gpu, 'GPU')} but the largest node has {largest_gpus}"
        if replica.memory_bytes > largest_memory:
            wanted, largest = _memory_pair(replica.memory_bytes, largest_memory)
            return f"{prefix} {wanted} of memory but the largest node has {largest}"
        if replica.gpu and replica.gpu_models and not any(node.gpu_model in replica.gpu_models for node in nodes):
            return f"{prefix} GPUs of model {' or '.join(replica.gpu_models)} but no node has them"
        if not any(fits(_empty_demand(replica), _node_counts(node)) and _accepts_node(node, replica)
                   for node in nodes):
            return (
                f"{prefix} {_cpus(replica)}, {count_of(replica.gpu, 'GPU')} and "
                f"{_gib(replica.memory_bytes)} of memory but no single node has all of that"
            )
    # Shares of cores pack into at least this many whole ones.
    total_cores = sum(replica.cores for replica in replicas) \
        - (-sum(replica.millicores for replica in replicas) // MILLICORES)
    total_gpus = sum(replica.gpu for replica in replicas)
    total_memory = sum(replica.memory_bytes for replica in replicas)
    cluster_cores = sum(len(node.cpu_ids) for node in nodes)
    cluster_gpus = sum(len(node.gpu_ids) for node in nodes)
    cluster_memory = sum(node.memory_bytes for node in nodes)
    if total_cores > cluster_cores:
        return f"the job needs {count_of(total_cores, 'CPU')} in all but the cluster has {cluster_cores}"
    if total_gpus > cluster_gpus:
        return f"the job needs {count_of(total_gpus, 'GPU')} in all but the cluster has {cluster_gpus}"
    if total_memory > cluster_memory:
        wanted, available = _memory_pair(total_memory, cluster_memory)
        return f"the job needs {wanted} of memory in all but the cluster has {available}"
    empty = FreeResources.from_nodes(nodes)
    if place_gang(empty, replicas, same_node=same_node, same_topology=same_topology) is None:
        if (same_node or same_topology) and place_gang(empty, replicas) is not None:
            return constraint_reason(empty.nodes, replicas, same_node, same_topology, free="")
        return (
            f"the job's {count_of(len(replicas), 'replica')} fit the cluster's totals "
            "but cannot be packed onto its nodes together"
        )
    return None


def constraint_reason(views: Sequence[NodeFree], replicas: Sequence[ReplicaRequest], same_node: bool,
                      same_topology: str | None, free: str = "free ") -> str | None:
    """Why a gang cannot keep its placement constraint on ``views`` in words, or None."""
    wanted = count_of(len(replicas), "replica")
    if same_topology:
        labelled = [view for view in views if same_topology in view.labels]
        if not labelled:
            return f"no node has the label {same_topology}"
        groups: dict[str, list[NodeFree]] = {}
        for view in labelled:
            groups.setdefault(view.labels[same_topology], []).append(view)
        if same_node:
            room = max(gang_room([view], replicas) for view in labelled)
            return f"needs {wanted} on one node; largest {free}node has room for {room}"
        room, value = max((gang_room(members, replicas), value) for value, members in sorted(groups.items()))
        return (f"needs {wanted} on nodes with one value of label {same_topology}; "
                f"the roomiest ({same_topology}={value}) has {free}room for {room}")
    if same_node:
        room = max((gang_room([view], replicas) for view in views), default=0)
        return f"needs {wanted} on one node; largest {free}node has room for {room}"
    return None


def gang_room(views: Sequence[NodeFree], replicas: Sequence[ReplicaRequest]) -> int:
    """How many of ``replicas``, in order, fit ``views`` together, each on the first node with
    room for it: the "room for" of a wait reason (exact for a gang of equal replicas)."""
    rooms = [[len(view.gpu_ids), len(view.cpu_ids), view.memory_bytes,
              sorted(room for room in view.shared.values() if room)] for view in views]
    placed = 0
    for replica in replicas:
        for view, room in zip(views, rooms, strict=True):
            if room[0] < replica.gpu or room[2] < replica.memory_bytes \
                    or (replica.gpu and replica.gpu_models and view.gpu_model not in replica.gpu_models):
                continue
            if replica.millicores:
                if not room[1] and not (room[3] and room[3][-1] >= replica.millicores):
                    continue
                take_shares(room, replica.millicores, 1)
            elif room[1] < replica.cores:
                continue
            room[0] -= replica.gpu
            room[1] -= replica.cores
            room[2] -= replica.memory_bytes
            placed += 1
            break
        else:
            return placed
    return placed


def _empty_demand(replica: ReplicaRequest) -> tuple[int, int, int]:
    """``demand_of`` on an empty node: a share of a core takes a whole free one into sharing mode."""
    return replica.gpu, replica.cores or (1 if replica.millicores else 0), replica.memory_bytes


def _accepts_node(node: Node, replica: ReplicaRequest) -> bool:
    return not (replica.gpu and replica.gpu_models) or node.gpu_model in replica.gpu_models


def _node_counts(node: Node) -> tuple[int, int, int]:
    return len(node.gpu_ids), len(node.cpu_ids), node.memory_bytes


def count_of(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _cpus(replica: ReplicaRequest) -> str:
    if replica.millicores:
        return f"{replica.millicores / MILLICORES:g} of a CPU core"
    if replica.cpu == replica.cores:
        return count_of(replica.cores, "CPU")
    return f"{replica.cpu:g} CPUs ({count_of(replica.cores, 'whole core')})"


def _gib(size_bytes: int) -> str:
    return f"{size_bytes / _GIB:.1f} GiB"


def _memory_pair(wanted: int, available: int) -> tuple[str, str]:
    # Fall back to exact bytes when rounding would make the two look equal.
    if _gib(wanted) == _gib(available):
        return f"{wanted} bytes", f"{available} bytes"
    return _gib(wanted), _gib(available)
