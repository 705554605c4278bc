"""The contract between the controller and whatever runs replicas (local processes, pods).

Every call returns fast: a backend starts or signals things and reports what it sees; the
controller observes the consequences on its next loop. `stop` is idempotent: stopping what is
already gone is not an error. Each backend renders a launch as plain data first (`dryrun`),
and `launch` submits exactly that.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlyard.errors import MlyardError


@dataclass(frozen=True)
class GpuDescription:
    index: int
    model: str
    memory_bytes: int


@dataclass(frozen=True)
class NodeDescription:
    name: str
    address: str
    cpu_ids: tuple[int, ...]
    memory_bytes: int
    gpus: tuple[GpuDescription, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    """What this node cannot do, in words: shown by `mlyard nodes`."""


@dataclass(frozen=True)
class ReplicaLaunch:
    """Everything needed to start one replica; `env` already holds the rendezvous settings."""

    replica_id: int
    name: str
    rank: int
    node: str
    cpu_ids: tuple[int, ...]
    gpu_ids: tuple[int, ...]
    memory_bytes: int
    command: tuple[str, ...]
    env: Mapping[str, str]
    directory: Path
    snapshot: Path | None
    image: str | None = None
    """The container image a backend that runs containers starts (the job's `image`); None:
    the backend's default. The local backend runs such a replica in a container of its engine,
    and one without an image as a process."""
    secret_names: frozenset[str] = frozenset()
    """The variables of `env` that hold the job's `env_secrets`: a backend that writes the
    environment where others read it (a Pod's spec) passes these by reference instead."""
    processes: int = 1
    """The role's processes per replica: the launcher starts a plain command this many times
    (`runtime/processes.py`)."""
    cpu_millicores: int = 0
    """0: `cpu_ids` are the replica's own cores. Otherwise its share, in thousandths, of its one
    core, which it shares with other replicas: a backend caps it there (a CPU quota) where it can."""


@dataclass(frozen=True)
class DatasetMount:
    """A dataset version the job reads: its tree of the store's files, which every replica sees
    read-only at the same absolute path, and a link to it in the replica's working directory."""

    directory: str
    """The link's path, relative to the working directory."""
    view: Path


@dataclass(frozen=True)
class VolumeMount:
    """A project volume the job reads and writes: the backend's storage named `claim` (a
    directory of `MLYARD_HOME/volumes` locally, a PersistentVolumeClaim on Kubernetes), seen by
    every replica at `path`."""

    name: str
    claim: str
    path: str
    """An absolute mount point (containers and pods), or a link's path relative to the working
    directory that leads to `Backend.volume_directory(claim)`."""


@dataclass(frozen=True)
class AttemptLaunch:
    job_id: int
    attempt: int
    replicas: tuple[ReplicaLaunch, ...]
    owner: str | None = None
    """The mlyard user the job belongs to: a backend that separates users runs it as theirs."""
    private_directories: tuple[Path, ...] = ()
    """The job's own directories (checkpoints, TensorBoard logs): writable by its replicas,
    closed to other users' jobs."""
    datasets: tuple[DatasetMount, ...] = ()
    volumes: tuple[VolumeMount, ...] = ()
    volume_directories: Mapping[str, str] = field(default_factory=dict)
    """Claim → where a replica finds that volume (`Backend.volume_directory`)."""

    @property
    def dataset_links(self) -> dict[str, str]:
        return {mount.directory: str(mount.view) for mount in self.datasets}

    @property
    def volume_links(self) -> dict[str, str]:
        """The links of the volumes mounted at a relative path: that path → the volume's directory."""
        return {mount.path: self.volume_directories[mount.claim] for mount in self.volumes
                if not mount.path.startswith("/")}


@dataclass(frozen=True)
class ReplicaRef:
    """How to find a started replica again, even from a restarted server: what `launch`
    returns and the controller records."""

    replica_id: int
    node: str
    directory: Path
    pid: int | None
    """The process the backend started for the replica (its launcher, a container's first
    process); None where the backend has no process of its own to name (a pod)."""
    pid_started_at: float | None
    """When `pid` started: a reused pid is not taken for the replica's."""


ReplicaState = Literal["pending", "running", "exited", "lost"]


@dataclass(frozen=True)
class ReplicaObservation:
    """`exited`: the launcher recorded an exit code. `lost`: the replica is gone without one
    (killed with SIGKILL, its node vanished)."""

    state: ReplicaState
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    reason: str | None = None
    """Why a replica is in this state, in words, when the backend knows more than the state
    says: `pending` (unschedulable, its image cannot be pulled), `exited` (killed for using too
    much memory), `lost` (its node is gone, evicted). None: nothing to add."""

    @property
    def is_gone(self) -> bool:
        return self.state in ("exited", "lost")


class Backend(abc.ABC):
    name: str
    node_refresh_seconds: float | None = None
    """How often the controller records `nodes()` again; None: once, at its start (a machine's
    resources do not change; a cluster's nodes come and go)."""
    notify: Callable[[], None] | None = None
    """Set by the controller: a backend that learns of a change early (a process exited) may
    call it to have the change observed at once instead of on the next tick."""

    def close(self) -> None:
        """Ends what the backend runs in the background (a watch); replicas keep running."""

    @abc.abstractmethod
    def nodes(self) -> list[NodeDescription]:
        """The nodes this backend runs replicas on and their allocatable resources."""

    def replica_address(self, job_id: int, attempt: int, replica: str, node: str, node_address: str) -> str:
        """How the other replicas of an attempt reach `replica` (MASTER_ADDR, TF_CONFIG's
        hosts): by default its node's address; a backend whose replicas have addresses of
        their own (pods behind a headless Service) names them here."""
        return node_address

    def check_image(self, image: str) -> str | None:
        """Why a job naming `image` cannot run on this backend, in words (asked at submission);
        None when it can, or when only starting it would tell."""
        return None

    def create_volume(self, claim: str, size_bytes: int) -> str | None:
        """Makes the storage of a new volume (idempotent). Returns how the backend holds it to
        `size_bytes` where the storage enforces it ("the ceph.quota.max_bytes attribute"); None
        where mlyard only measures it (`volume_usage`)."""
        raise MlyardError(f"the {self.name} backend keeps no volumes")

    def remove_volume(self, claim: str) -> None:
        """Deletes a volume's storage and everything in it (idempotent)."""
        raise MlyardError(f"the {self.name} backend keeps no volumes")

    def volume_usage(self, claim: str) -> int | None:
        """The bytes a volume holds now; None where the server cannot measure it (a claim whose
        storage class holds it to its size)."""
        return None

    def volume_directory(self, claim: str) -> str:
        """Where a replica finds the volume: the absolute path `MLYARD_VOLUME_<NAME>` names and a
        relative mount's link leads to."""
        raise MlyardError(f"the {self.name} backend keeps no volumes")

    @abc.abstractmethod
    def reserve_ports(self, node: str, count: int) -> list[int]:
        """Ports that were free on `node` just now, for rendezvous (MASTER_PORT, TF_CONFIG)."""

    @abc.abstractmethod
    def dryrun(self, launch: AttemptLaunch) -> list[dict[str, Any]]:
        """The launch as plain data (process arguments, pod objects), one entry per replica.
        Changes nothing: no directory, account or object is created."""

    @abc.abstractmethod
    def launch(self, launch: AttemptLaunch) -> list[ReplicaRef]:
        """Starts every replica of an attempt and returns a reference to each, in the order of
        `launch.replicas`. On error nothing of the attempt is left running."""

    @abc.abstractmethod
    def observe(self, replicas: Sequence[ReplicaRef]) -> dict[int, ReplicaObservation]:
        """The current state of each replica, by replica_id."""

    def stop(self, replicas: Sequence[ReplicaRef], *, force: bool) -> None:
        """SIGTERM (or SIGKILL when `force`) to every replica still there. For replicas already
        gone, only what they may have left behind is cleaned up; stopping twice is harmless."""
        observed = self.observe(replicas)
        present = [ref for ref in replicas if not observed[ref.replica_id].is_gone]
        gone = [ref for ref in replicas if observed[ref.replica_id].is_gone]
        if present:
            self._stop_present(present, force=force)
        if gone:
            self._clean_up_gone(gone)

    @abc.abstractmethod
    def _stop_present(self, replicas: Sequence[ReplicaRef], *, force: bool) -> None:
        """Signals replicas known to be present a moment ago."""

    def _clean_up_gone(self, replicas: Sequence[ReplicaRef]) -> None:
        """Removes what replicas that ended abnormally left behind (orphaned processes)."""
