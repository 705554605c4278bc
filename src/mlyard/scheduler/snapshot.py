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


MILLICORES = 1000
"""A core in thousandths: what a request below one core is counted in (``ReplicaRequest.millicores``)."""


def whole_cores(cpu: float) -> int:
    """Return the number of dedicated cores a request of ``cpu`` cores is pinned to.

    This is ``ceil(cpu)``, tolerant of float noise just above an integer, for a request of
    one core or more; a request below one core shares a core instead (``shared_millicores``).
    """
    if 0 < cpu < 1:
        return 0
    return max(0, math.ceil(cpu - _CORE_TOLERANCE))


def shared_millicores(cpu: float) -> int:
    """The share of one core, in thousandths, a request below one core holds; 0 for a whole-core request."""
    if 0 < cpu < 1:
        # Below one core even where it rounds up to a whole one: a share is never a whole core.
        return min(MILLICORES - 1, max(1, round(cpu * MILLICORES)))
    return 0


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
    value = getattr(instance, name)
    if type(value) is not tuple:  # the scheduler builds thousands of these from tuples already
        object.__setattr__(instance, name, tuple(value))


@dataclass(frozen=True, slots=True)
class Node:
    """A machine replicas can be placed on, with its allocatable resources.

    ``cpu_ids`` and ``gpu_ids`` are the ids as the OS numbers them; they must be
    unique within the node; they are stored ascending. ``labels`` is copied into a ``Labels`` mapping,
    which compares equal to a plain dict with the same items.
    """

    name: str
    address: str
    cpu_ids: tuple[int, ...]
    memory_bytes: int
    gpu_ids: tuple[int, ...] = ()
    labels: Mapping[str, str] = field(default_factory=Labels)
    gpu_model: str = ""
    """Model name of the node's GPUs (one model per node), e.g. "A100-80GB"; "" when unknown."""

    def __post_init__(self) -> None:
        _freeze_ids(self, "cpu_ids")
        _freeze_ids(self, "gpu_ids")
        # Kept ascending so free views can copy them without sorting every round.
        object.__setattr__(self, "cpu_ids", tuple(sorted(self.cpu_ids)))
        object.__setattr__(self, "gpu_ids", tuple(sorted(self.gpu_ids)))
        if self.memory_bytes < 0:
            raise ValueError(f"node {self.name}: memory_bytes must be >= 0")
        object.__setattr__(self, "labels", Labels(self.labels))


