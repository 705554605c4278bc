"""The container engine, through its Docker-compatible API (docker SDK): Docker Engine's
socket or Podman's (`podman system service unix:///run/podman/podman.sock`).

Only this module imports `docker`; it holds what the engine answers as plain values.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from mlyard.errors import MlyardError

# Podman 4 speaks 1.41 on its Docker-compatible API; device requests need 1.40.
API_VERSION = "1.41"
DEFAULT_SOCKETS = ("/run/podman/podman.sock", "/var/run/docker.sock")
# Calls return fast; a stuck engine must not hold up the controller for long.
CALL_TIMEOUT = 30


class EngineError(MlyardError):
    http_status = 503
    code = "container_engine"


def default_socket(candidates: tuple[str, ...] = DEFAULT_SOCKETS) -> str:
    """DOCKER_HOST if set, else the first engine socket something listens on (Podman's,
    Docker's), else the first that exists. A socket file outlives the engine that made it
    (one killed, or stopped by hand), so a dead Podman socket must not hide a live Docker."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    present = [candidate for candidate in candidates if Path(candidate).exists()]
    for candidate in present:
        if _listens(candidate):
            return f"unix://{candidate}"
    return f"unix://{(present or list(candidates))[0]}"


def _listens(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def socket_url(value: str) -> str:
    """A path is a unix socket; a URL (unix://, tcp://, ssh://) is taken as it is."""
    return value if "://" in value else f"unix://{value}"


@dataclass(frozen=True)
class ContainerState:
    """What the engine says of one container."""

    id: str
    name: str
    status: str
    """created, running, paused, restarting, exited, stopped, dead (Docker's and Podman's words)."""
    exit_code: int | None
    oom_killed: bool
    pid: int | None
    started_at: float | None
    finished_at: float | None
    labels: dict[str, str]

    @property
    def has_ended(self) -> bool:
        return self.status in ("exited", "stopped", "dead")

    @property
    def never_started(self) -> bool:
        return self.status in ("created", "configured")


def _timestamp(value: str | None) -> float | None:
    """The engine's RFC 3339 times (nanoseconds; Podman's zero time for "never")."""
    if not value or value.startswith("0001-"):
        return None
    text = value.replace("Z", "+00:00")
    if "." in text:  # Python parses at most microseconds
        head, rest = text.split(".", 1)
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:min(digits, 6)]}{rest[digits:]}"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def container_state(attributes: dict[str, Any]) -> ContainerState:
    state = attributes.get("State") or {}
    status = str(state.get("Status") or "unknown").lower()
    return ContainerState(
        id=attributes["Id"],
        name=str(attributes.get("Name") or "").lstrip("/"),
        status=status,
        exit_code=state.get("ExitCode") if status in ("exited", "stopped", "dead") else None,
        oom_killed=bool(state.get("OOMKilled")),
        pid=state.get("Pid") or None,
        started_at=_timestamp(state.get("StartedAt")),
        finished_at=_timestamp(state.get("FinishedAt")),
        labels=dict((attributes.get("Config") or {}).get("Labels") or {}),
    )


class Engine:
    """A connection to one engine, made on first use and kept."""

    def __init__(self, url: str):
        self.url = socket_url(url)
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import docker
            except ImportError:
                raise EngineError("the docker Python package, which talks to container engines, is not "
                                  "installed: pip install docker") from None
            try:
                self._client = docker.DockerClient(base_url=self.url, version=API_VERSION, timeout=CALL_TIMEOUT)
            except docker.errors.DockerException as error:
                raise EngineError(f"cannot use the container engine at {self.url}: {error}") from None
        return self._client

    def problem(self) -> str | None:
        """Why the engine cannot be used now, in words; None when it answers."""
        if self.url.startswith("unix://") and not Path(self.url.removeprefix("unix://")).exists():
            return (f"no container engine listens at {self.url} (the socket does not exist; start one with "
                    f"`podman system service --time=0 {self.url}` or dockerd)")
        try:
            client = self.client
        except EngineError as error:
            return str(error)
        import docker

        try:
            client.ping()
        except (docker.errors.DockerException, OSError) as error:
            return f"the container engine at {self.url} does not answer ({_short(error)})"
        return None

    def has_image(self, image: str) -> bool:
        import docker

        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as error:
            if error.status_code == 404:
                return False
            raise EngineError(f"the container engine at {self.url} could not look up {image!r}: "
                              f"{_short(error)}") from None
        return True

    def run(self, arguments: dict[str, Any]) -> ContainerState:
        """Creates and starts a container; one that fails to start is removed again."""
        import docker

        try:
            container = self.client.containers.create(**arguments)
        except docker.errors.ImageNotFound:
            raise EngineError(f"the image {arguments['image']!r} is not on the container engine at {self.url}") from None
        except docker.errors.APIError as error:
            raise EngineError(f"the container engine could not create {arguments['name']}: {_short(error)}") from None
        try:
            container.start()
            container.reload()
        except docker.errors.APIError as error:
            self.remove(container.id)
            raise EngineError(f"the container engine could not start {arguments['name']}: {_short(error)}") from None
        return container_state(container.attrs)

    def find(self, labels: dict[str, str]) -> list[ContainerState]:
        """Every container, running or not, carrying all of `labels`."""
        filters = {"label": [f"{key}={value}" for key, value in labels.items()]}
        listed = self.client.api.containers(all=True, filters=filters)
        found = []
        for summary in listed:
            attributes = self.inspect(summary["Id"])
            if attributes is not None:
                found.append(container_state(attributes))
        return found

    def inspect(self, container: str) -> dict[str, Any] | None:
        import docker

        try:
            return self.client.api.inspect_container(container)
        except docker.errors.NotFound:
            return None

    def signal(self, container: str, signal: str) -> None:
        """Sends `signal` to the container's init process; nothing when it is not running."""
        import docker

        try:
            self.client.api.kill(container, signal=signal)
        except docker.errors.APIError as error:  # gone (404) or not running (409)
            if error.status_code not in (404, 409, 500):
                raise

    def wait(self, container: str, timeout: float) -> bool:
        """Whether the container ended within `timeout` seconds (or is gone)."""
        import requests

        import docker

        try:
            self.client.api.wait(container, timeout=timeout)
        except docker.errors.NotFound:
            return True
        except (requests.exceptions.ConnectionError, requests.exceptions.ReadTimeout):
            return False
        return True

    def remove(self, container: str) -> None:
        """Removes a container, killing it first if it runs; removing one that is gone is fine."""
        import docker

        try:
            self.client.api.remove_container(container, force=True, v=True)
        except docker.errors.APIError as error:
            if error.status_code not in (404, 409):  # gone, or its removal already in progress
                raise

    def logs(self, container: str, *, follow: bool) -> Iterator[bytes]:
        """The container's stdout and stderr as written, from its start."""
        return self.client.api.logs(container, stdout=True, stderr=True, stream=True, follow=follow)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def _short(error: BaseException) -> str:
    explanation = getattr(error, "explanation", None)
    return str(explanation or error).strip().splitlines()[0] if str(explanation or error).strip() else type(error).__name__
