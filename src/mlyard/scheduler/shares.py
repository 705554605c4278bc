"""Shares of cores: how requests below one core pack onto a node's cores.

A replica asking for less than a core holds a share of one core, in thousandths
(millicores), which it shares with other such replicas; whole-core requests never get
such a core. On a node, shares are packed best fit decreasing: the biggest share first,
each onto the core in sharing mode with the least room that holds it, else onto a
wholly free core that joins them. Counting (``new_cores``) and binding (``share_cores``)
pack the same way, so a node found to hold a gang's shares holds them when bound, and
the count does not depend on the order the replicas come in.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence

from .snapshot import MILLICORES


def new_cores(shared: Mapping[int, int], shares: Sequence[int]) -> int:
    """How many of a node's wholly free cores enter sharing mode to hold ``shares`` (millicores);
    ``shared``: the node's cores in sharing mode and the millicores each has left."""
    if len(shares) == 1:
        (share,) = shares
        return 0 if any(room >= share for room in shared.values()) else 1
    rooms = sorted(room for room in shared.values() if room)
    opened = 0
    for share in sorted(shares, reverse=True):
        at = bisect_left(rooms, share)
        if at < len(rooms):
            room = rooms.pop(at) - share
        else:
            opened += 1
            room = MILLICORES - share
        if room:
            insort(rooms, room)
    return opened


def share_cores(shared: Mapping[int, int], shares: list[tuple[int, int]], spare: Sequence[int]) -> dict[int, int]:
    """The core of each ``(position, millicores)`` share, packed as ``new_cores`` counts:
    ties go to the lowest core id; wholly free cores are taken from ``spare`` in order."""
    rooms = {core: room for core, room in shared.items() if room}
    chosen: dict[int, int] = {}
    opened = 0
    for position, share in sorted(shares, key=lambda item: (-item[1], item[0])):
        best = best_room = None
        for core, room in rooms.items():
            if room >= share and (best is None or room < best_room or (room == best_room and core < best)):
                best, best_room = core, room
        if best is None:
            best = spare[opened]
            opened += 1
            rooms[best] = MILLICORES - share
        else:
            rooms[best] = best_room - share
        chosen[position] = best
    return chosen


def take_shares(room: list, share: int, count: int) -> None:
    """Take ``count`` shares of ``share`` millicores from a node's ``room`` ([GPUs, wholly free
    cores, memory, sorted rooms of its cores in sharing mode]), each by best fit."""
    rooms = room[3]
    for _ in range(count):
        at = bisect_left(rooms, share)
        if at < len(rooms):
            left = rooms.pop(at) - share
        else:
            room[1] -= 1
            left = MILLICORES - share
        if left:
            insort(rooms, left)
