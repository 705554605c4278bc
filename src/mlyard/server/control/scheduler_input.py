"""Turns database rows into the scheduler's plain values (and nothing else).

Service is counted the way the scheduler counts it: GPU-seconds for a job that holds GPUs,
core-seconds (whole pinned cores) for one that does not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from mlyard.scheduler import (
    Amounts,
    ClusterSnapshot,
    Node,
    PendingJob,
    Queue,
    ReplicaPlacement,
    ReplicaRequest,
    RunningJob,
    SchedulerConfig,
)
from mlyard.server.store.rows import AttemptRow, JobRow, NodeRow, QueueRow, ReplicaRow
from mlyard.spec import JobSpec, Role

DEFAULT_QUEUE = "default"


def _request(role: Role, index: int) -> ReplicaRequest:
    return ReplicaRequest(
        role=role.name, index=index, cpu=role.resources.cpu, memory_bytes=role.resources.memory, gpu=role.resources.gpu,
        gpu_models=tuple(role.resources.gpu_models),
    )


def replica_requests(spec: JobSpec) -> tuple[ReplicaRequest, ...]:
    """One request per replica the job may run, roles in spec order; ranks follow this order.
    An elastic job asks for its maximum size."""
    if spec.elastic is not None:
        (role,) = spec.roles
        return tuple(_request(role, index) for index in range(spec.elastic.max_replicas))
    return tuple(_request(role, index) for role in spec.roles for index in range(role.replicas))


def smallest_gang(spec: JobSpec) -> tuple[ReplicaRequest, ...]:
    """The replicas the job cannot start without: all of them, or an elastic job's minimum."""
    requests = replica_requests(spec)
    return requests if spec.elastic is None else requests[: spec.elastic.min_replicas]


def service_rate(replicas: Iterable[ReplicaRow]) -> float:
    """Service units per second of run time: the GPUs held, or the cores if no GPU is held."""
    held = list(replicas)
    gpus = sum(len(replica.gpu_ids) for replica in held)
    return float(gpus if gpus else sum(len(replica.cpu_ids) for replica in held))


def attempt_started_at(attempt: AttemptRow) -> float:
    return attempt.launched_at if attempt.launched_at is not None else attempt.created_at


def attempt_run_time(attempt: AttemptRow, now: float) -> float:
    """Wall seconds the attempt's processes have existed (0 for one that was never launched)."""
    if attempt.launched_at is None:
        return 0.0
    return max(0.0, (attempt.finished_at or now) - attempt.launched_at)


def scheduler_node(row: NodeRow) -> Node:
    return Node(
        name=row.name,
        address=row.address,
        cpu_ids=tuple(row.cpu_ids),
        memory_bytes=row.memory_bytes,
        gpu_ids=tuple(gpu["index"] for gpu in row.gpus),
        labels=dict(row.labels),
        gpu_model=row.gpus[0]["model"] if row.gpus else "",
    )


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


def pending_job(row: JobRow) -> PendingJob:
    spec = JobSpec.model_validate(row.spec)
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
    )


def running_job(attempt: AttemptRow) -> RunningJob:
    job = attempt.job
    spec = JobSpec.model_validate(job.spec)
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
        grow_replicas=tuple(
            request for request in replica_requests(spec) if (request.role, request.index) not in held
        ) if elastic else (),
    )


def snapshot(
    nodes: Iterable[NodeRow],
    holding_attempts: Iterable[AttemptRow],
    queued: Iterable[JobRow],
    *,
    queues: Iterable[QueueRow] = (),
    config: SchedulerConfig | None = None,
) -> ClusterSnapshot:
    """`holding_attempts`: every attempt whose replicas may still hold resources."""
    return ClusterSnapshot(
        nodes=tuple(scheduler_node(row) for row in nodes),
        running=tuple(running_job(attempt) for attempt in holding_attempts),
        pending=tuple(pending_job(row) for row in queued),
        queues=scheduler_queues(queues),
        config=config or SchedulerConfig(),
    )
