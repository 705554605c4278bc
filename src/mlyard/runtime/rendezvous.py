"""The environment each replica starts with: who it is and how to find the others.

Pure: every backend computes replica environments here, so PyTorch (`RANK`, `WORLD_SIZE`,
`MASTER_ADDR`, …) and TensorFlow (`TF_CONFIG`) see the same conventions on every backend.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mlyard.spec import JobSpec

# TF_CONFIG's cluster lists these task types; an evaluator runs beside the cluster.
_TF_CLUSTER_ROLES_EXCLUDED = {"evaluator"}


@dataclass(frozen=True)
class ReplicaSlot:
    """One replica's identity and address, ranks counted over all roles in spec order."""

    role: str
    index: int
    rank: int
    node: str
    address: str
    port: int
    """This replica's own port (TensorFlow servers listen on it)."""
    cpu_count: int
    gpu_ids: tuple[int, ...]


@dataclass(frozen=True)
class JobContext:
    job_id: int
    attempt: int
    api_url: str
    token: str
    checkpoint_directory: str
    master_port: int
    earlier_attempts: int = 0
    """Every earlier attempt of the job, failures and preemptions alike (MLYARD_RESTART_COUNT);
    a job resumes when it is above 0. The job's own `restart_count` counts restarts after
    failures only."""
    tensorboard_directory: str = ""
    """The job's TensorBoard log directory, shared by its attempts; empty: none offered."""


def replica_environments(spec: JobSpec, slots: Sequence[ReplicaSlot], context: JobContext) -> list[dict[str, str]]:
    """One environment per slot, in slot order. User-set variables (job env, then role env)
    win over computed ones, except the identity variables mlyard owns."""
    world_size = len(slots)
    master = next(slot for slot in slots if slot.rank == 0)
    per_node = Counter(slot.node for slot in slots)
    local_ranks: dict[str, int] = Counter()
    cluster = _tf_cluster(slots)
    roles = {role.name: role for role in spec.roles}
    environments = []
    for slot in slots:
        local_rank = local_ranks[slot.node]
        local_ranks[slot.node] += 1
        environment: dict[str, str] = {
            "OMP_NUM_THREADS": str(max(1, slot.cpu_count)),
            "PYTHONUNBUFFERED": "1",
        }
        environment.update(spec.env)
        environment.update(roles[slot.role].env)
        environment.update(
            {
                "MLYARD_JOB_ID": str(context.job_id),
                "MLYARD_ATTEMPT": str(context.attempt),
                "MLYARD_REPLICA": f"{slot.role}-{slot.index}",
                "MLYARD_ROLE": slot.role,
                "MLYARD_API": context.api_url,
                "MLYARD_TOKEN": context.token,
                "MLYARD_CHECKPOINT_DIR": context.checkpoint_directory,
                "MLYARD_RESTART_COUNT": str(context.earlier_attempts),
                "RANK": str(slot.rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_RANK": str(local_rank),
                "LOCAL_WORLD_SIZE": str(per_node[slot.node]),
                "GROUP_RANK": str(sorted(per_node).index(slot.node)),
                "MASTER_ADDR": master.address,
                "MASTER_PORT": str(context.master_port),
                "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in slot.gpu_ids),
            }
        )
        if context.tensorboard_directory:
            environment["MLYARD_TENSORBOARD_DIR"] = context.tensorboard_directory
        if spec.framework == "tensorflow":
            environment["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": slot.role, "index": slot.index}}, separators=(",", ":")
            )
        environments.append(environment)
    return environments


def _tf_cluster(slots: Sequence[ReplicaSlot]) -> Mapping[str, list[str]]:
    cluster: dict[str, list[str]] = {}
    for slot in sorted(slots, key=lambda s: (s.role, s.index)):
        if slot.role not in _TF_CLUSTER_ROLES_EXCLUDED:
            cluster.setdefault(slot.role, []).append(f"{slot.address}:{slot.port}")
    return cluster
