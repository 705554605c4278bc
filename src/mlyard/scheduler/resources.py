"""Mutable per-round view of unallocated cores, GPUs and memory on each node.

Built from a snapshot's nodes minus what its running jobs hold; a policy then
reserves each gang it decides to start so later decisions in the same round
see what is left. Nodes are also indexed by their number of free GPUs so that
best-fit placement on a thousand-node cluster looks at a handful of nodes, not
all of them; cluster-wide totals are kept for the same reason (a gang bigger
than everything free is rejected without looking at any node).

CPUs are counted two ways. ``cpu_ids`` are the cores no replica holds any of: whole-core
requests take from them only, and the totals count them. A request below one core takes
a share, in thousandths, of one core in sharing mode (``shared``: core id -> free
millicores): one that still has room, or a wholly free core that enters sharing mode.
A core whose last share is given back is wholly free again.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice

from .snapshot import MILLICORES, ClusterSnapshot, Labels, Node, ReplicaPlacement


@dataclass
class NodeFree:
    """Unallocated resources of one node; id lists are kept sorted ascending.

    ``cpu_ids`` are the wholly free cores; ``shared`` the cores in sharing mode, each with
    the millicores it has left (0: full).
    """

    name: str
    cpu_ids: list[int]
    gpu_ids: list[int]
    memory_bytes: int
    gpu_model: str = ""
    labels: Mapping[str, str] = field(default_factory=Labels)
    shared: dict[int, int] = field(default_factory=dict)

    def counts(self) -> tuple[int, int, int]:
        """Return ``(free gpus, free cores, free memory bytes)``."""
        return len(self.gpu_ids), len(self.cpu_ids), self.memory_bytes


def _take_share(view: NodeFree, core: int, millicores: int) -> None:
    """Take ``millicores`` of ``core``: whatever of it is free (a record may be stale)."""
    room = view.shared.get(core)
    if room is not None:
        view.shared[core] = room - millicores if room > millicores else 0
        return
    free_ids = view.cpu_ids
    at = bisect_left(free_ids, core)
    if at < len(free_ids) and free_ids[at] == core:
        del free_ids[at]
        view.shared[core] = MILLICORES - millicores if millicores < MILLICORES else 0


def _close_shared(view: NodeFree, held: tuple[int, ...]) -> None:
    """Whole cores taken that a view has in sharing mode (a stale record): nothing is left of them."""
    shared = view.shared
    for core in held:
        if core in shared:
            shared[core] = 0


def _remove_ids(free_ids: list[int], held: tuple[int, ...]) -> None:
    """Drop ``held`` from ``free_ids`` where present, keeping the rest in order."""
    count = len(held)
    if not count:
        return
    # Placement hands out a node's lowest free ids, so a start usually takes a prefix.
    if tuple(free_ids[:count]) == held:
        del free_ids[:count]
        return
    taken = set(held)
    free_ids[:] = [resource_id for resource_id in free_ids if resource_id not in taken]


class FreeResources:
    """Mutable view of unallocated resources per node, iterated in node-name order.

    Node order is by name rather than snapshot order so that placement does not
    depend on the order a caller happened to list nodes in.
    """

    def __init__(self, nodes: Iterable[NodeFree]) -> None:
        self._nodes: dict[str, NodeFree] = {}
        for node in sorted(nodes, key=lambda node: node.name):
            if node.name in self._nodes:
                raise ValueError(f"duplicate node name {node.name!r}")
            self._nodes[node.name] = node
        self._owned: set[str] = set(self._nodes)  # records no other view shares
        self._reindex()

    def _reindex(self) -> None:
        # bucket: free GPU count -> node name -> the node's current record, in a stable order
        self._buckets: dict[int, dict[str, NodeFree]] = {}
        gpus = cores = memory = 0
        for node in self._nodes.values():
            self._buckets.setdefault(len(node.gpu_ids), {})[node.name] = node
            gpus += len(node.gpu_ids)
            cores += len(node.cpu_ids)
            memory += node.memory_bytes
        self._totals = [gpus, cores, memory]
        self._counts: tuple[int, ...] | None = None  # gpu_counts(), until a bucket empties or fills
        self._skips: dict[int, dict[Hashable, int]] = {}  # see known_misfits()
        self._group_key = ""
        self._group_of: dict[str, str] = {}
        self._group_sums: dict[str, list[int]] = {}
        self._group_members: dict[str, list[str]] = {}

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node]) -> FreeResources:
        """Return the view of an empty cluster made of ``nodes``."""
        return cls(
            NodeFree(node.name, sorted(node.cpu_ids), sorted(node.gpu_ids), node.memory_bytes,
                     node.gpu_model, node.labels)
            for node in nodes
        )

    @classmethod
    def from_snapshot(cls, snapshot: ClusterSnapshot) -> FreeResources:
        """Return the snapshot's nodes minus everything its running jobs hold.

        Lenient on purpose: placements on unknown nodes or ids the node no longer
        lists are ignored and memory never drops below zero, because a stale or
        inconsistent record must not stop the whole scheduler.
        """
        views = {node.name: NodeFree(node.name, list(node.cpu_ids), list(node.gpu_ids), node.memory_bytes,
                                     node.gpu_model, node.labels) for node in snapshot.nodes}
        if len(views) < len(snapshot.nodes):  # let the constructor name the duplicate
            return cls(NodeFree(node.name, [], [], 0) for node in snapshot.nodes)
        held_memory: dict[str, int] = {}
        for job in snapshot.running:
            for placement in job.placements:
                name = placement.node
                view = views.get(name)
                if view is None:
                    continue
                # Removing each placement's ids in turn leaves the same ids as removing their
                # union, and is cheaper: placement hands out a node's lowest free ids, so a
                # running job usually holds a prefix of what the jobs before it left.
                if placement.cpu_millicores:
                    if placement.cpu_ids:
                        _take_share(view, placement.cpu_ids[0], placement.cpu_millicores)
                else:
                    if view.shared:
                        _close_shared(view, placement.cpu_ids)
                    _remove_ids(view.cpu_ids, placement.cpu_ids)
                _remove_ids(view.gpu_ids, placement.gpu_ids)
                held_memory[name] = held_memory.get(name, 0) + placement.memory_bytes
        for name, memory in held_memory.items():
            view = views[name]
            view.memory_bytes = max(0, view.memory_bytes - memory)
        return cls(views.values())

    @property
    def nodes(self) -> tuple[NodeFree, ...]:
        """The per-node views, in node-name order (live objects: do not mutate)."""
        return tuple(self._nodes.values())

    def node(self, name: str) -> NodeFree:
        """Return the view of node ``name``; raises ``KeyError`` if unknown."""
        return self._nodes[name]

    def totals(self) -> tuple[int, int, int]:
        """Return ``(free gpus, free cores, free memory bytes)`` over all nodes."""
        return self._totals[0], self._totals[1], self._totals[2]

    def max_gpus(self) -> int:
        """The most free GPUs any single node has."""
        return max((count for count, names in self._buckets.items() if names), default=0)

    def with_free_gpus(self, count: int) -> list[NodeFree]:
        """Nodes with exactly ``count`` free GPUs, in a stable order."""
        return list(self._buckets.get(count, {}).values())

    def nodes_with_free_gpus(self, count: int) -> int:
        """How many nodes have exactly ``count`` free GPUs."""
        return len(self._buckets.get(count, ()))

    def iter_free_gpus(self, count: int) -> Iterable[NodeFree]:
        """Like ``with_free_gpus`` without building a list (do not reserve while iterating)."""
        return self._buckets.get(count, {}).values()

    def iter_free_gpus_from(self, count: int, start: int) -> Iterator[NodeFree]:
        """``iter_free_gpus(count)`` without its first ``start`` nodes (skipped in C, not one by one)."""
        nodes = self._buckets.get(count, {}).values()
        return islice(nodes, start, None) if start else iter(nodes)

    def known_misfits(self, count: int, shape: Hashable) -> int:
        """How many leading nodes of bucket ``count`` an earlier search found unable to hold ``shape``.

        Placement scans a bucket in order for the first nodes that fit; on a busy cluster
        CPU-only jobs wade through a hundred full nodes each. Nodes only join a bucket at
        its end and, between releases, only lose resources, so a node that could not hold
        a shape still cannot: the next search of the same shape starts past them. A node
        leaving the bucket (shifting positions) or any release forgets the bucket's counts.
        """
        skips = self._skips.get(count)
        return skips.get(shape, 0) if skips else 0

    def note_misfits(self, count: int, shape: Hashable, leading: int) -> None:
        """Record that the first ``leading`` nodes of bucket ``count`` cannot hold ``shape``."""
        skips = self._skips.get(count)
        if skips is None:
            skips = self._skips[count] = {}
        skips[shape] = leading

    def groups(self, key: str) -> dict[str, tuple[list[int], list[str]]]:
        """Nodes grouped by the value of label ``key``: ``value -> (free totals, node names)``.

        Totals are kept up to date as resources are taken and given back, so asking
        for the tightest rack that holds a gang costs the number of racks, not nodes.
        """
        sums = self.group_sums(key)
        return {value: (sums[value], members) for value, members in self._group_members.items()}

    def group_sums(self, key: str) -> dict[str, list[int]]:
        """Like ``groups`` but only the live totals (do not mutate): placement asks for them
        once per multi-node gang, where building the full answer each time showed up."""
        if key != self._group_key:
            self._group_key = key
            self._group_of, self._group_sums, self._group_members = {}, {}, {}
            for node in self._nodes.values():
                value = node.labels.get(key)
                if value is None:
                    continue
                self._group_of[node.name] = value
                sums = self._group_sums.setdefault(value, [0, 0, 0])
                sums[0] += len(node.gpu_ids)
                sums[1] += len(node.cpu_ids)
                sums[2] += node.memory_bytes
                self._group_members.setdefault(value, []).append(node.name)
        return self._group_sums

    def group_nodes(self, key: str, value: str) -> list[NodeFree]:
        """The nodes whose label ``key`` is ``value``, in node-name order."""
        self.group_sums(key)
        return [self._nodes[name] for name in self._group_members.get(value, ())]

    def gpu_counts(self) -> tuple[int, ...]:
        """The distinct free-GPU counts nodes have, ascending."""
        if self._counts is None:
            self._counts = tuple(sorted(count for count, names in self._buckets.items() if names))
        return self._counts

    def copy(self) -> FreeResources:
        """Return an independent copy.

        Copy-on-write: both views share the per-node records until one of them changes
        a node, which then gets a record of its own. Preemption planning copies a
        thousand-node view and touches a handful of nodes.
        """
        clone = FreeResources.__new__(FreeResources)
        clone._nodes = dict(self._nodes)
        clone._owned = set()
        self._owned = set()
        clone._buckets = {count: dict(names) for count, names in self._buckets.items()}
        clone._totals = list(self._totals)
        clone._counts = self._counts
        clone._skips = {}
        clone._group_key = self._group_key
        clone._group_of = self._group_of  # membership never changes: shared
        clone._group_members = self._group_members
        clone._group_sums = {value: list(sums) for value, sums in self._group_sums.items()}
        return clone

    def reserve(self, placements: Iterable[ReplicaPlacement]) -> None:
        """Remove the placements' resources from the view, all or nothing.

        Raises ``ValueError`` (leaving the view unchanged) if any placement names
        an unknown node, a core or GPU that is not free, or more memory than is free.
        """
        placements = tuple(placements)
        wanted: dict[str, tuple[set[int], set[int], int]] = {}
        shares: dict[tuple[str, int], int] = {}  # (node, core) -> millicores this call takes of it
        for placement in placements:
            node = self._nodes.get(placement.node)
            if node is None:
                raise ValueError(f"unknown node {placement.node!r}")
            cpus, gpus, memory = wanted.get(placement.node, (set(), set(), 0))
            whole_cpus = placement.cpu_ids
            if placement.cpu_millicores:
                whole_cpus = ()
                if len(placement.cpu_ids) != 1:
                    raise ValueError(f"a share of a core names one core, not {placement.cpu_ids}")
                core = placement.cpu_ids[0]
                room = node.shared.get(core)
                if room is None:
                    room = MILLICORES if core in node.cpu_ids and core not in cpus else 0
                share = shares.get((node.name, core), 0) + placement.cpu_millicores
                if share > room:
                    raise ValueError(f"core {core} on {node.name} has no {placement.cpu_millicores} millicores free")
                shares[(node.name, core)] = share
            elif node.shared or shares:
                for core in whole_cpus:
                    if core in node.shared or (node.name, core) in shares:
                        raise ValueError(f"core {core} on {node.name} is not free")
            for kind, held, taken, free_ids in (
                ("core", whole_cpus, cpus, node.cpu_ids),
                ("GPU", placement.gpu_ids, gpus, node.gpu_ids),
            ):
                # Set operations first: the id-by-id test against the free list (a scan per id)
                # cost a hundred microseconds for a node's worth of cores. The loop only names
                # the first id at fault.
                wanted_ids = set(held)
                if len(wanted_ids) != len(held) or not taken.isdisjoint(wanted_ids) \
                        or not wanted_ids.issubset(free_ids):
                    for resource_id in held:
                        if resource_id in taken or resource_id not in free_ids:
                            raise ValueError(f"{kind} {resource_id} on {node.name} is not free")
                        taken.add(resource_id)
                taken |= wanted_ids
            memory += placement.memory_bytes
            if memory > node.memory_bytes:
                raise ValueError(f"not enough free memory on {node.name}")
            wanted[placement.node] = (cpus, gpus, memory)
        self.take_available(placements)

    def take_available(self, placements: Iterable[ReplicaPlacement]) -> None:
        """Remove whatever of the placements' resources is free; ignore the rest.

        Used for records that may be stale (running jobs) and for reservations a
        job will only get once others stop (part of it may be held right now).
        """
        nodes, owned = self._nodes, self._owned
        for placement in placements:
            name = placement.node
            node = nodes.get(name)
            if node is None:
                continue
            if name not in owned:
                node = self._writable(name)
            free_cpus, free_gpus = node.cpu_ids, node.gpu_ids
            before = len(free_gpus)
            cores_before = len(free_cpus)
            # Placement hands out a node's lowest free ids, so a start usually takes a prefix
            # (``_remove_ids``, its common case inlined: this runs for every start).
            held = placement.cpu_ids
            if placement.cpu_millicores:
                if held:
                    _take_share(node, held[0], placement.cpu_millicores)
            else:
                if node.shared:
                    _close_shared(node, held)
                if tuple(free_cpus[: len(held)]) == held:
                    del free_cpus[: len(held)]
                else:
                    _remove_ids(free_cpus, held)
            held = placement.gpu_ids
            if tuple(free_gpus[: len(held)]) == held:
                del free_gpus[: len(held)]
            else:
                _remove_ids(free_gpus, held)
            memory = placement.memory_bytes
            if memory >= node.memory_bytes:  # noqa: PLR1730 - min(), spelled out: once per placement
                memory = node.memory_bytes
            node.memory_bytes -= memory
            self._account(node, before, cores_before, -memory)

    def release(self, placements: Iterable[ReplicaPlacement]) -> None:
        """Give the placements' resources back (ids that are already free are ignored)."""
        self._skips.clear()  # a node that did not fit a shape may fit it now
        for placement in placements:
            node = self._writable(placement.node)
            if node is None:
                continue
            before = len(node.gpu_ids)
            cores_before = len(node.cpu_ids)
            shared = node.shared
            if placement.cpu_millicores:
                # A share goes back to its core; the core is wholly free once every share is back.
                # A core that is not in sharing mode here is not the share's to give back.
                core = placement.cpu_ids[0] if placement.cpu_ids else None
                room = shared.get(core) if core is not None else None
                if room is not None:
                    room += placement.cpu_millicores
                    if room >= MILLICORES:
                        del shared[core]
                        insort(node.cpu_ids, core)
                    else:
                        shared[core] = room
                cpu_ids: tuple[int, ...] = ()
            else:
                # A whole core in sharing mode here holds others' shares: it stays theirs.
                cpu_ids = placement.cpu_ids if not shared else tuple(i for i in placement.cpu_ids if i not in shared)
            for held, free_ids in ((cpu_ids, node.cpu_ids), (placement.gpu_ids, node.gpu_ids)):
                added = [resource_id for resource_id in held if resource_id not in free_ids]
                if added:
                    free_ids.extend(added)
                    free_ids.sort()
            node.memory_bytes += placement.memory_bytes
            self._account(node, before, cores_before, placement.memory_bytes)

    def _writable(self, name: str) -> NodeFree | None:
        node = self._nodes.get(name)
        if node is None or name in self._owned:
            return node
        node = NodeFree(node.name, list(node.cpu_ids), list(node.gpu_ids), node.memory_bytes, node.gpu_model,
                        node.labels, dict(node.shared))
        self._nodes[name] = node
        self._buckets[len(node.gpu_ids)][name] = node
        self._owned.add(name)
        return node

    def _account(self, node: NodeFree, gpus_before: int, cores_before: int, memory_delta: int) -> None:
        gpus_after = len(node.gpu_ids)
        if gpus_after != gpus_before:
            left = self._buckets[gpus_before]
            del left[node.name]
            if self._skips:
                self._skips.pop(gpus_before, None)
            joined = self._buckets.setdefault(gpus_after, {})
            if not left or not joined:
                self._counts = None
            joined[node.name] = node
        self._totals[0] += gpus_after - gpus_before
        self._totals[1] += len(node.cpu_ids) - cores_before
        self._totals[2] += memory_delta
        if self._group_of:
            value = self._group_of.get(node.name)
            if value is not None:
                sums = self._group_sums[value]
                sums[0] += gpus_after - gpus_before
                sums[1] += len(node.cpu_ids) - cores_before
                sums[2] += memory_delta

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FreeResources):
            return NotImplemented
        return self.nodes == other.nodes

    def __repr__(self) -> str:
        return f"FreeResources({list(self._nodes.values())!r})"
