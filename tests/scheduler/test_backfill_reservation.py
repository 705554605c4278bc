"""Backfill around the head job's reservation, with many jobs of one shape that cannot fit
beside it: each of them would delay the head, while other shapes still backfill."""

from __future__ import annotations

from mlyard.scheduler import (
    ClusterSnapshot,
    Node,
    PendingJob,
    ReplicaPlacement,
    ReplicaRequest,
    RunningJob,
    SchedulerConfig,
    decide,
)

GIB = 1 << 30


def node(name: str) -> Node:
    return Node(name, f"{name}.local", tuple(range(16)), 64 * GIB, tuple(range(4)), {"rack": "r0"})


def job(job_id: int, at: float, gpus: int, cores: float = 1.0, replicas: int = 1,
        max_runtime: float | None = None) -> PendingJob:
    gang = tuple(ReplicaRequest("worker", i, cores, GIB, gpus) for i in range(replicas))
    return PendingJob(job_id, at, gang, max_runtime=max_runtime)


def test_jobs_that_cannot_fit_beside_the_reservation_wait_and_other_shapes_backfill():
    # Job 1 holds two GPUs of "a" until t=1,000; head job 2 needs all eight GPUs, so it is
    # reserved to start then and leaves no GPU beside it, only cores.
    busy = RunningJob(1, (ReplicaPlacement("worker", 0, "a", (0, 1), (0, 1), GIB),), started_at=0.0,
                      max_runtime=1_000.0)
    head = job(2, 1.0, gpus=4, cores=4.0, replicas=2)
    long_gpu_jobs = [job(10 + k, 2.0 + k, gpus=1, max_runtime=5_000.0) for k in range(40)]
    cpu_only = job(60, 60.0, gpus=0, cores=2.0, max_runtime=5_000.0)  # fits beside the head
    short = job(61, 61.0, gpus=1, max_runtime=500.0)  # ends before the head starts
    late = job(70, 70.0, gpus=1, max_runtime=5_000.0)
    snapshot = ClusterSnapshot((node("a"), node("b")), (busy,), (head, *long_gpu_jobs, cpu_only, short, late),
                               config=SchedulerConfig(policy="backfill"))
    decisions = decide(snapshot, 100.0)
    assert sorted(start.job_id for start in decisions.starts) == [60, 61]
    assert "reserved to start in ~15m" in decisions.waiting[2]
    for waiting in (*long_gpu_jobs, late):
        assert decisions.waiting[waiting.job_id].startswith("would delay job 2, reserved to start in ~15m")
