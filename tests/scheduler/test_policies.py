"""Each policy's behaviour on small hand-built snapshots."""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import GIB, gpu_node, running_job

from mlyard.scheduler import (
    Amounts,
    ClusterSnapshot,
    PendingJob,
    Queue,
    ReplicaPlacement,
    ReplicaRequest,
    RunningJob,
    SchedulerConfig,
    decide,
)


def gang(gpus: int, per_replica: int = 8, models: tuple[str, ...] = ()) -> tuple[ReplicaRequest, ...]:
    sizes = [per_replica] * (gpus // per_replica) + ([gpus % per_replica] if gpus % per_replica else [])
    return tuple(ReplicaRequest("worker", i, 1, GIB, size, models) for i, size in enumerate(sizes))


def pending(job_id: int, gpus: int, at: float = 0.0, **fields) -> PendingJob:
    per_replica = fields.pop("per_replica", 8)
    models = fields.pop("models", ())
    return PendingJob(job_id, at, gang(gpus, per_replica, models), **fields)


def run(policy: str, nodes, running_jobs=(), pending_jobs=(), queues=(), now: float = 100_000.0, **config):
    snapshot = ClusterSnapshot(tuple(nodes), tuple(running_jobs), tuple(pending_jobs), tuple(queues),
                               SchedulerConfig(policy=policy, **config))
    return decide(snapshot, now)


def starts(decisions) -> list[int]:
    return [start.job_id for start in decisions.starts]


def preempted(decisions) -> list[int]:
    return [preemption.job_id for preemption in decisions.preemptions]


# --------------------------------------------------------------------- priority
def test_priority_preempts_lowest_priority_then_most_recent_and_the_job_waits_for_it():
    nodes = [gpu_node("a", 4)]
    jobs = [running_job(1, "a", (0,), [0], started_at=10, priority=1),
            running_job(2, "a", (1,), [1], started_at=20, priority=0),
            running_job(3, "a", (2,), [2], started_at=30, priority=0),
            running_job(4, "a", (3,), [3], started_at=5, priority=5)]
    decisions = run("priority", nodes, jobs, [pending(9, 1, per_replica=1, priority=3)])
    assert preempted(decisions) == [3]  # priority 0 and started last
    assert decisions.preemptions[0].for_job == 9 and "job 9" in decisions.preemptions[0].reason
    assert starts(decisions) == []
    assert decisions.waiting[9] == "waiting for job 3 to stop (preempted or shrunk for it)"
    # Next round the victim is stopping: nobody else is preempted for the same job.
    stopping = [*jobs[:2], running_job(3, "a", (2,), [2], started_at=30, stopping=True), jobs[3]]
    again = run("priority", nodes, stopping, [pending(9, 1, per_replica=1, priority=3)])
    assert preempted(again) == [] and starts(again) == []
    assert again.waiting[9] == "waiting for job 3 to stop"


def test_priority_never_preempts_equal_or_higher_priority():
    nodes = [gpu_node("a", 2)]
    jobs = [running_job(1, "a", (0,), [0], priority=3), running_job(2, "a", (1,), [1], priority=4)]
    decisions = run("priority", nodes, jobs, [pending(9, 1, per_replica=1, priority=3)])
    assert preempted(decisions) == [] and starts(decisions) == []
    assert decisions.waiting[9] == "no node with 1 free GPU"


def test_priority_reason_counts_waiting_jobs_of_higher_priority():
    nodes = [gpu_node("a", 1)]
    jobs = [running_job(1, "a", (0,), [0], priority=9)]
    waiting = [pending(i, 1, per_replica=1, priority=5, at=i) for i in (2, 3, 4)] + [pending(5, 1, per_replica=1)]
    decisions = run("priority", nodes, jobs, waiting)
    assert decisions.waiting[5] == "no node with 1 free GPU; behind 3 jobs of higher priority"


# --------------------------------------------------------------------- las
def test_las_demotes_by_attained_service_and_new_jobs_preempt_demoted_ones():
    nodes = [gpu_node("a", 2)]
    # Job 1 has run 2 GPUs x 2 h = 14,400 GPU-s: past the first threshold (3,600).
    old = running_job(1, "a", (0,), (0, 1), started_at=0.0)
    decisions = run("las", nodes, [old], [pending(2, 1, per_replica=1, at=7000)], now=7200.0)
    assert preempted(decisions) == [1]
    # Below the threshold the same job is in the top queue and is left alone.
    young = RunningJob(1, old.placements, started_at=7000.0)
    assert preempted(run("las", nodes, [young], [pending(2, 1, per_replica=1)], now=7200.0)) == []


def test_las_orders_by_queue_then_fifo_and_starvation_guard_promotes():
    nodes = [gpu_node("a", 1)]
    demoted = pending(1, 1, per_replica=1, at=0, attained_service=5_000, attained_time=5_000, queued_since=90_000)
    fresh = pending(2, 1, per_replica=1, at=99_000)
    assert starts(run("las", nodes, [], [demoted, fresh], now=100_000)) == [2]
    # Waiting 4x its run time (and at least an hour) sends it back to the top queue, and it is older.
    starving = pending(1, 1, per_replica=1, at=0, attained_service=5_000, attained_time=5_000, queued_since=70_000)
    assert starts(run("las", nodes, [], [starving, fresh], now=100_000)) == [1]


# --------------------------------------------------------------------- balanced
def test_balanced_does_not_preempt_a_job_that_only_just_started():
    nodes = [gpu_node("a", 1)]
    victim = running_job(1, "a", (0,), (0,), started_at=99_900, attained_service=50_000)
    assert preempted(run("balanced", nodes, [victim], [pending(2, 1, per_replica=1)], now=100_000)) == []
    assert preempted(run("balanced", nodes, [victim], [pending(2, 1, per_replica=1)], now=100_400)) == [1]


def test_balanced_lets_a_job_predicted_short_go_before_an_older_one_predicted_long():
    nodes = [gpu_node("a", 1)]
    older, newer = pending(1, 1, per_replica=1, at=10), pending(2, 1, per_replica=1, at=20)
    assert starts(run("balanced", nodes, [], [older, newer])) == [1], "without predictions the older goes first"
    long = replace(older, predicted_duration=10 * 3600)
    assert starts(run("balanced", nodes, [], [long, newer])) == [2]
    assert starts(run("balanced", nodes, [], [long, replace(newer, predicted_duration=300)])) == [2]
    assert starts(run("las", nodes, [], [long, newer])) == [1], "only balanced reads predictions"


def test_a_starving_job_goes_back_to_the_top_whatever_its_prediction():
    nodes = [gpu_node("a", 1)]
    other = pending(2, 1, per_replica=1, at=90_000, attained_service=5_000, attained_time=5_000, queued_since=99_000)
    waited_long = pending(1, 1, per_replica=1, at=0, attained_service=5_000, attained_time=5_000,
                          queued_since=70_000, predicted_duration=10 * 3600)
    assert starts(run("balanced", nodes, [], [waited_long, other])) == [1]
    just_back = replace(waited_long, queued_since=99_500)
    assert starts(run("balanced", nodes, [], [just_back, other])) == [2], "not starving: its prediction counts"


def test_a_job_is_preempted_for_the_ordering_no_more_often_than_the_budget():
    nodes = [gpu_node("a", 1)]
    newcomer = [pending(2, 1, per_replica=1)]
    once = running_job(1, "a", (0,), (0,), started_at=90_000, attained_service=50_000, preemptions=1)
    for policy in ("balanced", "las"):
        assert preempted(run(policy, nodes, [once], newcomer)) == [1], "no budget by default"
        assert preempted(run(policy, nodes, [once], newcomer, preemption_budget=2)) == [1]
        decisions = run(policy, nodes, [once], newcomer, preemption_budget=1)
        assert preempted(decisions) == [] and starts(decisions) == [] and decisions.waiting[2]
        assert preempted(run(policy, nodes, [replace(once, preemptions=0)], newcomer, preemption_budget=0)) == []
    urgent = [pending(2, 1, per_replica=1, priority=5)]
    assert preempted(run("priority", nodes, [once], urgent, preemption_budget=1)) == []


def test_a_job_past_its_budget_still_gives_back_a_borrowed_quota_but_is_not_shrunk_for_the_ordering():
    nodes = [gpu_node("a", 4)]
    queues = [Queue("nlp", quota=Amounts.limit(gpu=2)), Queue("vision", quota=Amounts.limit(gpu=2))]
    # Vision borrows two of nlp's GPUs with a job preempted as often as the budget allows.
    borrower = RunningJob(1, tuple(ReplicaPlacement("worker", i, "a", (i,), (i,), GIB) for i in range(4)),
                          queue="vision", started_at=0, attained_service=10**6, preemptions=5)
    owed = [pending(2, 2, per_replica=2, queue="nlp")]
    assert preempted(run("balanced", nodes, [borrower], owed, queues, preemption_budget=1)) == [1]
    elastic = RunningJob(1, borrower.placements, started_at=0, attained_service=10**6, preemptions=5,
                         min_replicas=2)
    newcomer = [pending(2, 2, per_replica=2)]
    assert [r.job_id for r in run("balanced", nodes, [replace(elastic, preemptions=0)], newcomer,
                                  preemption_budget=1).resizes] == [1]
    decisions = run("balanced", nodes, [elastic], newcomer, preemption_budget=1)
    assert preempted(decisions) == [] and decisions.resizes == ()


def test_balanced_preempts_only_a_job_two_levels_below_unless_the_margin_says_otherwise():
    nodes = [gpu_node("a", 1)]
    newcomer = [pending(2, 1, per_replica=1)]  # no service yet: the top level
    # 1,000 GPU-s in this attempt: one level down the ladder (600, 1,800, 5,400 …); 2,000: two.
    one_level = running_job(1, "a", (0,), (0,), started_at=99_000)
    two_levels = running_job(1, "a", (0,), (0,), started_at=99_000, attained_service=1_000)
    assert preempted(run("balanced", nodes, [one_level], newcomer)) == []
    assert preempted(run("balanced", nodes, [two_levels], newcomer)) == [1]
    assert preempted(run("balanced", nodes, [one_level], newcomer, balanced_margin=1)) == [1]
    with pytest.raises(ValueError, match="balanced_margin"):
        SchedulerConfig(balanced_margin=0)


def test_balanced_prefers_least_attained_service_within_a_level():
    nodes = [gpu_node("a", 1)]
    more = pending(1, 1, per_replica=1, at=0, attained_service=500)
    less = pending(2, 1, per_replica=1, at=50, attained_service=100)
    assert starts(run("balanced", nodes, [], [more, less])) == [2]


# --------------------------------------------------------------------- srtf-oracle
def test_srtf_oracle_starts_shortest_remaining_service_and_preempts_longer():
    nodes = [gpu_node("a", 1)]
    long_running = running_job(1, "a", (0,), (0,), started_at=0, expected_duration=10_000)
    short = pending(2, 1, per_replica=1, expected_duration=100)
    decisions = run("srtf-oracle", nodes, [long_running], [short], now=1_000)
    assert preempted(decisions) == [1]
    almost_done = pending(3, 1, per_replica=1, expected_duration=9_500)
    assert preempted(run("srtf-oracle", nodes, [long_running], [almost_done], now=1_000)) == []


# --------------------------------------------------------------------- backfill
def test_backfill_lets_short_jobs_through_but_never_delays_the_head():
    nodes = [gpu_node("a", 4)]
    # Job 1 holds 2 GPUs until t=1,000; head job 2 needs all 4.
    busy = running_job(1, "a", (0,), [0, 1], started_at=0, max_runtime=1_000)
    head = pending(2, 4, at=1, per_replica=4)
    short = pending(3, 1, at=2, per_replica=1, max_runtime=500)  # ends at 600 < 1,000
    long = pending(4, 1, at=3, per_replica=1, max_runtime=5_000)
    unknown = pending(5, 1, at=4, per_replica=1)
    decisions = run("backfill", nodes, [busy], [head, short, long, unknown], now=100)
    assert starts(decisions) == [3]
    assert "reserved to start in ~15m" in decisions.waiting[2]
    assert decisions.waiting[4].startswith("would delay job 2")
    assert decisions.waiting[5].startswith("would delay job 2")
    # Strict FIFO starts none of them.
    assert starts(run("fifo", nodes, [busy], [head, short, long, unknown], now=100)) == []


def test_backfill_uses_resources_the_head_will_not_need():
    nodes = [gpu_node("a", 4), gpu_node("b", 4)]
    busy = running_job(1, "a", (0,), [0, 1, 2], started_at=0, max_runtime=1_000)
    head = pending(2, 4, at=1, per_replica=4)  # fits on "a" at t=1,000 at the latest ... or "b" now
    blocker = running_job(3, "b", (0,), [0], started_at=0, max_runtime=2_000)
    long = pending(4, 1, at=3, per_replica=1, max_runtime=50_000)
    decisions = run("backfill", nodes, [busy, blocker], [head, long], now=100)
    # The head's spot is node "a" at t=1,000; "b" has 3 GPUs nobody reserved.
    assert starts(decisions) == [4]
    assert decisions.starts[0].placements[0].node == "b"


# --------------------------------------------------------------------- quotas
def test_queue_cannot_exceed_quota_plus_borrowing_limit():
    nodes = [gpu_node("a", 8)]
    queues = [Queue("vision", quota=Amounts.limit(gpu=4), borrow_limit=Amounts.limit(gpu=2))]
    jobs = [pending(i, 2, per_replica=2, at=i, queue="vision") for i in range(1, 5)]
    decisions = run("fifo", nodes, [], jobs, queues)
    assert starts(decisions) == [1, 2, 3]
    assert decisions.waiting[4] == "queue vision over quota plus borrowing limit: gpu 6/6, needs 2"


def test_quota_reason_reads_like_used_over_limit():
    nodes = [gpu_node("a", 16)]
    queues = [Queue("vision", quota=Amounts.limit(gpu=8), borrow_limit=Amounts.limit(gpu=0))]
    jobs = [running_job(1, "a", (0,), range(8), queue="vision")]
    decisions = run("balanced", nodes, jobs, [pending(2, 4, per_replica=4, queue="vision")], queues)
    assert decisions.waiting[2] == "queue vision over quota: gpu 8/8, needs 4"


def test_queue_reclaims_its_quota_from_borrowers_lowest_priority_most_recent_first():
    nodes = [gpu_node("a", 4)]
    queues = [Queue("nlp", quota=Amounts.limit(gpu=2)), Queue("vision", quota=Amounts.limit(gpu=2))]
    borrowers = [running_job(1, "a", (0,), [0], started_at=10, queue="vision", priority=1),
                 running_job(2, "a", (1,), [1], started_at=20, queue="vision"),
                 running_job(3, "a", (2,), [2], started_at=30, queue="vision"),
                 running_job(4, "a", (3,), [3], started_at=40, queue="vision", priority=2)]
    decisions = run("fifo", nodes, borrowers, [pending(9, 2, per_replica=2, queue="nlp")], queues)
    # vision holds 4 of its 2: the two priority-0 jobs go, the newest first.
    assert sorted(preempted(decisions)) == [2, 3]
    assert all("queue nlp reclaims its quota" in p.reason for p in decisions.preemptions)


def test_no_reclaim_beyond_own_quota_and_not_from_queues_within_theirs():
    nodes = [gpu_node("a", 4)]
    queues = [Queue("nlp", quota=Amounts.limit(gpu=2)), Queue("vision", quota=Amounts.limit(gpu=2))]
    mine = [running_job(1, "a", (0,), [0, 1], queue="nlp")]
    theirs = [running_job(2, "a", (1,), [2, 3], queue="vision")]
    decisions = run("fifo", nodes, mine + theirs, [pending(9, 1, per_replica=1, queue="nlp")], queues)
    assert preempted(decisions) == []


def test_a_job_within_its_queues_quota_goes_before_a_borrower_ahead_of_it():
    nodes = [gpu_node("a", 4)]
    queues = [Queue("nlp", quota=Amounts.limit(gpu=2)), Queue("vision", quota=Amounts.limit(gpu=2))]
    at_quota = [running_job(1, "a", (0,), [0, 1], queue="vision")]
    jobs = [pending(10, 2, per_replica=2, at=0, queue="vision"), pending(11, 2, per_replica=2, at=5, queue="nlp")]
    decisions = run("fifo", nodes, at_quota, jobs, queues)
    # Were job 10 to borrow the last two GPUs, nlp would reclaim them next round, and again.
    assert starts(decisions) == [11]
    assert preempted(decisions) == []


def test_priority_preempts_another_queue_only_while_that_queue_borrows():
    nodes = [gpu_node("a", 4)]
    queues = [Queue("nlp", quota=Amounts.limit(gpu=1)), Queue("vision", quota=Amounts.limit(gpu=2))]
    urgent = [pending(10, 1, per_replica=1, queue="nlp", priority=5)]  # nlp would borrow
    own = running_job(2, "a", (3,), [3], started_at=5, queue="nlp")
    within = [own, running_job(1, "a", (0,), [0, 1], started_at=30, queue="vision"),
              running_job(3, "a", (2,), [2], started_at=20, queue="nlp")]
    # Vision holds just its quota: the newest lower-priority job of another queue is spared.
    assert preempted(run("priority", nodes, within, urgent, queues)) == [3]
    borrowing = [own, running_job(1, "a", (0,), [0, 1], started_at=10, queue="vision"),
                 running_job(4, "a", (2,), [2], started_at=20, queue="vision")]
    assert preempted(run("priority", nodes, borrowing, urgent, queues)) == [4]


def test_dominant_resource_fair_share_interleaves_queues():
    nodes = [gpu_node("a", 4)]
    hog = [running_job(1, "a", (0,), [0], queue="a")]
    jobs = [pending(10 + i, 1, per_replica=1, at=i, queue="a") for i in range(3)]
    jobs += [pending(20 + i, 1, per_replica=1, at=10 + i, queue="b") for i in range(3)]
    decisions = run("balanced", nodes, hog, jobs)
    # Queue a already holds a GPU, so b goes first, then they alternate.
    assert starts(decisions) == [20, 10, 21]


# --------------------------------------------------------------------- placement
def test_best_fit_keeps_whole_nodes_free_for_big_gangs():
    nodes = [gpu_node("a"), gpu_node("b")]
    partly_used = running_job(1, "b", (0,), range(5))  # b has 3 free
    decisions = run("fifo", nodes, [partly_used], [pending(2, 2, per_replica=2), pending(3, 8)])
    placed = {start.job_id: {p.node for p in start.placements} for start in decisions.starts}
    assert placed == {2: {"b"}, 3: {"a"}}


def test_multi_node_gang_stays_in_one_rack_on_fewest_nodes():
    nodes = [gpu_node("a1", rack="r1"), gpu_node("b1", rack="r2"), gpu_node("b2", rack="r2"),
             gpu_node("a2", rack="r1")]
    other_rack = running_job(1, "a1", (0,), range(4))
    decisions = run("fifo", nodes, [other_rack], [pending(2, 16)])
    assert {p.node for p in decisions.starts[0].placements} == {"b1", "b2"}


def test_gpu_model_constraint():
    nodes = [gpu_node("old", model="V100"), gpu_node("new", model="A100")]
    decisions = run("fifo", nodes, [], [pending(1, 4, per_replica=4, models=("A100",))])
    assert decisions.starts[0].placements[0].node == "new"
    busy = running_job(2, "new", (0,), range(6))
    waiting = run("fifo", nodes, [busy], [pending(1, 4, per_replica=4, models=("A100",))])
    assert waiting.waiting[1] == "no node with 4 free A100 GPUs"


# --------------------------------------------------------------------- elastic
def elastic(job_id: int, count: int, minimum: int, **fields) -> PendingJob:
    replicas = tuple(ReplicaRequest("worker", i, 1, GIB, 1) for i in range(count))
    return PendingJob(job_id, 0.0, replicas, min_replicas=minimum, **fields)


def test_elastic_job_starts_with_what_fits_and_grows_into_idle_capacity():
    nodes = [gpu_node("a", 4)]
    busy = running_job(1, "a", (0,), [0])
    decisions = run("balanced", nodes, [busy], [elastic(2, 8, 2)])
    assert starts(decisions) == [2]
    assert len(decisions.starts[0].placements) == 3  # min 2, grown by the idle third GPU


def test_elastic_job_starts_at_min_when_others_wait():
    nodes = [gpu_node("a", 4)]
    decisions = run("fifo", nodes, [], [elastic(2, 4, 2), pending(3, 4, per_replica=4, at=1)])
    assert len(decisions.starts[0].placements) == 2
    assert decisions.waiting[3]


def test_running_elastic_job_grows_only_when_nobody_waits():
    nodes = [gpu_node("a", 4)]
    placements = tuple(ReplicaPlacement("worker", i, "a", (i,), (i,), GIB) for i in range(2))
    grow = tuple(ReplicaRequest("worker", i, 1, GIB, 1) for i in range(2, 6))
    job = RunningJob(1, placements, min_replicas=1, grow_replicas=grow)
    decisions = run("balanced", nodes, [job], [])
    assert [len(r.placements) for r in decisions.resizes] == [4]
    assert decisions.resizes[0].placements[:2] == placements


def test_idle_gpus_go_to_the_elastic_job_that_gains_most_from_them():
    nodes = [gpu_node("a", 4)]

    def holding_one(job_id: int, gpu: int, serial_fraction: float | None) -> RunningJob:
        held = (ReplicaPlacement("worker", 0, "a", (gpu,), (gpu,), GIB),)
        grow = tuple(ReplicaRequest("worker", i, 1, GIB, 1) for i in range(1, 3))
        return RunningJob(job_id, held, min_replicas=1, grow_replicas=grow, serial_fraction=serial_fraction)

    def grown(*jobs: RunningJob) -> dict[int, int]:
        return {r.job_id: len(r.placements) for r in run("balanced", nodes, list(jobs), []).resizes}

    # Two idle GPUs: a second replica makes a job with half its step serial a third faster; a
    # well-scaling job's second makes it 90% faster, and its third 43% more.
    assert grown(holding_one(1, 0, 0.5), holding_one(2, 1, 0.05)) == {2: 3}
    assert grown(holding_one(1, 0, 0.05), holding_one(2, 1, 0.05)) == {1: 2, 2: 2}, "equal gains alternate"
    assert grown(holding_one(1, 0, None), holding_one(2, 1, None)) == {1: 2, 2: 2}, "unknown: linear"
    assert grown(holding_one(1, 0, 0.5), holding_one(2, 1, None)) == {2: 3}


def test_elastic_job_shrinks_before_anyone_is_preempted():
    nodes = [gpu_node("a", 4)]
    placements = tuple(ReplicaPlacement("worker", i, "a", (i,), (i,), GIB) for i in range(4))
    stretched = RunningJob(1, placements, priority=0, min_replicas=2, started_at=0)
    decisions = run("priority", nodes, [stretched], [pending(2, 2, per_replica=2, priority=5)])
    assert preempted(decisions) == []
    assert [r.job_id for r in decisions.resizes] == [1]
    assert decisions.resizes[0].placements == placements[:2]
    assert "shrunk to 2 replicas for job 2" in decisions.resizes[0].reason


# --------------------------------------------------------------------- common
@pytest.mark.parametrize("policy", ["fifo", "backfill", "priority", "las", "srtf-oracle", "balanced"])
def test_job_that_can_never_run_is_explained_and_passed_over(policy):
    nodes = [gpu_node("a", 4)]
    decisions = run(policy, nodes, [], [pending(1, 16, at=0), pending(2, 1, per_replica=1, at=1,
                                                                         expected_duration=10)])
    assert starts(decisions) == [2]
    assert decisions.waiting[1].startswith("can never run on this cluster")


def test_explain_off_gives_no_reasons():
    nodes = [gpu_node("a", 1)]
    decisions = run("balanced", nodes, [running_job(1, "a", (0,), [0])], [pending(2, 1, per_replica=1)], explain=False)
    assert decisions.waiting == {}


def test_gpu_model_nobody_has_makes_a_job_unschedulable_with_that_reason():
    from mlyard.scheduler import unschedulable_reason

    nodes = [gpu_node("old", model="V100")]
    reason = unschedulable_reason(nodes, gang(4, per_replica=4, models=("A100",)))
    assert reason == "replica worker-0 asks for GPUs of model A100 but no node has them"


def test_spec_gpu_models_reach_the_scheduler():
    from mlyard.server.scheduler_terms import replica_requests
    from mlyard.spec import JobSpec

    spec = JobSpec.model_validate({"name": "a", "command": "true",
                                   "roles": [{"replicas": 2, "resources": {"gpu": 1, "gpu_models": ["A100"]}}]})
    assert [request.gpu_models for request in replica_requests(spec)] == [("A100",), ("A100",)]
