"""How the Kubernetes backend runs pods, read from MLYARD_K8S_* environment variables.

The shared volume is the heart of it: a ReadWriteMany PersistentVolumeClaim that the server
and every job pod mount at the same path, the server's MLYARD_HOME. The server writes code
snapshots and reads logs there; pods extract the snapshot, write their output, exit status,
checkpoints and TensorBoard logs there.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mlyard.errors import MlyardError
from mlyard.spec import parse_duration

Placement = Literal["affinity", "node-name"]
PLACEMENTS: tuple[Placement, ...] = ("affinity", "node-name")
DEFAULT_MOUNT_PATH = "/var/lib/mlyard"
DEFAULT_IMAGE = "mlyard/pytorch:0.1.0"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")


@dataclass(frozen=True)
class KubernetesSettings:
    namespace: str = "mlyard"
    """Where job pods, their Services and Secrets are created (the server's own namespace)."""
    shared_claim: str = "mlyard-shared"
    """The ReadWriteMany PersistentVolumeClaim (CephFS, NFS) mounted by the server and every pod."""
    volume_storage_class: str | None = None
    """The StorageClass of project volumes' claims (ReadWriteMany, such as CephFS, whose
    provisioner holds a claim to its request); None: the cluster's default class."""
    shared_mount_path: str = DEFAULT_MOUNT_PATH
    """Where it is mounted, in pods and in the server alike: the server's MLYARD_HOME."""
    image: str = DEFAULT_IMAGE
    """The image of jobs that name none; it must have mlyard installed (docker/pytorch.Dockerfile)."""
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """Added to every job pod, as in the Pod API (`key`, `operator`, `value`, `effect`)."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Only nodes with these labels are offered to jobs (GPU nodes, a node pool)."""
    placement: Placement = "affinity"
    """How a pod is bound to the node mlyard's scheduler chose: `affinity` (a required node
    affinity on the node's name, so the Kubernetes scheduler still checks taints and room) or
    `node-name` (spec.nodeName: straight to the kubelet, no Kubernetes scheduler)."""
    service_account: str | None = None
    """The ServiceAccount of job pods; None: the namespace's default. Its token is never mounted."""
    run_as_user: int = 1000
    """Job pods run as this uid and gid: the server's own, so both can use the shared volume."""
    run_as_group: int = 1000
    cluster_domain: str = "cluster.local"
    rendezvous_port: int = 29500
    """MASTER_PORT, and from the next port on, TensorFlow's ports: every pod has an IP of its own."""
    termination_grace_seconds: int = 3600
    """The longest a pod may take to stop after SIGTERM if nobody forces it; the server forces
    it sooner, after the job's stop grace."""
    node_lost_seconds: int = 60
    """A pod whose node has been unreachable or not ready this long is evicted, and its
    replica reported lost (Kubernetes' default is 300 s)."""
    start_timeout_seconds: float = 600.0
    """A pod that cannot be scheduled or whose image cannot be pulled for this long is given up."""
    finished_retention_seconds: float = 600.0
    """Finished pods stay this long for `kubectl describe` and `kubectl logs`, then go."""
    max_log_bytes: int | None = None
    """The most output a replica keeps in its log (the server's MLYARD_MAX_LOG_BYTES); None: the launcher's default."""
    kubeconfig: str | None = None
    """A kubeconfig file; None: the in-cluster ServiceAccount, else ~/.kube/config."""
    context: str | None = None

    def __post_init__(self) -> None:
        _check(_DNS_LABEL.match(self.namespace), "MLYARD_K8S_NAMESPACE", self.namespace, "a DNS label")
        _check(_DNS_SUBDOMAIN.match(self.shared_claim), "MLYARD_K8S_SHARED_CLAIM", self.shared_claim,
               "a PersistentVolumeClaim name")
        if self.volume_storage_class is not None:
            _check(_DNS_SUBDOMAIN.match(self.volume_storage_class), "MLYARD_K8S_VOLUME_STORAGE_CLASS",
                   self.volume_storage_class, "a StorageClass name")
        _check(self.shared_mount_path.startswith("/"), "MLYARD_K8S_SHARED_MOUNT", self.shared_mount_path,
               "an absolute path")
        _check(bool(self.image.strip()), "MLYARD_K8S_IMAGE", self.image, "an image reference")
        _check(self.image_pull_policy in _PULL_POLICIES, "MLYARD_K8S_IMAGE_PULL_POLICY", self.image_pull_policy,
               "one of " + ", ".join(_PULL_POLICIES))
        for secret in self.image_pull_secrets:
            _check(_DNS_SUBDOMAIN.match(secret), "MLYARD_K8S_IMAGE_PULL_SECRETS", secret, "a Secret name")
        for key, value in self.node_selector.items():
            _check(_LABEL_KEY.match(key) and _LABEL_VALUE.match(value), "MLYARD_K8S_NODE_SELECTOR",
                   f"{key}={value}", "a label key=value")
        for index, toleration in enumerate(self.tolerations):
            _check(isinstance(toleration, Mapping) and set(toleration) <= _TOLERATION_FIELDS,
                   f"MLYARD_K8S_TOLERATIONS[{index}]", json.dumps(toleration),
                   "an object with " + ", ".join(sorted(_TOLERATION_FIELDS)))
        _check(self.placement in PLACEMENTS, "MLYARD_K8S_PLACEMENT", self.placement, " or ".join(PLACEMENTS))
        if self.service_account is not None:
            _check(_DNS_SUBDOMAIN.match(self.service_account), "MLYARD_K8S_SERVICE_ACCOUNT", self.service_account,
                   "a ServiceAccount name")
        _check(self.run_as_user > 0, "MLYARD_K8S_RUN_AS_USER", str(self.run_as_user), "a uid above 0 (pods run as non-root)")
        _check(self.run_as_group > 0, "MLYARD_K8S_RUN_AS_GROUP", str(self.run_as_group), "a gid above 0")
        _check(1 <= self.rendezvous_port <= 65000, "MLYARD_K8S_PORT", str(self.rendezvous_port), "a port from 1 to 65000")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> KubernetesSettings:
        """Unset variables keep their defaults; the shared mount defaults to MLYARD_HOME."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}

        def text(variable: str, name: str) -> None:
            if env.get(variable, "").strip():
                values[name] = env[variable].strip()

        def integer(variable: str, name: str) -> None:
            if env.get(variable, "").strip():
                try:
                    values[name] = int(env[variable])
                except ValueError:
                    raise MlyardError(f"{variable}: {env[variable]!r} is not a whole number") from None

        def seconds(variable: str, name: str, cast: type = float) -> None:
            if env.get(variable, "").strip():
                try:
                    values[name] = cast(parse_duration(env[variable]))
                except ValueError as error:
                    raise MlyardError(f"{variable}: {error}") from None

        text("MLYARD_K8S_NAMESPACE", "namespace")
        text("MLYARD_K8S_SHARED_CLAIM", "shared_claim")
        text("MLYARD_K8S_VOLUME_STORAGE_CLASS", "volume_storage_class")
        if env.get("MLYARD_K8S_SHARED_MOUNT", "").strip():
            values["shared_mount_path"] = env["MLYARD_K8S_SHARED_MOUNT"].strip().rstrip("/") or "/"
        elif env.get("MLYARD_HOME", "").strip():
            values["shared_mount_path"] = env["MLYARD_HOME"].strip().rstrip("/") or "/"
        text("MLYARD_K8S_IMAGE", "image")
        text("MLYARD_K8S_IMAGE_PULL_POLICY", "image_pull_policy")
        if env.get("MLYARD_K8S_IMAGE_PULL_SECRETS", "").strip():
            values["image_pull_secrets"] = tuple(
                name.strip() for name in env["MLYARD_K8S_IMAGE_PULL_SECRETS"].split(",") if name.strip())
        if env.get("MLYARD_K8S_TOLERATIONS", "").strip():
            values["tolerations"] = _tolerations(env["MLYARD_K8S_TOLERATIONS"])
        if env.get("MLYARD_K8S_NODE_SELECTOR", "").strip():
            values["node_selector"] = _labels("MLYARD_K8S_NODE_SELECTOR", env["MLYARD_K8S_NODE_SELECTOR"])
        text("MLYARD_K8S_PLACEMENT", "placement")
        text("MLYARD_K8S_SERVICE_ACCOUNT", "service_account")
        integer("MLYARD_K8S_RUN_AS_USER", "run_as_user")
        integer("MLYARD_K8S_RUN_AS_GROUP", "run_as_group")
        text("MLYARD_K8S_CLUSTER_DOMAIN", "cluster_domain")
        integer("MLYARD_K8S_PORT", "rendezvous_port")
        seconds("MLYARD_K8S_TERMINATION_GRACE", "termination_grace_seconds", int)
        seconds("MLYARD_K8S_NODE_LOST_AFTER", "node_lost_seconds", int)
        seconds("MLYARD_K8S_START_TIMEOUT", "start_timeout_seconds")
        seconds("MLYARD_K8S_FINISHED_RETENTION", "finished_retention_seconds")
        text("MLYARD_K8S_KUBECONFIG", "kubeconfig")
        text("MLYARD_K8S_CONTEXT", "context")
        return cls(**values)


_TOLERATION_FIELDS = {"key", "operator", "value", "effect", "tolerationSeconds"}


def _check(condition: object, variable: str, value: str, expected: str) -> None:
    if not condition:
        raise MlyardError(f"{variable}: {value!r} is not {expected}")


def _tolerations(value: str) -> tuple[Mapping[str, Any], ...]:
    try:
        parsed = json.loads(value)
    except ValueError as error:
        raise MlyardError(f"MLYARD_K8S_TOLERATIONS: not JSON ({error}); expected a list of tolerations, "
                          'e.g. [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]') from None
    if not isinstance(parsed, list):
        raise MlyardError("MLYARD_K8S_TOLERATIONS: expected a JSON list of tolerations")
    return tuple(parsed)


def _labels(variable: str, value: str) -> dict[str, str]:
    labels = {}
    for pair in value.split(","):
        if not pair.strip():
            continue
        key, equals, label = pair.partition("=")
        if not equals:
            raise MlyardError(f"{variable}: {pair.strip()!r} is not key=value")
        labels[key.strip()] = label.strip()
    return labels
