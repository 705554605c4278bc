"""Elastic jobs whose throughput follows Amdahl's law in replays (`TraceJob.serial_fraction`), and
idle GPUs given to the jobs that gain most from them (`scheduler.scaling`)."""

from __future__ import annotations

import random

import pytest

from mlyard.scheduler import ReplicaPlacement
from mlyard.sim import EngineOptions, TraceJob, simulate, summarize
from mlyard.sim.cluster import gang, queues, synthetic_nodes
from mlyard.sim.jobstate import JobState
from mlyard.sim.workloads import pollux_like


def test_a_job_holding_part_of_its_replicas_progresses_as_amdahl_says() -> None:
    job = TraceJob(1, 0, 100, 2, "t", min_replicas=1, serial_fraction=0.5)
    state = JobState(job, gang(job, 1))
    state.hold((ReplicaPlacement("worker", 0, "n0", (0,), (0,), 0),), 0.0)
    assert state.rate == pytest.approx(0.75)  # one replica does 1 / 1.33 of what two do
    linear = TraceJob(2, 0, 100, 2, "t", min_replicas=1)
    state = JobState(linear, gang(linear, 1))
    state.hold((ReplicaPlacement("worker", 0, "n0", (0,), (0,), 0),), 0.0)
    assert state.rate == 0.5


def mixed_scaling() -> list[TraceJob]:
    """Eight-GPU elastic jobs (one GPU at least) every 40 minutes or so on 16 GPUs: half scale
    well (2% of a step serial), half badly (60%), in no particular order."""
    rng = random.Random(11)
    jobs, at = [], 0.0
    for job_id in range(1, 61):
        at += rng.expovariate(1 / 2400)
        jobs.append(TraceJob(job_id, at, 3600 * rng.uniform(0.5, 2.0), 8, "lab", min_replicas=1,
                             serial_fraction=rng.choice((0.02, 0.6))))
    return jobs


@pytest.fixture(scope="module")
def replays() -> dict[str, object]:
    jobs = mixed_scaling()
    nodes = synthetic_nodes(jobs, 16, 1)
    tenant_queues = queues(["lab"], nodes, "none")
    runs = {label: simulate(jobs, nodes, EngineOptions(policy="balanced", gpus_per_node=1, scaling=known),
                            queues=tenant_queues)
            for label, known in (("linear", False), ("goodput", True))}
    rigid = [TraceJob(job.job_id, job.submitted_at, job.duration, job.gpus, job.tenant) for job in jobs]
    runs["rigid"] = simulate(rigid, nodes, EngineOptions(policy="balanced", gpus_per_node=1), queues=tenant_queues)
    return runs


def test_growing_the_jobs_that_scale_best_finishes_jobs_sooner(replays) -> None:
    rigid, linear, goodput = (summarize(replays[label]) for label in ("rigid", "linear", "goodput"))
    assert rigid.jobs == linear.jobs == goodput.jobs == 60
    assert goodput.avg_jct < linear.avg_jct < rigid.avg_jct


def test_the_pollux_like_workload_is_the_same_jobs_rigid_or_elastic() -> None:
    elastic, rigid = pollux_like(seed=4), pollux_like(seed=4, elastic=False)
    assert len(elastic) == 160 and all(0 <= job.submitted_at <= 8 * 3600 for job in elastic)
    assert [(job.submitted_at, job.duration, job.gpus) for job in elastic] == \
        [(job.submitted_at, job.duration, job.gpus) for job in rigid]
    assert all(job.min_replicas is None and job.serial_fraction == 0 for job in rigid)
    assert all(job.min_replicas == (1 if job.gpus > 1 else None) for job in elastic)
    assert {job.tenant for job in elastic} >= {"recommendation", "image-small", "speech"}
    assert pollux_like(seed=5) != elastic
