"""EASY backfill reservations, and elastic jobs growing into idle capacity."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .placement import place_gang
from .quotas import request_amounts
from .reasons import count_of
from .snapshot import (
    PendingJob,
    ReplicaPlacement,
    ReplicaRequest,
    Resize,
    StartJob,
)
from .state import Reservation, RoundState


def reserve(state: RoundState, job: PendingJob, gang: Sequence[ReplicaRequest]) -> Reservation:
    """EASY backfill: the earliest time the blocked head job surely fits, from max_runtime."""
    trial = state.future_view().copy() if state.future is not None else state.free.copy()
    ends = []
    for run in state.snapshot.running:
        if run.job_id in state.taken:
            continue
        end = math.inf if run.max_runtime is None else run.started_at + run.max_runtime
        ends.append((end, run.job_id, run.placements))
    pending = state.pending_by_id()
    for start in state.starts:  # started earlier in this round
        limit = pending[start.job_id].max_runtime
        ends.append((math.inf if limit is None else state.now + limit, start.job_id, start.placements))
    ends.sort(key=lambda item: (item[0], item[1]))
    shadow = math.inf
    placements = None
    need = request_amounts(gang)
    for end, _, held in ends:
        trial.release(held)
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
    return Reservation(job.job_id, shadow, extra)


def backfill_placement(state: RoundState, job: PendingJob, gang: Sequence[ReplicaRequest],
                       in_free: tuple[ReplicaPlacement, ...] | None, shape: int):
    """Where ``job`` may start without delaying the reserved job; ``in_free`` is its placement
    in ``state.free``, which it keeps when it ends before the reservation starts."""
    reservation = state.reservation
    assert reservation is not None
    if job.max_runtime is not None and state.now + job.max_runtime <= reservation.shadow:
        return in_free
    # Runs past the shadow time: only resources the reserved job will not need. Once a shape
    # did not fit there, the next jobs of that shape (thousands, on a busy cluster) skip the search.
    if shape in reservation.failed_shapes:
        return None
    placements = place_gang(reservation.extra, gang, topology_key=state.config.topology_key)
    if placements is None:
        reservation.failed_shapes.add(shape)
    return placements


def grow_elastic(state: RoundState) -> None:
    """Nobody waits for resources: elastic jobs grow into what is idle, one replica at a time."""
    for position, start in enumerate(state.starts):
        pending = next((job for job in state.snapshot.pending if job.job_id == start.job_id), None)
        if pending is None or pending.min_replicas is None:
            continue
        added = add_replicas(state, pending.queue, pending.user, pending.replicas[len(start.placements):])
        if added:
            state.starts[position] = StartJob(start.job_id, start.placements + added,
                                              f"started with {len(start.placements) + len(added)} replicas")
    for run in state.snapshot.running:
        if run.stopping or run.job_id in state.taken or not run.grow_replicas:
            continue
        added = add_replicas(state, run.queue, run.user, run.grow_replicas)
        if added:
            state.resizes[run.job_id] = Resize(
                run.job_id, run.placements + added,
                f"grown to {count_of(len(run.placements) + len(added), 'replica')} into idle capacity",
            )


def add_replicas(state: RoundState, queue: str, user: str,
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
        state.version += 1
        state.take_from_future(placement)
        state.book.add(queue, user, amounts)
        added.extend(placement)
    return tuple(added)
