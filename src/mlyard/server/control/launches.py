"""What the controller hands the backend to start an attempt: the ports it reserves, the
environment a job names applied to its replicas, and the `AttemptLaunch` itself."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from mlyard.backends.base import AttemptLaunch, Backend, DatasetMount, ReplicaLaunch, VolumeMount
from mlyard.errors import MlyardError
from mlyard.paths import Paths
from mlyard.scheduler import StartJob
from mlyard.server import job_secrets
from mlyard.server.services import volumes
from mlyard.server.store.rows import AttemptRow, EnvironmentRow, JobRow, ReplicaRow
from mlyard.spec import JobSpec, volume_variable
from mlyard.storage import BlobStore


def reserve_ports(backend: Backend, decision: StartJob) -> tuple[int, list[int]]:
    """A master port on rank 0's node, and one port per replica on its own node."""
    master_node = decision.placements[0].node
    wanted: dict[str, int] = {}
    for placement in decision.placements:
        wanted[placement.node] = wanted.get(placement.node, 0) + 1
    wanted[master_node] += 1
    free = {node: iter(backend.reserve_ports(node, count)) for node, count in wanted.items()}
    master_port = next(free[master_node])
    return master_port, [next(free[placement.node]) for placement in decision.placements]


def apply_environment(spec: JobSpec, built: EnvironmentRow | None, environments: list[dict[str, str]]) -> str | None:
    """The image the replicas run in. An `image` environment is that image; a virtualenv comes
    first on each replica's PATH (unless the job sets PATH) with VIRTUAL_ENV."""
    if built is None:
        return spec.image
    if built.kind == "image":
        return built.image
    for environment in environments:
        if "PATH" not in environment:
            environment["PATH"] = f"{built.image}/bin{os.pathsep}{os.environ.get('PATH', os.defpath)}"
        environment["VIRTUAL_ENV"] = built.image
    return None


def open_secrets(spec: JobSpec, key_file: Path) -> tuple[dict[str, str], str | None]:
    """The job's `env_secrets` in clear for its replicas' environment, or why they cannot be."""
    if not spec.env_secrets:
        return {}, None
    try:
        return job_secrets.box_at(key_file).open(spec.env_secrets), None
    except MlyardError as error:
        return {}, error.message


@dataclass(frozen=True)
class MountedVolumes:
    mounts: tuple[VolumeMount, ...] = ()
    directories: dict[str, str] = field(default_factory=dict)
    """Claim → where replicas find it (`Backend.volume_directory`)."""
    variables: dict[str, str] = field(default_factory=dict)
    """`MLYARD_VOLUME_<NAME>` of each: its mount point, or the directory its relative path leads to."""


def mounted_volumes(session: Session, backend: Backend, job: JobRow, spec: JobSpec) -> MountedVolumes | str:
    """The volumes the job mounts, or why it cannot start. Only a job's first attempt is held
    back by a volume over its quota: a restarted job is not a new one."""
    if not spec.volumes:
        return MountedVolumes()
    mounts, problems = volumes.mounts_of(session, job.id, spec, first_attempt=job.attempt_count == 0)
    if problems:
        return "; ".join(problems)
    directories = {mount.claim: backend.volume_directory(mount.claim) for mount in mounts}
    return MountedVolumes(
        mounts=tuple(mounts), directories=directories,
        variables={volume_variable(mount.name): mount.path if mount.path.startswith("/") else directories[mount.claim]
                   for mount in mounts})


def attempt_launch(job: JobRow, attempt: AttemptRow, spec: JobSpec, rows: Sequence[ReplicaRow],
                   environments: Sequence[dict[str, str]], image: str | None, paths: Paths, blobs: BlobStore,
                   private_directories: tuple[Path, ...], secret_names: frozenset[str] = frozenset(),
                   datasets: tuple[DatasetMount, ...] = (),
                   mounted: MountedVolumes = MountedVolumes()) -> AttemptLaunch:
    roles = {role.name: role for role in spec.roles}
    return AttemptLaunch(
        job_id=job.id,
        attempt=attempt.number,
        owner=job.owner.name if job.owner is not None else None,
        private_directories=private_directories,
        datasets=datasets,
        volumes=mounted.mounts,
        volume_directories=mounted.directories,
        replicas=tuple(
            ReplicaLaunch(
                replica_id=row.id, name=row.name, rank=row.rank, node=row.node, cpu_ids=tuple(row.cpu_ids),
                cpu_millicores=row.cpu_millicores or 0, gpu_ids=tuple(row.gpu_ids), memory_bytes=row.memory_bytes,
                command=tuple(spec.command_for(roles[row.role])), env=environment,
                directory=paths.replica_directory(job.id, attempt.number, row.name),
                snapshot=blobs.path_for(job.snapshot) if job.snapshot else None,
                image=image, secret_names=secret_names, processes=roles[row.role].processes,
            )
            for row, environment in zip(rows, environments, strict=True)
        ),
    )
