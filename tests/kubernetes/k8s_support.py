"""Shared by the Kubernetes backend's tests: attempts built the way the controller builds
them, and validation against the Kubernetes OpenAPI schema of a pinned version.

The schemas come from the `kubernetes-validate` package, which ships the JSON schemas of
every Kubernetes version it supports: nothing is fetched at test time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from mlyard.backends.base import AttemptLaunch, ReplicaLaunch
from mlyard.backends.kubernetes.backend import KubernetesBackend
from mlyard.backends.kubernetes.settings import KubernetesSettings
from mlyard.runtime.rendezvous import JobContext, ReplicaSlot, replica_environments
from mlyard.spec import JobSpec

KUBERNETES_VERSION = "1.31"
"""The Kubernetes version whose API every rendered object and manifest must fit."""
HOME = Path("/var/lib/mlyard")
HERE = Path(__file__).parent
SNAPSHOT = HOME / "blobs" / "ab" / ("ab" + "0" * 62)


class SchemaError(AssertionError):
    pass


def validate(document: dict[str, Any], where: str = "") -> None:
    """Fails with the object, field path and problem when `document` does not fit the schema
    (strict: unknown fields are errors too)."""
    try:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(part) for part in error.absolute_path) or "(top)"
        name = document.get("metadata", {}).get("name", "?")
        raise SchemaError(f"{where}{document.get('kind')}/{name} at {path}: {error.message} "
                          f"(Kubernetes {KUBERNETES_VERSION})") from None
    except kubernetes_validate.SchemaNotFoundError as error:
        raise SchemaError(f"{where}{error.message}") from None


@dataclass(frozen=True)
class Placement:
    role: str
    index: int
    node: str
    cpus: int
    memory_bytes: int
    gpus: tuple[int, ...] = ()


def backend(settings: KubernetesSettings | None = None) -> KubernetesBackend:
    """A backend that renders only: no API, no watch."""
    return KubernetesBackend(settings or KubernetesSettings(), api=None, watch=False)


def attempt(spec: JobSpec, placements: Sequence[Placement], *, renderer: KubernetesBackend,
            job_id: int = 42, attempt_number: int = 1, image: str | None = None,
            snapshot: Path | None = SNAPSHOT, home: Path = HOME) -> AttemptLaunch:
    """What the controller's `_start` hands the backend for these placements (under `home`)."""
    if snapshot is not None:
        snapshot = home / snapshot.relative_to(HOME)
    private = (home / "checkpoints" / str(job_id), home / "tensorboard" / str(job_id))
    wanted: dict[str, int] = {}
    for placement in placements:
        wanted[placement.node] = wanted.get(placement.node, 0) + 1
    wanted[placements[0].node] += 1
    free = {node: iter(renderer.reserve_ports(node, count)) for node, count in wanted.items()}
    master_port = next(free[placements[0].node])
    slots = []
    roles = {role.name: role for role in spec.roles}
    for rank, placement in enumerate(placements):
        name = f"{placement.role}-{placement.index}"
        slots.append(ReplicaSlot(
            role=placement.role, index=placement.index, rank=rank, node=placement.node,
            address=renderer.replica_address(job_id, attempt_number, name, placement.node, "10.0.0.1"),
            port=next(free[placement.node]), cpu_count=placement.cpus, gpu_ids=placement.gpus,
            processes=roles[placement.role].processes,
        ))
    context = JobContext(job_id=job_id, attempt=attempt_number, api_url="http://mlyard.mlyard.svc:8642",
                         token="test-token-not-secret", checkpoint_directory=str(private[0]),
                         master_port=master_port, tensorboard_directory=str(private[1]))
    environments = replica_environments(spec, slots, context)
    return AttemptLaunch(job_id=job_id, attempt=attempt_number, private_directories=private, replicas=tuple(
        ReplicaLaunch(
            replica_id=1000 + rank, name=f"{slot.role}-{slot.index}", rank=rank, node=slot.node,
            cpu_ids=tuple(range(placement.cpus)), gpu_ids=placement.gpus, memory_bytes=placement.memory_bytes,
            command=tuple(spec.command_for(roles[slot.role])), env=environment,
            directory=home / "runs" / str(job_id) / str(attempt_number) / f"{slot.role}-{slot.index}",
            snapshot=snapshot, image=image, processes=roles[slot.role].processes,
        )
        for rank, (slot, placement, environment) in enumerate(zip(slots, placements, environments, strict=True))
    ))


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document is not None]


class _PlainDumper(yaml.SafeDumper):
    """Writes a repeated value out again instead of as an alias: golden files read as manifests."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_documents(documents: Sequence[dict[str, Any]]) -> str:
    return yaml.dump_all(documents, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False, width=120)