@dataclass(frozen=True, slots=True)
class ReplicaRequest:
    """What one replica of a job needs.

    ``cpu`` of one core or more is pinned to ``whole_cores(cpu)`` cores that no other
    replica shares (see ``cores``); a fractional one above it (1.5) still gets whole cores.
    Below one core (0.25) the replica holds ``millicores`` thousandths of one core that it
    shares with other such replicas (``cores`` is 0 then).
    """

    role: str
    index: int
    cpu: float
    memory_bytes: int
    gpu: int = 0
    gpu_models: tuple[str, ...] = ()
    """GPU models this replica accepts; empty: any. Only constrains replicas with ``gpu > 0``."""
    cores: int = field(init=False, repr=False, compare=False, hash=False)
    """Number of dedicated cores this replica is pinned to (``whole_cores(cpu)``)."""
    millicores: int = field(init=False, repr=False, compare=False, hash=False)
    """Thousandths of one shared core this replica holds (``shared_millicores(cpu)``); 0: whole cores."""
    shape: tuple[int, float, int, tuple[str, ...]] = field(init=False, repr=False, compare=False, hash=False)
    """``(gpu, cpu held, memory_bytes, gpu_models)``: replicas of equal shape are interchangeable. The
    CPU is ``cores``, or ``millicores / 1000`` (never a whole number) for a share of a core."""

    def __post_init__(self) -> None:
        if self.cpu < 0 or self.memory_bytes < 0 or self.gpu < 0:
            raise ValueError(f"replica {self.name}: resource requests must be >= 0")
        _freeze_tuple(self, "gpu_models")
        # Computed once: placement asks for them many times per round.
        cores, share = whole_cores(self.cpu), shared_millicores(self.cpu)
        object.__setattr__(self, "cores", cores)
        object.__setattr__(self, "millicores", share)
        object.__setattr__(self, "shape", (self.gpu, share / MILLICORES if share else cores, self.memory_bytes,
                                           self.gpu_models))

    @property
    def name(self) -> str:
        """Human-readable replica name, ``"<role>-<index>"``."""
        return f"{self.role}-{self.index}"


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting to start; all of ``replicas`` must start together (a gang).

    ``attained_service`` is what earlier attempts consumed, in service units
    (GPU-seconds, or core-seconds for a job without GPUs; see ``service_rate``);
    ``attained_time`` the wall seconds they ran. Both survive preemption.
    ``queued_since`` is when the job last became pending (None: ``submitted_at``).
    ``max_runtime`` is the user's limit (used by backfill); ``expected_duration`` is
    the true remaining-free run time, known only to a simulator (``srtf-oracle``);
    ``predicted_duration`` is a trusted prediction of the whole run time from the
    history of jobs like it (``predictions.py``), which ``balanced`` orders by.
    An elastic job lists its replicas at maximum size and may start with only the
    first ``min_replicas`` of them; ``serial_fraction`` (0 to 1) says how its
    throughput grows with them (Amdahl's law, ``scaling.py``; None: unknown, taken as
    linear). ``same_node``: every replica on one node; ``same_topology``: a node label, every replica on nodes with one value of it (and
    the label). The job waits, with a reason, rather than be placed otherwise.
    """

    job_id: int
    submitted_at: float
    replicas: tuple[ReplicaRequest, ...]
    queue: str = "default"
    priority: int = 0
    user: str = ""
    attained_service: float = 0.0
    attained_time: float = 0.0
    queued_since: float | None = None
    max_runtime: float | None = None
    expected_duration: float | None = None
    predicted_duration: float | None = None
    min_replicas: int | None = None
    serial_fraction: float | None = None
    same_node: bool = False
    same_topology: str | None = None
    shape: tuple[tuple[int, float, int, tuple[str, ...]], ...] = field(
        init=False, repr=False, compare=False, hash=False)
    """Shapes of the replicas of ``smallest_gang``: equal shapes place alike (without constraints)."""
    gang_key: tuple = field(init=False, repr=False, compare=False, hash=False)
    """``shape``, with the placement constraints when there are any: equal keys place alike."""
    waiting_since: float = field(init=False, repr=False, compare=False, hash=False)
    """When the job last became pending: ``queued_since``, or ``submitted_at`` if never run."""

    def __post_init__(self) -> None:
        _freeze_tuple(self, "replicas")
        if self.min_replicas is not None and not 1 <= self.min_replicas <= len(self.replicas):
            raise ValueError(f"job {self.job_id}: min_replicas must be between 1 and {len(self.replicas)}")
        _check_estimates(self.job_id, self.serial_fraction, self.predicted_duration)
        shape = tuple(replica.shape for replica in self.smallest_gang)
        object.__setattr__(self, "shape", shape)
        constrained = self.same_node or self.same_topology
        object.__setattr__(self, "gang_key", (shape, self.same_node, self.same_topology) if constrained else shape)
        object.__setattr__(self, "waiting_since", self.submitted_at if self.queued_since is None else self.queued_since)

    @property
    def smallest_gang(self) -> tuple[ReplicaRequest, ...]:
        """The replicas the job cannot start without (all of them unless elastic)."""
        return self.replicas if self.min_replicas is None else self.replicas[: self.min_replicas]


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """Where one replica runs and exactly which resources it holds there."""

    role: str
    index: int
    node: str
    cpu_ids: tuple[int, ...]
    gpu_ids: tuple[int, ...]
    memory_bytes: int
    cpu_millicores: int = 0
    """0: ``cpu_ids`` are the replica's own, whole cores. Otherwise the replica holds this many
    thousandths of its one core, ``cpu_ids[0]``, which it shares with other such replicas."""

    def __post_init__(self) -> None:
        # _freeze_tuple, inlined: every start of a round builds these.
        if type(self.cpu_ids) is not tuple:
            object.__setattr__(self, "cpu_ids", tuple(self.cpu_ids))
        if type(self.gpu_ids) is not tuple:
            object.__setattr__(self, "gpu_ids", tuple(self.gpu_ids))

    @property
    def cpu(self) -> float:
        """Cores held: whole ones counted one each, a share of one core as its fraction."""
        return self.cpu_millicores / MILLICORES if self.cpu_millicores else len(self.cpu_ids)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job that holds resources; its placements are subtracted from the free view.

    ``attained_service``/``attained_time`` count earlier attempts only; the current
    one adds ``service_rate * (now - started_at)``. ``stopping`` marks a job whose stop
    (preemption, cancellation, resize) is already under way: it still holds its
    resources but is never chosen as a victim again. An elastic job names its
    ``min_replicas`` and, in ``grow_replicas``, the requests of the replicas it could
    still add (in order), so the scheduler can grow or shrink it; what it adds keeps to
    its placement constraints (``same_node``, ``same_topology``, as ``PendingJob``'s), and
    ``serial_fraction`` is as ``PendingJob``'s.
    ``preemptions``: how often the job was preempted before, weighed against
    ``SchedulerConfig.preemption_budget``.
    """

    job_id: int
    placements: tuple[ReplicaPlacement, ...]
    queue: str = "default"
    priority: int = 0
    started_at: float = 0.0
    submitted_at: float = 0.0
    user: str = ""
    attained_service: float = 0.0
    attained_time: float = 0.0
    max_runtime: float | None = None
    expected_duration: float | None = None
    stopping: bool = False
    min_replicas: int | None = None
    grow_replicas: tuple[ReplicaRequest, ...] = ()
    serial_fraction: float | None = None
    preemptions: int = 0
    same_node: bool = False
    same_topology: str | None = None

    def __post_init__(self) -> None:
        _freeze_tuple(self, "placements")
        _freeze_tuple(self, "grow_replicas")
        _check_estimates(self.job_id, self.serial_fraction, None)


