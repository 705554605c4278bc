"""Multi-node packing: a node for each replica of a gang that no single node holds.

``greedy_spread`` puts each group of identical replicas on as few nodes as it can;
``spread`` searches exhaustively (up to ``SEARCH_BUDGET`` node trials) for mixed gangs
greedy could not pack. Both count shares of cores the way binding packs them
(``shares.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from .resources import NodeFree
from .shares import new_cores, take_shares
from .snapshot import MILLICORES, ReplicaRequest

# Upper bound on node trials while searching for a multi-node packing. Packing is
# NP-hard in general; the bound keeps one scheduling round fast even for huge,
# hopeless gangs. A gang that exhausts it is treated as not fitting.
SEARCH_BUDGET = 50_000


def demand_of(replica: ReplicaRequest) -> tuple[int, int, int]:
    # Same layout as NodeFree.counts() so the two compare component-wise.
    return replica.gpu, replica.cores, replica.memory_bytes


def fits(demand: tuple[int, int, int], capacity: Sequence[int]) -> bool:
    # Spelled out: called per node and per rack, where a generator costs more than the test.
    return demand[0] <= capacity[0] and demand[1] <= capacity[1] and demand[2] <= capacity[2]


def greedy_spread(
    views: Sequence[NodeFree], demands: list[tuple[int, int, int]], limits: list[frozenset[str] | None],
    shares: list[int] | None = None,
) -> list[NodeFree] | None:
    """Fewest nodes for each group of identical replicas, biggest group first.

    ``shares``: each replica's millicores of a shared core (None: no replica asks for one).
    Returns the node of each replica, or None when the greedy packing fails.
    """
    # What is left of each view, by its position in ``views``; filled in as views are first read:
    # [GPUs, wholly free cores, memory, rooms of the cores in sharing mode (sorted, read when needed)].
    rooms: list[list | None] = [None] * len(views)
    used: set[int] = set()  # positions of the views this gang uses so far
    chosen: list[NodeFree | None] = [None] * len(demands)
    groups: dict[tuple[tuple[int, int, int], frozenset[str] | None, int], list[int]] = {}
    for position, demand in enumerate(demands):
        groups.setdefault((demand, limits[position], shares[position] if shares else 0), []).append(position)
    ordered = sorted(groups.items(),
                     key=lambda item: (tuple(-x for x in item[0][0]), -item[0][2], sorted(item[0][1] or ())))
    for (demand, models, share), positions in ordered:
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
                room = rooms[order] = [len(view.gpu_ids), len(view.cpu_ids), view.memory_bytes, None]
            if models is not None and view.gpu_model not in models:
                continue
            # Copies that fit, limited by each resource the replica needs (min(), spelled out).
            if share:
                count = _share_copies(room, view, share, gpus, memory)
            elif gpus:
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
        picks = _pick(holds, used, wanted)
        if picks is None:
            return None
        cursor = 0
        for order, view, count in picks:
            room = rooms[order]
            room[0] -= gpus * count
            room[1] -= cores * count
            room[2] -= memory * count
            if share:
                take_shares(room, share, count)
            used.add(order)
            for position in positions[cursor : cursor + count]:
                chosen[position] = view
            cursor += count
    if shares and len({share for share in shares if share}) > 1 and not _holds_shares(chosen, demands, shares):
        return None  # shares of several sizes, packed group by group, may need more cores than binding has
    return chosen  # type: ignore[return-value]


def _pick(holds: list[tuple[int, int, NodeFree]], used: set[int], wanted: int) -> list[tuple[int, NodeFree, int]] | None:
    """From ``(copies that fit, position, node)``: the nodes ``wanted`` copies go on, and how many
    on each; nodes the gang already uses first, then the roomiest; the last node by best fit."""
    remaining = wanted
    if sum(count for count, _, _ in holds) < remaining:
        return None
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
    return None if remaining else picks


def _share_copies(room: list, view: NodeFree, share: int, gpus: int, memory: int) -> int:
    """How many replicas of ``share`` millicores (and ``gpus``, ``memory`` each) a node's ``room`` holds."""
    rooms = room[3]
    if rooms is None:
        rooms = room[3] = sorted(left for left in view.shared.values() if left)
    count = room[1] * (MILLICORES // share) + sum(left // share for left in rooms)
    if gpus and room[0] // gpus < count:
        count = room[0] // gpus
    if memory and room[2] // memory < count:
        count = room[2] // memory
    return count


def _holds_shares(chosen: Sequence[NodeFree], demands: list[tuple[int, int, int]], shares: list[int]) -> bool:
    """Whether each node chosen holds its replicas' whole cores plus what their shares open there."""
    by_node: dict[str, tuple[NodeFree, list[int], list[int]]] = {}
    for view, demand, share in zip(chosen, demands, shares, strict=True):
        entry = by_node.setdefault(view.name, (view, [0], []))
        entry[1][0] += demand[1]
        if share:
            entry[2].append(share)
    return all(whole[0] + (new_cores(view.shared, items) if items else 0) <= len(view.cpu_ids)
               for view, whole, items in by_node.values())


def spread(
    views: Sequence[NodeFree], demands: list[tuple[int, int, int]], limits: list[frozenset[str] | None],
    shares: list[int] | None = None,
) -> list[NodeFree] | None:
    """Return a node per replica, or None; exhaustive up to SEARCH_BUDGET.

    ``shares`` (millicores of a shared core per replica; None: none) are packed on each node
    as binding packs them (``new_cores``), counted against the node's wholly free cores."""
    total = [sum(column) for column in zip(*demands, strict=False)]
    available = [sum(column) for column in zip(*(view.counts() for view in views), strict=False)] or [0, 0, 0]
    if not fits(tuple(total), available):
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
    share_of = shares or [0] * len(demands)
    # Biggest replicas first; identical replicas end up adjacent, which the
    # symmetry pruning below relies on.
    order = sorted(range(len(demands)),
                   key=lambda i: (*(-x for x in demands[i]), -share_of[i], sorted(limits[i] or ()), i))
    models = [views[k].gpu_model for k in node_order]
    slots = _SharedSlots([views[k] for k in node_order]) if shares else None
    choice = [-1] * len(order)
    tried: list[set[tuple[object, ...]]] = [set() for _ in order]
    steps = 0
    position = 0
    while 0 <= position < len(order):
        demand = demands[order[position]]
        limit = limits[order[position]]
        share = share_of[order[position]]
        previous = choice[position]
        if previous >= 0:
            _give_back(capacity[previous], demand)
            if share:
                slots.remove(previous, share, capacity[previous])
            start = previous + 1
        else:
            tried[position].clear()
            same_as_before = (position > 0 and demands[order[position - 1]] == demand
                              and limits[order[position - 1]] == limit and share_of[order[position - 1]] == share)
            # Identical replicas are interchangeable: only non-decreasing node
            # slots need trying, which prunes the permutations among them.
            start = choice[position - 1] if same_as_before else 0
        choice[position] = -1
        for slot in range(start, len(capacity)):
            steps += 1
            if steps > SEARCH_BUDGET:
                return None
            state = (*capacity[slot], models[slot])
            if slots is not None:
                state = (*state, *slots.key(slot))
            # A node with the same free counts (and model) as one that already failed here fails too.
            if state in tried[position] or not fits(demand, state) \
                    or (limit is not None and demand[0] and models[slot] not in limit):
                continue
            tried[position].add(state)
            if share and slots.opens(slot, share) > capacity[slot][1]:
                continue
            for axis, need in enumerate(demand):
                capacity[slot][axis] -= need
            if share:
                slots.add(slot, share, capacity[slot])
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


class _SharedSlots:
    """``spread``'s record of the shares it has put on each node (slot) so far: the cores they
    open there are taken from the slot's wholly free cores as ``new_cores`` counts them."""

    def __init__(self, views: Sequence[NodeFree]) -> None:
        self.shared = [view.shared for view in views]
        self.signature = [tuple(sorted(room for room in view.shared.values() if room)) for view in views]
        self.placed: list[list[int]] = [[] for _ in views]
        self.opened = [0] * len(views)

    def key(self, slot: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """What, beyond its free counts, makes a slot alike another for the shares to come."""
        return self.signature[slot], tuple(sorted(self.placed[slot]))

    def opens(self, slot: int, share: int) -> int:
        """Wholly free cores one more share opens on ``slot``."""
        return new_cores(self.shared[slot], [*self.placed[slot], share]) - self.opened[slot]

    def add(self, slot: int, share: int, capacity: list[int]) -> None:
        self._count(slot, capacity, self.placed[slot].append, share)

    def remove(self, slot: int, share: int, capacity: list[int]) -> None:
        self._count(slot, capacity, self.placed[slot].remove, share)

    def _count(self, slot: int, capacity: list[int], change, share: int) -> None:
        change(share)
        now_open = new_cores(self.shared[slot], self.placed[slot]) if self.placed[slot] else 0
        capacity[1] += self.opened[slot] - now_open
        self.opened[slot] = now_open
