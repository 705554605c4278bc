"""Shares of cores, placement constraints and ranks that follow placement, case by case.

The properties that hold for every round (no core over-committed, whole cores never shared,
constraints kept) are in ``test_properties.py``; here each rule is shown on a small snapshot.
"""

from __future__ import annotations

from factories import GIB, gpu_node, node, workers

from mlyard.scheduler import (
    Amounts,
    ClusterSnapshot,
    FreeResources,
    PendingJob,
    Queue,
    ReplicaPlacement,
    ReplicaRequest,
    RunningJob,
    SchedulerConfig,
    decide,
    place_gang,
    unschedulable_reason,
)


def _quarter_jobs(count: int, first_id: int = 1) -> tuple[PendingJob, ...]:
    return tuple(PendingJob(first_id + k, float(k), tuple(workers(1, cpu=0.25))) for k in range(count))


def test_four_quarter_core_replicas_share_one_core_and_a_fifth_opens_another():
    snapshot = ClusterSnapshot((node("a", 2),), pending=(PendingJob(1, 0.0, tuple(workers(4, cpu=0.25))),))
    (start,) = decide(snapshot, 0.0).starts
    assert [(p.cpu_ids, p.cpu_millicores) for p in start.placements] == [((0,), 250)] * 4
    # One job per replica: the same, across jobs.
    decisions = decide(ClusterSnapshot((node("a", 2),), pending=_quarter_jobs(5)), 0.0)
    assert [(s.placements[0].cpu_ids, s.placements[0].cpu_millicores) for s in decisions.starts] == \
        [((0,), 250)] * 4 + [((1,), 250)]


def test_a_whole_core_request_never_gets_a_shared_core():
    running = RunningJob(1, (ReplicaPlacement("worker", 0, "a", (0,), (), GIB, 250),))
    pending = (PendingJob(2, 0.0, tuple(workers(1, cpu=1))), PendingJob(3, 1.0, tuple(workers(1, cpu=1))))
    decisions = decide(ClusterSnapshot((node("a", 2),), (running,), pending), 0.0)
    assert [(s.job_id, s.placements[0].cpu_ids) for s in decisions.starts] == [(2, (1,))]
    assert decisions.waiting[3] == "no node with 1 free CPU"
    # A share still fits next to the running one, up to what the core has left.
    pending = (PendingJob(4, 0.0, tuple(workers(1, cpu=0.75))), PendingJob(5, 1.0, tuple(workers(1, cpu=0.1))))
    decisions = decide(ClusterSnapshot((node("a", 1),), (running,), pending), 0.0)
    assert [(s.job_id, s.placements[0].cpu_ids) for s in decisions.starts] == [(4, (0,))]
    assert decisions.waiting[5] == "no node with 0 free GPUs, 0.1 of a free CPU core and 1.0 GiB of free memory at once"


def test_a_running_share_is_accounted_and_the_last_one_frees_the_core():
    shares = tuple(RunningJob(k, (ReplicaPlacement("worker", 0, "a", (0,), (), GIB, 500),)) for k in (1, 2))
    free = FreeResources.from_snapshot(ClusterSnapshot((node("a", 1),), shares))
    assert free.node("a").cpu_ids == [] and free.node("a").shared == {0: 0}
    assert place_gang(free, workers(1, cpu=0.1)) is None
    free.release(shares[0].placements)
    assert free.node("a").shared == {0: 500}
    free.release(shares[1].placements)
    assert free.node("a").cpu_ids == [0] and free.node("a").shared == {}


def test_quotas_and_service_count_a_share_as_its_fraction():
    # A queue with a quota of one core holds four quarter-core jobs, not one.
    queue = Queue("q", quota=Amounts.limit(cpu=1), borrow_limit=Amounts.limit(cpu=0))
    pending = tuple(PendingJob(k, float(k), tuple(workers(1, cpu=0.25)), queue="q") for k in range(1, 6))
    decisions = decide(ClusterSnapshot((node("a", 4),), pending=pending, queues=(queue,)), 0.0)
    assert [s.job_id for s in decisions.starts] == [1, 2, 3, 4]
    assert decisions.waiting[5] == "queue q over quota: cpu 1/1, needs 0.25"


def test_same_node_waits_with_a_reason_when_no_free_node_has_room():
    nodes = (node("a", 4), node("b", 4))
    # Two cores held on each node: two 2-core replicas fit the cluster but not one node.
    running = tuple(RunningJob(k, (ReplicaPlacement("worker", 0, name, (0, 1), (), GIB),))
                    for k, name in ((1, "a"), (2, "b")))
    job = PendingJob(3, 0.0, tuple(workers(2, cpu=2)), same_node=True)
    decisions = decide(ClusterSnapshot(nodes, running, (job,)), 0.0)
    assert not decisions.starts
    assert decisions.waiting[3] == "needs 2 replicas on one node; largest free node has room for 1"
    # Without the constraint it spreads over both nodes.
    loose = PendingJob(3, 0.0, tuple(workers(2, cpu=2)))
    (start,) = decide(ClusterSnapshot(nodes, running, (loose,)), 0.0).starts
    assert {p.node for p in start.placements} == {"a", "b"}
    # Once a node is free, it starts there.
    (start,) = decide(ClusterSnapshot(nodes, running[:1], (job,)), 0.0).starts
    assert {p.node for p in start.placements} == {"b"}


