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
from .placement import place_gang
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
    # Gang shapes (numbered as in ``engine.decide_round``) that did not fit in ``extra``:
    # it only loses resources, so they never will this round.
    failed_shapes: set[int] = field(default_factory=set)


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
    # Starts not yet taken from ``future``. Many of a round's starts (a third in the
    # benchmark) come after the last time anything reads it, so they are taken from it
    # only when it is next read (``future_view``), in the order they were made.
    future_takes: list[tuple[ReplicaPlacement, ...]] = field(default_factory=list)
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
    version: int = 0  # bumped whenever ``free`` changes
    _largest: tuple[int, tuple[int, int, int]] | None = None  # (version, largest_free())
    # Free views only shrink during a round (starts and holds take from them), so a
    # gang shape that did not fit keeps not fitting: identical gangs skip the search.
    # Shapes are numbered per round (see ``engine.decide_round``).
    failed_now: set[int] = field(default_factory=set)
    # Jobs whose queue stays within its quota if they start (see ``engine._within_quota_first``):
    # only they go first and only they may reclaim.
    within_quota: set[int] = field(default_factory=set)
    failed_later: set[int] = field(default_factory=set)
    failed_plans: set[tuple] = field(default_factory=set)
    stopping_ids: list[int] | None = None
    never: dict[int, str | None] = field(default_factory=dict)
    demands: dict[int, Amounts] = field(default_factory=dict)
    # Jobs waiting for resources, worded at the end (see ``defer``): their ids per
    # (shape, better jobs ahead), a job of each shape, and the tails of a few reasons.
    deferred: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    deferred_jobs: dict[int, PendingJob] = field(default_factory=dict)
    deferred_tails: dict[int, str] = field(default_factory=dict)
    # Deferred jobs that hold no placeholder in ``waiting`` yet, in order.
    unplaced: list[int] = field(default_factory=list)
    # Every deferral in order, kept only when job ids repeat (the last one must win).
    deferred_order: list[tuple[int, tuple[int, int], str]] | None = None
    # Bumped whenever something ``engine._quickly_blocked`` reads may have changed.
    epoch: int = 0
    eligible: dict[float, tuple[int, list]] = field(default_factory=dict)
    # Per (class, reclaiming queue): the (len(taken), future_generation) they hold for, the
    # victims and what would be free with them gone (see ``preemption._candidates``).
    victim_cache: dict[tuple, tuple[tuple[int, int], list, list[int]]] = field(default_factory=dict)
    top_victim_class: float = -math.inf
    future_generation: int = 0
    reclaim_pool: list[RunningJob] | None = None
    victim_pool: list[tuple[tuple[float, ...], float, RunningJob]] | None = None
    # Per reason, the victim record that takes each running job whole, and what each running
    # job holds; both keyed by id() of the running job (job ids of a stale snapshot may repeat).
    whole_victims: dict[str, dict[int, Victim]] = field(default_factory=dict)
    held_by_run: dict[int, tuple[int, int, int]] = field(default_factory=dict)

    # Quota answers per (queue, shape), with the queue's version in the book they hold for.
    quota_answers: dict[tuple[str, int], tuple[int, str | None]] = field(default_factory=dict)
    # Jobs not yet considered, per gang shape, and how many of those shapes might still fit.
    remaining: list[int] = field(default_factory=list)
    open_shapes: int = 0
    _pending_by_id: dict[int, PendingJob] | None = None

    def pending_by_id(self) -> dict[int, PendingJob]:
        """The snapshot's pending jobs by id (the last of any duplicates), built on first use."""
        if self._pending_by_id is None:
            self._pending_by_id = {job.job_id: job for job in self.snapshot.pending}
        return self._pending_by_id

    def may_reclaim(self, job: PendingJob, demand: Amounts) -> bool:
        return job.job_id in self.within_quota and self.book.within_nominal(job.queue, demand)

    def mark_failed(self, shape: int) -> None:
        if shape not in self.failed_now:
            self.failed_now.add(shape)
            if self.remaining[shape] > 0:
                self.open_shapes -= 1

    def defer(self, job: PendingJob, shape: int, better_ahead: int, tail: str = "") -> None:
        """Word ``job``'s reason once the round is over, with ``better_ahead`` jobs counted ahead
        of it and ``tail`` appended. Ids are kept per (shape, better_ahead), whose jobs share
        one text, rather than a record per job: thousands of records living through the round
        would mostly be work for the garbage collector."""
        self.deferred_bucket(shape, better_ahead, job).append(job.job_id)
        if tail:
            self.deferred_tails[job.job_id] = tail
        if self.deferred_order is not None:
            self.deferred_order.append((job.job_id, (shape, better_ahead), tail))

    def deferred_bucket(self, shape: int, better_ahead: int, job: PendingJob) -> list[int]:
        """The ids deferred with ``shape`` and ``better_ahead`` (``job`` is one of that shape)."""
        bucket = self.deferred.get((shape, better_ahead))
        if bucket is None:
            bucket = self.deferred[(shape, better_ahead)] = []
            self.deferred_jobs.setdefault(shape, job)
        return bucket

    def place(self, free: FreeResources, job: PendingJob | RunningJob,
              gang: Sequence[ReplicaRequest]) -> tuple[ReplicaPlacement, ...] | None:
        """``place_gang`` for ``job``'s ``gang`` in ``free``, keeping the job's placement constraints."""
        return place_gang(free, gang, topology_key=self.config.topology_key, same_node=job.same_node,
                          same_topology=job.same_topology)

    # ----------------------------------------------------------------- views
    def future_view(self) -> FreeResources:
        if self.future is None:
            future = self.free.copy()
            for job in self.snapshot.running:
                if job.stopping:
                    future.release(job.placements)
            self.future = future
        elif self.future_takes:  # in the order they were made: the view ends up the same
            for placements in self.future_takes:
                self.future.take_available(placements)
            self.future_takes.clear()
        return self.future

    def take_from_future(self, placements: tuple[ReplicaPlacement, ...]) -> None:
        """Take ``placements`` from the future view (if there is one yet) before it is next read."""
        if self.future is not None:
            self.future_takes.append(placements)

    def commit_start(self, job: PendingJob, placements: tuple[ReplicaPlacement, ...], reason: str,
                     demand: Amounts | None = None) -> None:
        """``demand``: what ``placements`` hold, when the caller knows it already."""
        # place_gang chose these from ``free`` itself: valid by construction, no re-check.
        self.free.take_available(placements)
        self.take_from_future(placements)
        if self.reservation is not None:
            self.reservation.extra.take_available(placements)
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
        # Every gang shape's reason asks, and the free view no longer changes by then.
        if self._largest is None or self._largest[0] != self.version:
            nodes = self.free.nodes
            self._largest = (self.version, (
                self.free.max_gpus(), max((len(node.cpu_ids) for node in nodes), default=0),
                max((node.memory_bytes for node in nodes), default=0)))
        return self._largest[1]
