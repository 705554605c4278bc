"""Server settings, read once at start from arguments and MLYARD_* environment variables."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from mlyard.config import DEFAULT_HOST, DEFAULT_PORT, Paths, home_directory
from mlyard.spec import parse_duration, parse_memory
from mlyard.storage import DEFAULT_MAX_SNAPSHOT_BYTES


@dataclass(frozen=True)
class ServerSettings:
    paths: Paths
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    database_url: str | None = None
    node_cpus: int | None = None
    """Cores the local node offers to jobs (the first N the server may run on); None: all."""
    node_memory: int | None = None
    """Bytes of memory the local node offers to jobs; None: all physical memory."""
    stop_grace_seconds: float = 10.0
    """Between SIGTERM and SIGKILL when a job is cancelled or fails."""
    max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES
    """The largest code snapshot an upload may be (MLYARD_MAX_SNAPSHOT)."""
    idle_tick_seconds: float = 1.0
    busy_tick_seconds: float = 0.1
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.paths.database}"

    @classmethod
    def from_environment(cls, *, host: str | None = None, port: int | None = None) -> ServerSettings:
        environment = os.environ
        cpus = environment.get("MLYARD_NODE_CPUS")
        memory = environment.get("MLYARD_NODE_MEMORY")
        grace = environment.get("MLYARD_STOP_GRACE")
        snapshot_cap = environment.get("MLYARD_MAX_SNAPSHOT")
        return cls(
            paths=Paths(home_directory()),
            host=host or environment.get("MLYARD_HOST", DEFAULT_HOST),
            port=port or int(environment.get("MLYARD_PORT", DEFAULT_PORT)),
            database_url=environment.get("MLYARD_DATABASE_URL") or None,
            node_cpus=int(cpus) if cpus else None,
            node_memory=parse_memory(memory) if memory else None,
            stop_grace_seconds=parse_duration(grace) if grace else 10.0,
            max_snapshot_bytes=parse_memory(snapshot_cap) if snapshot_cap else DEFAULT_MAX_SNAPSHOT_BYTES,
        )
