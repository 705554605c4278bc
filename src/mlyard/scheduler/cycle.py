"""One scheduling round: order, admit, place, preempt, backfill, grow — and explain.

The round's state and its two free views are in ``state.py``; preemption in
``preemption.py``, backfill and elastic growth in ``backfill.py``, wait reasons in
``reasons.py``. Quotas are checked before placement (``quotas.QueueBook``);
the policy (``policies.py``) decides the order and who may preempt whom.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from operator import attrgetter

from .backfill import backfill_placement, grow_elastic, reserve
from .policies import POLICY_TABLE
from .preemption import try_preemption, victim_pool
from .quotas import QueueBook, held_amounts, reclaim_victim_order, request_amounts
from .reasons import count_of, duration_text, job_list, never_fits, resource_reason
from .resources import FreeResources
from .snapshot import Amounts, ClusterSnapshot, Decisions, PendingJob, ReplicaRequest
from .state import RoundState

FAST_PATH = True
"""Settle jobs alike to one found quickly blocked before them without the full check (see
``_walk``). It never changes a decision; False sends every job down the slow path, which the
tests compare with."""


def decide_round(snapshot: ClusterSnapshot, now: float) -> Decisions:
    config = snapshot.config
    policy = POLICY_TABLE[config.policy]
    state = RoundState(snapshot, now, policy, config, FreeResources.from_snapshot(snapshot), QueueBook(snapshot))
    jobs, classes = policy.order(snapshot.pending, state.book, now, config)
    # Jobs of one shape, class and queue are alike to the round: once one of them is found
    # quickly blocked, the next ones are settled the same way until something that decided
    # it changes (see ``_walk``). Strict FIFO stops at its first blocked job: no use there.
    # With duplicate job ids the last word on an id must win, which the fast path's bulk
    # wording cannot promise: such rounds take the slow path throughout.
    fast = FAST_PATH and not policy.strict and len(set(map(_JOB_ID, jobs))) == len(jobs)
    # Gang shapes are nested tuples, hashed anew on every lookup; the round's memos key
    # them (and the groups) by a small number instead: one hash per job here, none later.
    shape_ids: dict[tuple, int] = {}
    if fast:
        group_ids: dict[tuple, int] = {}
        groups = [group_ids.setdefault((job.gang_key, klass, job.queue), len(group_ids))
                  for job, klass in zip(jobs, classes, strict=True)]
        group_shape = [shape_ids.setdefault(key[0], len(shape_ids)) for key in group_ids]
        shapes = [group_shape[group] for group in groups]
        group_count = len(group_ids)
        remaining = state.remaining = [0] * len(shape_ids)
        for group, count in Counter(groups).items():
            remaining[group_shape[group]] += count
    else:
        shapes = [shape_ids.setdefault(job.gang_key, len(shape_ids)) for job in jobs]
        groups, group_count = shapes.copy(), len(shape_ids)
        state.deferred_order = []
        remaining = state.remaining = [0] * len(shape_ids)
        for shape in shapes:
            remaining[shape] += 1
    state.open_shapes = len(shape_ids)
    # Only jobs before ``borrowers_from`` may reclaim quota by preemption.
    quotas = any(queue.quota is not None for queue in snapshot.queues)
    borrowers_from = _within_quota_first(state, jobs, classes, shapes, groups) if quotas else 0
    _walk(state, jobs, classes, shapes, groups, group_count, borrowers_from, fast)
    if state.resource_waiters == 0:
        grow_elastic(state)
    _word_deferred(state)
    return Decisions(
        starts=tuple(state.starts),
        preemptions=tuple(state.preemptions.values()),
        resizes=tuple(state.resizes.values()),
        waiting=state.waiting if config.explain else {},
    )


_JOB_ID = attrgetter("job_id")


def _walk(state: RoundState, jobs: list[PendingJob], classes: list[float], shapes: list[int], groups: list[int],
          count: int, borrowers_from: int, fast: bool) -> None:
    """Consider the jobs in order, until the rest can only wait."""
    head: PendingJob | None = None
    waiting_ahead = 0
    class_of_run = math.nan
    waiting_in_class = 0
    strict, explain = state.policy.strict, state.config.explain
    remaining, failed_now, waiting = state.remaining, state.failed_now, state.waiting
    versions = state.book.queue_versions
    # Per group: the ``state.epoch`` at which its jobs were found quickly blocked (see
    # ``_quickly_blocked``), the queue version its quota answer holds for, that answer, and
    # where its jobs' reasons are collected (with the count of better jobs ahead they share).
    blocked_at = [-1] * count
    quota_at = [-1] * count
    quota_answer: list[str | None] = [None] * count
    no_bucket: tuple[int, list[int]] = (-1, [])
    bucket_of = [no_bucket] * count
    epoch = state.epoch  # changes only inside _consider
    blocked = 0  # fast-path jobs waiting for resources, added to state.resource_waiters at the end
    for position, (group, klass) in enumerate(zip(groups, classes)):
        if position == borrowers_from and position > 0:
            # Borrowers wait behind every job within its quota; what was said of the
            # jobs ahead "of higher priority" starts over among them.
            waiting_ahead, class_of_run, waiting_in_class = 0, math.nan, 0
        if head is not None or (position % 16 == 0 and _exhausted(state, position < borrowers_from, klass)):
            # Strict FIFO's first job in line is blocked, or nothing pending fits any more
            # and no preemption is left to try: the rest waits and only needs its reasons,
            # which are cheap to give in bulk.
            state.resource_waiters += blocked
            _explain_rest(state, jobs[position:], classes[position:], shapes[position:], head, waiting_ahead,
                          class_of_run, waiting_in_class)
            return
        if klass != class_of_run:
            class_of_run, waiting_in_class = klass, 0
        job = jobs[position]
        waiting_ahead += 1  # taken back below if the job starts
        waiting_in_class += 1
        if blocked_at[group] == epoch:
            # Fast path, for most jobs of a big queue: an earlier job of this group was
            # quickly blocked and nothing that decided it has changed since but the quota.
            # (Its shape has failed: what is left of it no longer counts for open_shapes.)
            stamp = versions.get(job.queue, 0)
            if quota_at[group] != stamp:
                quota_at[group] = stamp
                quota_answer[group] = _over_quota(state, job, shapes[position])
            quota = quota_answer[group]
            if quota is not None:
                waiting[job.job_id] = quota
                continue
            blocked += 1
            waiting[job.job_id] = ""
            if explain:
                better_ahead = waiting_ahead - waiting_in_class
                bucket = bucket_of[group]
                if bucket[0] != better_ahead:
                    bucket = bucket_of[group] = (
                        better_ahead, state.deferred_bucket(shapes[position], better_ahead, job))
                bucket[1].append(job.job_id)
            continue
        shape = shapes[position]
        outcome = _consider(state, job, klass, shape, waiting_ahead - waiting_in_class)
        epoch = state.epoch
        remaining[shape] -= 1  # a shape with no job left to come no longer counts as open
        if remaining[shape] == 0 and shape not in failed_now:
            state.open_shapes -= 1
        if outcome == "started":
            waiting_ahead -= 1
            waiting_in_class -= 1
        elif outcome == "quick":
            if fast:
                blocked_at[group] = epoch
            if strict and head is None:
                head = job
        elif strict and head is None and outcome == "blocked":
            head = job
    state.resource_waiters += blocked


def _word_deferred(state: RoundState) -> None:
    # Worded once the round is over: the reason describes what is left free then.
    # Jobs of one shape with as many better jobs ahead share their text: each is built once.
    if not state.deferred:
        return
    texts: dict[int, str] = {}  # shape -> text without jobs ahead
    worded: dict[tuple[int, int], str] = {}
    phrase = state.policy.ahead_phrase
    waiting = state.waiting
    for key in state.deferred:
        shape, better_ahead = key
        reason = texts.get(shape)
        if reason is None:
            reason = texts[shape] = resource_reason(state, state.deferred_jobs[shape])
        worded[key] = f"{reason}; behind {count_of(better_ahead, 'job')} {phrase}" if better_ahead > 0 else reason
    if state.deferred_order is not None:
        for job_id, key, tail in state.deferred_order:
            waiting[job_id] = worded[key] + tail
        return
    if state.unplaced:  # in the order the jobs were deferred, after every other job's reason
        waiting.update(dict.fromkeys(state.unplaced, ""))
    for key, job_ids in state.deferred.items():
        waiting.update(dict.fromkeys(job_ids, worded[key]))
    for job_id, tail in state.deferred_tails.items():
        waiting[job_id] += tail


def _explain_rest(state: RoundState, jobs: Sequence[PendingJob], classes: Sequence[float], shapes: Sequence[int],
                  head: PendingJob | None, waiting_ahead: int, class_of_run: float, waiting_in_class: int) -> None:
    state.resource_waiters += 1
    if not state.config.explain:
        return
    waiting = state.waiting
    if head is not None:
        behind_head = f"behind job {head.job_id}, first in line and waiting for resources"
        for job in jobs:
            waiting[job.job_id] = behind_head
        return
    for job, klass, shape in zip(jobs, classes, shapes, strict=True):
        if klass != class_of_run:
            class_of_run, waiting_in_class = klass, 0
        better_ahead = waiting_ahead - waiting_in_class
        waiting_ahead += 1
        waiting_in_class += 1
        quota = _over_quota(state, job, shape)
        if quota is not None:
            waiting[job.job_id] = quota
            continue
        never = never_fits(state, job, job.smallest_gang, _demand(state, job, shape), shape)
        if never is not None:
            waiting[job.job_id] = f"can never run on this cluster: {never}"
            continue
        state.defer(job, shape, better_ahead)
        state.unplaced.append(job.job_id)


def _exhausted(state: RoundState, may_reclaim: bool, klass: float) -> bool:
    # Free resources only shrink during a round: once every gang shape still to come
    # has failed to fit, none of those jobs can start any more.
    if state.open_shapes > 0:
        return False
    if state.attempts_left <= 0 or state.plans_left <= 0:
        return True
    if may_reclaim and _borrowers_left(state):
        return False
    if not state.policy.preemptive:
        return True
    # Classes only grow along the order: once this job outranks no running job, nobody after it does.
    pool = victim_pool(state)
    return not pool or klass >= state.top_victim_class


def _borrowers_left(state: RoundState) -> bool:
    if state.reclaim_pool is None:  # borrowers as the round began: victims stay in the book
        state.reclaim_pool = reclaim_victim_order(state.book, state.snapshot.running)
    taken = state.taken
    return any(run.job_id not in taken for run in state.reclaim_pool)


def _demand(state: RoundState, job: PendingJob, shape: int) -> Amounts:
    demand = state.demands.get(shape)
    if demand is None:
        demand = state.demands[shape] = request_amounts(job.smallest_gang)
    return demand


def _over_quota(state: RoundState, job: PendingJob, shape: int) -> str | None:
    queue = job.queue
    demand = state.demands.get(shape)
    if state.book.fits_ceiling(queue, demand if demand is not None else _demand(state, job, shape)):
        return None  # the common answer, cheaper to recheck than to look up
    # The words for a queue and a shape hold until that queue's usage changes.
    stamp = state.book.queue_versions.get(queue, 0)
    key = (queue, shape)
    known = state.quota_answers.get(key)
    if known is not None and known[0] == stamp:
        return known[1]
    quota = state.book.over_quota(queue, _demand(state, job, shape))
    state.quota_answers[key] = (stamp, quota)
    return quota


_UNSEEN: list[float] = []


def _within_quota_first(state: RoundState, jobs: list[PendingJob], classes: list[float],
                        shapes: list[int], groups: list[int]) -> int:
    """Move the jobs whose start keeps their queue within its quota ahead of those that
    would borrow (stable within each part); returns where the borrowers begin.

    Without this, a borrower ahead in the order takes the capacity a queue just
    reclaimed by preemption, that queue reclaims it again, and so on forever.
    A queue's own jobs keep their order: its first job that would borrow, and every
    one after it, go behind, and none of them may reclaim (it would take capacity a
    job going first then takes). A queue's earlier jobs count against its quota as if
    they all started: a job classed as borrowing only risks being considered later."""
    book = state.book
    # Per queue: [used gpu, cpu, memory, quota gpu, cpu, memory] as plain floats (this runs
    # for every pending job); None once the queue's jobs borrow from here on.
    planned: dict[str, list[float] | None] = {}
    amounts: dict[int, tuple[float, float, float]] = {}  # per shape
    within: list[int] = []
    borrowing: list[int] = []
    # Queues with a quota whose jobs may still be within it; once there are none, every
    # job left borrows (queues without a quota borrow from the start).
    open_plans = sum(1 for queue in book.queues.values() if queue.quota is not None)
    for index, (job, shape) in enumerate(zip(jobs, shapes, strict=True)):
        name = job.queue
        plan = planned.get(name, _UNSEEN)
        if plan is _UNSEEN:
            queue = book.queue(name)
            if queue.quota is None:
                plan = None
            else:
                used, quota = book.used(name), queue.nominal
                plan = [used.gpu, used.cpu, used.memory, quota.gpu + 1e-9, quota.cpu + 1e-9, quota.memory + 1e-9]
            planned[name] = plan
        if plan is None:
            borrowing.append(index)
            continue
        demand = amounts.get(shape)
        if demand is None:
            wanted = _demand(state, job, shape)
            demand = amounts[shape] = (wanted.gpu, wanted.cpu, wanted.memory)
        gpu, cpu, memory = plan[0] + demand[0], plan[1] + demand[1], plan[2] + demand[2]
        if gpu <= plan[3] and cpu <= plan[4] and memory <= plan[5]:
            plan[0], plan[1], plan[2] = gpu, cpu, memory
            within.append(index)
        else:
            planned[name] = None
            borrowing.append(index)
            open_plans -= 1
            if open_plans == 0:  # most of a long queue: no need to look at the rest one by one
                borrowing.extend(range(index + 1, len(jobs)))
                break
    state.within_quota = {jobs[index].job_id for index in within}
    if not within or not borrowing or within[-1] < borrowing[0]:
        return len(within)
    order = within + borrowing
    jobs[:] = [jobs[index] for index in order]
    classes[:] = [classes[index] for index in order]
    shapes[:] = [shapes[index] for index in order]
    groups[:] = [groups[index] for index in order]
    return len(within)


def _quickly_blocked(state: RoundState, job: PendingJob, klass: float, shape: int) -> bool:
    """True when an earlier job of the same shape settled everything this one could try:
    it cannot fit now, cannot wait for stopping jobs, and has no preemption left to try.

    Reads only what changes after a failed placement (``state.epoch`` counts those)."""
    if state.never.get(shape) is not None or (state.policy.backfill and state.reservation is None):
        return False
    if shape not in state.failed_later and (state.taken or state.stopping_ids is None or state.stopping_ids):
        return False
    return (state.plans_left <= 0 or state.attempts_left <= 0
            or (shape, klass, job.queue) in state.failed_plans)


def _consider(state: RoundState, job: PendingJob, klass: float, shape: int, better_ahead: int) -> str:
    """Start, hold a spot for, or explain one pending job; returns "started", "quota" or "blocked"."""
    quota = _over_quota(state, job, shape)
    if quota is not None:
        state.waiting[job.job_id] = quota
        return "quota"
    failed = shape in state.failed_now
    if failed and _quickly_blocked(state, job, klass, shape):
        state.resource_waiters += 1
        state.waiting[job.job_id] = ""
        if state.config.explain:
            state.defer(job, shape, better_ahead)
        return "quick"
    policy, config = state.policy, state.config
    gang = job.smallest_gang
    demand = _demand(state, job, shape)
    placements = None
    if not failed:
        placements = state.place(state.free, job, gang)
        if placements is None:
            state.mark_failed(shape)
    if placements is not None and state.reservation is not None:
        placements = backfill_placement(state, job, gang, placements, shape)
        if placements is None:
            shadow = state.reservation.shadow
            when = "" if math.isinf(shadow) else f", reserved to start in ~{duration_text(shadow - state.now)}"
            state.waiting[job.job_id] = (
                f"would delay job {state.reservation.job_id}{when}; backfills once it cannot"
            )
            state.resource_waiters += 1
            return "blocked"
    if placements is not None:
        state.commit_start(job, placements, "", demand)
        return "started"
    state.epoch += 1  # what follows may change what _quickly_blocked reads
    never = never_fits(state, job, gang, demand, shape)
    if never is not None:
        state.waiting[job.job_id] = f"can never run on this cluster: {never}"
        return "quota"
    state.resource_waiters += 1
    if _wait_for_stopping(state, job, gang, shape) or try_preemption(state, job, klass, gang, demand, shape):
        return "blocked"
    tail = ""
    if policy.backfill and state.reservation is None:
        state.reservation = reserve(state, job, gang)
        if not math.isinf(state.reservation.shadow):
            tail = f"; first in line, reserved to start in ~{duration_text(state.reservation.shadow - state.now)}"
        else:
            tail = "; first in line"
    # Worded once the round is over: the reason describes what is left free then.
    state.waiting[job.job_id] = ""
    if config.explain:
        state.defer(job, shape, better_ahead, tail)
    return "blocked"


def _wait_for_stopping(state: RoundState, job: PendingJob, gang: Sequence[ReplicaRequest], shape: int) -> bool:
    if shape in state.failed_later:
        return False
    if state.stopping_ids is None:
        state.stopping_ids = [run.job_id for run in state.snapshot.running if run.stopping]
    if not state.stopping_ids and not state.taken:
        return False
    stopping = state.stopping_ids + sorted(state.taken)
    placements = state.place(state.future_view(), job, gang)
    if placements is None:
        state.failed_later.add(shape)
        return False
    state.hold_future(placements)
    state.book.add(job.queue, job.user, held_amounts(placements))
    state.waiting[job.job_id] = f"waiting for {job_list(stopping)} to stop"
    return True
