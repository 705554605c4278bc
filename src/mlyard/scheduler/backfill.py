"""EASY backfill reservations, and elastic jobs growing into idle capacity."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .placement import place_gang, place_on
from .quotas import request_amounts
from .reasons import count_of
from .scaling import relative_gain
from .snapshot import (
    PendingJob,
    ReplicaPlacement,
    ReplicaRequest,
    Resize,
    RunningJob,
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
    cores = sum(replica.cores for replica in gang)  # whole ones: shares may fit cores in sharing mode
    for end, _, held in ends:
        trial.release(held)
        totals = trial.totals()
        if math.isinf(end) and placements is None:
            shadow = math.inf
        if totals[0] >= need.gpu and totals[1] >= cores and totals[2] >= need.memory:
            placements = state.place(trial, job, gang)
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
    placements = state.place(reservation.extra, job, gang)
    if placements is None:
        reservation.failed_shapes.add(shape)
    return placements


@dataclass(slots=True)
class _Growing:
    job: PendingJob | RunningJob
    held: list[ReplicaPlacement]
    extra: list[ReplicaRequest]
    start: int | None
    """Its place in ``state.starts`` (a job starting this round); None for a running job."""
    added: int = 0


def grow_elastic(state: RoundState) -> None:
    """Nobody waits for resources: elastic jobs grow into what is idle, one replica at a time,
    each to the job it makes relatively the most faster (``scaling.relative_gain``: a small job
    before a big one, a job that scales well before one whose next replica adds little). Equal
    gains go in order: jobs starting now, then running ones. A job whose next replica does not
    fit grows no more this round."""
    growing: list[_Growing] = []
    for position, start in enumerate(state.starts):
        pending = next((job for job in state.snapshot.pending if job.job_id == start.job_id), None)
        if pending is not None and pending.min_replicas is not None:
            growing.append(_Growing(pending, list(start.placements), list(pending.replicas[len(start.placements):]),
                                    position))
    for run in state.snapshot.running:
        if not (run.stopping or run.job_id in state.taken or not run.grow_replicas):
            growing.append(_Growing(run, list(run.placements), list(run.grow_replicas), None))
    candidates = [grower for grower in growing if grower.extra]
    while candidates:
        best = max(range(len(candidates)),
                   key=lambda index: (relative_gain(len(candidates[index].held), candidates[index].job.serial_fraction),
                                      -index))
        grower = candidates[best]
        added = add_replicas(state, grower.job, grower.held, grower.extra[:1])
        if added:
            grower.held.extend(added)
            grower.added += 1
            grower.extra.pop(0)
        if not added or not grower.extra:
            candidates.pop(best)
    for grower in growing:
        if not grower.added:
            continue
        size = len(grower.held)
        if grower.start is not None:
            state.starts[grower.start] = StartJob(grower.job.job_id, tuple(grower.held), f"started with {size} replicas")
        else:
            state.resizes[grower.job.job_id] = Resize(
                grower.job.job_id, tuple(grower.held), f"grown to {count_of(size, 'replica')} into idle capacity")


def add_replicas(state: RoundState, job: PendingJob | RunningJob, held: Sequence[ReplicaPlacement],
                 extra: Sequence[ReplicaRequest]) -> tuple[ReplicaPlacement, ...]:
    """Place ``extra`` one at a time while they fit; ``job`` holds ``held`` already, and what it
    adds keeps to its placement constraints: the node it is on, or nodes of its label's value."""
    queue, user = job.queue, job.user
    names = _allowed_nodes(state, job, held)
    added: list[ReplicaPlacement] = []
    for replica in extra:
        amounts = request_amounts((replica,))
        if state.book.over_quota(queue, amounts) is not None:
            break
        if names is None:
            placement = place_gang(state.free, (replica,))
        else:
            one = place_on(state.free, replica, names)
            placement = None if one is None else (one,)
        if placement is None:
            break
        state.free.reserve(placement)
        state.version += 1
        state.take_from_future(placement)
        state.book.add(queue, user, amounts)
        added.extend(placement)
    return tuple(added)


def _allowed_nodes(state: RoundState, job: PendingJob | RunningJob,
                   held: Sequence[ReplicaPlacement]) -> list[str] | None:
    """The nodes a growing job's next replicas may go on (None: any)."""
    if not held or not (job.same_node or job.same_topology):
        return None
    if job.same_node:
        return [held[0].node]
    key = job.same_topology
    nodes = {node.name: node for node in state.snapshot.nodes}
    anchor = nodes.get(held[0].node)
    value = anchor.labels.get(key) if anchor is not None else None
    if value is None:
        return []
    return sorted(name for name, node in nodes.items() if node.labels.get(key) == value)
