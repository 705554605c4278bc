"""Gang placement: put every replica of a job on concrete cores, GPUs and memory, or none.

``FreeResources`` (from ``resources``, re-exported here) is the mutable,
per-round view of what is still unallocated. ``place_gang`` only reads it; the
caller commits a result with ``FreeResources.reserve``. Placement knows nothing
about queues or policies so that every policy (FIFO today, backfill and
preemption later) shares it. Gangs no single node holds are packed by ``spread.py``;
shares of cores (requests below one core) pack as ``shares.py`` says.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

from .resources import FreeResources, NodeFree
from .shares import new_cores, share_cores
from .snapshot import ReplicaPlacement, ReplicaRequest
from .spread import SEARCH_BUDGET, demand_of, fits, greedy_spread, spread

__all__ = ["SEARCH_BUDGET", "FreeResources", "NodeFree", "place_gang", "place_on"]


def place_gang(
    free: FreeResources, replicas: Sequence[ReplicaRequest], *, topology_key: str = "",
    same_node: bool = False, same_topology: str | None = None,
) -> tuple[ReplicaPlacement, ...] | None:
    """Place every replica or none; never mutates ``free``.

    On success returns one placement per replica, in the order of ``replicas``.
    Each replica gets ``replica.cores`` distinct cores and ``replica.gpu``
    distinct GPUs that no other replica (of this or any reserved job) holds,
    plus its memory, on a node whose GPU model it accepts; a replica asking for
    less than a core gets its ``millicores`` of one core in sharing mode (see
    ``new_cores``). The whole gang goes
    on one node when any node can hold it, picking the node that would have the
    fewest GPUs, then cores, then bytes left over (best fit keeps big, empty
    nodes for the gangs that need them). Otherwise it goes onto as few nodes as
    possible, the last one chosen by best fit, and within one group of nodes
    sharing the ``topology_key`` label (a rack) when one group can hold it.
    ``same_node`` allows one node only; ``same_topology`` (a label) only nodes with
    that label, all of one value of it. Ranks follow placement: replicas of a role
    that may swap nodes are ordered so that consecutive ones share a node and nodes
    with one value of the label (``same_topology``, else ``topology_key``) come
    together. On each node the lowest-numbered free cores and GPUs are handed out in
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
        models = frozenset(replica.gpu_models) if gpus and replica.gpu_models else None
        if replica.millicores or same_topology:
            best = _single_node_among(free, (gpus, cores, memory), models,
                                      (replica.millicores,) if replica.millicores else (), same_topology)
            return None if best is None else _bind_on(replicas, best)
        best = _single_node(free, (gpus, cores, memory), models)
        if best is None:
            return None
        return (ReplicaPlacement(replica.role, replica.index, best.name, tuple(best.cpu_ids[:cores]),
                                 tuple(best.gpu_ids[:gpus]), memory),)
    demands = [demand_of(replica) for replica in replicas]
    total = tuple(sum(column) for column in zip(*demands, strict=False))
    if not fits(total, free.totals()):
        return None
    models = _accepted_models(replicas)
    shares = [replica.millicores for replica in replicas]
    wanted_shares = tuple(sorted((share for share in shares if share), reverse=True))
    if wanted_shares or same_topology:
        best = _single_node_among(free, total, models, wanted_shares, same_topology)
    else:
        best = _single_node(free, total, models)
    if best is not None:
        return _bind_on(replicas, best)
    if same_node or not _enough_gpu_slots(free, demands):
        return None
    assignment = _across_nodes(free, replicas, demands, total, shares if wanted_shares else None,
                               topology_key, same_topology)
    if assignment is None:
        return None
    return _bind(replicas, _follow_placement(replicas, assignment, same_topology or topology_key))


