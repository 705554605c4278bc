"""Strict FIFO policy through the package's public ``decide``."""

from __future__ import annotations

import copy
import pickle

from factories import GIB, node, pending_job, running_job

from mlyard.scheduler import (
    ClusterSnapshot,
    Node,
    RunningJob,
    SchedulerConfig,
    StartJob,
    decide,
)

FIFO = SchedulerConfig(policy="fifo")


def fifo_snapshot(nodes, running=(), pending=()) -> ClusterSnapshot:
    return ClusterSnapshot(nodes, running, pending, config=FIFO)


def started(decisions) -> list[int]:
    assert not decisions.preemptions and not decisions.resizes
    assert all(isinstance(decision, StartJob) for decision in decisions.starts)
    return [decision.job_id for decision in decisions.starts]


def test_empty_queue_starts_nothing():
    assert decide(fifo_snapshot(nodes=(node("a", 4, zone="z1"),)), now=0.0).starts == ()


def test_head_job_starts_with_one_placement_per_replica_in_order():
    pending = (pending_job(1, 10.0, 3, cpu=1),)
    decisions = decide(fifo_snapshot(nodes=(node("a", 4, zone="z1"),), pending=pending), now=11.0)
    assert started(decisions) == [1]
    placements = decisions.starts[0].placements
    assert [(p.role, p.index) for p in placements] == [("worker", 0), ("worker", 1), ("worker", 2)]
    assert [p.cpu_ids for p in placements] == [(0,), (1,), (2,)]


def test_several_jobs_start_in_one_round_without_sharing_cores():
    pending = (pending_job(1, 1.0, 2), pending_job(2, 2.0, 1), pending_job(3, 3.0, 1, cpu=2))
    nodes = (node("a", 4, zone="z1"), node("b", 2, zone="z1"))
    decisions = decide(fifo_snapshot(nodes=nodes, pending=pending), now=5.0)
    assert started(decisions) == [1, 2, 3]
    held = [(p.node, cpu) for d in decisions for p in d.placements for cpu in p.cpu_ids]
    assert len(held) == len(set(held)) == 5


def test_strict_fifo_blocks_small_job_behind_big_waiting_job():
    nodes = (node("a", 4, zone="z1"),)
    running = (running_job(9, "a", (0, 1)),)
    # Job 1 needs 4 cores (only 2 free); job 2 needs 1 and would fit but must not overtake.
    pending = (pending_job(2, 2.0, 1), pending_job(1, 1.0, 4))
    assert decide(fifo_snapshot(nodes, running, pending), now=3.0).starts == ()


def test_jobs_that_do_not_fit_together_run_one_after_the_other():
    nodes = (node("a", 4, zone="z1"),)
    pending = (pending_job(1, 1.0, 3), pending_job(2, 2.0, 3))
    first_round = decide(fifo_snapshot(nodes, pending=pending), now=3.0)
    assert started(first_round) == [1]
    running = (RunningJob(1, first_round.starts[0].placements),)
    assert decide(fifo_snapshot(nodes, running, pending[1:]), now=4.0).starts == ()
    second_round = decide(fifo_snapshot(nodes, pending=pending[1:]), now=5.0)
    assert started(second_round) == [2]


def test_running_jobs_resources_are_not_handed_out_again():
    nodes = (node("a", 4, gpus=2, zone="z1"),)
    running = (running_job(9, "a", (0, 1), (0,)),)
    decisions = decide(fifo_snapshot(nodes, running, (pending_job(1, 1.0, 1, cpu=2, gpu=1),)), now=2.0)
    assert started(decisions) == [1]
    assert decisions.starts[0].placements[0].cpu_ids == (2, 3)
    assert decisions.starts[0].placements[0].gpu_ids == (1,)


def test_queue_order_is_submission_time_then_job_id():
    pending = [pending_job(5, 2.0, 1), pending_job(3, 1.0, 1), pending_job(4, 1.0, 1)]
    decisions = decide(fifo_snapshot((node("a", 2, zone="z1"),), pending=tuple(pending)), now=3.0)
    assert started(decisions) == [3, 4]


def test_job_that_can_never_run_does_not_block_the_queue():
    # Can happen when a node leaves after the job was accepted.
    pending = (pending_job(1, 1.0, 1, cpu=16), pending_job(2, 2.0, 1))
    decisions = decide(fifo_snapshot((node("a", 4, zone="z1"),), pending=pending), now=3.0)
    assert started(decisions) == [2]


def test_decide_is_deterministic_and_does_not_mutate_its_input():
    nodes = (node("b", 4, gpus=2, zone="z1"), node("a", 8, zone="z1"))
    running = (running_job(9, "a", (0, 1)),)
    pending = (pending_job(1, 1.0, 2, cpu=2), pending_job(2, 2.0, 2, cpu=1, gpu=1), pending_job(3, 3.0, 4, cpu=2))
    snapshot = fifo_snapshot(nodes, running, pending)
    before = copy.deepcopy(snapshot)
    first = decide(snapshot, now=10.0)
    assert snapshot == before
    assert decide(snapshot, now=10.0) == first
    assert decide(fifo_snapshot(tuple(reversed(nodes)), running, tuple(reversed(pending))), 10.0) == first
    assert started(first) == [1, 2]


def test_snapshot_is_hashable_picklable_and_frozen_against_caller_changes():
    labels = {"zone": "z1"}
    cpu_ids = [0, 1]
    shared = Node("a", "a.local", cpu_ids, GIB, labels=labels)
    labels["zone"] = "z2"
    cpu_ids.append(2)
    assert shared.labels == {"zone": "z1"} and shared.cpu_ids == (0, 1)
    snapshot = ClusterSnapshot((shared,), pending=(pending_job(1, 1.0, 1),))
    restored = pickle.loads(pickle.dumps(snapshot))
    assert restored == snapshot and hash(restored) == hash(snapshot)