def _check_estimates(job_id: int, serial_fraction: float | None, predicted_duration: float | None) -> None:
    if serial_fraction is not None and not 0.0 <= serial_fraction <= 1.0:
        raise ValueError(f"job {job_id}: serial_fraction must be between 0 and 1, not {serial_fraction}")
    if predicted_duration is not None and not predicted_duration >= 0.0:
        raise ValueError(f"job {job_id}: predicted_duration must be 0 or more, not {predicted_duration}")


@dataclass(frozen=True, slots=True)
class Amounts:
    """An amount of each schedulable resource: GPUs, CPU cores and memory bytes."""

    gpu: float = 0.0
    cpu: float = 0.0
    memory: float = 0.0

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(self.gpu + other.gpu, self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Amounts) -> Amounts:
        return Amounts(self.gpu - other.gpu, self.cpu - other.cpu, self.memory - other.memory)

    @classmethod
    def limit(cls, gpu: float | None = None, cpu: float | None = None, memory: float | None = None) -> Amounts:
        """A quota or borrowing limit; a resource left out (None) is not limited."""
        return cls(*(math.inf if value is None else float(value) for value in (gpu, cpu, memory)))

    def fits_in(self, limit: Amounts) -> bool:
        return self.gpu <= limit.gpu + 1e-9 and self.cpu <= limit.cpu + 1e-9 and self.memory <= limit.memory + 1e-9


UNLIMITED = Amounts(math.inf, math.inf, math.inf)