def test_a_constraint_no_node_can_ever_keep_is_refused_in_words():
    nodes = (node("a", 2, rack="r1"), node("b", 2, rack="r2"))
    assert unschedulable_reason(nodes, workers(2, cpu=2), same_node=True) == \
        "needs 2 replicas on one node; largest node has room for 1"
    assert unschedulable_reason(nodes, workers(2, cpu=2)) is None
    assert unschedulable_reason(nodes, workers(2, cpu=2), same_topology="switch") == "no node has the label switch"
    assert unschedulable_reason(nodes, workers(2, cpu=2), same_topology="rack") == \
        "needs 2 replicas on nodes with one value of label rack; the roomiest (rack=r2) has room for 1"
    job = PendingJob(1, 0.0, tuple(workers(2, cpu=2)), same_node=True)
    decisions = decide(ClusterSnapshot(nodes, pending=(job,)), 0.0)
    assert decisions.waiting[1] == "can never run on this cluster: needs 2 replicas on one node; " \
        "largest node has room for 1"


def test_same_topology_keeps_every_replica_within_one_value_of_the_label():
    nodes = (gpu_node("a1", 4, rack="r1"), gpu_node("b1", 4, rack="r2"), gpu_node("b2", 4, rack="r2"),
             node("plain", 8, gpus=8, memory_gib=256))
    gang = tuple(workers(6, gpu=1))
    placements = place_gang(FreeResources.from_nodes(nodes), gang, same_topology="rack")
    assert placements is not None and {p.node for p in placements} == {"b1", "b2"}
    # Unconstrained, the unlabelled 8-GPU node holds it alone.
    assert {p.node for p in place_gang(FreeResources.from_nodes(nodes), gang)} == {"plain"}
    # Seven GPUs are in no rack: it waits, saying how much the roomiest rack has.
    job = PendingJob(1, 0.0, tuple(workers(9, gpu=1)), same_topology="rack")
    decisions = decide(ClusterSnapshot(nodes, pending=(job,)), 0.0)
    assert decisions.waiting[1] == ("can never run on this cluster: needs 9 replicas on nodes with one value of "
                                    "label rack; the roomiest (rack=r2) has room for 8")


def test_ranks_follow_placement_on_a_multi_node_snapshot():
    # Two racks whose nodes alternate by name; no rack holds the 8-GPU gang alone, so it spreads.
    nodes = (gpu_node("n1", 3, rack="r1"), gpu_node("n2", 3, rack="r2"), gpu_node("n3", 2, rack="r1"))
    chief = ReplicaRequest("chief", 0, 1, GIB, 1)
    gang = (chief, *workers(7, gpu=1))
    job = PendingJob(1, 0.0, gang)
    (start,) = decide(ClusterSnapshot(nodes, pending=(job,), config=SchedulerConfig(topology_key="rack")), 0.0).starts
    order = [p.node for p in start.placements]  # rank = position
    assert [(p.role, p.index) for p in start.placements] == [(r.role, r.index) for r in gang]
    racks = [{"n1": "r1", "n2": "r2", "n3": "r1"}[name] for name in order]
    # Consecutive ranks share a node, and a rack's nodes are next to each other.
    assert order == ["n1", "n1", "n1", "n3", "n3", "n2", "n2", "n2"]
    assert racks == sorted(racks, key=["r1", "r2"].index)
    for name in set(order):
        at = [rank for rank, node_name in enumerate(order) if node_name == name]
        assert at == list(range(at[0], at[0] + len(at)))


def test_an_elastic_job_grows_within_its_constraint():
    nodes = (node("a", 2), node("b", 8))
    held = (ReplicaPlacement("worker", 0, "a", (0,), (), GIB),)
    run = RunningJob(1, held, min_replicas=1, grow_replicas=tuple(workers(4)[1:]), same_node=True)
    (resize,) = decide(ClusterSnapshot(nodes, (run,)), 0.0).resizes
    assert [p.node for p in resize.placements] == ["a", "a"]
    loose = RunningJob(1, held, min_replicas=1, grow_replicas=tuple(workers(4)[1:]))
    (resize,) = decide(ClusterSnapshot(nodes, (loose,)), 0.0).resizes
    assert len(resize.placements) == 4
