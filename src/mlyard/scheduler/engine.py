"""One scheduling round: order, admit, place, preempt, backfill, grow — and explain.

The round keeps two views of free resources. ``free`` is what is unallocated
right now; a job starts only if it fits there. ``future`` is ``free`` plus what
stopping jobs (and the victims this round preempts) will give back; a job that
fits only there waits for them, with its spot held in both views so nobody
behind it takes it. Quotas are checked before placement (``quotas.QueueBook``);
the policy (``policies.py``) decides the order and who may preempt whom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .config import SchedulerConfig
from .placement import place_gang, unschedulable_reason
from .policies import POLICY_TABLE, Policy
from .quotas import QueueBook, held_amounts, reclaim_victim_order, request_amounts
from .resources import FreeResources
from .snapshot import (
    Amounts,
    ClusterSnapshot,
    Decisions,
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

_GIB = 1 << 30


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _job_list(ids: Sequence[int]) -> str:
    if len(ids) == 1:
        return f"job {ids[0]}"
    shown = ", ".join(str(job_id) for job_id in ids[:5])
    return f"jobs {shown}" + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(0, round(seconds))}s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)}m"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


@dataclass
class _Reservation:
    """Backfill: where and when the first blocked job will start at the latest."""

    job_id: int
    shadow: float
    extra: FreeResources


@dataclass
class _Victim:
    job: RunningJob
    release: tuple[ReplicaPlacement, ...]
    keep: tuple[ReplicaPlacement, ...] | None  # None: preempt whole; else shrink to these
    why: str  # "policy" or "reclaim": why this job may be taken (worded at commit time)


@dataclass
class _Round:
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
    reservation: _Reservation | None = None
    _largest: tuple[int, int, int, int] | None = None
    _capacity: tuple[int, int, int] | None = None
    _largest_version: int = -1
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

    def largest_free(self) -> tuple[int, int, int, int]:
        """(most free GPUs, cores, bytes on one node, most cores on a node with free GPUs), cached per change."""
        if self._largest is None or self._largest_version != self.version:
            nodes = self.free.nodes
            self._largest = (
                self.free.max_gpus(),
                max((len(node.cpu_ids) for node in nodes), default=0),
                max((node.memory_bytes for node in nodes), default=0),
                0,
            )
            self._largest_version = self.version
        return self._largest


def decide_round(snapshot: ClusterSnapshot, now: float) -> Decisions:
    config = snapshot.config
    policy = POLICY_TABLE[config.policy]
    state = _Round(snapshot, now, policy, config, FreeResources.from_snapshot(snapshot), QueueBook(snapshot))
    ordered = policy.order(snapshot.pending, state.book, now, config)
    head: PendingJob | None = None
    waiting_ahead = 0
    class_of_run = math.nan
    waiting_in_class = 0
    for job in snapshot.pending:
        state.remaining[job.shape] = state.remaining.get(job.shape, 0) + 1
    state.open_shapes = len(state.remaining)
    reclaim_possible = any(queue.quota is not None for queue in snapshot.queues)
    for position, (job, klass) in enumerate(ordered):
        if head is not None or (position % 16 == 0 and _exhausted(state, reclaim_possible, klass)):
            # Strict FIFO's first job in line is blocked, or nothing pending fits any more
            # and no preemption is left to try: the rest waits and only needs its reasons,
            # which are cheap to give in bulk.
            _explain_rest(state, ordered[position:], head, waiting_ahead, class_of_run, waiting_in_class)
            break
        if klass != class_of_run:
            class_of_run, waiting_in_class = klass, 0
        outcome = _consider(state, job, klass, head, waiting_ahead - waiting_in_class)
        state.passed(job.shape)
        if outcome != "started":
            waiting_ahead += 1
            waiting_in_class += 1
            if policy.strict and head is None and outcome == "blocked":
                head = job
    if state.resource_waiters == 0:
        _grow_elastic(state)
    texts: dict[tuple, str] = {}
    for job_id, shape, gang, suffix in state.deferred:
        text = texts.get(shape)
        if text is None:
            text = texts[shape] = _resource_reason(state, gang)
        state.waiting[job_id] = text + suffix
    return Decisions(
        starts=tuple(state.starts),
        preemptions=tuple(state.preemptions.values()),
        resizes=tuple(state.resizes.values()),
        waiting=state.waiting if config.explain else {},
    )


def _explain_rest(state: _Round, rest: Sequence[tuple[PendingJob, float]], head: PendingJob | None,
                  waiting_ahead: int, class_of_run: float, waiting_in_class: int) -> None:
    state.resource_waiters += 1
    config, book = state.config, state.book
    if not config.explain:
        return
    phrase = state.policy.ahead_phrase
    for job, klass in rest:
        if klass != class_of_run:
            class_of_run, waiting_in_class = klass, 0
        better_ahead = waiting_ahead - waiting_in_class
        waiting_ahead += 1
        waiting_in_class += 1
        if head is not None:
            state.waiting[job.job_id] = f"behind job {head.job_id}, first in line and waiting for resources"
            continue
        gang = job.smallest_gang
        shape = job.shape
        demand = state.demands.get(shape)
        if demand is None:
            demand = state.demands[shape] = request_amounts(gang)
        quota = book.over_quota(job.queue, demand)
        if quota is not None:
            state.waiting[job.job_id] = quota
            continue
        never = _never_fits(state, gang, demand, shape)
        if never is not None:
            state.waiting[job.job_id] = f"can never run on this cluster: {never}"
            continue
        suffix = f"; behind {_count(better_ahead, 'job')} {phrase}" if better_ahead > 0 else ""
        state.deferred.append((job.job_id, shape, gang, suffix))


def _exhausted(state: _Round, reclaim_possible: bool, klass: float) -> bool:
    # Free resources only shrink during a round: once every gang shape still to come
    # has failed to fit, none of those jobs can start any more.
    if state.open_shapes > 0:
        return False
    if state.attempts_left <= 0 or state.plans_left <= 0:
        return True
    if reclaim_possible:
        return False
    if not state.policy.preemptive:
        return True
    # Classes only grow along the order: once this job outranks no running job, nobody after it does.
    pool = _victim_pool(state)
    return not pool or klass >= state.top_victim_class


def _quickly_blocked(state: _Round, job: PendingJob, klass: float, shape: tuple) -> bool:
    """True when an earlier job of the same shape settled everything this one could try:
    it cannot fit now, cannot wait for stopping jobs, and has no preemption left to try."""
    if state.never.get(shape) is not None or (state.policy.backfill and state.reservation is None):
        return False
    if shape not in state.failed_later and (state.taken or state.stopping_ids is None or state.stopping_ids):
        return False
    return (state.plans_left <= 0 or state.attempts_left <= 0
            or (shape, klass, job.queue) in state.failed_plans)


def _consider(state: _Round, job: PendingJob, klass: float, head: PendingJob | None, better_ahead: int) -> str:
    """Start, hold a spot for, or explain one pending job; returns "started", "quota" or "blocked"."""
    policy, config = state.policy, state.config
    gang = job.smallest_gang
    if head is not None:  # strict FIFO: the first blocked job holds everyone behind it
        state.waiting[job.job_id] = f"behind job {head.job_id}, first in line and waiting for resources"
        return "blocked"
    shape = job.shape
    demand = state.demands.get(shape)
    if demand is None:
        demand = state.demands[shape] = request_amounts(gang)
    # The quota answer for a queue and a shape holds until the book changes.
    quota_key = (job.queue, shape)
    known = state.quota_answers.get(quota_key)
    if known is not None and known[0] == state.book.version:
        quota = known[1]
    else:
        quota = state.book.over_quota(job.queue, demand)
        state.quota_answers[quota_key] = (state.book.version, quota)
    if quota is not None:
        state.waiting[job.job_id] = quota
        return "quota"
    if shape in state.failed_now and _quickly_blocked(state, job, klass, shape):
        state.resource_waiters += 1
        state.waiting[job.job_id] = ""
        if config.explain:
            suffix = f"; behind {_count(better_ahead, 'job')} {policy.ahead_phrase}" if better_ahead > 0 else ""
            state.deferred.append((job.job_id, shape, gang, suffix))
        return "blocked"
    placements = None
    if shape not in state.failed_now:
        placements = place_gang(state.free, gang, topology_key=config.topology_key)
        if placements is None:
            state.mark_failed(shape)
    if placements is not None and state.reservation is not None:
        placements = _backfill_placement(state, job, gang)
        if placements is None:
            shadow = state.reservation.shadow
            when = "" if math.isinf(shadow) else f", reserved to start in ~{_duration(shadow - state.now)}"
            state.waiting[job.job_id] = (
                f"would delay job {state.reservation.job_id}{when}; backfills once it cannot"
            )
            state.resource_waiters += 1
            return "blocked"
    if placements is not None:
        state.commit_start(job, placements, "")
        return "started"
    never = _never_fits(state, gang, demand, shape)
    if never is not None:
        state.waiting[job.job_id] = f"can never run on this cluster: {never}"
        return "quota"
    state.resource_waiters += 1
    suffix = ""
    if better_ahead > 0 and config.explain:
        suffix = f"; behind {_count(better_ahead, 'job')} {policy.ahead_phrase}"
    if _wait_for_stopping(state, job, gang, shape) or _try_preemption(state, job, klass, gang, demand, shape):
        return "blocked"
    if policy.backfill and state.reservation is None:
        state.reservation = _reserve(state, job, gang)
        if not math.isinf(state.reservation.shadow):
            suffix += f"; first in line, reserved to start in ~{_duration(state.reservation.shadow - state.now)}"
        else:
            suffix += "; first in line"
    # Worded once the round is over: the reason describes what is left free then.
    state.waiting[job.job_id] = ""
    if config.explain:
        state.deferred.append((job.job_id, shape, gang, suffix))
    return "blocked"


def _wait_for_stopping(state: _Round, job: PendingJob, gang: Sequence[ReplicaRequest], shape: tuple) -> bool:
    if shape in state.failed_later:
        return False
    if state.stopping_ids is None:
        state.stopping_ids = [run.job_id for run in state.snapshot.running if run.stopping]
    if not state.stopping_ids and not state.taken:
        return False
    stopping = state.stopping_ids + sorted(state.taken)
    placements = place_gang(state.future_view(), gang, topology_key=state.config.topology_key)
    if placements is None:
        state.failed_later.add(shape)
        return False
    state.hold_future(placements)
    state.book.add(job.queue, job.user, held_amounts(placements))
    state.waiting[job.job_id] = f"waiting for {_job_list(stopping)} to stop"
    return True


# --------------------------------------------------------------------- preemption
def _victims(state: _Round, job: PendingJob, klass: float, demand) -> list[_Victim]:
    """Candidates in the order they are taken: shrinking elastic jobs first, then
    whole jobs the policy ranks below this one, then quota borrowers to reclaim from."""
    policy, now, config = state.policy, state.now, state.config
    by_policy: list[tuple[tuple[float, ...], RunningJob]] = []
    if policy.preemptive:
        _victim_pool(state)
        memo = state.eligible.get(klass)
        if memo is None or memo[0] != len(state.taken):
            memo = (len(state.taken), [(key, run) for key, theirs, run in state.victim_pool
                                       if run.job_id not in state.taken
                                       and policy.may_preempt(klass, run, theirs, now, config)])
            state.eligible[klass] = memo
        by_policy = memo[1]
    whole = [run for _, run in by_policy]
    victims: list[_Victim] = [
        _Victim(run, run.placements[run.min_replicas :], run.placements[: run.min_replicas], "policy")
        for run in whole if run.min_replicas is not None and len(run.placements) > run.min_replicas
    ]
    victims += [_Victim(run, run.placements, None, "policy") for run in whole]
    if state.book.within_nominal(job.queue, demand):
        seen = {run.job_id for run in whole}
        borrowers = [run for run in reclaim_victim_order(state.book, state.snapshot.running)
                     if run.job_id not in seen and run.job_id not in state.taken and run.queue != job.queue]
        shrinkable = [_Victim(run, run.placements[run.min_replicas :], run.placements[: run.min_replicas], "reclaim")
                      for run in borrowers if run.min_replicas is not None and len(run.placements) > run.min_replicas]
        victims = shrinkable + victims + [_Victim(run, run.placements, None, "reclaim") for run in borrowers]
    return victims


def _victim_pool(state: _Round) -> list[tuple[tuple[float, ...], float, RunningJob]]:
    """Running jobs that are not stopping, with their class, least important first."""
    if state.victim_pool is None:
        policy = state.policy
        runs = [run for run in state.snapshot.running if not run.stopping]
        classes = policy.running_classes(runs, state.now, state.config)
        pool = [(policy.victim_key(run, theirs), theirs, run) for run, theirs in zip(runs, classes, strict=True)]
        pool.sort(key=lambda item: item[0])
        state.victim_pool = pool
        state.top_victim_class = max((theirs for _, theirs, _ in pool), default=-math.inf)
    return state.victim_pool


def _try_preemption(state: _Round, job: PendingJob, klass: float, gang: Sequence[ReplicaRequest], demand,
                    shape: tuple) -> bool:
    memo = (shape, klass, job.queue)
    if state.plans_left <= 0 or state.attempts_left <= 0 or memo in state.failed_plans:
        return False
    state.attempts_left -= 1
    reclaim = job.queue if state.book.within_nominal(job.queue, demand) else None
    cache_key = (klass, reclaim, len(state.taken), state.future_generation)
    cached = state.victim_cache.get(cache_key)
    if cached is None:
        victims = _victims(state, job, klass, demand)
        have = list(state.future_view().totals())
        for victim in victims:
            if victim.keep is None:
                held = held_amounts(victim.release)
                have = [have[0] + int(held.gpu), have[1] + int(held.cpu), have[2] + int(held.memory)]
        cached = state.victim_cache[cache_key] = (victims, have)
    victims, have = cached
    if not victims:
        state.failed_plans.add(memo)
        return False
    future = state.future_view()
    need = (int(demand.gpu), int(demand.cpu), int(demand.memory))
    if not all(n <= h for n, h in zip(need, have, strict=True)):
        state.failed_plans.add(memo)
        return False
    state.plans_left -= 1
    widest = max(replica.gpu for replica in gang)
    trial = future.copy()
    chosen: list[_Victim] = []
    placements = None
    reclaimed: dict[str, object] = {}
    book = state.book
    for victim in victims:
        run = victim.job
        if victim.keep is None and any(c.job is run and c.keep is None for c in chosen):
            continue
        if victim.why == "reclaim" and victim.keep is None:
            # A reclaim may only take from a queue while it is still over its quota.
            used = reclaimed.get(run.queue, book.used(run.queue))
            if used.fits_in(book.queue(run.queue).nominal):  # type: ignore[union-attr]
                continue
            reclaimed[run.queue] = used - held_amounts(run.placements)  # type: ignore[operator]
        release = victim.release
        if victim.keep is None:
            shrunk = next((c for c in chosen if c.job is run), None)
            if shrunk is not None:  # shrinking was not enough: it goes whole after all
                chosen.remove(shrunk)
                release = run.placements[: run.min_replicas or 0]
        trial.release(release)
        chosen.append(victim)
        if all(n <= h for n, h in zip(need, trial.totals(), strict=True)) and trial.max_gpus() >= widest:
            placements = place_gang(trial, gang, topology_key=state.config.topology_key)
            if placements is not None:
                break
    if placements is None:
        state.failed_plans.add(memo)
        return False
    # Reprieve: give back victims (most important first) the job can do without.
    if 1 < len(chosen) <= 16:
        for victim in list(reversed(chosen[:-1])):
            trial.take_available(victim.release)
            again = place_gang(trial, gang, topology_key=state.config.topology_key)
            if again is None:
                trial.release(victim.release)
            else:
                chosen.remove(victim)
                placements = again
    trial.reserve(placements)
    state.future = trial
    state.future_generation += 1
    state.failed_later.clear()  # the victims' resources are in the future view now
    state.free.take_available(placements)
    if state.reservation is not None:
        state.reservation.extra.take_available(placements)
    state.version += 1
    # Victims stay in the quota book: they hold their resources until they have stopped.
    for victim in chosen:
        run = victim.job
        state.taken.add(run.job_id)
        why = (f"queue {job.queue} reclaims its quota" if victim.why == "reclaim"
               else f"the {state.policy.name} policy ranks job {job.job_id} higher")
        if victim.keep is None:
            state.preemptions[run.job_id] = Preempt(run.job_id, f"preempted for job {job.job_id}: {why}", job.job_id)
        else:
            state.resizes[run.job_id] = Resize(
                run.job_id, victim.keep, f"shrunk to {_count(len(victim.keep), 'replica')} for job {job.job_id}: {why}",
            )
    state.book.add(job.queue, job.user, held_amounts(placements))
    state.waiting[job.job_id] = (
        f"waiting for {_job_list(sorted(v.job.job_id for v in chosen))} to stop (preempted or shrunk for it)"
    )
    return True


# --------------------------------------------------------------------- backfill
def _reserve(state: _Round, job: PendingJob, gang: Sequence[ReplicaRequest]) -> _Reservation:
    """EASY backfill: the earliest time the blocked head job surely fits, from max_runtime."""
    trial = state.future_view().copy() if state.future is not None else state.free.copy()
    ends = []
    for run in state.snapshot.running:
        if run.job_id in state.taken:
            continue
        end = math.inf if run.max_runtime is None else run.started_at + run.max_runtime
        ends.append((end, run.job_id, run))
    pending = {job.job_id: job for job in state.snapshot.pending}
    for start in state.starts:  # started earlier in this round
        limit = pending[start.job_id].max_runtime
        ends.append((math.inf if limit is None else state.now + limit, start.job_id,
                     RunningJob(start.job_id, start.placements)))
    ends.sort(key=lambda item: (item[0], item[1]))
    shadow = math.inf
    placements = None
    need = request_amounts(gang)
    for end, _, run in ends:
        trial.release(run.placements)
        totals = trial.totals()
        if math.isinf(end) and placements is None:
            shadow = math.inf
        if totals[0] >= need.gpu and totals[1] >= need.cpu and totals[2] >= need.memory:
            placements = place_gang(trial, gang, topology_key=state.config.topology_key)
            if placements is not None:
                shadow = max(end, state.now)
                break
    extra = state.free.copy()
    if placements is not None:
        extra.take_available(placements)
    return _Reservation(job.job_id, shadow, extra)


def _backfill_placement(state: _Round, job: PendingJob, gang: Sequence[ReplicaRequest]):
    reservation = state.reservation
    assert reservation is not None
    if job.max_runtime is not None and state.now + job.max_runtime <= reservation.shadow:
        return place_gang(state.free, gang, topology_key=state.config.topology_key)
    # Runs past the shadow time: only resources the reserved job will not need.
    return place_gang(reservation.extra, gang, topology_key=state.config.topology_key)


# --------------------------------------------------------------------- elastic
def _grow_elastic(state: _Round) -> None:
    """Nobody waits for resources: elastic jobs grow into what is idle, one replica at a time."""
    for position, start in enumerate(state.starts):
        pending = next((job for job in state.snapshot.pending if job.job_id == start.job_id), None)
        if pending is None or pending.min_replicas is None:
            continue
        added = _add_replicas(state, pending.queue, pending.user, pending.replicas[len(start.placements):])
        if added:
            state.starts[position] = StartJob(start.job_id, start.placements + added,
                                              f"started with {len(start.placements) + len(added)} replicas")
    for run in state.snapshot.running:
        if run.stopping or run.job_id in state.taken or not run.grow_replicas:
            continue
        added = _add_replicas(state, run.queue, run.user, run.grow_replicas)
        if added:
            state.resizes[run.job_id] = Resize(
                run.job_id, run.placements + added,
                f"grown to {_count(len(run.placements) + len(added), 'replica')} into idle capacity",
            )


def _add_replicas(state: _Round, queue: str, user: str,
                  extra: Sequence[ReplicaRequest]) -> tuple[ReplicaPlacement, ...]:
    added: list[ReplicaPlacement] = []
    for replica in extra:
        amounts = request_amounts((replica,))
        if state.book.over_quota(queue, amounts) is not None:
            break
        placement = place_gang(state.free, (replica,))
        if placement is None:
            break
        state.free.reserve(placement)
        if state.future is not None:
            state.future.take_available(placement)
        state.book.add(queue, user, amounts)
        added.extend(placement)
    return tuple(added)


# --------------------------------------------------------------------- reasons
def _never_fits(state: _Round, gang: Sequence[ReplicaRequest], demand, shape: tuple) -> str | None:
    """Why the gang cannot run even on the empty cluster (e.g. a node left), or None.

    Cheap checks on the cluster's largest node and totals first; the full packing
    check runs only for the few jobs that pass them yet do not fit right now.
    """
    if state._capacity is None:
        nodes = state.snapshot.nodes
        state._capacity = (
            max((len(node.gpu_ids) for node in nodes), default=0),
            max((len(node.cpu_ids) for node in nodes), default=0),
            max((node.memory_bytes for node in nodes), default=0),
        )
    if shape in state.never:
        return state.never[shape]
    most_gpus, most_cores, most_memory = state._capacity
    capacity = state.book.capacity
    cheap_ok = (
        all(r.gpu <= most_gpus and r.cores <= most_cores and r.memory_bytes <= most_memory for r in gang)
        and demand.fits_in(capacity)
    )
    reason = None if cheap_ok and not state.policy.strict else unschedulable_reason(state.snapshot.nodes, gang)
    state.never[shape] = reason
    return reason


def _resource_reason(state: _Round, gang: Sequence[ReplicaRequest]) -> str:
    if not state.config.explain:
        return ""
    most_gpus, most_cores, most_memory, _ = state.largest_free()
    biggest_gpu = max(replica.gpu for replica in gang)
    biggest_cores = max(replica.cores for replica in gang)
    biggest_memory = max(replica.memory_bytes for replica in gang)
    models = sorted({model for replica in gang if replica.gpu for model in replica.gpu_models})
    model_text = f" {' or '.join(models)}" if models else ""
    if models:
        most_gpus = max((len(node.gpu_ids) for node in state.free.nodes if node.gpu_model in models), default=0)
    if biggest_gpu > most_gpus:
        return f"no node with {biggest_gpu} free{model_text} {'GPU' if biggest_gpu == 1 else 'GPUs'}"
    if biggest_cores > most_cores:
        return f"no node with {_count(biggest_cores, 'free CPU')}"
    if biggest_memory > most_memory:
        return f"no node with {biggest_memory / _GIB:.1f} GiB of free memory"
    demand = request_amounts(gang)
    gpus, cores, memory = state.free.totals()
    if demand.gpu > gpus:
        return f"needs {_count(int(demand.gpu), 'GPU')}, {gpus} free"
    if demand.cpu > cores:
        return f"needs {_count(int(demand.cpu), 'CPU')}, {cores} free"
    if demand.memory > memory:
        return f"needs {demand.memory / _GIB:.1f} GiB of memory, {memory / _GIB:.1f} GiB free"
    if len(gang) == 1:
        (replica,) = gang
        return (f"no node with {_count(replica.gpu, f'free{model_text} GPU')}, {_count(replica.cores, 'free CPU')} "
                f"and {replica.memory_bytes / _GIB:.1f} GiB of free memory at once")
    if models:
        return f"not enough free{model_text} GPUs"
    return f"its {_count(len(gang), 'replica')} do not fit on the free parts of the nodes together"
