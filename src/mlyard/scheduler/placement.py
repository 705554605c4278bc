"""Gang placement: put every replica of a job on concrete cores, GPUs and memory, or none.

``FreeResources`` (from ``resources``, re-exported here) is the mutable,
per-round view of what is still unallocated. ``place_gang`` only reads it; the
caller commits a result with ``FreeResources.reserve``. Placement knows nothing
about queues or policies so that every policy (FIFO today, backfill and
preemption later) shares it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .resources import FreeResources, NodeFree
from .snapshot import Node, ReplicaPlacement, ReplicaRequest

__all__ = ["SEARCH_BUDGET", "FreeResources", "NodeFree", "place_gang", "unschedulable_reason"]

# Upper bound on node trials while searching for a multi-node packing. Packing is
# NP-hard in general; the bound keeps one scheduling round fast even for huge,
# hopeless gangs. A gang that exhausts it is treated as not fitting.
SEARCH_BUDGET = 50_000

_GIB = 1 << 30


def _demand(replica: ReplicaRequest) -> tuple[int, int, int]:
    # Same layout as NodeFree.counts() so the two compare component-wise.
    return replica.gpu, replica.cores, replica.memory_bytes


def _fits(demand: tuple[int, int, int], capacity: Sequence[int]) -> bool:
    return all(need <= have for need, have in zip(demand, capacity, strict=False))


def place_gang(
    free: FreeResources, replicas: Sequence[ReplicaRequest]
) -> tuple[ReplicaPlacement, ...] | None:
    """Place every replica or none; never mutates ``free``.

    On success returns one placement per replica, in the order of ``replicas``.
    Each replica gets ``replica.cores`` distinct cores and ``replica.gpu``
    distinct GPUs that no other replica (of this or any reserved job) holds,
    plus its memory. The whole gang goes on one node when any node can hold it,
    picking the node that would have the fewest GPUs, then cores, then bytes
    left over; otherwise it is spread over as few nodes as a first-fit search
    finds. On each node the lowest-numbered free cores and GPUs are handed out
    in replica order. The result depends only on the inputs. Returns None when
    the gang does not fit; an empty gang trivially fits and yields ``()``.
    """
    if not replicas:
        return ()
    views = free.nodes
    demands = [_demand(replica) for replica in replicas]
    assignment = _single_node(views, demands)
    if assignment is None:
        assignment = _spread(views, demands)
    if assignment is None:
        return None
    return _bind(views, replicas, assignment)


def _single_node(views: Sequence[NodeFree], demands: list[tuple[int, int, int]]) -> list[int] | None:
    total = tuple(sum(column) for column in zip(*demands, strict=False))
    candidates = [k for k, view in enumerate(views) if _fits(total, view.counts())]
    if not candidates:
        return None
    # Best fit: leave big, empty nodes for the gangs that need them.
    best = min(
        candidates,
        key=lambda k: tuple(have - need for have, need in zip(views[k].counts(), total, strict=False)),
    )
    return [best] * len(demands)


def _spread(views: Sequence[NodeFree], demands: list[tuple[int, int, int]]) -> list[int] | None:
    """Return a node index per replica, or None; exhaustive up to SEARCH_BUDGET."""
    total = [sum(column) for column in zip(*demands, strict=False)]
    available = [sum(column) for column in zip(*(view.counts() for view in views), strict=False)] or [0, 0, 0]
    if not _fits(tuple(total), available):
        return None
    needs_gpu = total[0] > 0
    # Largest nodes first so the gang lands on few of them; gangs without GPUs
    # try nodes with the fewest free GPUs first to keep GPU nodes for GPU jobs.
    node_order = sorted(
        range(len(views)),
        key=lambda k: (
            -views[k].counts()[0] if needs_gpu else views[k].counts()[0],
            -views[k].counts()[1],
            -views[k].counts()[2],
        ),
    )
    capacity = [list(views[k].counts()) for k in node_order]
    # Biggest replicas first; identical replicas end up adjacent, which the
    # symmetry pruning below relies on.
    order = sorted(range(len(demands)), key=lambda i: tuple(-x for x in demands[i]) + (i,))
    choice = [-1] * len(order)
    tried: list[set[tuple[int, ...]]] = [set() for _ in order]
    steps = 0
    position = 0
    while 0 <= position < len(order):
        demand = demands[order[position]]
        previous = choice[position]
        if previous >= 0:
            _give_back(capacity[previous], demand)
            start = previous + 1
        else:
            tried[position].clear()
            same_as_before = position > 0 and demands[order[position - 1]] == demand
            # Identical replicas are interchangeable: only non-decreasing node
            # slots need trying, which prunes the permutations among them.
            start = choice[position - 1] if same_as_before else 0
        choice[position] = -1
        for slot in range(start, len(capacity)):
            steps += 1
            if steps > SEARCH_BUDGET:
                return None
            state = tuple(capacity[slot])
            # A node with the same free counts as one that already failed here fails too.
            if state in tried[position] or not _fits(demand, state):
                continue
            tried[position].add(state)
            for axis, need in enumerate(demand):
                capacity[slot][axis] -= need
            choice[position] = slot
            break
        position = position + 1 if choice[position] >= 0 else position - 1
    if position < 0:
        return None
    assignment = [0] * len(demands)
    for position, replica_index in enumerate(order):
        assignment[replica_index] = node_order[choice[position]]
    return assignment


def _give_back(capacity: list[int], demand: tuple[int, int, int]) -> None:
    for axis, need in enumerate(demand):
        capacity[axis] += need


def _bind(
    views: Sequence[NodeFree], replicas: Sequence[ReplicaRequest], assignment: list[int]
) -> tuple[ReplicaPlacement, ...]:
    next_cpu = [0] * len(views)
    next_gpu = [0] * len(views)
    placements = []
    for replica, k in zip(replicas, assignment, strict=False):
        view = views[k]
        cpu_ids = tuple(view.cpu_ids[next_cpu[k] : next_cpu[k] + replica.cores])
        gpu_ids = tuple(view.gpu_ids[next_gpu[k] : next_gpu[k] + replica.gpu])
        next_cpu[k] += replica.cores
        next_gpu[k] += replica.gpu
        placements.append(
            ReplicaPlacement(replica.role, replica.index, view.name, cpu_ids, gpu_ids, replica.memory_bytes)
        )
    return tuple(placements)


def unschedulable_reason(nodes: Sequence[Node], replicas: Sequence[ReplicaRequest]) -> str | None:
    """Return None if the gang could be placed on the empty cluster, else why not.

    The message is one line naming the replica (or the job total) and the
    resource that is too big. None here means exactly that ``place_gang`` on
    ``FreeResources.from_nodes(nodes)`` succeeds.
    """
    if not replicas:
        return "the job has no replicas"
    if not nodes:
        return "the cluster has no nodes"
    largest_cores = max(len(node.cpu_ids) for node in nodes)
    largest_gpus = max(len(node.gpu_ids) for node in nodes)
    largest_memory = max(node.memory_bytes for node in nodes)
    for replica in replicas:
        prefix = f"replica {replica.name} asks for"
        if replica.cores > largest_cores:
            return f"{prefix} {_cpus(replica)} but the largest node has {largest_cores}"
        if replica.gpu > largest_gpus:
            return f"{prefix} {_count(replica.gpu, 'GPU')} but the largest node has {largest_gpus}"
        if replica.memory_bytes > largest_memory:
            wanted, largest = _memory_pair(replica.memory_bytes, largest_memory)
            return f"{prefix} {wanted} of memory but the largest node has {largest}"
        if not any(_fits(_demand(replica), _node_counts(node)) for node in nodes):
            return (
                f"{prefix} {_cpus(replica)}, {_count(replica.gpu, 'GPU')} and "
                f"{_gib(replica.memory_bytes)} of memory but no single node has all of that"
            )
    total_cores = sum(replica.cores for replica in replicas)
    total_gpus = sum(replica.gpu for replica in replicas)
    total_memory = sum(replica.memory_bytes for replica in replicas)
    cluster_cores = sum(len(node.cpu_ids) for node in nodes)
    cluster_gpus = sum(len(node.gpu_ids) for node in nodes)
    cluster_memory = sum(node.memory_bytes for node in nodes)
    if total_cores > cluster_cores:
        return f"the job needs {_count(total_cores, 'CPU')} in all but the cluster has {cluster_cores}"
    if total_gpus > cluster_gpus:
        return f"the job needs {_count(total_gpus, 'GPU')} in all but the cluster has {cluster_gpus}"
    if total_memory > cluster_memory:
        wanted, available = _memory_pair(total_memory, cluster_memory)
        return f"the job needs {wanted} of memory in all but the cluster has {available}"
    if place_gang(FreeResources.from_nodes(nodes), replicas) is None:
        return (
            f"the job's {_count(len(replicas), 'replica')} fit the cluster's totals "
            "but cannot be packed onto its nodes together"
        )
    return None


def _node_counts(node: Node) -> tuple[int, int, int]:
    return len(node.gpu_ids), len(node.cpu_ids), node.memory_bytes


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _cpus(replica: ReplicaRequest) -> str:
    if replica.cpu == replica.cores:
        return _count(replica.cores, "CPU")
    return f"{replica.cpu:g} CPUs ({_count(replica.cores, 'whole core')})"


def _gib(size_bytes: int) -> str:
    return f"{size_bytes / _GIB:.1f} GiB"


def _memory_pair(wanted: int, available: int) -> tuple[str, str]:
    # Fall back to exact bytes when rounding would make the two look equal.
    if _gib(wanted) == _gib(available):
        return f"{wanted} bytes", f"{available} bytes"
    return _gib(wanted), _gib(available)
