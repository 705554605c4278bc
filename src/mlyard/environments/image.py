"""An environment with a container engine: an image built through the engine's
Docker-compatible build API (Docker Engine, or Podman's `podman system service`).

That API (the classic builder docker-py speaks) has no build secrets, and what a RUN line
names stays in the image's history: an index URL holding credentials is refused here, never
put in an image."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlyard.api.environments import EnvironmentRequest
from mlyard.environments.build_policy import BuildPolicy, redact
from mlyard.environments.containerfile import REQUIREMENTS_FILE, containerfile
from mlyard.environments.virtualenv import BuildFailed

REPOSITORY = "localhost/mlyard-env"
CREDENTIALS_REFUSED = ("MLYARD_PIP_INDEX_URL or MLYARD_PIP_EXTRA_INDEX_URLS holds credentials (user:password@), "
                       "which an image would keep in its history; image builds take an index without them (an "
                       "index open to the build host, or a proxy that adds them)")
BUILD_TIMEOUT = 3600


class ImageBuilder:
    kind = "image"

    def __init__(self, client: Any, policy: BuildPolicy | None = None):
        """`client`: a `docker.DockerClient` connected to the engine."""
        self.client = client
        self.policy = policy or BuildPolicy()

    @classmethod
    def connect(cls, url: str, policy: BuildPolicy | None = None) -> ImageBuilder:
        """A client of its own: a build may stream for many minutes, past the replicas'
        client's call timeout."""
        import docker

        return cls(docker.DockerClient(base_url=url, timeout=BUILD_TIMEOUT), policy)

    @staticmethod
    def tag_for(content_hash: str) -> str:
        return f"{REPOSITORY}:{content_hash[:32]}"

    def exists(self, content_hash: str) -> bool:
        import docker.errors

        try:
            self.client.images.get(self.tag_for(content_hash))
            return True
        except docker.errors.ImageNotFound:
            return False

    def build(self, request: EnvironmentRequest, content_hash: str, log: Callable[[str], None]) -> str:
        tag = self.tag_for(content_hash)
        if self.exists(content_hash):
            return tag
        problem = self.policy.base_problem(request.base)
        if problem is None and request.requirements and self.policy.has_credentials():
            problem = CREDENTIALS_REFUSED
        if problem is not None:
            raise BuildFailed(problem)
        with tempfile.TemporaryDirectory(prefix="mlyard-env-") as context:
            # The context holds these two files only: the build sees nothing of the server's.
            (Path(context) / "Dockerfile").write_text(containerfile(request, content_hash, self.policy.pip_options()))
            if request.requirements:
                (Path(context) / REQUIREMENTS_FILE).write_text(request.requirements + "\n")
            # The base must be on the engine already or pullable: labs are often offline.
            for chunk in self.client.api.build(path=context, tag=tag, rm=True, forcerm=True, decode=True):
                if "error" in chunk:
                    raise BuildFailed(redact(f"the image build failed: {str(chunk['error']).strip()}"))
                text = chunk.get("stream") or chunk.get("status")
                if text and text.strip():
                    log(redact(text.rstrip("\n")))
        if not self.exists(content_hash):
            raise BuildFailed(f"the engine finished the build but has no image {tag}")
        return tag

    def remove(self, content_hash: str) -> None:
        import docker.errors

        try:
            self.client.images.remove(self.tag_for(content_hash))
        except docker.errors.APIError:  # in use by a container, or gone already
            pass

    def collect(self, used: set[str]) -> None:
        import docker.errors

        kept = {self.tag_for(content_hash) for content_hash in used}
        try:
            images = self.client.images.list(name=REPOSITORY)
        except docker.errors.APIError:
            return
        for image in images:
            for tag in image.tags:
                if tag.startswith(REPOSITORY + ":") and tag not in kept:
                    try:
                        self.client.images.remove(tag)
                    except docker.errors.APIError:  # in use by a container: the next pass retries
                        pass