@dataclass(frozen=True, slots=True)
class Queue:
    """A project's queue: the capacity it is guaranteed and how far it may borrow.

    Limits are ``Amounts.limit(...)``: a resource left out is not limited.
    ``quota`` is the nominal amount the queue may always use (reclaimed from
    borrowers by preemption when needed); None means the queue has no quota of its
    own and lives on borrowed capacity only if ``borrow_limit`` allows, or on the
    whole cluster when both are None. ``borrow_limit`` is how much beyond its quota
    it may use while others leave capacity idle; None: unlimited. ``weight`` scales
    its dominant-resource fair share.
    """

    name: str
    project: str = "default"
    quota: Amounts | None = None
    borrow_limit: Amounts | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ValueError(f"queue {self.name}: weight must be > 0")

    @property
    def nominal(self) -> Amounts:
        return self.quota if self.quota is not None else (UNLIMITED if self.borrow_limit is None else Amounts())

    @property
    def ceiling(self) -> Amounts:
        """The most this queue may ever hold: quota plus borrowing limit."""
        if self.borrow_limit is None:
            return UNLIMITED
        return self.nominal + self.borrow_limit


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything the scheduler may look at: nodes, queues, running and pending jobs,
    and the configuration of the policy that decides. A job naming a queue that is
    not in ``queues`` is in an implicit queue without quota."""

    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    queues: tuple[Queue, ...] = ()
    config: SchedulerConfig = field(default_factory=lambda: SchedulerConfig())

    def __post_init__(self) -> None:
        _freeze_tuple(self, "nodes")
        _freeze_tuple(self, "running")
        _freeze_tuple(self, "pending")
        _freeze_tuple(self, "queues")


@dataclass(frozen=True, slots=True)
class StartJob:
    """Decision: start ``job_id`` with exactly these placements.

    There is one placement per replica, in the same order as
    ``PendingJob.replicas``; an elastic job may get only its first N replicas
    (``min_replicas <= N``).
    """

    job_id: int
    placements: tuple[ReplicaPlacement, ...]
    reason: str = ""

    def __post_init__(self) -> None:
        if type(self.placements) is not tuple:  # _freeze_tuple, inlined: built for every start
            object.__setattr__(self, "placements", tuple(self.placements))


@dataclass(frozen=True, slots=True)
class Preempt:
    """Decision: stop running job ``job_id`` (SIGTERM, grace period, then back to the queue).

    ``for_job`` is the pending job the capacity is freed for; ``reason`` says why in
    words the API shows.
    """

    job_id: int
    reason: str
    for_job: int | None = None


@dataclass(frozen=True, slots=True)
class Resize:
    """Decision: run elastic job ``job_id`` with exactly ``placements`` from now on.

    The placements are the job's whole new set: the ones it keeps (unchanged) plus
    any new ones when it grows, or a prefix of its current ones when it shrinks.
    """

    job_id: int
    placements: tuple[ReplicaPlacement, ...]
    reason: str

    def __post_init__(self) -> None:
        _freeze_tuple(self, "placements")


Decision = StartJob | Preempt | Resize


@dataclass(frozen=True, slots=True)
class Decisions:
    """Everything one scheduling round decided, plus why each other pending job waits.

    ``starts`` are in the order the policy chose them; all starts, preemptions and
    resizes of one round fit together. ``waiting`` maps each pending job that does
    not start to a one-line reason (empty when the config asks for no explanations).
    """

    starts: tuple[StartJob, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    resizes: tuple[Resize, ...] = ()
    waiting: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _freeze_tuple(self, "starts")
        _freeze_tuple(self, "preemptions")
        _freeze_tuple(self, "resizes")

    def __iter__(self) -> Iterator[Decision]:
        yield from self.preemptions
        yield from self.resizes
        yield from self.starts

    def __len__(self) -> int:
        return len(self.starts) + len(self.preemptions) + len(self.resizes)

    def __bool__(self) -> bool:
        return len(self) > 0


from .config import SchedulerConfig
