"""An attempt as Kubernetes objects, in the API's JSON shape: pure, so it is tested as data.

Per attempt: a headless Service (the pods' DNS subdomain, and the owner of everything else),
a Secret with each replica's API token and the job's `env_secrets`, and one Pod per replica. A pod runs
`python -m mlyard.backends.kubernetes.entrypoint`, which runs mlyard's launcher in the
replica's directory on the shared volume (the pod mounts only that directory, the job's
checkpoint and TensorBoard directories, and read-only its snapshot and virtualenv; the job's
project volumes are claims of their own, `volumes.py`): it extracts the code snapshot, runs the command,
writes its output to `output.log` (and the container's stdout) and its exit status to
`exit.json`, and exits with the command's exit code.

Inside a pod the replica is the only one on its "machine": the device plugin gives it its own
GPUs, numbered from 0, so the node-wide numbering the local backend uses is replaced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from mlyard.backends.base import AttemptLaunch, DatasetMount, ReplicaLaunch
from mlyard.backends.kubernetes import names, volumes
from mlyard.backends.kubernetes.settings import KubernetesSettings
from mlyard.errors import MlyardError

GPU_RESOURCE = "nvidia.com/gpu"
ENTRYPOINT_MODULE = "mlyard.backends.kubernetes.entrypoint"
SHARED_VOLUME = "shared"
SHM_VOLUME = "shm"
TOKEN_VARIABLE = "MLYARD_TOKEN"
# Node conditions under which Kubernetes evicts pods (NoExecute taints it sets itself).
_NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def render_attempt(launch: AttemptLaunch, settings: KubernetesSettings, *,
                   owner_uid: str | None = None) -> list[dict[str, Any]]:
    """The Service, the token Secret and the pods, in the order they are created. The Secret
    and pods name the Service as their owner when its `owner_uid` is known (once created), so
    deleting the Service deletes them all."""
    service = render_service(launch, settings)
    owner = _owner_reference(service["metadata"]["name"], owner_uid) if owner_uid else None
    return [service, render_secret(launch, settings, owner),
            *(render_pod(launch, replica, settings, owner) for replica in launch.replicas)]


def render_service(launch: AttemptLaunch, settings: KubernetesSettings) -> dict[str, Any]:
    labels = names.attempt_labels(launch.job_id, launch.attempt)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names.service_name(launch.job_id, launch.attempt), "namespace": settings.namespace,
                     "labels": labels},
        "spec": {
            "clusterIP": "None",
            "selector": dict(labels),
            # Peers look each other up before they are ready (rendezvous is what makes them ready).
            "publishNotReadyAddresses": True,
        },
    }


def render_secret(launch: AttemptLaunch, settings: KubernetesSettings,
                  owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Each replica's API token and the job's `env_secrets`, out of the pod spec (which anyone
    who may list pods reads)."""
    metadata: dict[str, Any] = {"name": names.service_name(launch.job_id, launch.attempt),
                                "namespace": settings.namespace,
                                "labels": names.attempt_labels(launch.job_id, launch.attempt)}
    if owner:
        metadata["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "stringData": {
            **{_token_key(replica): replica.env.get(TOKEN_VARIABLE, "") for replica in launch.replicas},
            **{_secret_key(name): replica.env[name] for replica in launch.replicas for name in replica.secret_names},
        },
    }


