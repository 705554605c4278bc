"""Replicas as containers on the local node, through a Docker-compatible engine API (Docker
Engine, or Podman's `podman system service`); `LocalBackend` hands them the replicas of jobs
that name an `image`.

`MLYARD_RUNTIME` chooses: `auto` (the default: a job with an image runs in a container when the
engine answers, and is refused at submission when it does not), `container` (the same, but the
server refuses to start without an engine), or `process` (no containers: a job with an image is
refused). Jobs without an image always run as processes. `MLYARD_CONTAINER_SOCKET` names the
engine's socket (default: DOCKER_HOST, else Podman's or Docker's usual socket).
"""

from __future__ import annotations

import os

from mlyard.backends.local.containers.engine import Engine, EngineError, default_socket
from mlyard.backends.local.containers.replicas import ContainerReplicas, is_container_replica
from mlyard.runtime.launcher import DEFAULT_MAX_LOG_BYTES

RUNTIMES = ("auto", "container", "process")

__all__ = ["RUNTIMES", "ContainerReplicas", "Engine", "EngineError", "container_replicas",
           "from_environment", "is_container_replica"]


def container_replicas(runtime: str, socket: str | None = None, *,
                       max_log_bytes: int = DEFAULT_MAX_LOG_BYTES) -> ContainerReplicas | None:
    """The container runtime the server's settings ask for; None for `process`. Raises
    EngineError for `container` when the engine does not answer."""
    if runtime not in RUNTIMES:
        raise EngineError(f"MLYARD_RUNTIME={runtime!r}: choose one of {', '.join(RUNTIMES)}")
    if runtime == "process":
        return None
    replicas = ContainerReplicas(Engine(socket or default_socket()), max_log_bytes=max_log_bytes)
    if runtime == "container":
        problem = replicas.problem()
        if problem is not None:
            raise EngineError(f"MLYARD_RUNTIME=container: {problem}")
    return replicas


def from_environment(max_log_bytes: int = DEFAULT_MAX_LOG_BYTES) -> ContainerReplicas | None:
    """`container_replicas` from MLYARD_RUNTIME and MLYARD_CONTAINER_SOCKET."""
    return container_replicas(os.environ.get("MLYARD_RUNTIME", "auto").strip() or "auto",
                              os.environ.get("MLYARD_CONTAINER_SOCKET") or None, max_log_bytes=max_log_bytes)
