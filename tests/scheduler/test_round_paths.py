"""The round's shortcuts give the decisions the plain walk gives: jobs settled in bulk
like an earlier job of their group (``cycle._walk``), reasons worded once per shape and
count, duplicate job ids, and multi-node packing of replicas that need no GPU."""

from __future__ import annotations

import pytest
from factories import GIB, gpu_node, node, running_job

from mlyard.scheduler import (
    POLICIES,
    Amounts,
    ClusterSnapshot,
    FreeResources,
    PendingJob,
    Queue,
    ReplicaRequest,
    RunningJob,
    SchedulerConfig,
    decide,
    cycle,
    place_gang,
)


def replica(gpus: int, cores: int, index: int = 0) -> ReplicaRequest:
    return ReplicaRequest("worker", index, cores, GIB, gpus)


def busy(gpus: int, **fields) -> RunningJob:
    """A job holding the first ``gpus`` GPUs and cores of node "a"."""
    return running_job(1, "a", range(gpus), range(gpus), **fields)


def slow_path(snapshot: ClusterSnapshot, now: float):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cycle, "FAST_PATH", False)
        return decide(snapshot, now)


def same(first, second) -> None:
    assert first == second
    assert list(first.waiting.items()) == list(second.waiting.items())  # in the same order, too


def test_alike_blocked_jobs_are_settled_like_the_first_until_their_queue_fills():
    # Two 4-GPU jobs per priority and queue never fit beside the job holding 6 of 8 GPUs,
    # while CPU-only jobs of queue a start until a reaches its 10-core ceiling: from then
    # on, a's waiting jobs say so instead.
    pending = []
    for k in range(6):
        base = 10 + 4 * k
        pending += [
            PendingJob(base, float(k), (replica(4, 1),), queue="a", priority=1),
            PendingJob(base + 1, float(k), (replica(4, 1),), queue="b"),
            PendingJob(base + 2, k + 0.5, (replica(0, 2),), queue="a"),
            PendingJob(base + 3, k + 0.7, (replica(4, 1),), queue="a"),
        ]
    queues = (Queue("a", quota=Amounts.limit(cpu=10), borrow_limit=Amounts.limit(cpu=0)), Queue("b"))
    snapshot = ClusterSnapshot((gpu_node("a"),), (busy(6, priority=9, queue="a"),), tuple(pending), queues,
                               SchedulerConfig(policy="priority"))
    decisions = decide(snapshot, 100.0)
    same(decisions, slow_path(snapshot, 100.0))
    assert [start.job_id for start in decisions.starts] == [12, 16]
    waiting = decisions.waiting
    assert waiting[10] == waiting[30] == "no node with 4 free GPUs"
    assert waiting[13] == waiting[31] == "no node with 4 free GPUs; behind 2 jobs of higher priority"
    assert waiting[17] == waiting[33] == "queue a over quota: cpu 10/10, needs 1"
    assert waiting[20] == "queue a over quota: cpu 10/10, needs 2"


@pytest.mark.parametrize("policy", POLICIES)
def test_many_copies_of_a_few_jobs_decide_alike_on_both_paths(policy: str):
    nodes = (gpu_node("a"), gpu_node("b", gpus=4), node("c", 16, memory_gib=256, rack="r0"))
    running = (busy(6, priority=2, started_at=50.0, attained_service=4_000.0, queue="q1"),)
    shapes = [(replica(4, 2),), (replica(1, 1),), (replica(0, 4),), (replica(8, 1), replica(8, 1, 1)),
              (replica(2, 2), replica(2, 2, 1))]
    pending = tuple(
        PendingJob(100 + k, float(k), shapes[k % len(shapes)], queue=("q1", "q2")[k % 2], priority=k % 3,
                   user=("u1", "u2", "u3")[k % 3], max_runtime=(None, 600.0)[k % 2], expected_duration=60.0 * k)
        for k in range(60)
    )
    queues = (Queue("q1", quota=Amounts.limit(gpu=6), borrow_limit=Amounts.limit(gpu=2)), Queue("q2"))
    for explain in (True, False):
        snapshot = ClusterSnapshot(nodes, running, pending, queues, SchedulerConfig(policy=policy, explain=explain))
        same(decide(snapshot, 1_000.0), slow_path(snapshot, 1_000.0))


@pytest.mark.parametrize(("policy", "reason"), [
    ("priority", "no node with 3 free GPUs; behind 2 jobs of higher priority"),
    ("balanced", "no node with 3 free GPUs"),
    ("backfill", "no node with 3 free GPUs"),
])
def test_a_repeated_job_id_keeps_the_reason_of_its_last_copy(policy: str, reason: str):
    pending = (PendingJob(7, 0.0, (replica(4, 1),), priority=1), PendingJob(8, 1.0, (replica(4, 1),), priority=1),
               PendingJob(7, 2.0, (replica(3, 1),)), PendingJob(9, 3.0, (replica(1, 1),)),
               PendingJob(10, 4.0, (replica(3, 1),)))
    snapshot = ClusterSnapshot((gpu_node("a"),), (busy(6, priority=9),), pending, (), SchedulerConfig(policy=policy))
    decisions = decide(snapshot, 100.0)
    assert [start.job_id for start in decisions.starts] == [9]
    assert list(decisions.waiting) == [7, 8, 10]
    assert decisions.waiting[7] == reason
    assert decisions.waiting[8] == "no node with 4 free GPUs"


@pytest.mark.parametrize("topology_key", ["rack", ""])
def test_cpu_only_replicas_fill_the_roomiest_nodes_and_end_on_the_tightest_fit(topology_key: str):
    nodes = [node(name, cores, memory_gib=256, rack="r0")
             for name, cores in (("n1", 30), ("n2", 50), ("n3", 20), ("n4", 40))]
    gang = (*(replica(0, 10, index) for index in range(6)), replica(0, 20, 6))
    placements = place_gang(FreeResources.from_nodes(nodes), gang, topology_key=topology_key)
    assert placements is not None
    # The biggest replica goes first, on the first node with room for just one of it; the
    # 10-core ones fill what is left there, then the node with room for all the rest.
    assert [(p.node, p.cpu_ids[0], len(p.cpu_ids)) for p in placements] == [
        ("n1", 0, 10), ("n2", 0, 10), ("n2", 10, 10), ("n2", 20, 10), ("n2", 30, 10), ("n2", 40, 10), ("n1", 10, 20),
    ]