def render_pod(launch: AttemptLaunch, replica: ReplicaLaunch, settings: KubernetesSettings,
               owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    _check_on_shared_volume(replica, launch.private_directories, settings, launch.datasets)
    role, index = names.role_and_index(replica.name)
    labels = {
        **names.attempt_labels(launch.job_id, launch.attempt),
        names.ROLE_LABEL: role,
        names.INDEX_LABEL: str(index),
        names.REPLICA_LABEL: names.dns_label(replica.name),
        names.RANK_LABEL: str(replica.rank),
    }
    metadata: dict[str, Any] = {
        "name": names.pod_name(launch.job_id, launch.attempt, replica.name),
        "namespace": settings.namespace,
        "labels": labels,
        "annotations": {names.REPLICA_ID_ANNOTATION: str(replica.replica_id),
                        names.DIRECTORY_ANNOTATION: str(replica.directory)},
    }
    if owner:
        metadata["ownerReferences"] = [dict(owner)]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostname": names.hostname(replica.name),
        "subdomain": names.service_name(launch.job_id, launch.attempt),
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": settings.termination_grace_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": settings.run_as_user,
            "runAsGroup": settings.run_as_group,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(launch, replica, settings)],
        "volumes": [
            {"name": SHARED_VOLUME, "persistentVolumeClaim": {"claimName": settings.shared_claim}},
            # PyTorch's data loaders and NCCL share memory through /dev/shm: the default 64 MiB is too small.
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": str(replica.memory_bytes)}},
            *volumes.pod_volumes(launch),
        ],
        "tolerations": [dict(toleration) for toleration in settings.tolerations] + [
            {"key": taint, "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": settings.node_lost_seconds}
            for taint in _NODE_LOST_TAINTS
        ],
    }
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    if settings.placement == "node-name":
        spec["nodeName"] = replica.node
    else:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [replica.node]}]}]}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _container(launch: AttemptLaunch, replica: ReplicaLaunch, settings: KubernetesSettings) -> dict[str, Any]:
    command = ["python", "-m", ENTRYPOINT_MODULE, str(replica.directory)]
    if replica.snapshot is not None:
        command += ["--snapshot", str(replica.snapshot)]
    if settings.max_log_bytes is not None:
        command += ["--max-log-bytes", str(settings.max_log_bytes)]
    command += [f"--link={path}={view}" for path, view in launch.dataset_links.items()]
    command += [f"--link={path}={directory}" for path, directory in launch.volume_links.items()]
    command += ["--", *replica.command]
    # A replica below one core asks for its share of one (250m): the kubelet's CFS quota holds it there.
    cpu = f"{replica.cpu_millicores}m" if replica.cpu_millicores else str(len(replica.cpu_ids))
    quantities = {"cpu": cpu, "memory": str(replica.memory_bytes)}
    if not replica.cpu_ids:
        del quantities["cpu"]
    if replica.gpu_ids:
        quantities[GPU_RESOURCE] = str(len(replica.gpu_ids))
    return {
        "name": names.CONTAINER,
        "image": replica.image or settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": command,
        "env": pod_environment(launch, replica),
        # Requests equal to limits: the Guaranteed class, the only one the kubelet pins CPUs for.
        "resources": {"requests": dict(quantities), "limits": dict(quantities)},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [*shared_mounts(launch, replica, settings), {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
                         *volumes.container_mounts(launch)],
    }


def shared_mounts(launch: AttemptLaunch, replica: ReplicaLaunch, settings: KubernetesSettings) -> list[dict[str, Any]]:
    """Only the replica's own parts of the shared volume, each at its own path: the pods run
    as the server's user, so the volume's root (admin.token, secret.key, the database, other
    jobs' directories) stays out. Each directory exists before the pod starts (the kubelet
    would create a missing one as root)."""
    parts = [(PurePosixPath(replica.directory), False)]
    parts += [(PurePosixPath(directory), False) for directory in launch.private_directories]
    if replica.snapshot is not None:
        parts.append((PurePosixPath(replica.snapshot), True))
    parts += [(PurePosixPath(mount.view), True) for mount in launch.datasets]
    virtualenv = _virtualenv(replica)
    if virtualenv is not None:
        parts.append((virtualenv, True))
    mount = PurePosixPath(settings.shared_mount_path)
    mounts: list[dict[str, Any]] = []
    for path, read_only in parts:
        entry: dict[str, Any] = {"name": SHARED_VOLUME, "mountPath": str(path), "subPath": str(path.relative_to(mount))}
        if read_only:
            entry["readOnly"] = True
        mounts.append(entry)
    return mounts


def _virtualenv(replica: ReplicaLaunch) -> PurePosixPath | None:
    """The built virtualenv the replica runs in: VIRTUAL_ENV may come from the job's own `env`,
    so only a directory `environments/<content hash>` of the home holding the replica's runs/ counts."""
    value = replica.env.get("VIRTUAL_ENV")
    if not value:
        return None
    runs = PurePosixPath(replica.directory).parents  # <home>/runs/<job>/<attempt>/<replica>
    path = PurePosixPath(value)
    if len(runs) < 4 or path.parent != runs[3] / "environments" or not re.fullmatch(r"[0-9a-f]{64}", path.name):
        return None
    return path


def pod_environment(launch: AttemptLaunch, replica: ReplicaLaunch) -> list[dict[str, Any]]:
    """The replica's environment as the local backend gives it, sorted by name, with what a
    pod sees differently: its GPUs numbered from 0, the token and secrets by reference."""
    environment = {name: value for name, value in replica.env.items() if name not in replica.secret_names}
    environment.pop(TOKEN_VARIABLE, None)
    environment["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in range(len(replica.gpu_ids)))
    if not replica.gpu_ids:
        # Images built on CUDA's set NVIDIA_VISIBLE_DEVICES=all: a pod without GPUs must see none.
        environment["NVIDIA_VISIBLE_DEVICES"] = "void"
    variables: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in sorted(environment.items())]
    if TOKEN_VARIABLE in replica.env:
        variables.append({"name": TOKEN_VARIABLE, "valueFrom": {"secretKeyRef": {
            "name": names.service_name(launch.job_id, launch.attempt), "key": _token_key(replica)}}})
    for name in sorted(replica.secret_names):
        variables.append({"name": name, "valueFrom": {"secretKeyRef": {
            "name": names.service_name(launch.job_id, launch.attempt), "key": _secret_key(name)}}})
    return variables


def _token_key(replica: ReplicaLaunch) -> str:
    return f"token-{replica.name}"


def _secret_key(name: str) -> str:
    """The same for every replica: `env_secrets` belong to the job."""
    return f"env-{name}"


def _owner_reference(service: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "name": service, "uid": uid, "blockOwnerDeletion": True}


def _check_on_shared_volume(replica: ReplicaLaunch, private_directories: tuple[Path, ...],
                            settings: KubernetesSettings, datasets: tuple[DatasetMount, ...] = ()) -> None:
    """Pods find their directories and snapshot only if they lie on the shared volume."""
    mount = PurePosixPath(settings.shared_mount_path)
    for what, path in (("replica directory", replica.directory), ("code snapshot", replica.snapshot),
                       *(("job directory", directory) for directory in private_directories),
                       *(("dataset version", mount.view) for mount in datasets)):
        if path is not None and not PurePosixPath(path).is_relative_to(mount):
            raise MlyardError(
                f"the {what} {path} is not on the shared volume mounted at {mount}: set MLYARD_HOME to a "
                f"directory on it (or MLYARD_K8S_SHARED_MOUNT to where the server mounts it)")