def _across_nodes(
    free: FreeResources, replicas: Sequence[ReplicaRequest], demands: list[tuple[int, int, int]],
    total: tuple[int, ...], share_list: list[int] | None, topology_key: str, same_topology: str | None,
) -> Sequence[NodeFree] | None:
    """The node of each replica of a gang no single node holds, or None (see ``place_gang``)."""
    # Across nodes each replica only needs a node of a model it accepts itself.
    limits = [frozenset(r.gpu_models) if r.gpu and r.gpu_models else None for r in replicas]
    mixed = len(set(zip(demands, limits, share_list or [0] * len(demands), strict=True))) > 1
    assignment = None
    if same_topology:
        for group in _topology_groups(free, total, same_topology, alone=True):
            assignment = _assign(group, demands, limits, share_list, mixed)
            if assignment is not None:
                break
        return assignment
    if topology_key:
        for group in _topology_groups(free, total, topology_key):
            assignment = greedy_spread(group, demands, limits, share_list)
            if assignment is not None:
                break
    if assignment is None:
        smallest = min(gpus for gpus, _, _ in demands)
        # Nodes without room for even the smallest replica's GPUs cannot take part.
        candidates: Sequence[NodeFree] = free.nodes
        if smallest:
            candidates = sorted((view for count in free.gpu_counts() if count >= smallest
                                 for view in free.iter_free_gpus(count)), key=lambda view: view.name)
        assignment = _assign(candidates, demands, limits, share_list, mixed)
    return assignment


def _assign(
    views: Sequence[NodeFree], demands: list[tuple[int, int, int]], limits: list[frozenset[str] | None],
    shares: list[int] | None, mixed: bool,
) -> list[NodeFree] | None:
    """A node per replica among ``views``, or None: greedy, then (mixed gangs) exhaustive."""
    assignment = greedy_spread(views, demands, limits, shares)
    if assignment is None and mixed:
        # Greedy is exact for identical replicas (nodes are independent bins for
        # them); mixed gangs get the exhaustive search as a second chance.
        assignment = spread(views, demands, limits, shares)
    return assignment


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


def _single_node_among(
    free: FreeResources, total: tuple[int, int, int], models: frozenset[str] | None, shares: tuple[int, ...],
    label: str | None,
) -> NodeFree | None:
    """``_single_node`` for a gang with shares of cores (``shares``, biggest first) or one that
    needs a node with ``label``: best fit prefers nodes whose cores in sharing mode hold the shares."""
    gpus, cores, memory = total
    if not gpus:
        models = None
    shape = (cores, memory, models, shares, label)
    for count in free.gpu_counts():
        if count < gpus:
            continue
        best: NodeFree | None = None
        best_key: tuple[int, int, int] | None = None
        seen = 0
        known = leading = free.known_misfits(count, shape)
        for view in free.iter_free_gpus_from(count, leading):
            opened = new_cores(view.shared, shares) if shares else 0
            cores_left = len(view.cpu_ids) - cores - opened
            memory_left = view.memory_bytes - memory
            if cores_left < 0 or memory_left < 0 or (models is not None and view.gpu_model not in models) \
                    or (label is not None and label not in view.labels):
                if not seen:
                    leading += 1
                continue
            key = (opened, cores_left, memory_left)
            if best_key is None or key < best_key:
                best, best_key = view, key
            seen += 1
            if seen >= _BEST_FIT_WINDOW:
                break
        if leading != known:
            free.note_misfits(count, shape, leading)
        if best is not None:
            return best
    return None


def _topology_groups(free: FreeResources, total: tuple[int, int, int], key: str,
                     alone: bool = False) -> Iterator[list[NodeFree]]:
    """Groups of nodes sharing label ``key`` whose free totals could hold the gang, tightest first.
    Only when there are two groups or more to choose from, unless ``alone`` (a constraint)."""
    sums_by_group = free.group_sums(key)
    if len(sums_by_group) < (1 if alone else 2):
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


def _bind_on(replicas: Sequence[ReplicaRequest], view: NodeFree) -> tuple[ReplicaPlacement, ...]:
    """``_bind`` for a gang that goes whole on ``view``: the common case, without per-node offsets."""
    if any(replica.millicores for replica in replicas):
        return tuple(_bind_node(view, list(enumerate(replicas))).values())
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


