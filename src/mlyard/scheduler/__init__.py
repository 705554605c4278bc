"""Pure gang scheduler: ``decide(snapshot, now) -> list[Decision]``.

Contract callers may rely on:

* ``decide`` performs no I/O, reads no clock (``now`` is the only notion of
  time, epoch or simulated), keeps no state between calls and never mutates
  its input; the same snapshot and ``now`` always give the same decisions.
* Every ``StartJob`` carries exactly one ``ReplicaPlacement`` per replica, in
  the order of ``PendingJob.replicas``. A job is started whole or not at all.
* All decisions of one call fit together on top of the snapshot's running jobs:
  no core or GPU is handed to two replicas, and no node's memory is exceeded.
  Each replica is pinned to ``ceil(cpu)`` cores of its own.
* The current policy is strict FIFO by ``(submitted_at, job_id)``: a queued job
  never starts ahead of an older one that is still waiting for resources.
  Jobs that could never run on the cluster are passed over (see
  ``unschedulable_reason``, also meant for rejecting them at submission).

The module imports only the standard library.
"""

from __future__ import annotations

from .fifo import decide_fifo, queue_order
from .placement import FreeResources, NodeFree, place_gang, unschedulable_reason
from .snapshot import (
    ClusterSnapshot,
    Decision,
    Labels,
    Node,
    PendingJob,
    ReplicaPlacement,
    ReplicaRequest,
    RunningJob,
    StartJob,
    whole_cores,
)

__all__ = [
    "ClusterSnapshot",
    "Decision",
    "FreeResources",
    "Labels",
    "Node",
    "NodeFree",
    "PendingJob",
    "ReplicaPlacement",
    "ReplicaRequest",
    "RunningJob",
    "StartJob",
    "decide",
    "decide_fifo",
    "place_gang",
    "queue_order",
    "unschedulable_reason",
    "whole_cores",
]


def decide(snapshot: ClusterSnapshot, now: float) -> list[Decision]:
    """Return what to start now for ``snapshot`` at time ``now`` (FIFO policy)."""
    return decide_fifo(snapshot, now)
