"""Gang placement and the unschedulable check."""

from __future__ import annotations

import itertools
import random

import pytest
from factories import GIB, cpu_fits, node, workers

from mlyard.scheduler import (
    ClusterSnapshot,
    FreeResources,
    Node,
    ReplicaPlacement,
    ReplicaRequest,
    RunningJob,
    place_gang,
    unschedulable_reason,
)


def assert_valid(nodes: list[Node], replicas, placements) -> None:
    """Exact counts, ids that exist on the node, and nothing shared between replicas."""
    by_name = {n.name: n for n in nodes}
    assert len(placements) == len(replicas)
    used: set[tuple[str, str, int]] = set()
    memory: dict[str, int] = {}
    shared: dict[tuple[str, int], int] = {}  # (node, core) -> millicores handed out of it
    for replica, placement in zip(replicas, placements, strict=False):
        assert (placement.role, placement.index) == (replica.role, replica.index)
        target = by_name[placement.node]
        assert placement.cpu_millicores == replica.millicores
        assert len(placement.cpu_ids) == (1 if replica.millicores else replica.cores)
        assert len(placement.gpu_ids) == replica.gpu
        assert placement.memory_bytes == replica.memory_bytes
        assert set(placement.cpu_ids) <= set(target.cpu_ids)
        assert set(placement.gpu_ids) <= set(target.gpu_ids)
        if replica.millicores:
            (core,) = placement.cpu_ids
            assert (target.name, "cpu", core) not in used  # never a share of a whole core
            shared[(target.name, core)] = shared.get((target.name, core), 0) + replica.millicores
            assert shared[(target.name, core)] <= 1000
        for kind, ids in (("cpu", () if replica.millicores else placement.cpu_ids), ("gpu", placement.gpu_ids)):
            for resource_id in ids:
                key = (target.name, kind, resource_id)
                assert key not in used and (kind == "gpu" or (target.name, resource_id) not in shared)
                used.add(key)
        memory[target.name] = memory.get(target.name, 0) + placement.memory_bytes
    for name, total in memory.items():
        assert total <= by_name[name].memory_bytes


def test_gang_that_fits_gets_distinct_lowest_cores_in_replica_order():
    nodes = [node("a", 8)]
    replicas = workers(3, cpu=2)
    placements = place_gang(FreeResources.from_nodes(nodes), replicas)
    assert placements is not None
    assert_valid(nodes, replicas, placements)
    assert [p.cpu_ids for p in placements] == [(0, 1), (2, 3), (4, 5)]
    assert all(p.node == "a" for p in placements)


def test_fractional_cpu_rounds_up_to_whole_cores():
    replicas = workers(2, cpu=1.5) + [ReplicaRequest("ps", 0, 1.1 * 3, GIB)]
    placements = place_gang(FreeResources.from_nodes([node("a", 8)]), replicas)
    assert placements is not None
    assert [len(p.cpu_ids) for p in placements] == [2, 2, 4]
    assert {p.cpu_millicores for p in placements} == {0}
    # 2 + 2 + 4 = 8 cores; with only 7 cores the gang must not fit.
    assert place_gang(FreeResources.from_nodes([node("a", 7)]), replicas) is None


def test_requests_below_one_core_share_a_core_and_whole_ones_never_do():
    replicas = workers(4, cpu=0.25) + [ReplicaRequest("ps", 0, 0.1 * 3, GIB), ReplicaRequest("chief", 0, 1, GIB)]
    free = FreeResources.from_nodes([node("a", 3)])
    placements = place_gang(free, replicas)
    assert placements is not None
    # Whole cores first, lowest first; shares biggest first, each onto the tightest core that holds it.
    assert [(p.cpu_ids, p.cpu_millicores) for p in placements] == [
        ((1,), 250), ((1,), 250), ((2,), 250), ((2,), 250), ((1,), 300), ((0,), 0)]
    free.reserve(placements)
    assert free.node("a").cpu_ids == [] and free.node("a").shared == {1: 200, 2: 500}
    assert free.totals()[1] == 0
    # What is left of cores 1 and 2 is for shares, never for a whole core.
    assert place_gang(free, workers(1, cpu=1)) is None
    more = place_gang(free, workers(2, cpu=0.2))
    assert more is not None and [(p.cpu_ids, p.cpu_millicores) for p in more] == [((1,), 200), ((2,), 200)]
    free.reserve(more)
    assert place_gang(free, workers(1, cpu=0.35)) is None
    with pytest.raises(ValueError, match="core 2 on a has no 350 millicores free"):
        free.reserve([ReplicaPlacement("w", 9, "a", (2,), (), 0, 350)])
    with pytest.raises(ValueError, match="core 0 on a has no 1 millicores free"):  # held whole
        free.reserve([ReplicaPlacement("w", 9, "a", (0,), (), 0, 1)])
    with pytest.raises(ValueError, match="core 1 on a is not free"):  # shared
        free.reserve([ReplicaPlacement("w", 9, "a", (1,), (), 0)])
    # The last share given back makes the core whole again.
    free.release((placements[2], placements[3], more[1]))
    assert free.node("a").cpu_ids == [2] and free.node("a").shared == {1: 0}
    free.release(placements)  # shares already given back are not given back twice
    assert free.node("a").cpu_ids == [0, 2] and free.node("a").shared == {1: 800}
    free.release(more[:1])
    assert free.node("a").cpu_ids == [0, 1, 2] and free.node("a").shared == {}


