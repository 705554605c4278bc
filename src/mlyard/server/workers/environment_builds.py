"""Builds environments on the leading server, where jobs start, one at a time.

A queued environment gets its kind (the builder's: an image with a container engine, a
virtualenv without) and its content hash. If that content is built already (by an
environment of another name, or before) it is ready at once and marked `cached`; otherwise it
is built, its output going to `MLYARD_HOME/environments/logs/<name>.log`. Builds left half
done by a server that stopped are queued again at start. Every minute, images and virtualenvs
no environment uses any more are removed.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from pydantic import ValidationError
from sqlalchemy import select

from mlyard.paths import Paths
from mlyard.api.environments import EnvironmentRequest
from mlyard.api.errors import field_errors, summarize
from mlyard.environments.build_policy import BuildPolicy
from mlyard.environments.virtualenv import VirtualenvBuilder
from mlyard.server.workers.build_account import account_for
from mlyard.server.loop import Loop
from mlyard.server.store.db import Database
from mlyard.server.store.rows import EnvironmentRow

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0
COLLECT_EVERY = 60.0


class Builder(Protocol):
    kind: str

    def exists(self, content_hash: str) -> bool: ...

    def build(self, request: EnvironmentRequest, content_hash: str, log: Any) -> str: ...

    def remove(self, content_hash: str) -> None: ...

    def tag_for(self, content_hash: str) -> str: ...

    def collect(self, used: set[str]) -> None:
        """Removes what it built for content hashes not in `used`."""


def builder_for(backend: Any, paths: Paths, policy: BuildPolicy | None = None, *,
                isolate: bool = True) -> Builder | None:
    """An image builder on the local backend's container engine, else a virtualenv builder on
    the local backend; None on a backend that builds nothing (Kubernetes: jobs name images).
    `isolate` (MLYARD_JOB_ISOLATION=namespace): builds on the server's own account see of
    MLYARD_HOME only their virtualenv."""
    if getattr(backend, "name", None) != "local":
        return None
    policy = policy or BuildPolicy()
    containers = getattr(backend, "containers", None)
    if containers is not None and containers.problem() is None:
        from mlyard.environments.image import CREDENTIALS_REFUSED, ImageBuilder

        if policy.has_credentials():
            log.warning("environments with requirements will not build: %s", CREDENTIALS_REFUSED)
        return ImageBuilder.connect(containers.engine.url, policy)
    return VirtualenvBuilder(paths.environments, policy=policy, account=account_for(policy, paths.environments),
                             hide=paths.home if isolate else None)


class EnvironmentBuilds:
    def __init__(self, database: Database, paths: Paths, builder: Builder):
        self.database = database
        self.paths = paths
        self.builder = builder
        self._loop = Loop("mlyard-environments", self._pass, retry_seconds=POLL_SECONDS,
                          failure="environment builds: pass failed")
        self._collected_at = 0.0

    def start(self) -> None:
        with self.database.transaction() as session:
            for row in session.scalars(select(EnvironmentRow).where(EnvironmentRow.status == "building")):
                row.status, row.message = "queued", "queued again: the server building it stopped"
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop(timeout=0)  # a build in progress ends on its own; the next leader queues it again

    def _pass(self) -> float:
        """One build (if any is queued), then at once the next; a short wait when none was."""
        built = self.build_next()
        if time.monotonic() - self._collected_at > COLLECT_EVERY:
            self.collect_garbage()
        return 0.0 if built else POLL_SECONDS

    def build_next(self) -> bool:
        """Takes up the oldest queued environment; returns whether there was one."""
        with self.database.transaction() as session:
            row = session.scalar(select(EnvironmentRow).where(EnvironmentRow.status == "queued")
                                 .order_by(EnvironmentRow.created_at).limit(1).with_for_update())
            if row is None:
                return False
            try:
                request = EnvironmentRequest(name=row.name, project=row.project, base=row.base,
                                             requirements=row.requirements, apt=row.apt)
            except ValidationError as error:
                # Asked before requirements were checked as they are now: never handed to pip.
                row.status, row.message = "failed", f"refused: {summarize(field_errors(error.errors()))}"
                return True
            content_hash = request.content_hash(self.builder.kind)
            row.kind, row.content_hash, row.status, row.message = self.builder.kind, content_hash, "building", None
            name = row.name
        # The engine is asked outside any transaction.
        if self.builder.exists(content_hash):
            self._finish(name, content_hash, "ready", None, cached=True)
            return True
        log_path = self.paths.environment_log(name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(log_path, "w") as output:
                def write(line: str) -> None:
                    output.write(line + "\n")
                    output.flush()

                artifact = self.builder.build(request, content_hash, write)
            self._finish(name, content_hash, "ready", None, artifact=artifact)
        except Exception as error:  # noqa: BLE001 - the user reads it in `mlyard env show`
            self._finish(name, content_hash, "failed", str(error) or type(error).__name__)
        return True

    def _finish(self, name: str, content_hash: str, status: str, message: str | None, *,
                cached: bool = False, artifact: str | None = None) -> None:
        with self.database.transaction() as session:
            row = session.get(EnvironmentRow, name, with_for_update=True)
            # Removed or asked again with other inputs meanwhile: this build answers nobody.
            if row is None or row.status != "building" or row.content_hash != content_hash:
                return
            row.status, row.message, row.cached = status, message, cached
            if status == "ready":
                row.built_at = time.time()
                row.image = artifact or self.builder.tag_for(content_hash)
                if cached:
                    twin = session.scalar(select(EnvironmentRow.name).where(
                        EnvironmentRow.content_hash == content_hash, EnvironmentRow.name != name,
                        EnvironmentRow.status == "ready").limit(1))
                    row.message = (f"same content as environment {twin!r}: its build is reused" if twin
                                   else "built before with the same content: reused")
        log.info("environment %s: %s%s", name, status, " (cached)" if cached else "")

    def collect_garbage(self) -> None:
        self._collected_at = time.monotonic()
        with self.database.transaction() as session:
            used = set(session.scalars(select(EnvironmentRow.content_hash).where(
                EnvironmentRow.content_hash.is_not(None))))
        self.builder.collect(used)
