"""Strict first-in, first-out policy.

Queue sort is ``(submitted_at, job_id)``. The head job starts when its whole
gang fits in what is free; if it does not, nothing behind it starts this round,
so jobs never overtake one another. Placement is delegated to
``placement.place_gang`` so that later policies reuse it unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

from .placement import FreeResources, place_gang, unschedulable_reason
from .snapshot import ClusterSnapshot, Decision, PendingJob, StartJob


def queue_order(pending: Iterable[PendingJob]) -> list[PendingJob]:
    """Return pending jobs oldest first; ``job_id`` breaks ties in submission time."""
    return sorted(pending, key=lambda job: (job.submitted_at, job.job_id))


def decide_fifo(snapshot: ClusterSnapshot, now: float) -> list[Decision]:
    """Return the jobs to start now, in queue order, each with its placements.

    Jobs are placed one after another against a single free view, so every
    decision in the list can be carried out together. A job that could not run
    even on the empty cluster (``unschedulable_reason`` is not None, e.g. after a
    node left) is passed over instead of blocking the queue forever; it stays
    pending. ``now`` is unused by this policy but part of every policy's signature.
    """
    del now
    free = FreeResources.from_snapshot(snapshot)
    decisions: list[Decision] = []
    for job in queue_order(snapshot.pending):
        placements = place_gang(free, job.replicas)
        if placements is None:
            if unschedulable_reason(snapshot.nodes, job.replicas) is not None:
                continue
            break
        free.reserve(placements)
        decisions.append(StartJob(job.job_id, placements))
    return decisions
