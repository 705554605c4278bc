"""Project volumes as PersistentVolumeClaims, and how an attempt's pods mount them: pure, like
`objects.py`, so they are tested as data.

A volume is a ReadWriteMany claim named by the server (`mlyard-vol-<hex>`) in the backend's
namespace, of the storage class `MLYARD_K8S_VOLUME_STORAGE_CLASS` (else the cluster's
default). Its size is the claim's storage request: the API server only records it, and the
class's provisioner decides whether writes beyond it fail (ceph-csi's CephFS provisioner gives
the subvolume a quota of that many bytes; NFS provisioners give none). The server cannot see
into a claim to measure it, and does not read the class's provisioner, so the words
`enforcement` gives name the class and say the limit holds only if its provisioner sets one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlyard.backends.base import AttemptLaunch
from mlyard.backends.kubernetes import names
from mlyard.backends.kubernetes.settings import KubernetesSettings
from mlyard.spec import format_bytes

VOLUME_ROOT = "/var/lib/mlyard-volumes"
"""Where every pod sees each volume of its job, under /var, where no job may mount one itself."""
VOLUME_LABEL = "mlyard/volume"


def volume_directory(claim: str) -> str:
    return f"{VOLUME_ROOT}/{claim}"


def render_claim(claim: str, size_bytes: int, settings: KubernetesSettings) -> dict[str, Any]:
    spec: dict[str, Any] = {
        # Every replica of a job, on whatever node, writes to it at once.
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": str(size_bytes)}},
    }
    if settings.volume_storage_class is not None:
        spec["storageClassName"] = settings.volume_storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": settings.namespace,
                     "labels": {names.MANAGED_BY: names.MANAGER, VOLUME_LABEL: claim}},
        "spec": spec,
    }


def enforcement(size_bytes: int, storage_class: str | None) -> str:
    """How a claim of `size_bytes` holds its volume to that size, in words. `storage_class`:
    the class the API recorded on the claim (it names the default class there when the claim
    named none); None where no class was known."""
    where = f"storage class {storage_class}" if storage_class else "the cluster's default storage class"
    return (f"its PersistentVolumeClaim's request of {format_bytes(size_bytes)}, which {where} enforces "
            f"if its provisioner does (CephFS's sets ceph.quota.max_bytes; NFS provisioners set no limit)")


def claim_storage_class(claim: Mapping[str, Any]) -> str | None:
    return (claim.get("spec") or {}).get("storageClassName") or None


def pod_volumes(launch: AttemptLaunch) -> list[dict[str, Any]]:
    """One pod volume per claim, named after it: claims are DNS labels, unique, and never
    `shared` or `shm`."""
    return [{"name": claim, "persistentVolumeClaim": {"claimName": claim}} for claim in _claims(launch)]


def container_mounts(launch: AttemptLaunch) -> list[dict[str, Any]]:
    """Each volume read-write at the absolute path the job names, or at its directory, where the
    link of a relative path leads (once, however many links lead there)."""
    places = dict.fromkeys((mount.claim, mount.path if mount.path.startswith("/") else volume_directory(mount.claim))
                           for mount in launch.volumes)
    return [{"name": claim, "mountPath": path} for claim, path in places]


def _claims(launch: AttemptLaunch) -> list[str]:
    """In the job's order, each once: a volume mounted at two paths is still one pod volume."""
    return list(dict.fromkeys(mount.claim for mount in launch.volumes))
