"""Gang placement: put every replica of a job on concrete cores, GPUs and memory, or none.

``FreeResources`` (from ``resources``, re-exported here) is the mutable,
per-round view of what is still unallocated. ``place_gang`` only reads it; the
caller commits a result with ``FreeResources.reserve``. Placement knows nothing
about queues or policies so that every policy (FIFO today, backfill and
preemption later) shares it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

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
    # Spelled out: called per node and per rack, where a generator costs more than the test.
    return demand[0] <= capacity[0] and demand[1] <= capacity[1] and demand[2] <= capacity[2]


def place_gang(
    free: FreeResources, replicas: Sequence[ReplicaRequest], *, topology_key: str = ""
) -> tuple[ReplicaPlacement, ...] | None:
    """Place every replica or none; never mutates ``free``.

    On success returns one placement per replica, in the order of ``replicas``.
    Each replica gets ``replica.cores`` distinct cores and ``replica.gpu``
    distinct GPUs that no other replica (of this or any reserved job) holds,
    plus its memory, on a node whose GPU model it accepts. The whole gang goes
    on one node when any node can hold it, picking the node that would have the
    fewest GPUs, then cores, then bytes left over (best fit keeps big, empty
    nodes for the gangs that need them). Otherwise it goes onto as few nodes as
    possible, the last one chosen by best fit, and within one group of nodes
    sharing the ``topology_key`` label (a rack) when one group can hold it.
    On each node the lowest-numbered free cores and GPUs are handed out in
    replica order. The result depends only on the inputs. Returns None when the
    gang does not fit; an empty gang trivially fits and yields ``()``.
    """
    if not replicas:
        return ()
    if len(replicas) == 1:
        # Most gangs are one replica: its demand is the total, and it goes on one node or nowhere.
        (replica,) = replicas
        gpus, cores, memory = replica.gpu, replica.cores, replica.memory_bytes
        free_gpus, free_cores, free_memory = free.totals()
        if gpus > free_gpus or cores > free_cores or memory > free_memory:
            return None
        best = _single_node(free, (gpus, cores, memory),
                            frozenset(replica.gpu_models) if gpus and replica.gpu_models else None)
        if best is None:
            return None
        return (ReplicaPlacement(replica.role, replica.index, best.name, tuple(best.cpu_ids[:cores]),
                                 tuple(best.gpu_ids[:gpus]), memory),)
    demands = [_demand(replica) for replica in replicas]
    total = tuple(sum(column) for column in zip(*demands, strict=False))
    if not _fits(total, free.totals()):
        return None
    models = _accepted_models(replicas)
    best = _single_node(free, total, models)
    if best is not None:
        return _bind_on(replicas, best)
    if not _enough_gpu_slots(free, demands):
        return None
    # Across nodes each replica only needs a node of a model it accepts itself.
    limits = [frozenset(r.gpu_models) if r.gpu and r.gpu_models else None for r in replicas]
    assignment = None
    if topology_key:
        for group in _topology_groups(free, total, topology_key):
            assignment = _greedy_spread(group, demands, limits)
            if assignment is not None:
                break
    if assignment is None:
        smallest = min(gpus for gpus, _, _ in demands)
        # Nodes without room for even the smallest replica's GPUs cannot take part.
        candidates: Sequence[NodeFree] = free.nodes
        if smallest:
            candidates = sorted((view for count in free.gpu_counts() if count >= smallest
                                 for view in free.iter_free_gpus(count)), key=lambda view: view.name)
        assignment = _greedy_spread(candidates, demands, limits)
        if assignment is None and len(set(zip(demands, limits, strict=True))) > 1:
            # Greedy is exact for identical replicas (nodes are independent bins for
            # them); mixed gangs get the exhaustive search as a second chance.
            assignment = _spread(candidates, demands, limits)
    if assignment is None:
        return None
    return _bind(replicas, assignment)


def _enough_gpu_slots(free: FreeResources, demands: list[tuple[int, int, int]]) -> bool:
    """Necessary condition from the free-GPU index alone: for each replica GPU size, enough
    nodes have room for that many replicas of it. Rejects most hopeless gangs in O(buckets)."""
    wanted: dict[int, int] = {}
    for gpus, _, _ in demands:
        if gpus:
            wanted[gpus] = wanted.get(gpus, 0) + 1
    if not wanted:
        return True
    counts = [(count, free.nodes_with_free_gpus(count)) for count in free.gpu_counts() if count]
    return all(sum(nodes * (count // size) for count, nodes in counts) >= needed for size, needed in wanted.items())


def _accepted_models(replicas: Sequence[ReplicaRequest]) -> frozenset[str] | None:
    """The GPU models every GPU replica of the gang accepts; None: any model."""
    allowed: frozenset[str] | None = None
    for replica in replicas:
        if replica.gpu and replica.gpu_models:
            models = frozenset(replica.gpu_models)
            allowed = models if allowed is None else allowed & models
    return allowed


# Best fit looks at this many fitting nodes of the tightest GPU bucket: exact on
# small clusters, bounded on large ones where the bucket's nodes are near-identical.
_BEST_FIT_WINDOW = 4


def _single_node(
    free: FreeResources, total: tuple[int, int, int], models: frozenset[str] | None
) -> NodeFree | None:
    gpus, cores, memory = total
    if not gpus:
        models = None  # the model only matters to a gang asking for GPUs
    # Whether a node of the bucket holds the gang.
    shape = (cores, memory, models)
    for count in free.gpu_counts():
        if count < gpus:
            continue
        best: NodeFree | None = None
        best_key: tuple[int, int] | None = None
        seen = 0
        known = leading = free.known_misfits(count, shape)
        for view in free.iter_free_gpus_from(count, leading):
            cores_left = len(view.cpu_ids) - cores
            memory_left = view.memory_bytes - memory
            if cores_left < 0 or memory_left < 0 or (models is not None and view.gpu_model not in models):
                if not seen:
                    leading += 1
                continue
            # Best fit: fewest cores, then bytes left (lexicographic, spelled out: no tuple per node).
            if best is None or cores_left < best_key[0] or (cores_left == best_key[0] and memory_left < best_key[1]):
                best, best_key = view, (cores_left, memory_left)
            seen += 1
            if seen >= _BEST_FIT_WINDOW:
                break
        if leading != known:
            free.note_misfits(count, shape, leading)
        if best is not None:
            return best
    return None


def _topology_groups(free: FreeResources, total: tuple[int, int, int], key: str) -> Iterator[list[NodeFree]]:
    """Groups of nodes sharing label ``key`` whose free totals could hold the gang, tightest first."""
    sums_by_group = free.group_sums(key)
    if len(sums_by_group) < 2:
        return
    gpus, cores, memory = total  # _fits, inline: once per rack
    fitting = [value for value, sums in sums_by_group.items()
               if gpus <= sums[0] and cores <= sums[1] and memory <= sums[2]]
    if not fitting:
        return
    # The tightest group usually holds the gang: find it in one pass, and sort the rest
    # (by the same key: free totals, then the label value) only when it does not.
    tightest = min(sums_by_group[value] for value in fitting)
    first = min(value for value in fitting if sums_by_group[value] == tightest)
    yield free.group_nodes(key, first)
    fitting.remove(first)
    fitting.sort(key=lambda value: (sums_by_group[value], value))
    for value in fitting:
        yield free.group_nodes(key, value)


def _greedy_spread(
    views: Sequence[NodeFree], demands: list[tuple[int, int, int]], limits: list[frozenset[str] | None]
) -> list[NodeFree] | None:
    """Fewest nodes for each group of identical replicas, biggest group first.

    Returns the node of each replica, or None when the greedy packing fails.
    """
    # What is left of each view, by its position in ``views``; filled in as views are first read.
    rooms: list[list[int] | None] = [None] * len(views)
    used: set[int] = set()  # positions of the views this gang uses so far
    chosen: list[NodeFree | None] = [None] * len(demands)
    groups: dict[tuple[tuple[int, int, int], frozenset[str] | None], list[int]] = {}
    for position, demand in enumerate(demands):
        groups.setdefault((demand, limits[position]), []).append(position)
    ordered = sorted(groups.items(), key=lambda item: (tuple(-x for x in item[0][0]), sorted(item[0][1] or ())))
    for (demand, models), positions in ordered:
        holds = []
        gpus, cores, memory = demand
        if not gpus:
            models = None  # the model only matters to a replica asking for GPUs
        wanted = len(positions)
        for order, view in enumerate(views):
            room = rooms[order]
            if room is None:
                if gpus and len(view.gpu_ids) < gpus:  # most nodes of a busy cluster: no copy fits
                    continue
                room = rooms[order] = [len(view.gpu_ids), len(view.cpu_ids), view.memory_bytes]
            if models is not None and view.gpu_model not in models:
                continue
            # Copies that fit, limited by each resource the replica needs (min(), spelled out).
            if gpus:
                count = room[0] // gpus
                if cores and room[1] // cores < count:
                    count = room[1] // cores
                if memory and room[2] // memory < count:
                    count = room[2] // memory
            elif cores:
                count = room[1] // cores
                if memory and room[2] // memory < count:
                    count = room[2] // memory
            elif memory:
                count = room[2] // memory
            else:
                count = wanted
            if count > 0:
                holds.append((count, order, view))
        remaining = wanted
        if sum(count for count, _, _ in holds) < remaining:
            return None
        # Nodes this gang already uses first, then the roomiest; the last node by best fit.
        holds.sort(key=lambda item: (-(item[1] in used), -item[0], item[1]))
        picks: list[tuple[int, NodeFree, int]] = []
        for index, (count, order, view) in enumerate(holds):
            if remaining == 0:
                break
            if count >= remaining:
                tail = [item for item in holds[index:] if item[0] >= remaining]
                tail.sort(key=lambda item: (-(item[1] in used), item[0], item[1]))
                picks.append((tail[0][1], tail[0][2], remaining))
                remaining = 0
                break
            picks.append((order, view, count))
            remaining -= count
        if remaining:
            return None
        cursor = 0
        for order, view, count in picks:
            room = rooms[order]
            room[0] -= gpus * count
            room[1] -= cores * count
            room[2] -= memory * count
            used.add(order)
            for position in positions[cursor : cursor + count]:
                chosen[position] = view
            cursor += count
    return chosen  # type: ignore[return-value]


def _spread(
    views: Sequence[NodeFree], demands: list[tuple[int, int, int]], limits: list[frozenset[str] | None]
) -> list[NodeFree] | None:
    """Return a node per replica, or None; exhaustive up to SEARCH_BUDGET."""
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
    order = sorted(range(len(demands)),
                   key=lambda i: (*(-x for x in demands[i]), sorted(limits[i] or ()), i))
    models = [views[k].gpu_model for k in node_order]
    choice = [-1] * len(order)
    tried: list[set[tuple[object, ...]]] = [set() for _ in order]
    steps = 0
    position = 0
    while 0 <= position < len(order):
        demand = demands[order[position]]
        limit = limits[order[position]]
        previous = choice[position]
        if previous >= 0:
            _give_back(capacity[previous], demand)
            start = previous + 1
        else:
            tried[position].clear()
            same_as_before = (position > 0 and demands[order[position - 1]] == demand
                              and limits[order[position - 1]] == limit)
            # Identical replicas are interchangeable: only non-decreasing node
            # slots need trying, which prunes the permutations among them.
            start = choice[position - 1] if same_as_before else 0
        choice[position] = -1
        for slot in range(start, len(capacity)):
            steps += 1
            if steps > SEARCH_BUDGET:
                return None
            state = (*capacity[slot], models[slot])
            # A node with the same free counts (and model) as one that already failed here fails too.
            if state in tried[position] or not _fits(demand, state) \
                    or (limit is not None and demand[0] and models[slot] not in limit):
                continue
            tried[position].add(state)
            for axis, need in enumerate(demand):
                capacity[slot][axis] -= need
            choice[position] = slot
            break
        position = position + 1 if choice[position] >= 0 else position - 1
    if position < 0:
        return None
    assignment: list[NodeFree] = [views[0]] * len(demands)
    for position, replica_index in enumerate(order):
        assignment[replica_index] = views[node_order[choice[position]]]
    return assignment


def _give_back(capacity: list[int], demand: tuple[int, int, int]) -> None:
    for axis, need in enumerate(demand):
        capacity[axis] += need


def _bind_on(replicas: Sequence[ReplicaRequest], view: NodeFree) -> tuple[ReplicaPlacement, ...]:
    """``_bind`` for a gang that goes whole on ``view``: the common case, without per-node offsets."""
    cpu_at = gpu_at = 0
    placements = []
    for replica in replicas:
        cores, gpus = replica.cores, replica.gpu
        placements.append(ReplicaPlacement(
            replica.role, replica.index, view.name, tuple(view.cpu_ids[cpu_at : cpu_at + cores]),
            tuple(view.gpu_ids[gpu_at : gpu_at + gpus]), replica.memory_bytes,
        ))
        cpu_at += cores
        gpu_at += gpus
    return tuple(placements)


def _bind(replicas: Sequence[ReplicaRequest], assignment: Sequence[NodeFree]) -> tuple[ReplicaPlacement, ...]:
    handed: dict[str, list[int]] = {}  # node -> [cores, GPUs] handed out so far
    placements = []
    for replica, view in zip(replicas, assignment, strict=True):
        at = handed.get(view.name)
        if at is None:
            at = handed[view.name] = [0, 0]
        cpu_at, gpu_at = at
        cores, gpus = replica.cores, replica.gpu
        placements.append(ReplicaPlacement(
            replica.role, replica.index, view.name, tuple(view.cpu_ids[cpu_at : cpu_at + cores]),
            tuple(view.gpu_ids[gpu_at : gpu_at + gpus]), replica.memory_bytes,
        ))
        at[0] = cpu_at + cores
        at[1] = gpu_at + gpus
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
            return f"{prefix} {count_of(replica.gpu, 'GPU')} but the largest node has {largest_gpus}"
        if replica.memory_bytes > largest_memory:
            wanted, largest = _memory_pair(replica.memory_bytes, largest_memory)
            return f"{prefix} {wanted} of memory but the largest node has {largest}"
        if replica.gpu and replica.gpu_models and not any(node.gpu_model in replica.gpu_models for node in nodes):
            return f"{prefix} GPUs of model {' or '.join(replica.gpu_models)} but no node has them"
        if not any(_fits(_demand(replica), _node_counts(node)) and _accepts_node(node, replica) for node in nodes):
            return (
                f"{prefix} {_cpus(replica)}, {count_of(replica.gpu, 'GPU')} and "
                f"{_gib(replica.memory_bytes)} of memory but no single node has all of that"
            )
    total_cores = sum(replica.cores for replica in replicas)
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
    if place_gang(FreeResources.from_nodes(nodes), replicas) is None:
        return (
            f"the job's {count_of(len(replicas), 'replica')} fit the cluster's totals "
            "but cannot be packed onto its nodes together"
        )
    return None


def _accepts_node(node: Node, replica: ReplicaRequest) -> bool:
    return not (replica.gpu and replica.gpu_models) or node.gpu_model in replica.gpu_models


def _node_counts(node: Node) -> tuple[int, int, int]:
    return len(node.gpu_ids), len(node.cpu_ids), node.memory_bytes


def count_of(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _cpus(replica: ReplicaRequest) -> str:
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
