"""The engine on hand-computed workloads, scripted policies and random traces."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mlyard.scheduler import (
    POLICIES,
    ClusterSnapshot,
    Decisions,
    FreeResources,
    Node,
    Preempt,
    ReplicaPlacement,
    ReplicaRequest,
    Resize,
    StartJob,
    decide,
    place_gang,
    unschedulable_reason,
)
from mlyard.sim import (
    EngineOptions,
    Scenario,
    SimulationError,
    TraceJob,
    replay,
    simulate,
    summarize,
)
from mlyard.sim.cluster import (
    fits_on_distinct_nodes,
    node_types,
    queues,
    synthetic_nodes,
)

ITP_HEADER = "job_id,submission_time,duration,num_gpu"
GIB = 1 << 30

# Two nodes of two GPUs; tick 10 s, so every submission below lands on a tick.
#   job  submit  duration  GPUs
#   a    0       100       2      on one node
#   b    0       50        4      both nodes: a gang of two 2-GPU replicas
#   c    10      30        1
#   d    20      20        2
#   e    30      10        1
TINY = ["a,0,100,2", "b,0,50,4", "c,10,30,1", "d,20,20,2", "e,30,10,1"]


def tiny_trace(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text("\n".join([ITP_HEADER, *TINY]) + "\n")
    return path


def tiny_scenario(tmp_path: Path, **changes) -> Scenario:
    return Scenario(tiny_trace(tmp_path), "itp", gpus=4, gpus_per_node=2, tenants="none", tick=10, **changes)


def jcts(tmp_path: Path, policy: str, **changes) -> dict[int, float]:
    scenario = tiny_scenario(tmp_path, **changes)
    jobs = scenario.jobs()
    nodes = scenario.nodes(jobs)
    result = simulate(jobs, nodes, scenario.options(policy), queues=queues(["default"], nodes, "none"))
    return {outcome.job_id: outcome.completed_at - outcome.submitted_at for outcome in result.outcomes}


def test_fifo_on_the_tiny_trace(tmp_path: Path):
    # t=0: a starts on one node; b (4 GPUs) does not fit and, FIFO being strict, blocks c, d, e.
    # t=100: a ends, b starts on both nodes.       a: JCT 100
    # t=150: b ends; c, d and e all start.          b: JCT 150
    # c ends 180, d 170, e 160.                     c: 170, d: 150, e: 130
    assert jcts(tmp_path, "fifo") == {1: 100, 2: 150, 3: 170, 4: 150, 5: 130}
    assert summarize_tiny(tmp_path, "fifo").avg_jct == 140


def test_backfill_on_the_tiny_trace(tmp_path: Path):
    # b holds a reservation for t=100 (a's max_runtime ends then); jobs that end by then jump ahead.
    # t=10: c (1 GPU, ends 40) backfills.   t=20: d needs a whole free node; only one GPU is free.
    # t=30: e (ends 40) backfills.          t=40: c and e ended, d (ends 60) backfills.
    # t=100: a ends, b starts, ends 150.
    # JCTs: a 100, b 150, c 30, d 40, e 10.
    assert jcts(tmp_path, "backfill") == {1: 100, 2: 150, 3: 30, 4: 40, 5: 10}


def test_a_decision_waits_for_the_next_tick(tmp_path: Path):
    path = tmp_path / "late.csv"
    path.write_text(f"{ITP_HEADER}\nx,0,30,1\ny,5,30,1\n")
    scenario = Scenario(path, "itp", gpus=8, tenants="none", tick=60)
    result = simulate(scenario.jobs(), scenario.nodes(scenario.jobs()), scenario.options("fifo"))
    # y arrives at 5 on an idle cluster but the next round is at 60: JCT = 55 + 30.
    assert {o.job_id: o.completed_at - o.submitted_at for o in result.outcomes} == {1: 30, 2: 85}


def summarize_tiny(tmp_path: Path, policy: str):
    return replay(tiny_scenario(tmp_path), policy)


def test_metrics_of_the_tiny_fifo_run(tmp_path: Path):
    metrics = summarize_tiny(tmp_path, "fifo")
    assert (metrics.jobs, metrics.rejected, metrics.makespan) == (5, 0, 180)
    # queueing = JCT - duration: 0, 100, 140, 130, 120
    assert metrics.avg_queueing == 98 and metrics.p99_queueing == 140
    assert metrics.p50_jct == 150 and metrics.p99_jct == 170
    assert metrics.preemptions_per_job == 0 and metrics.jain_fairness == 1.0
    # Steady window: p10 .. p90 of arrivals (0, 0, 10, 20, 30) = 0 .. 30; a holds 2 of 4 GPUs.
    assert metrics.utilization == 0.5
    # Rounds only when something changed: arrivals at 0, 10, 20, 30; completions at 100, 150, 160, 170, 180.
    assert metrics.decide_calls == 9


# --------------------------------------------------------------------------- scripted policies

def run_scripted(jobs: list[TraceJob], gpus: int, gpus_per_node: int, script: Callable, **options):
    # A policy the engine treats as time-dependent, so the script is asked every 10 s while jobs wait.
    options = {"policy": "balanced", "tick": 10, "requeue_interval": 10, **options}
    nodes = synthetic_nodes(jobs, gpus, gpus_per_node)
    return simulate(jobs, nodes, EngineOptions(gpus_per_node=gpus_per_node, **options), decide=script)


def start(snapshot: ClusterSnapshot, job_id: int, count: int | None = None) -> StartJob:
    job = next(job for job in snapshot.pending if job.job_id == job_id)
    replicas = job.replicas if count is None else job.replicas[:count]
    return StartJob(job_id, place_gang(FreeResources.from_snapshot(snapshot), replicas))


def start_what_fits(snapshot: ClusterSnapshot) -> Decisions:
    free = FreeResources.from_snapshot(snapshot)
    starts = []
    for job in sorted(snapshot.pending, key=lambda job: job.job_id):
        placements = place_gang(free, job.replicas)
        if placements is not None:
            free.reserve(placements)
            starts.append(StartJob(job.job_id, placements))
    return Decisions(starts=tuple(starts))


def test_preemption_keeps_progress_and_pays_the_restart_overhead():
    jobs = [TraceJob(1, 0, 100, 2, "t"), TraceJob(2, 20, 50, 2, "t"), TraceJob(3, 110, 0, 2, "t")]
    seen = {}

    def script(snapshot: ClusterSnapshot, now: float) -> Decisions:
        pending = {job.job_id: job for job in snapshot.pending}
        running = {job.job_id: job for job in snapshot.running}
        if now == 20:
            return Decisions(preemptions=(Preempt(1, "make room", for_job=2),))
        if now == 50:
            seen["stopped"] = pending[1]
            return Decisions(starts=(start(snapshot, 2),))
        if now == 110:
            seen["restarted"] = running[1]
        return start_what_fits(snapshot)

    result = run_scripted(jobs, 2, 2, script, preempt_grace=30, restart_overhead=60)
    # Job 1 runs 0..50 (grace included: 50 s of progress), waits while job 2 runs 50..100,
    # restarts at 100 and needs 60 s of overhead plus its last 50 s: it ends at 210.
    outcomes = {outcome.job_id: outcome for outcome in result.outcomes}
    assert outcomes[1].completed_at == 210 and outcomes[1].preemptions == 1
    assert outcomes[1].run_time == 50 + 110
    assert outcomes[2].completed_at == 100
    assert outcomes[3].completed_at == 210  # a zero-length job ends the moment it starts
    stopped = seen["stopped"]
    assert (stopped.attained_service, stopped.attained_time, stopped.queued_since) == (100, 50, 50)
    assert stopped.expected_duration == 100 and stopped.max_runtime == 100
    restarted = seen["restarted"]
    assert (restarted.started_at, restarted.attained_service, restarted.stopping) == (100, 100, False)
    # Queueing = JCT - run time: job 1 210 - 160, job 2 80 - 50, job 3 100 - 0.
    assert summarize(result).avg_queueing == pytest.approx((50 + 30 + 100) / 3)


def test_a_resize_changes_the_progress_rate():
    # 4 GPUs asked as four 1-GPU replicas, 2 needed: it starts on half and grows at t=20.
    jobs = [TraceJob(1, 0, 100, 4, "t", min_replicas=2), TraceJob(2, 20, 10, 1, "t")]
    seen = {}

    def script(snapshot: ClusterSnapshot, now: float) -> Decisions:
        if now == 0:
            return Decisions(starts=(start(snapshot, 1, count=2),))
        if now == 20:
            job = snapshot.running[0]
            assert len(job.grow_replicas) == 2
            free = FreeResources.from_snapshot(snapshot)
            grown = job.placements + place_gang(free, job.grow_replicas)
            return Decisions(resizes=(Resize(1, grown, "grow"),))
        if now == 30:
            seen["grown"] = snapshot.running[0]
        return start_what_fits(snapshot)

    result = run_scripted(jobs, 4, 1, script)
    # 20 s at half speed = 10 s of work; the other 90 s at full speed: done at 110.
    assert {outcome.job_id: outcome.completed_at for outcome in result.outcomes} == {1: 110, 2: 120}
    # Service is banked at the resize: 2 GPUs x 20 s; the new holding counts from t=20.
    assert (seen["grown"].attained_service, seen["grown"].started_at, seen["grown"].grow_replicas) == (40, 20, ())


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda s, now: Decisions(starts=(start(s, 1), start(s, 2))),
         r"StartJob\(job 2\): GPU 0 on node-0000 is already held by job 1"),
        (lambda s, now: Decisions(starts=(StartJob(9, ()),)), r"StartJob\(job 9\): job 9 is not pending"),
        (lambda s, now: Decisions(preemptions=(Preempt(1, "x"),)), r"Preempt\(job 1\): job 1 is not running \(pending"),
        (lambda s, now: Decisions(starts=(StartJob(1, (ReplicaPlacement("worker", 0, "node-0000", (), (0,), 0),)),)),
         r"StartJob\(job 1\): replica worker-0 on node-0000 gets 1 GPUs but asks for 2"),
        (lambda s, now: Decisions(starts=(StartJob(1, (ReplicaPlacement("worker", 0, "elsewhere", (), (0, 1), 0),)),)),
         "placed on unknown node 'elsewhere'"),
        (lambda s, now: Decisions(starts=(StartJob(1, (ReplicaPlacement("worker", 0, "node-0000", (), (0, 7), 0),)),)),
         "GPU 7 on node-0000 does not exist"),
        (lambda s, now: [start(s, 1)], "decide returned list, not Decisions"),
    ],
)
def test_impossible_decisions_are_refused_by_name(make, message):
    jobs = [TraceJob(1, 0, 100, 2, "t"), TraceJob(2, 0, 100, 2, "t")]
    with pytest.raises(SimulationError, match=message):
        run_scripted(jobs, 2, 2, make)


def test_shares_of_a_core_run_together_and_the_ledger_refuses_more_than_a_core():
    jobs = [TraceJob(k + 1, 0.0, 100.0, 0, "t", cpu=0.25, memory_bytes=GIB) for k in range(9)]
    nodes = [Node("n0", "n0.sim", (0, 1), 8 * GIB)]
    result = simulate(jobs, nodes, EngineOptions(policy="fifo", tick=30, check_every_round=True))
    finished = sorted(outcome.completed_at for outcome in result.outcomes)
    assert finished[:8] == [100.0] * 8 and finished[8] > 100.0  # eight quarters on two cores, the ninth waits

    def overcommit(snapshot: ClusterSnapshot, now: float) -> Decisions:
        if now:
            return Decisions()
        return Decisions(starts=tuple(StartJob(job.job_id, (ReplicaPlacement("worker", 0, "n0", (0,), (), GIB, 250),))
                                      for job in snapshot.pending[:5]))

    with pytest.raises(SimulationError, match=r"StartJob\(job 5\): core 0 on n0 has 0 millicores left, not 250"):
        simulate(jobs, nodes, EngineOptions(policy="fifo", tick=30), decide=overcommit)


def test_preempting_a_stopping_job_again_is_refused():
    jobs = [TraceJob(1, 0, 100, 2, "t"), TraceJob(2, 0, 100, 2, "t")]

    def script(snapshot: ClusterSnapshot, now: float) -> Decisions:
        if now == 0:
            return Decisions(starts=(start(snapshot, 1),))
        return Decisions(preemptions=(Preempt(1, "again"),))

    with pytest.raises(SimulationError, match=r"Preempt\(job 1\): job 1 is not running \(stopping\)"):
        run_scripted(jobs, 2, 2, script, preempt_grace=100)


def test_a_policy_that_never_starts_a_job_on_an_idle_cluster_is_reported():
    with pytest.raises(SimulationError, match="leaves 1 jobs pending .* on an idle cluster"):
        run_scripted([TraceJob(1, 0, 10, 1, "t")], 2, 2, lambda snapshot, now: Decisions())


def test_jobs_bigger_than_the_cluster_are_rejected_and_not_replayed():
    jobs = [TraceJob(1, 0, 10, 16, "t"), TraceJob(2, 0, 10, 2, "t")]
    nodes = synthetic_nodes(jobs, 8, 8)
    result = simulate(jobs, nodes, EngineOptions(policy="fifo"))
    assert result.rejected == {1: "asks for 16 GPUs; the cluster has 8"}
    assert [outcome.job_id for outcome in result.outcomes] == [2]
    assert summarize(result).rejected == 1


def test_the_gpus_must_fill_whole_nodes(tmp_path: Path):
    with pytest.raises(ValueError, match="--gpus 12 is not a multiple of --gpus-per-node 8"):
        Scenario(tiny_trace(tmp_path), "itp", gpus=12).nodes([])


# --------------------------------------------------------------------------- random traces

trace_jobs = st.lists(
    st.tuples(st.integers(0, 600), st.integers(0, 900), st.sampled_from([1, 1, 2, 3, 4, 8, 12, 16]),
              st.sampled_from(["a", "b", "c"]), st.integers(0, 2)),
    min_size=1, max_size=25,
)


# Queue a borrowed what queue b was entitled to; b reclaimed it, a took the freed capacity
# again with its next job, and so on forever.
RECLAIM_LIVELOCK = [
    (62, 695, 1, "c", 1), (103, 855, 4, "a", 0), (73, 662, 4, "b", 1), (184, 62, 16, "a", 2), (103, 716, 12, "a", 1),
    (367, 749, 16, "c", 0), (208, 785, 1, "c", 0), (165, 350, 4, "a", 2), (452, 681, 2, "a", 1), (419, 582, 4, "c", 1),
    (397, 857, 4, "a", 2), (12, 468, 1, "b", 2), (46, 557, 4, "a", 0), (493, 360, 4, "c", 1), (135, 732, 4, "b", 2),
    (424, 848, 1, "a", 2), (196, 715, 8, "a", 0), (228, 652, 16, "b", 2), (581, 895, 12, "a", 1), (581, 428, 1, "a", 1),
    (65, 265, 2, "b", 2), (498, 574, 1, "a", 1), (333, 319, 16, "a", 1), (192, 561, 1, "c", 0),
]
# Queue a's high-priority 12-GPU job preempted a's own small job; a's next small job, within
# a's quota, went first and took the capacity; and so on (queues keep their own order now).
PRIORITY_LIVELOCK = [
    (551, 504, 12, "c", 2), (407, 94, 12, "a", 2), (76, 262, 1, "a", 2), (498, 838, 3, "a", 1), (373, 569, 8, "c", 0),
    (349, 830, 2, "a", 0), (350, 737, 3, "c", 0), (424, 633, 1, "c", 1), (589, 422, 12, "b", 2), (360, 567, 8, "b", 1),
    (426, 427, 16, "a", 0), (346, 74, 1, "c", 2),
]
# Queue c's 4-GPU job reclaimed from b though a bigger job of c, which would borrow, was
# ahead of it in c's order; b's next job went first and took the capacity; and so on.
BEHIND_OWN_BORROWER = [
    (499, 217, 1, "b", 2), (546, 418, 1, "c", 1), (284, 254, 12, "c", 2), (4, 194, 16, "c", 0), (31, 642, 3, "b", 0),
    (177, 291, 2, "c", 0), (279, 318, 4, "c", 1), (172, 558, 8, "b", 1), (124, 787, 3, "c", 1), (209, 290, 1, "a", 0),
    (582, 765, 1, "c", 1), (139, 76, 8, "c", 1), (447, 515, 8, "c", 1), (0, 126, 16, "c", 1), (358, 312, 12, "b", 2),
    (585, 504, 1, "c", 1), (391, 208, 1, "b", 2), (523, 203, 16, "c", 2), (418, 762, 4, "c", 0), (460, 634, 3, "b", 2),
]
MAX_ROUNDS = 5000


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=trace_jobs, policy=st.sampled_from(POLICIES), quotas=st.sampled_from(["none", "equal"]))
@example(rows=RECLAIM_LIVELOCK, policy="fifo", quotas="equal")
@example(rows=PRIORITY_LIVELOCK, policy="priority", quotas="equal")
@example(rows=BEHIND_OWN_BORROWER, policy="priority", quotas="equal")
def test_every_policy_finishes_every_job_without_overcommitting(rows, policy, quotas):
    jobs = sorted((TraceJob(k + 1, float(at), float(length), gpus, tenant, priority=priority)
                   for k, (at, length, gpus, tenant, priority) in enumerate(rows)),
                  key=lambda job: (job.submitted_at, job.job_id))
    nodes = synthetic_nodes(jobs, 16, 4)
    options = EngineOptions(policy=policy, tick=30, requeue_interval=60, gpus_per_node=4, check_every_round=True)
    rounds = 0

    def bounded(snapshot: ClusterSnapshot, now: float) -> Decisions:
        nonlocal rounds
        rounds += 1
        assert rounds <= MAX_ROUNDS, f"{policy} is still deciding at t={now:.0f}s: a livelock"
        return decide(snapshot, now)

    result = simulate(jobs, nodes, options, queues=queues([job.tenant for job in jobs], nodes, quotas), decide=bounded)
    assert len(result.outcomes) == len(jobs)  # nothing here exceeds 16 GPUs
    assert max(result.busy_gpus) <= 16 and min(result.busy_gpus) >= 0 and result.busy_gpus[-1] == 0
    for outcome in result.outcomes:
        assert outcome.completed_at - outcome.submitted_at >= outcome.duration - 1e-6
        assert outcome.run_time >= outcome.duration - 1e-6


node_shapes = st.lists(st.tuples(st.sampled_from([0, 1, 2, 4, 8]), st.integers(0, 16), st.integers(0, 64),
                                 st.sampled_from(["", "A", "B"])), min_size=1, max_size=6)
replica_shapes = st.lists(st.tuples(st.integers(0, 8), st.one_of(st.integers(0, 16), st.sampled_from([0.25, 0.5])),
                                    st.integers(0, 64),
                                    st.sampled_from([(), ("A",), ("A", "B")])), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(shapes=node_shapes, wanted=replica_shapes)
def test_the_admission_shortcut_never_admits_what_the_scheduler_would_reject(shapes, wanted):
    nodes = [Node(f"n{k}", f"n{k}.sim", tuple(range(cores)), memory, tuple(range(gpus)), gpu_model=model)
             for k, (gpus, cores, memory, model) in enumerate(shapes)]
    replicas = [ReplicaRequest("worker", k, cores, memory, gpus, models)
                for k, (gpus, cores, memory, models) in enumerate(wanted)]
    if fits_on_distinct_nodes(replicas, node_types(nodes)):
        assert unschedulable_reason(nodes, replicas) is None
