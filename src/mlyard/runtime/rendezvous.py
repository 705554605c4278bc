"""The environment each replica starts with: who it is and how to find the others.

Pure: every backend computes replica environments here, so PyTorch (`RANK`, `WORLD_SIZE`,
`MASTER_ADDR`, …), torchrun (`PET_*`), Lightning (`NODE_RANK`) and TensorFlow (`TF_CONFIG`) see
the same conventions on every backend.

A replica is one node of the job's world, as a pod is: its node rank (`NODE_RANK`,
`GROUP_RANK`, `PET_NODE_RANK`) is its replica rank over the job, whichever machine it lands on,
and it runs `processes` processes (`LOCAL_WORLD_SIZE`, `PET_NPROC_PER_NODE`). Its variables
describe its first process (`LOCAL_RANK` 0, `RANK` the first of its ranks); the launcher gives
each further process of a plain command its own `RANK` and `LOCAL_RANK`, and torchrun does the
same for the workers it starts.
"""

from __future__ import annotations

import json
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
    """Cores the replica may use: its pinned cores, or 1 for a share of one."""
    gpu_ids: tuple[int, ...]
    processes: int = 1


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
    world_size = sum(slot.processes for slot in slots)
    first_ranks = _first_ranks(slots)
    master = next(slot for slot in slots if slot.rank == 0)
    cluster = _tf_cluster(slots)
    roles = {role.name: role for role in spec.roles}
    environments = []
    for slot in slots:
        environment: dict[str, str] = {
            "OMP_NUM_THREADS": str(max(1, slot.cpu_count // slot.processes)),
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
                "RANK": str(first_ranks[slot.rank]),
                "WORLD_SIZE": str(world_size),
                "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": str(slot.processes),
                "NODE_RANK": str(slot.rank),
                "GROUP_RANK": str(slot.rank),
                "MASTER_ADDR": master.address,
                "MASTER_PORT": str(context.master_port),
                # torchrun's flags as variables: `torchrun train.py` alone forms the job's world.
                "PET_NNODES": str(len(slots)),
                "PET_NODE_RANK": str(slot.rank),
                "PET_NPROC_PER_NODE": str(slot.processes),
                "PET_MASTER_ADDR": master.address,
                "PET_MASTER_PORT": str(context.master_port),
                "PET_RDZV_ENDPOINT": f"{master.address}:{context.master_port}",
                "PET_RDZV_ID": f"mlyard-{context.job_id}-{context.attempt}",
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


def _first_ranks(slots: Sequence[ReplicaSlot]) -> dict[int, int]:
    """Each replica's first process rank, by replica rank: the processes of lower replicas come first."""
    first, total = {}, 0
    for slot in sorted(slots, key=lambda s: s.rank):
        first[slot.rank] = total
        total += slot.processes
    return first


def _tf_cluster(slots: Sequence[ReplicaSlot]) -> Mapping[str, list[str]]:
    cluster: dict[str, list[str]] = {}
    for slot in sorted(slots, key=lambda s: (s.role, s.index)):
        if slot.role not in _TF_CLUSTER_ROLES_EXCLUDED:
            cluster.setdefault(slot.role, []).append(f"{slot.address}:{slot.port}")
    return cluster