def test_gpus_are_allocated_distinctly_and_counted():
    nodes = [node("gpu", 16, gpus=4)]
    replicas = workers(2, cpu=2, gpu=2)
    placements = place_gang(FreeResources.from_nodes(nodes), replicas)
    assert placements is not None
    assert [p.gpu_ids for p in placements] == [(0, 1), (2, 3)]
    assert place_gang(FreeResources.from_nodes(nodes), workers(3, gpu=2)) is None


def test_cpu_only_gang_avoids_the_gpu_node():
    nodes = [node("a-gpu", 8, gpus=2), node("b-cpu", 8)]
    placements = place_gang(FreeResources.from_nodes(nodes), workers(2))
    assert placements is not None
    assert {p.node for p in placements} == {"b-cpu"}


def test_memory_limits_placement():
    nodes = [node("small", 32, memory_gib=4), node("big", 4, memory_gib=64)]
    placements = place_gang(FreeResources.from_nodes(nodes), workers(2, memory_gib=3))
    assert placements is not None
    # Cores would fit on "small" but memory does not: 6 GiB > 4 GiB.
    assert {p.node for p in placements} == {"big"}
    assert place_gang(FreeResources.from_nodes(nodes), workers(2, memory_gib=40)) is None


def test_one_node_preferred_over_two_and_least_waste_wins():
    nodes = [node("a", 4), node("b", 4), node("c", 16), node("d", 6)]
    placements = place_gang(FreeResources.from_nodes(nodes), workers(3, cpu=2))
    assert placements is not None
    # a+b could hold it across two nodes; c and d each hold it alone, d wastes less.
    assert {p.node for p in placements} == {"d"}


def test_gang_that_fits_only_across_two_nodes_is_split():
    nodes = [node("a", 4), node("b", 4)]
    replicas = workers(4, cpu=2)
    placements = place_gang(FreeResources.from_nodes(nodes), replicas)
    assert placements is not None
    assert_valid(nodes, replicas, placements)
    assert [p.node for p in placements].count("a") == 2
    assert [p.node for p in placements].count("b") == 2


def test_spread_uses_fewest_nodes_largest_first():
    nodes = [node("a", 2), node("b", 2), node("c", 6)]
    placements = place_gang(FreeResources.from_nodes(nodes), workers(4, cpu=2))
    assert placements is not None
    nodes_used = [p.node for p in placements]
    assert nodes_used.count("c") == 3 and len(set(nodes_used)) == 2


def test_gang_that_does_not_fit_returns_none_and_leaves_free_view_unchanged():
    snapshot = ClusterSnapshot(nodes=(node("a", 4), node("b", 4)))
    free = FreeResources.from_snapshot(snapshot)
    before = free.copy()
    assert place_gang(free, workers(3, cpu=3)) is None
    assert free == before
    # A gang that fits is returned but still not reserved until the caller says so.
    assert place_gang(free, workers(2, cpu=3)) is not None
    assert free == before


def test_running_jobs_cores_gpus_and_memory_are_not_reused():
    nodes = (node("a", 4, memory_gib=8, gpus=2),)
    held = ReplicaPlacement("worker", 0, "a", (0, 2), (1,), 5 * GIB)
    free = FreeResources.from_snapshot(ClusterSnapshot(nodes, running=(RunningJob(7, (held,)),)))
    assert free.node("a").cpu_ids == [1, 3]
    assert free.node("a").gpu_ids == [0]
    assert free.node("a").memory_bytes == 3 * GIB
    placements = place_gang(free, workers(1, cpu=2, memory_gib=2, gpu=1))
    assert placements is not None
    assert placements[0].cpu_ids == (1, 3) and placements[0].gpu_ids == (0,)
    assert place_gang(free, workers(1, cpu=3)) is None
    assert place_gang(free, workers(1, memory_gib=4)) is None


def test_reserve_is_all_or_nothing():
    free = FreeResources.from_nodes([node("a", 4)])
    first = ReplicaPlacement("w", 0, "a", (0,), (), GIB)
    clash = ReplicaPlacement("w", 1, "a", (0,), (), GIB)
    before = free.copy()
    with pytest.raises(ValueError):
        free.reserve([first, clash])
    assert free == before
    free.reserve([first])
    assert free.node("a").cpu_ids == [1, 2, 3]


def test_placement_is_deterministic_and_independent_of_node_order():
    nodes = [node("a", 4, gpus=1), node("b", 6, gpus=2), node("c", 4)]
    replicas = workers(5, cpu=2, gpu=0) + workers(1, cpu=1, gpu=1)
    first = place_gang(FreeResources.from_nodes(nodes), replicas)
    again = place_gang(FreeResources.from_nodes(list(reversed(nodes))), replicas)
    assert first is not None and first == again


