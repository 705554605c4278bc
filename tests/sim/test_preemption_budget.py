"""Preemption thrash on a small, busy cluster, and what a preemption budget does to it.

The workload is the pattern of the clusters where least-attained-service policies lost to
FIFO: eight GPUs, one and a half times the work they can do, long four-GPU jobs arriving
among short ones. Each short arrival outranks the long jobs (they have attained more
service), so without a budget the same long jobs are preempted again and again, paying a
checkpoint and a restart each time."""

from __future__ import annotations

import random

import pytest

from mlyard.sim import EngineOptions, TraceJob, simulate, summarize
from mlyard.sim.cluster import queues, synthetic_nodes

def busy_small_cluster_trace() -> list[TraceJob]:
    rng = random.Random(3)
    jobs, at = [], 0.0
    for job_id in range(1, 121):
        at += rng.expovariate(1 / 1200)  # a job every 20 minutes on average
        long = rng.random() < 0.25
        duration = rng.uniform(2, 5) * 3600 if long else rng.uniform(600, 3600)
        jobs.append(TraceJob(job_id, at, duration, 4 if long else rng.choice((1, 2)), f"team-{job_id % 2}"))
    return jobs


@pytest.fixture(scope="module")
def outcomes() -> dict[str, object]:
    jobs = busy_small_cluster_trace()
    nodes = synthetic_nodes(jobs, 8, 8)
    tenant_queues = queues([job.tenant for job in jobs], nodes, "none")
    offered = sum(job.duration * job.gpus for job in jobs) / (8 * jobs[-1].submitted_at)
    assert offered > 1.2  # the queue builds up: preemption is tempting
    runs = {}
    for label, policy, budget in (("fifo", "fifo", None), ("las", "las", None),
                                  ("unbounded", "balanced", None), ("budget", "balanced", 1)):
        runs[label] = simulate(jobs, nodes, EngineOptions(policy=policy, preemption_budget=budget),
                               queues=tenant_queues)
    return runs


def test_without_a_budget_the_same_jobs_are_preempted_again_and_again(outcomes) -> None:
    unbounded = outcomes["unbounded"].outcomes
    assert max(outcome.preemptions for outcome in unbounded) >= 5
    assert summarize(outcomes["unbounded"]).preemptions_per_job > 1


def test_a_budget_bounds_every_job_and_here_wins_on_average(outcomes) -> None:
    budget = summarize(outcomes["budget"])
    assert max(outcome.preemptions for outcome in outcomes["budget"].outcomes) <= 1
    assert len(outcomes["budget"].outcomes) == len(outcomes["fifo"].outcomes)  # every job finished
    for other in ("fifo", "las", "unbounded"):
        assert budget.avg_jct < summarize(outcomes[other]).avg_jct, other
    assert budget.p99_jct <= 1.5 * summarize(outcomes["fifo"]).p99_jct


def test_a_budget_moves_preemptions_onto_jobs_that_were_never_preempted(outcomes) -> None:
    """Why there is no budget by default: a protected job's room is taken from others, so
    far more jobs pay a restart (on the public traces, at a cost in average JCT)."""
    def preempted_jobs(label: str) -> int:
        return sum(1 for outcome in outcomes[label].outcomes if outcome.preemptions)

    assert preempted_jobs("budget") >= 1.5 * preempted_jobs("unbounded")  # 77 against 38
