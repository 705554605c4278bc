"""Mutable per-round view of unallocated cores, GPUs and memory on each node.

Built from a snapshot's nodes minus what its running jobs hold; a policy then
reserves each gang it decides to start so later decisions in the same round
see what is left.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .snapshot import ClusterSnapshot, Node, ReplicaPlacement


@dataclass
class NodeFree:
    """Unallocated resources of one node; id lists are kept sorted ascending."""

    name: str
    cpu_ids: list[int]
    gpu_ids: list[int]
    memory_bytes: int

    def counts(self) -> tuple[int, int, int]:
        """Return ``(free gpus, free cores, free memory bytes)``."""
        return len(self.gpu_ids), len(self.cpu_ids), self.memory_bytes


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

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node]) -> FreeResources:
        """Return the view of an empty cluster made of ``nodes``."""
        return cls(
            NodeFree(node.name, sorted(node.cpu_ids), sorted(node.gpu_ids), node.memory_bytes)
            for node in nodes
        )

    @classmethod
    def from_snapshot(cls, snapshot: ClusterSnapshot) -> FreeResources:
        """Return the snapshot's nodes minus everything its running jobs hold.

        Lenient on purpose: placements on unknown nodes or ids the node no longer
        lists are ignored and memory never drops below zero, because a stale or
        inconsistent record must not stop the whole scheduler.
        """
        free = cls.from_nodes(snapshot.nodes)
        for job in snapshot.running:
            free._take(job.placements, strict=False)
        return free

    @property
    def nodes(self) -> tuple[NodeFree, ...]:
        """The per-node views, in node-name order (live objects: do not mutate)."""
        return tuple(self._nodes.values())

    def node(self, name: str) -> NodeFree:
        """Return the view of node ``name``; raises ``KeyError`` if unknown."""
        return self._nodes[name]

    def copy(self) -> FreeResources:
        """Return an independent copy."""
        return FreeResources(
            NodeFree(node.name, list(node.cpu_ids), list(node.gpu_ids), node.memory_bytes)
            for node in self._nodes.values()
        )

    def reserve(self, placements: Iterable[ReplicaPlacement]) -> None:
        """Remove the placements' resources from the view, all or nothing.

        Raises ``ValueError`` (leaving the view unchanged) if any placement names
        an unknown node, a core or GPU that is not free, or more memory than is free.
        """
        trial = self.copy()
        trial._take(placements, strict=True)
        self._nodes = trial._nodes

    def _take(self, placements: Iterable[ReplicaPlacement], *, strict: bool) -> None:
        for placement in placements:
            node = self._nodes.get(placement.node)
            if node is None:
                if strict:
                    raise ValueError(f"unknown node {placement.node!r}")
                continue
            for kind, held, free_ids in (
                ("core", placement.cpu_ids, node.cpu_ids),
                ("GPU", placement.gpu_ids, node.gpu_ids),
            ):
                for resource_id in held:
                    if resource_id in free_ids:
                        free_ids.remove(resource_id)
                    elif strict:
                        raise ValueError(f"{kind} {resource_id} on {node.name} is not free")
            if strict and placement.memory_bytes > node.memory_bytes:
                raise ValueError(f"not enough free memory on {node.name}")
            node.memory_bytes = max(0, node.memory_bytes - placement.memory_bytes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FreeResources):
            return NotImplemented
        return self.nodes == other.nodes

    def __repr__(self) -> str:
        return f"FreeResources({list(self._nodes.values())!r})"
