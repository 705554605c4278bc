"""Jobs and nodes in the scheduler's terms: one request per replica a job may run, the smallest
gang it cannot start without, and a node row as the scheduler's `Node`. Pure conversions,
shared by the request path (can this job ever fit?) and the controller (each round's snapshot).
"""

from __future__ import annotations

from mlyard.scheduler import Node, ReplicaRequest
from mlyard.server.store.rows import NodeRow
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