def _bind_node(view: NodeFree, entries: list[tuple[int, ReplicaRequest]]) -> dict[int, ReplicaPlacement]:
    """Placements on ``view`` of the ``(position, replica)`` entries, by position: whole cores and
    GPUs lowest first in replica order, then each share onto a core as ``share_cores`` packs them."""
    cpu_at = gpu_at = 0
    whole: dict[int, tuple[int, ...]] = {}
    gpus_of: dict[int, tuple[int, ...]] = {}
    for position, replica in entries:
        cores, gpus = replica.cores, replica.gpu
        whole[position] = tuple(view.cpu_ids[cpu_at : cpu_at + cores])
        gpus_of[position] = tuple(view.gpu_ids[gpu_at : gpu_at + gpus])
        cpu_at += cores
        gpu_at += gpus
    shares = [(position, replica.millicores) for position, replica in entries if replica.millicores]
    cores_of = share_cores(view.shared, shares, view.cpu_ids[cpu_at:]) if shares else {}
    placed: dict[int, ReplicaPlacement] = {}
    for position, replica in entries:
        if replica.millicores:
            placed[position] = ReplicaPlacement(replica.role, replica.index, view.name, (cores_of[position],),
                                                gpus_of[position], replica.memory_bytes, replica.millicores)
        else:
            placed[position] = ReplicaPlacement(replica.role, replica.index, view.name, whole[position],
                                                gpus_of[position], replica.memory_bytes)
    return placed


def _follow_placement(replicas: Sequence[ReplicaRequest], assignment: Sequence[NodeFree],
                      key: str) -> Sequence[NodeFree]:
    """Ranks follow placement: ``assignment`` with the nodes of each role's interchangeable
    replicas (equal requests) reordered so that consecutive replicas share a node, and nodes
    with one value of label ``key`` (a rack) sit next to each other, so that neighbours on a
    ring all-reduce are close. Nodes and label values keep the order they were first used in."""
    values: dict[str | None, int] = {}
    rank: dict[str, tuple[int, int]] = {}
    for view in assignment:
        if view.name not in rank:
            value = view.labels.get(key) if key else None
            rank[view.name] = (values.setdefault(value, len(values)), len(rank))
    if len(rank) < 2:
        return assignment
    kinds: dict[tuple, list[int]] = {}
    for position, replica in enumerate(replicas):
        kinds.setdefault((replica.role, replica.shape), []).append(position)
    ordered = list(assignment)
    for positions in kinds.values():
        if len(positions) > 1:
            views = sorted((assignment[position] for position in positions), key=lambda view: rank[view.name])
            for position, view in zip(positions, views, strict=True):
                ordered[position] = view
    return ordered


def _bind(replicas: Sequence[ReplicaRequest], assignment: Sequence[NodeFree]) -> tuple[ReplicaPlacement, ...]:
    if any(replica.millicores for replica in replicas):
        by_node: dict[str, tuple[NodeFree, list[tuple[int, ReplicaRequest]]]] = {}
        for position, (replica, view) in enumerate(zip(replicas, assignment, strict=True)):
            by_node.setdefault(view.name, (view, []))[1].append((position, replica))
        placed: dict[int, ReplicaPlacement] = {}
        for view, entries in by_node.values():
            placed.update(_bind_node(view, entries))
        return tuple(placed[position] for position in range(len(replicas)))
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


def place_on(free: FreeResources, replica: ReplicaRequest, names: Collection[str]) -> ReplicaPlacement | None:
    """One replica on one of the nodes ``names`` (best fit, as ``place_gang``), or None;
    never mutates ``free``. An elastic job grows this way within its placement constraint."""
    best: NodeFree | None = None
    best_key: tuple[int, int, int, int, str] | None = None
    shares = (replica.millicores,) if replica.millicores else ()
    for name in names:
        try:
            view = free.node(name)
        except KeyError:
            continue
        if len(view.gpu_ids) < replica.gpu or view.memory_bytes < replica.memory_bytes \
                or (replica.gpu and replica.gpu_models and view.gpu_model not in replica.gpu_models):
            continue
        opened = new_cores(view.shared, shares) if shares else 0
        cores_left = len(view.cpu_ids) - replica.cores - opened
        if cores_left < 0:
            continue
        key = (len(view.gpu_ids) - replica.gpu, opened, cores_left, view.memory_bytes - replica.memory_bytes, name)
        if best_key is None or key < best_key:
            best, best_key = view, key
    return None if best is None else _bind_on((replica,), best)[0]


