"""Backfill around the head job's reservation, with many jobs of one shape that cannot fit
beside it: each of them would delay the head, while other shapes still backfill."""

from __future__ import annotations

from factories import node, pending_job, running_job

from mlyard.scheduler import ClusterSnapshot, SchedulerConfig, decide


def test_jobs_that_cannot_fit_beside_the_reservation_wait_and_other_shapes_backfill():
    # Job 1 holds two GPUs of "a" until t=1,000; head job 2 needs all eight GPUs, so it is
    # reserved to start then and leaves no GPU beside it, only cores.
    busy = running_job(1, "a", (0, 1), (0, 1), started_at=0.0, max_runtime=1_000.0)
    head = pending_job(2, 1.0, 2, cpu=4.0, gpu=4)
    long_gpu_jobs = [pending_job(10 + k, 2.0 + k, cpu=1.0, gpu=1, max_runtime=5_000.0) for k in range(40)]
    cpu_only = pending_job(60, 60.0, cpu=2.0, max_runtime=5_000.0)  # fits beside the head
    short = pending_job(61, 61.0, cpu=1.0, gpu=1, max_runtime=500.0)  # ends before the head starts
    late = pending_job(70, 70.0, cpu=1.0, gpu=1, max_runtime=5_000.0)
    nodes = (node("a", 16, gpus=4, rack="r0"), node("b", 16, gpus=4, rack="r0"))
    snapshot = ClusterSnapshot(nodes, (busy,), (head, *long_gpu_jobs, cpu_only, short, late),
                               config=SchedulerConfig(policy="backfill"))
    decisions = decide(snapshot, 100.0)
    assert sorted(start.job_id for start in decisions.starts) == [60, 61]
    assert "reserved to start in ~15m" in decisions.waiting[2]
    for waiting in (*long_gpu_jobs, late):
        assert decisions.waiting[waiting.job_id].startswith("would delay job 2, reserved to start in ~15m")
