"""Groups of indices joined pair by pair: duplicates of duplicates are one group."""

from __future__ import annotations


class UnionFind:
    """Groups of indices joined pair by pair (path halving, union by size)."""

    def __init__(self, count: int) -> None:
        self.parent = list(range(count))
        self.size = [1] * count

    def find(self, index: int) -> int:
        parent = self.parent
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    def union(self, first: int, second: int) -> None:
        first, second = self.find(first), self.find(second)
        if first == second:
            return
        if self.size[first] < self.size[second]:
            first, second = second, first
        self.parent[second] = first
        self.size[first] += self.size[second]

    def groups(self) -> list[list[int]]:
        """Groups of more than one index, each sorted."""
        members: dict[int, list[int]] = {}
        for index in range(len(self.parent)):
            members.setdefault(self.find(index), []).append(index)
        return [group for group in members.values() if len(group) > 1]
