"""What one scheduling round knows and has decided so far.

``free`` is what is unallocated right now; a job starts only if it fits there.
``future`` is ``free`` plus what stopping jobs (and the victims this round preempts)
will give back; a job that fits only there waits for them, with its spot held in both
views so nobody behind it takes it. The memo fields let identical gang shapes skip
work an earlier job of the same shape already did in this round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .config import SchedulerConfig
from .policies import Policy
from .quotas import QueueBook, held_amounts
from .resources import FreeResources
from .snapshot import (
    Amounts,
    ClusterSnapshot,
    PendingJob,
    Preempt,
    ReplicaPlacement,
    ReplicaRequest,
    Resize,
    RunningJob,
    StartJob,
)

MAX_PREEMPTION_PLANS = 4
"""Preemption searches per round; each copies the free view, so a huge queue of
blocked jobs cannot make one round slow. The rest try again next round."""

MAX_PREEMPTION_ATTEMPTS = 8
"""Blocked jobs, in policy order, that look for victims at all in one round."""


@dataclass
class Reservation:
    """Backfill: where and when the first blocked job will start at the latest."""

    job_id: int
    shadow: float
    extra: FreeResources


@dataclass
class Victim:
    job: RunningJob
    release: tuple[ReplicaPlacement, ...]
    keep: tuple[ReplicaPlacement, ...] | None  # None: preempt whole; else shrink to these
    why: str  # "policy" or "reclaim": why this job may be taken (worded at commit time)


@dataclass
class RoundState:
    snapshot: ClusterSnapshot
    now: float
    policy: Policy
    config: SchedulerConfig
    free: FreeResources
    book: QueueBook
    future: FreeResources | None = None
    starts: list[StartJob] = field(default_factory=list)
    preemptions: dict[int, Preempt] = field(default_factory=dict)
    resizes: dict[int, Resize] = field(default_factory=dict)
    waiting: dict[int, str] = field(default_factory=dict)
    taken: set[int] = field(default_factory=set)
    plans_left: int = MAX_PREEMPTION_PLANS
    attempts_left: int = MAX_PREEMPTION_ATTEMPTS
    resource_waiters: int = 0
    reservation: Reservation | None = None
    _capacity: tuple[int, int, int] | None = None
    version: int = 0
    # Free views only shrink during a round (starts and holds take from them), so a
    # gang shape that did not fit keeps not fitting: identical gangs skip the search.
    failed_now: set[tuple] = field(default_factory=set)
    failed_later: set[tuple] = field(default_factory=set)
    failed_plans: set[tuple] = field(default_factory=set)
    stopping_ids: list[int] | None = None
    never: dict[tuple, str | None] = field(default_factory=dict)
    demands: dict[tuple, Amounts] = field(default_factory=dict)
    deferred: list[tuple[int, tuple, Sequence[ReplicaRequest], str]] = field(default_factory=list)
    eligible: dict[float, tuple[int, list]] = field(default_factory=dict)
    victim_cache: dict[tuple, tuple[list, list[int]]] = field(default_factory=dict)
    top_victim_class: float = -math.inf
    future_generation: int = 0
    reclaim_pool: list[RunningJob] | None = None
    victim_pool: list[tuple[tuple[float, ...], float, RunningJob]] | None = None

    quota_answers: dict[tuple, tuple[int, str | None]] = field(default_factory=dict)
    # Jobs not yet considered, per gang shape, and how many of those shapes might still fit.
    remaining: dict[tuple, int] = field(default_factory=dict)
    open_shapes: int = 0

    def passed(self, shape: tuple) -> None:
        self.remaining[shape] -= 1
        if self.remaining[shape] == 0 and shape not in self.failed_now:
            self.open_shapes -= 1

    def mark_failed(self, shape: tuple) -> None:
        if shape not in self.failed_now:
            self.failed_now.add(shape)
            if self.remaining.get(shape, 0) > 0:
                self.open_shapes -= 1

    # ----------------------------------------------------------------- views
    def future_view(self) -> FreeResources:
        if self.future is None:
            future = self.free.copy()
            for job in self.snapshot.running:
                if job.stopping:
                    future.release(job.placements)
            self.future = future
        return self.future

    def commit_start(self, job: PendingJob, placements: tuple[ReplicaPlacement, ...], reason: str) -> None:
        # place_gang chose these from ``free`` itself: valid by construction, no re-check.
        self.free.take_available(placements)
        if self.future is not None:
            self.future.take_available(placements)
        if self.reservation is not None:
            self.reservation.extra.take_available(placements)
        demand = self.demands.get(job.shape) if len(placements) == len(job.shape) else None
        self.book.add(job.queue, job.user, demand if demand is not None else held_amounts(placements))
        self.starts.append(StartJob(job.job_id, placements, reason))
        self.version += 1

    def hold_future(self, placements: tuple[ReplicaPlacement, ...]) -> None:
        """Keep a spot that frees up later for a waiting job: nobody behind it gets it."""
        self.future_view().reserve(placements)
        self.free.take_available(placements)
        if self.reservation is not None:
            self.reservation.extra.take_available(placements)
        self.version += 1

    def largest_free(self) -> tuple[int, int, int]:
        """(most free GPUs, cores, memory bytes any one node has): reasons are worded once per round."""
        nodes = self.free.nodes
        return (self.free.max_gpus(), max((len(node.cpu_ids) for node in nodes), default=0),
                max((node.memory_bytes for node in nodes), default=0))
