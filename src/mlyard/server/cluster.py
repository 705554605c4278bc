"""Turns database rows into the scheduler's plain values (and nothing else)."""

from __future__ import annotations

from collections.abc import Iterable

from mlyard.scheduler import ClusterSnapshot, Node, PendingJob, ReplicaPlacement, ReplicaRequest, RunningJob
from mlyard.server.rows import AttemptRow, JobRow, NodeRow
from mlyard.spec import JobSpec


def replica_requests(spec: JobSpec) -> tuple[ReplicaRequest, ...]:
    """One request per replica, roles in spec order; ranks follow this order."""
    return tuple(
        ReplicaRequest(
            role=role.name,
            index=index,
            cpu=role.resources.cpu,
            memory_bytes=role.resources.memory,
            gpu=role.resources.gpu,
        )
        for role in spec.roles
        for index in range(role.replicas)
    )


def scheduler_node(row: NodeRow) -> Node:
    return Node(
        name=row.name,
        address=row.address,
        cpu_ids=tuple(row.cpu_ids),
        memory_bytes=row.memory_bytes,
        gpu_ids=tuple(gpu["index"] for gpu in row.gpus),
        labels=dict(row.labels),
    )


def pending_job(row: JobRow) -> PendingJob:
    return PendingJob(
        job_id=row.id,
        submitted_at=row.submitted_at,
        replicas=replica_requests(JobSpec.model_validate(row.spec)),
        queue=row.queue,
        priority=row.priority,
    )


def running_job(attempt: AttemptRow) -> RunningJob:
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
        queue=attempt.job.queue,
        priority=attempt.job.priority,
        started_at=attempt.created_at,
    )


def snapshot(
    nodes: Iterable[NodeRow], holding_attempts: Iterable[AttemptRow], queued: Iterable[JobRow]
) -> ClusterSnapshot:
    """`holding_attempts`: every attempt whose replicas may still hold resources."""
    return ClusterSnapshot(
        nodes=tuple(scheduler_node(row) for row in nodes),
        running=tuple(running_job(attempt) for attempt in holding_attempts),
        pending=tuple(pending_job(row) for row in queued),
    )
