"""The free view built from a snapshot, ``reserve``'s checks, the order racks are tried in,
and the garbage collector around a round."""

from __future__ import annotations

import gc
import random

import pytest
from factories import GIB, node

from mlyard.scheduler import (
    ClusterSnapshot,
    FreeResources,
    Node,
    PendingJob,
    ReplicaPlacement,
    ReplicaRequest,
    RunningJob,
    decide,
    place_gang,
)


def expected_free(nodes: list[Node], running: list[RunningJob]) -> dict[str, tuple[list[int], list[int], int]]:
    """The definition: each node's ids minus every id a running job holds there (ids it does
    not list are ignored), and its memory minus theirs, never below zero."""
    held: dict[str, tuple[set[int], set[int], int]] = {item.name: (set(), set(), 0) for item in nodes}
    for job in running:
        for placement in job.placements:
            if placement.node in held:
                cpus, gpus, memory = held[placement.node]
                held[placement.node] = (cpus | set(placement.cpu_ids), gpus | set(placement.gpu_ids),
                                        memory + placement.memory_bytes)
    return {
        item.name: ([i for i in item.cpu_ids if i not in held[item.name][0]],
                    [i for i in item.gpu_ids if i not in held[item.name][1]],
                    max(0, item.memory_bytes - held[item.name][2]))
        for item in nodes
    }


@pytest.mark.parametrize("seed", range(40))
def test_the_free_view_is_the_nodes_less_what_running_jobs_hold(seed):
    # Stale and overlapping records included: ids held twice, ids the node does not have,
    # unknown nodes, more memory than the node has, and holdings in no particular order.
    rng = random.Random(seed)
    nodes = [node(f"n{k}", cores=rng.randint(1, 12), gpus=rng.randint(0, 6), memory_gib=rng.randint(1, 16),
                  rack="r0") for k in range(rng.randint(1, 6))]
    running = []
    for job_id in range(rng.randint(0, 12)):
        placements = []
        for index in range(rng.randint(1, 3)):
            target = rng.choice([*(item.name for item in nodes), "elsewhere"])
            cpus = rng.sample(range(14), rng.randint(0, 5))
            if rng.random() < 0.5:
                cpus.sort()
            gpus = sorted(rng.sample(range(8), rng.randint(0, 3)))
            placements.append(ReplicaPlacement("w", index, target, tuple(cpus), tuple(gpus),
                                               rng.randint(0, 12) * GIB))
        running.append(RunningJob(job_id, tuple(placements)))
    free = FreeResources.from_snapshot(ClusterSnapshot(tuple(nodes), tuple(running)))
    wanted = expected_free(nodes, running)
    assert {view.name: (view.cpu_ids, view.gpu_ids, view.memory_bytes) for view in free.nodes} == wanted
    assert free.totals() == (sum(len(g) for _, g, _ in wanted.values()), sum(len(c) for c, _, _ in wanted.values()),
                             sum(m for _, _, m in wanted.values()))


def test_a_snapshot_naming_a_node_twice_is_refused_with_its_name():
    with pytest.raises(ValueError, match="duplicate node name 'a'"):
        FreeResources.from_snapshot(ClusterSnapshot(tuple(node(name, gpus=4, rack="r0") for name in "aba")))


@pytest.mark.parametrize(("placements", "message"), [
    ([ReplicaPlacement("w", 0, "a", (1, 2, 1), (), GIB)], "core 1 on a is not free"),
    ([ReplicaPlacement("w", 0, "a", (0, 3), (), GIB), ReplicaPlacement("w", 1, "a", (5, 3), (), GIB)],
     "core 3 on a is not free"),
    ([ReplicaPlacement("w", 0, "a", (0, 1), (2, 9, 7), GIB)], "GPU 9 on a is not free"),
    ([ReplicaPlacement("w", 0, "a", (2,), (), GIB), ReplicaPlacement("w", 1, "a", (6,), (0,), GIB)],
     "core 6 on a is not free"),  # held by the running job
    ([ReplicaPlacement("w", 0, "a", (0,), (), 40 * GIB), ReplicaPlacement("w", 1, "a", (1,), (), 30 * GIB)],
     "not enough free memory on a"),
])
def test_reserve_names_what_is_not_free_and_changes_nothing(placements, message):
    held = ReplicaPlacement("w", 0, "a", (6, 7), (3,), 0)
    snapshot = ClusterSnapshot((node("a", gpus=4, rack="r0"),), (RunningJob(1, (held,)),))
    free = FreeResources.from_snapshot(snapshot)
    before = free.copy()
    with pytest.raises(ValueError, match=message):
        free.reserve(placements)
    assert free == before
    free.reserve([ReplicaPlacement("w", 0, "a", (5, 0), (2, 0), GIB)])
    assert free.node("a").cpu_ids == [1, 2, 3, 4] and free.node("a").gpu_ids == [1]


def two_by_two() -> tuple[ReplicaRequest, ...]:
    return tuple(ReplicaRequest("w", i, 2.0, GIB, 2) for i in range(2))


def test_a_gang_spread_over_nodes_goes_to_the_tightest_rack_that_holds_it():
    # Rack "a" has the least free (4 GPUs, 4 cores) but no two nodes with two GPUs each: it
    # cannot hold the gang although its totals could. Racks "c" and "b" tie on free totals
    # and "c"'s nodes come first by name: the label decides, and "b" goes first.
    nodes = [node(name, gpus=4, rack=rack) for name, rack in
             (("a1", "a"), ("a2", "a"), ("n1", "c"), ("n2", "c"), ("n3", "b"), ("n4", "b"))]
    cores = tuple(range(6))
    running = [RunningJob(1, (ReplicaPlacement("w", 0, "a1", cores, (0,), GIB),
                              ReplicaPlacement("w", 1, "a2", cores, (0, 1, 2), GIB)))]
    running += [RunningJob(2 + k, (ReplicaPlacement("w", 0, name, (0,), (0, 1), GIB),))
                for k, name in enumerate(("n1", "n2", "n3", "n4"))]
    free = FreeResources.from_snapshot(ClusterSnapshot(tuple(nodes), tuple(running)))
    placements = place_gang(free, two_by_two(), topology_key="rack")
    assert placements is not None and {p.node for p in placements} == {"n3", "n4"}
    # Once "b" is too small, "c" is next.
    free.reserve([ReplicaPlacement("w", 0, "n3", (1,), (2,), GIB)])
    placements = place_gang(free, two_by_two(), topology_key="rack")
    assert placements is not None and {p.node for p in placements} == {"n1", "n2"}


@pytest.mark.parametrize("enabled", [True, False])
def test_a_round_leaves_the_garbage_collector_as_it_found_it(enabled):
    pending = (PendingJob(1, 0.0, (ReplicaRequest("w", 0, 1.0, GIB, 1),)),)
    snapshot = ClusterSnapshot((node("a", gpus=4, rack="r0"),), pending=pending)
    was = gc.isenabled()
    try:
        if enabled:
            gc.enable()
        else:
            gc.disable()
        assert len(decide(snapshot, 10.0).starts) == 1
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()
