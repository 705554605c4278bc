"""Pure gang scheduler: ``decide(snapshot, now) -> Decisions``.

Contract callers may rely on:

* ``decide`` performs no I/O, reads no clock (``now`` is the only notion of
  time, epoch or simulated), keeps no state between calls and never mutates
  its input; the same snapshot and ``now`` always give the same decisions.
  The policy and its knobs come in ``snapshot.config`` (``SchedulerConfig``).
* Every ``StartJob`` carries one ``ReplicaPlacement`` per replica, in the order
  of ``PendingJob.replicas`` (an elastic job: its first N replicas, N at least
  ``min_replicas``). A job is started whole or not at all.
* All starts, resizes and preemptions of one call fit together on top of the
  snapshot's running jobs: no core or GPU is handed to two replicas, no node's
  memory is exceeded, and no queue goes past its quota plus borrowing limit.
  A start never uses resources of a job being preempted: the job it is for
  waits until the victims are gone (``RunningJob.stopping``) and starts then.
* ``Decisions.waiting`` says in one line why every other pending job waits.
* Jobs that could never run on the cluster are passed over (see
  ``unschedulable_reason``, also meant for rejecting them at submission).

Policies are described in ``policies.py``, the round in ``cycle.py``. The
package imports only the standard library.
"""

from __future__ import annotations

import gc

from .config import DEFAULT_POLICY, LIVE_POLICIES, POLICIES, SchedulerConfig
from .cycle import decide_round
from .placement import FreeResources, NodeFree, place_gang
from .policies import weighs_time
from .unschedulable import unschedulable_reason
from .snapshot import (
    UNLIMITED,
    Amounts,
    ClusterSnapshot,
    Decision,
    Decisions,
    Labels,
    Node,
    PendingJob,
    Preempt,
    Queue,
    ReplicaPlacement,
    ReplicaRequest,
    Resize,
    RunningJob,
    StartJob,
    whole_cores,
)

__all__ = [
    "DEFAULT_POLICY",
    "LIVE_POLICIES",
    "POLICIES",
    "UNLIMITED",
    "Amounts",
    "ClusterSnapshot",
    "Decision",
    "Decisions",
    "FreeResources",
    "Labels",
    "Node",
    "NodeFree",
    "PendingJob",
    "Preempt",
    "Queue",
    "ReplicaPlacement",
    "ReplicaRequest",
    "Resize",
    "RunningJob",
    "SchedulerConfig",
    "StartJob",
    "decide",
    "place_gang",
    "unschedulable_reason",
    "weighs_time",
    "whole_cores",
]


def decide(snapshot: ClusterSnapshot, now: float) -> Decisions:
    """Return what to start, preempt and resize now, and why the other pending jobs wait."""
    # A round allocates tens of thousands of short-lived containers, which would set off
    # dozens of cyclic collections (5-7% of a round) that find nothing: the round builds
    # no reference cycles, so reference counting frees its garbage. The caller's setting
    # is restored; whatever survives the round is collected later as usual.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return decide_round(snapshot, now)
    finally:
        if enabled:
            gc.enable()
