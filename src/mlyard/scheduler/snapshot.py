"""Immutable inputs and outputs of the scheduler.

Everything here is a frozen, slotted, hashable and picklable dataclass so a
snapshot can be shared, cached, compared and sent between processes without
defensive copies. Sequence fields are coerced to tuples and ``Node.labels`` to
a ``Labels`` mapping, so callers may pass lists and dicts but never see them
mutated or aliased afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

# Float arithmetic on requests (e.g. 0.1 * 30) can land a hair above an integer;
# without this tolerance a "3 core" replica would be pinned to 4 cores.
_CORE_TOLERANCE = 1e-9


def whole_cores(cpu: float) -> int:
    """Return the number of dedicated cores a request of ``cpu`` cores is pinned to.

    This is ``ceil(cpu)``, tolerant of float noise just above an integer.
    """
    return max(0, math.ceil(cpu - _CORE_TOLERANCE))


class Labels(Mapping[str, str]):
    """Immutable, hashable, picklable string-to-string mapping for node labels."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items = dict(items or {})

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __reduce__(self) -> tuple[type[Labels], tuple[dict[str, str]]]:
        return Labels, (dict(self._items),)

    def __repr__(self) -> str:
        return f"Labels({self._items!r})"


def _freeze_ids(instance: object, name: str) -> None:
    values = tuple(getattr(instance, name))
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must not contain duplicates: {values}")
    object.__setattr__(instance, name, values)


def _freeze_tuple(instance: object, name: str) -> None:
    object.__setattr__(instance, name, tuple(getattr(instance, name)))


@dataclass(frozen=True, slots=True)
class Node:
    """A machine replicas can be placed on, with its allocatable resources.

    ``cpu_ids`` and ``gpu_ids`` are the ids as the OS numbers them; they must be
    unique within the node. ``labels`` is copied into a ``Labels`` mapping,
    which compares equal to a plain dict with the same items.
    """

    name: str
    address: str
    cpu_ids: tuple[int, ...]
    memory_bytes: int
    gpu_ids: tuple[int, ...] = ()
    labels: Mapping[str, str] = field(default_factory=Labels)

    def __post_init__(self) -> None:
        _freeze_ids(self, "cpu_ids")
        _freeze_ids(self, "gpu_ids")
        if self.memory_bytes < 0:
            raise ValueError(f"node {self.name}: memory_bytes must be >= 0")
        object.__setattr__(self, "labels", Labels(self.labels))


@dataclass(frozen=True, slots=True)
class ReplicaRequest:
    """What one replica of a job needs.

    ``cpu`` may be fractional; the replica is still pinned to
    ``whole_cores(cpu)`` cores that no other replica shares (see ``cores``).
    """

    role: str
    index: int
    cpu: float
    memory_bytes: int
    gpu: int = 0

    def __post_init__(self) -> None:
        if self.cpu < 0 or self.memory_bytes < 0 or self.gpu < 0:
            raise ValueError(f"replica {self.name}: resource requests must be >= 0")

    @property
    def cores(self) -> int:
        """Number of dedicated cores this replica is pinned to."""
        return whole_cores(self.cpu)

    @property
    def name(self) -> str:
        """Human-readable replica name, ``"<role>-<index>"``."""
        return f"{self.role}-{self.index}"


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting to start; all of ``replicas`` must start together (a gang)."""

    job_id: int
    submitted_at: float
    replicas: tuple[ReplicaRequest, ...]
    queue: str = "default"
    priority: int = 0

    def __post_init__(self) -> None:
        _freeze_tuple(self, "replicas")


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """Where one replica runs and exactly which resources it holds there."""

    role: str
    index: int
    node: str
    cpu_ids: tuple[int, ...]
    gpu_ids: tuple[int, ...]
    memory_bytes: int

    def __post_init__(self) -> None:
        _freeze_tuple(self, "cpu_ids")
        _freeze_tuple(self, "gpu_ids")


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job that holds resources; its placements are subtracted from the free view."""

    job_id: int
    placements: tuple[ReplicaPlacement, ...]
    queue: str = "default"
    priority: int = 0
    started_at: float = 0.0

    def __post_init__(self) -> None:
        _freeze_tuple(self, "placements")


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything the scheduler may look at: nodes, running and pending jobs."""

    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()

    def __post_init__(self) -> None:
        _freeze_tuple(self, "nodes")
        _freeze_tuple(self, "running")
        _freeze_tuple(self, "pending")


@dataclass(frozen=True, slots=True)
class StartJob:
    """Decision: start ``job_id`` with exactly these placements.

    There is one placement per replica, in the same order as
    ``PendingJob.replicas``.
    """

    job_id: int
    placements: tuple[ReplicaPlacement, ...]

    def __post_init__(self) -> None:
        _freeze_tuple(self, "placements")


# Becomes a union (StartJob | Preempt | ...) once more decision kinds exist.
Decision = StartJob
