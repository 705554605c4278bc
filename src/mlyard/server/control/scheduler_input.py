"""Turns database rows into the scheduler's `ClusterSnapshot` (and nothing else).

Service is counted the way the scheduler counts it (`lifecycle.service_rate`): GPU-seconds for a
job that holds GPUs, core-seconds (whole pinned cores, a share of a core as its fraction) for one
that does not. Specs come parsed, from `Database.specs`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from mlyard.scheduler import Amounts, ClusterSnapshot, PendingJob, Queue, ReplicaPlacement, RunningJob, SchedulerConfig
from mlyard.server.lifecycle import attempt_started_at
from mlyard.server.scheduler_terms import DEFAULT_QUEUE, replica_requests, scheduler_node
from mlyard.server.store.rows import AttemptRow, JobRow, NodeRow, QueueRow
from mlyard.spec import JobSpec


def _amounts(gpu: float | None, cpu: float | None, memory: int | None, *, missing: float) -> Amounts | None:
    if gpu is None and cpu is None and memory is None:
        return None
    return Amounts(
        gpu=missing if gpu is None else gpu, cpu=missing if cpu is None else cpu,
        memory=missing if memory is None else float(memory),
    )


def scheduler_queue(row: QueueRow) -> Queue:
    """A null quota column guarantees none of that resource; a null borrow column is unlimited."""
    return Queue(
        name=row.name,
        project=row.project,
        quota=_amounts(row.quota_gpu, row.quota_cpu, row.quota_memory, missing=0.0),
        borrow_limit=_amounts(row.borrow_gpu, row.borrow_cpu, row.borrow_memory, missing=math.inf),
        weight=row.weight,
    )


def scheduler_queues(rows: Iterable[QueueRow]) -> tuple[Queue, ...]:
    """The stored queues, plus the implicit `default` queue without quota unless it is stored."""
    queues = [scheduler_queue(row) for row in rows]
    if all(queue.name != DEFAULT_QUEUE for queue in queues):
        queues.insert(0, Queue(name=DEFAULT_QUEUE))
    return tuple(queues)


def _user(job: JobRow) -> str:
    return job.owner.name if job.owner is not None else ""


def pending_job(row: JobRow, spec: JobSpec) -> PendingJob:
    return PendingJob(
        job_id=row.id,
        submitted_at=row.submitted_at,
        replicas=replica_requests(spec),
        queue=row.queue,
        priority=row.priority,
        user=_user(row),
        attained_service=row.attained_service,
        attained_time=row.attained_time,
        queued_since=row.queued_since,
        max_runtime=spec.max_runtime,
        min_replicas=spec.elastic.min_replicas if spec.elastic is not None else None,
        same_node=spec.placement.same_node,
        same_topology=spec.placement.same_topology,
    )


def running_job(attempt: AttemptRow, spec: JobSpec, serial_fraction: float | None = None) -> RunningJob:
    """`serial_fraction`: the job's fitted scaling curve (`scaling_fits.py`), elastic jobs only."""
    job = attempt.job
    held = {(replica.role, replica.index) for replica in attempt.replicas}
    elastic = spec.elastic is not None
    return RunningJob(
        job_id=attempt.job_id,
        placements=tuple(
            ReplicaPlacement(
                role=replica.role,
                index=replica.index,
                node=replica.node,
                cpu_ids=tuple(replica.cpu_ids),
                gpu_ids=tuple(replica.gpu_ids),
                memory_bytes=replica.memory_bytes,
                cpu_millicores=replica.cpu_millicores or 0,
            )
            for replica in attempt.replicas
        ),
        queue=job.queue,
        priority=job.priority,
        started_at=attempt_started_at(attempt),
        submitted_at=job.submitted_at,
        user=_user(job),
        attained_service=job.attained_service,
        attained_time=job.attained_time,
        max_runtime=spec.max_runtime,
        stopping=attempt.stop_requested_at is not None,
        min_replicas=spec.elastic.min_replicas if elastic else None,
        preemptions=job.preemption_count or 0,
        grow_replicas=tuple(
            request for request in replica_requests(spec) if (request.role, request.index) not in held
        ) if elastic else (),
        same_node=spec.placement.same_node,
        same_topology=spec.placement.same_topology,
        serial_fraction=serial_fraction if elastic else None,
    )


def snapshot(
    nodes: Iterable[NodeRow],
    holding_attempts: Iterable[AttemptRow],
    queued: Iterable[JobRow],
    *,
    specs: Mapping[int, JobSpec],
    queues: Iterable[QueueRow] = (),
    config: SchedulerConfig | None = None,
) -> ClusterSnapshot:
    """`holding_attempts`: every attempt whose replicas may still hold resources; `specs`: the
    parsed spec of each of their jobs and of every queued job, by job id."""
    return ClusterSnapshot(
        nodes=tuple(scheduler_node(row) for row in nodes),
        running=tuple(running_job(attempt, specs[attempt.job_id]) for attempt in holding_attempts),
        pending=tuple(pending_job(row, specs[row.id]) for row in queued),
        queues=scheduler_queues(queues),
        config=config or SchedulerConfig(),
    )
