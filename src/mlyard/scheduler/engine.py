"""One scheduling round: order, admit, place, preempt, backfill, grow — and explain.

The round's state and its two free views are in ``state.py``; preemption in
``preemption.py``, backfill and elastic growth in ``backfill.py``, wait reasons in
``reasons.py``. Quotas are checked before placement (``quotas.QueueBook``);
the policy (``policies.py``) decides the order and who may preempt whom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .backfill import backfill_placement, grow_elastic, reserve
from .placement import place_gang
from .policies import POLICY_TABLE
from .preemption import try_preemption, victim_pool
from .quotas import QueueBook, held_amounts, request_amounts
from .reasons import count_of, duration_text, job_list, never_fits, resource_reason
from .resources import FreeResources
from .snapshot import ClusterSnapshot, Decisions, PendingJob, ReplicaRequest
from .state import RoundState


def decide_round(snapshot: ClusterSnapshot, now: float) -> Decisions:
    config = snapshot.config
    policy = POLICY_TABLE[config.policy]
    state = RoundState(snapshot, now, policy, config, FreeResources.from_snapshot(snapshot), QueueBook(snapshot))
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
        grow_elastic(state)
    texts: dict[tuple, str] = {}
    for job_id, shape, gang, suffix in state.deferred:
        text = texts.get(shape)
        if text is None:
            text = texts[shape] = resource_reason(state, gang)
        state.waiting[job_id] = text + suffix
    return Decisions(
        starts=tuple(state.starts),
        preemptions=tuple(state.preemptions.values()),
        resizes=tuple(state.resizes.values()),
        waiting=state.waiting if config.explain else {},
    )


def _explain_rest(state: RoundState, rest: Sequence[tuple[PendingJob, float]], head: PendingJob | None,
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
        never = never_fits(state, gang, demand, shape)
        if never is not None:
            state.waiting[job.job_id] = f"can never run on this cluster: {never}"
            continue
        suffix = f"; behind {count_of(better_ahead, 'job')} {phrase}" if better_ahead > 0 else ""
        state.deferred.append((job.job_id, shape, gang, suffix))


def _exhausted(state: RoundState, reclaim_possible: bool, klass: float) -> bool:
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
    pool = victim_pool(state)
    return not pool or klass >= state.top_victim_class


def _quickly_blocked(state: RoundState, job: PendingJob, klass: float, shape: tuple) -> bool:
    """True when an earlier job of the same shape settled everything this one could try:
    it cannot fit now, cannot wait for stopping jobs, and has no preemption left to try."""
    if state.never.get(shape) is not None or (state.policy.backfill and state.reservation is None):
        return False
    if shape not in state.failed_later and (state.taken or state.stopping_ids is None or state.stopping_ids):
        return False
    return (state.plans_left <= 0 or state.attempts_left <= 0
            or (shape, klass, job.queue) in state.failed_plans)


def _consider(state: RoundState, job: PendingJob, klass: float, head: PendingJob | None, better_ahead: int) -> str:
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
            suffix = f"; behind {count_of(better_ahead, 'job')} {policy.ahead_phrase}" if better_ahead > 0 else ""
            state.deferred.append((job.job_id, shape, gang, suffix))
        return "blocked"
    placements = None
    if shape not in state.failed_now:
        placements = place_gang(state.free, gang, topology_key=config.topology_key)
        if placements is None:
            state.mark_failed(shape)
    if placements is not None and state.reservation is not None:
        placements = backfill_placement(state, job, gang)
        if placements is None:
            shadow = state.reservation.shadow
            when = "" if math.isinf(shadow) else f", reserved to start in ~{duration_text(shadow - state.now)}"
            state.waiting[job.job_id] = (
                f"would delay job {state.reservation.job_id}{when}; backfills once it cannot"
            )
            state.resource_waiters += 1
            return "blocked"
    if placements is not None:
        state.commit_start(job, placements, "")
        return "started"
    never = never_fits(state, gang, demand, shape)
    if never is not None:
        state.waiting[job.job_id] = f"can never run on this cluster: {never}"
        return "quota"
    state.resource_waiters += 1
    suffix = ""
    if better_ahead > 0 and config.explain:
        suffix = f"; behind {count_of(better_ahead, 'job')} {policy.ahead_phrase}"
    if _wait_for_stopping(state, job, gang, shape) or try_preemption(state, job, klass, gang, demand, shape):
        return "blocked"
    if policy.backfill and state.reservation is None:
        state.reservation = reserve(state, job, gang)
        if not math.isinf(state.reservation.shadow):
            suffix += f"; first in line, reserved to start in ~{duration_text(state.reservation.shadow - state.now)}"
        else:
            suffix += "; first in line"
    # Worded once the round is over: the reason describes what is left free then.
    state.waiting[job.job_id] = ""
    if config.explain:
        state.deferred.append((job.job_id, shape, gang, suffix))
    return "blocked"


def _wait_for_stopping(state: RoundState, job: PendingJob, gang: Sequence[ReplicaRequest], shape: tuple) -> bool:
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
    state.waiting[job.job_id] = f"waiting for {job_list(stopping)} to stop"
    return True
