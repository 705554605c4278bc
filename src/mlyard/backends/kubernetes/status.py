"""A replica's state from its Pod, as the API returns it (JSON shape): pure, so recorded pods
are fed to it in tests.

`pending` until the container runs, `running` while it does (also while it is being
stopped), `exited` with the container's exit code (the command's: the entrypoint exits with
it), `lost` when the pod ended without one: evicted, its node gone, refused by the kubelet,
deleted, or stuck unschedulable or without its image for longer than the start timeout. The
`reason` says, in words, what Kubernetes said.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mlyard.backends.base import ReplicaObservation
from mlyard.backends.kubernetes.names import CONTAINER

# The kubelet cannot pull the image: retried by Kubernetes, so transient until the start timeout.
_PULL_WAITING = {"ErrImagePull", "ImagePullBackOff"}
# The container cannot be created as specified: also retried (a Secret may appear, a config be fixed).
_CREATE_WAITING = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
# Retrying cannot help.
_FATAL_WAITING = {"InvalidImageName", "ErrImageNeverPull"}
_PENDING_WAITING = _PULL_WAITING | _CREATE_WAITING


def observe_pod(pod: Mapping[str, Any] | None, *, deleted: bool = False, now: float,
                start_timeout: float = float("inf")) -> ReplicaObservation:
    """The replica's state from its pod. `deleted`: the pod is gone from the API and `pod` is
    the last state seen; None: no pod was ever seen."""
    if pod is None:
        return ReplicaObservation(state="lost", reason="its pod does not exist")
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    phase = status.get("phase") or "Pending"
    container = _container_status(status)
    state = (container or {}).get("state") or {}
    terminated, running, waiting = state.get("terminated"), state.get("running"), state.get("waiting")
    if terminated is None and (container or {}).get("lastState", {}).get("terminated") and phase in ("Failed", "Succeeded"):
        terminated = container["lastState"]["terminated"]

    evicted = f"evicted from node {node or '(unknown)'}{_said(status.get('message'))}" \
        if status.get("reason") == "Evicted" else None
    # The runtime lost track of a container on a node that went away: no exit code to trust.
    if terminated is not None and "exitCode" in terminated and terminated.get("reason") != "ContainerStatusUnknown":
        return ReplicaObservation(
            state="exited", exit_code=int(terminated["exitCode"]), started_at=parse_time(terminated.get("startedAt")),
            finished_at=parse_time(terminated.get("finishedAt")),
            reason=_termination_reason(terminated, spec) or evicted,
        )
    started_at = parse_time((running or {}).get("startedAt"))
    disruption = _condition(status, "DisruptionTarget")
    if phase == "Unknown" or status.get("reason") == "NodeLost":
        return ReplicaObservation(state="lost", started_at=started_at,
                                  reason=f"lost contact with its node {node or '(unknown)'}")
    if disruption is not None and disruption.get("status") == "True" and \
            disruption.get("reason") == "DeletionByTaintManager":
        return ReplicaObservation(
            state="lost", started_at=started_at,
            reason=f"its node {node or '(unknown)'} is not ready or unreachable; "
                   f"the pod was evicted{_said(disruption.get('message'))}")
    if phase == "Failed":
        why = status.get("reason") or "Failed"
        text = evicted or f"the pod failed before its command ran ({why}){_said(status.get('message'))}"
        if terminated is not None and not evicted:  # ContainerStatusUnknown
            text = f"its container vanished with its node {node or '(unknown)'}{_said(terminated.get('message'))}"
        return ReplicaObservation(state="lost", started_at=started_at, reason=text)
    if phase == "Succeeded":  # no container status: nothing tells the exit code
        return ReplicaObservation(state="lost", started_at=started_at, reason="the pod ended without an exit status")
    if deleted:
        reason = "its pod was deleted before the command ended"
        if disruption is not None:
            reason += _said(disruption.get("message"))
        return ReplicaObservation(state="lost", started_at=started_at, reason=reason)
    if running is not None:
        return ReplicaObservation(state="running", started_at=started_at)

    age = now - (parse_time(metadata.get("creationTimestamp")) or now)
    if waiting is not None and waiting.get("reason") in _FATAL_WAITING | _PENDING_WAITING:
        reason = _waiting_text(waiting, container or {})
        if waiting["reason"] in _FATAL_WAITING or age > start_timeout:
            if waiting["reason"] not in _FATAL_WAITING:
                reason += f"; given up after {start_timeout:g}s"
            return ReplicaObservation(state="lost", reason=reason)
        return ReplicaObservation(state="pending", reason=reason)
    scheduled = _condition(status, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        reason = f"Kubernetes cannot schedule the pod{_said(scheduled.get('message'))}"
        if age > start_timeout:
            return ReplicaObservation(state="lost", reason=f"{reason}; given up after {start_timeout:g}s")
        return ReplicaObservation(state="pending", reason=reason)
    if age > start_timeout:
        # Stuck creating the container (a volume that does not mount, say): the events say why.
        stage = (waiting or {}).get("reason") or phase
        return ReplicaObservation(
            state="lost",
            reason=f"the pod did not start within {start_timeout:g}s (still {stage}); `kubectl -n "
                   f"{metadata.get('namespace', 'mlyard')} describe pod {metadata.get('name', '')}` shows why, and "
                   "MLYARD_K8S_START_TIMEOUT allows more time (large images take long to pull)")
    return ReplicaObservation(state="pending")


def _container_status(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((c for c in status.get("containerStatuses") or () if c.get("name") == CONTAINER), None)


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c.get("type") == kind), None)


def _termination_reason(terminated: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    why = terminated.get("reason")
    if why == "OOMKilled":
        limit = _memory_limit(spec)
        return "killed for running out of memory (OOMKilled)" + (f": its limit is {limit} bytes" if limit else "")
    if why in ("ContainerCannotRun", "StartError"):
        return f"the container could not start ({why}){_said(terminated.get('message'))}"
    if why == "DeadlineExceeded":
        return "stopped by Kubernetes at the pod's deadline"
    return None


def _memory_limit(spec: Mapping[str, Any]) -> str | None:
    for container in spec.get("containers") or ():
        if container.get("name") == CONTAINER:
            return ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return None


def _waiting_text(waiting: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    why = waiting["reason"]
    if why in _PULL_WAITING or why in _FATAL_WAITING:
        image = container.get("image") or "(unknown)"
        return f"cannot pull image {image} ({why}){_said(waiting.get('message'))}"
    return f"cannot create the container ({why}){_said(waiting.get('message'))}"


def _said(message: str | None) -> str:
    return f": {message.strip()}" if message and message.strip() else ""


def parse_time(value: str | None) -> float | None:
    """RFC 3339 as the API writes it (`2026-11-30T10:00:00Z`) → seconds since the epoch."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None