def _brute_force_fits(nodes: list[Node], replicas: list[ReplicaRequest]) -> bool:
    for assignment in itertools.product(range(len(nodes)), repeat=len(replicas)):
        load = [[[], 0, 0] for _ in nodes]
        for replica, k in zip(replicas, assignment, strict=False):
            load[k][0].append(replica)
            load[k][1] += replica.gpu
            load[k][2] += replica.memory_bytes
        if all(
            cpu_fits(len(n.cpu_ids), (), on) and g <= len(n.gpu_ids) and m <= n.memory_bytes
            for (on, g, m), n in zip(load, nodes, strict=False)
        ):
            return True
    return False


def test_random_gangs_are_valid_and_found_whenever_one_exists():
    generator = random.Random(1234)
    for _ in range(300):
        nodes = [
            node(f"n{k}", generator.randint(0, 6), memory_gib=generator.randint(1, 8), gpus=generator.randint(0, 3))
            for k in range(generator.randint(1, 3))
        ]
        replicas = [
            ReplicaRequest("r", i, generator.choice([0.3, 0.5, 0.75, 1, 2, 2.5, 3]),
                           generator.randint(1, 4) * GIB, generator.randint(0, 2))
            for i in range(generator.randint(1, 5))
        ]
        placements = place_gang(FreeResources.from_nodes(nodes), replicas)
        assert (placements is not None) == _brute_force_fits(nodes, replicas)
        assert (unschedulable_reason(nodes, replicas) is None) == (placements is not None)
        if placements is not None:
            assert_valid(nodes, replicas, placements)


def test_unschedulable_reason_is_none_for_a_job_that_fits_the_empty_cluster():
    nodes = [node("a", 4, gpus=2), node("b", 4, gpus=2)]
    assert unschedulable_reason(nodes, workers(2, cpu=4, gpu=2)) is None


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        (workers(1, cpu=8), "replica worker-0 asks for 8 CPUs but the largest node has 4"),
        (workers(1, cpu=4.5), "replica worker-0 asks for 4.5 CPUs (5 whole cores) but the largest node has 4"),
        (workers(1, gpu=3), "replica worker-0 asks for 3 GPUs but the largest node has 2"),
        (workers(1, memory_gib=64), "replica worker-0 asks for 64.0 GiB of memory but the largest node has 23.4 GiB"),
        (workers(3, cpu=4), "the job needs 12 CPUs in all but the cluster has 6"),
        (workers(2, gpu=2), "the job needs 4 GPUs in all but the cluster has 2"),
        (workers(2, memory_gib=20), "the job needs 40.0 GiB of memory in all but the cluster has 31.4 GiB"),
    ],
)
def test_unschedulable_reason_names_replica_or_total_and_resource(replicas, expected):
    nodes = [node("a", 4, memory_gib=23.4, gpus=2), node("b", 2, memory_gib=8)]
    assert unschedulable_reason(nodes, replicas) == expected


def test_unschedulable_reason_when_no_single_node_has_every_resource():
    nodes = [node("cpu", 8), node("gpu", 2, gpus=2)]
    reason = unschedulable_reason(nodes, workers(1, cpu=4, gpu=1))
    assert reason is not None and "worker-0" in reason and "no single node" in reason


def test_unschedulable_reason_when_totals_fit_but_packing_does_not():
    nodes = [node("a", 3), node("b", 3)]
    reason = unschedulable_reason(nodes, workers(3, cpu=2))
    assert reason is not None and "packed" in reason


def test_search_memo_forgets_nodes_that_get_room_back():
    # The first search of a 4-core replica skips the full node-a; once a's cores are back,
    # the tie between a, b and c goes to a again, as on a fresh view.
    nodes = [node("a", 4), node("b", 4), node("c", 4)]
    free = FreeResources.from_nodes(nodes)
    hog = (ReplicaPlacement("hog", 0, "a", (0, 1, 2, 3), (), GIB),)
    free.reserve(hog)
    assert place_gang(free, workers(1, cpu=4))[0].node == "b"
    free.release(hog)
    assert place_gang(free, workers(1, cpu=4))[0].node == "a"


def test_search_memo_forgets_positions_when_a_node_leaves_its_gpu_bucket():
    # node-a cannot hold the replica (no cores) and is skipped; when its GPU is taken it moves
    # to another bucket, and b (now first in its old bucket) must still be found.
    nodes = [node("a", 8, gpus=2), node("b", 8, gpus=2), node("c", 8, gpus=2)]
    free = FreeResources.from_nodes(nodes)
    free.reserve((ReplicaPlacement("cpu", 0, "a", tuple(range(8)), (), GIB),))
    assert place_gang(free, workers(1, cpu=4, gpu=1))[0].node == "b"
    free.reserve((ReplicaPlacement("gpu", 0, "a", (), (0,), GIB),))
    assert place_gang(free, workers(1, cpu=4, gpu=1))[0].node == "b"
