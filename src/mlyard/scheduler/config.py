"""The scheduler's configuration: which policy orders the queue and how it behaves.

A ``SchedulerConfig`` travels inside every ``ClusterSnapshot`` so that ``decide`` stays a
function of its arguments alone. The server builds it from its settings; the simulator
from its command line.
"""

from __future__ import annotations

from dataclasses import dataclass

POLICIES = ("fifo", "backfill", "priority", "las", "srtf-oracle", "balanced")
"""Every policy ``decide`` knows. ``srtf-oracle`` needs true durations (simulator only)."""

DEFAULT_POLICY = "balanced"
LIVE_POLICIES = tuple(policy for policy in POLICIES if policy != "srtf-oracle")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """How ``decide`` orders, admits and preempts.

    ``las_thresholds``: attained service (GPU-seconds; core-seconds for CPU-only jobs)
    at which ``las`` demotes a job to the next lower queue. ``starvation_factor``: a job
    waiting longer than this many times its attained run time (and at least
    ``starvation_min_wait`` seconds) is promoted back to the top queue.
    ``balanced_base`` and ``balanced_ratio``: the geometric demotion ladder of the
    ``balanced`` policy; ``balanced_margin``: how many of its levels a running job must sit
    below a waiting one to be preempted for it (1: any lower level, as ``las``). A margin of 2
    keeps jobs of about the same age from preempting each other round after round (measured
    in docs/simulator.md: the same or a lower avg JCT, 15–30% fewer preemptions).
    ``min_run_before_preempt``: a job that has run for less than this since it last started
    is not preempted by ``las`` or ``balanced`` (preemption costs a checkpoint and a restart,
    so thrashing is worse than waiting).
    ``topology_key``: node label whose equal values mean "close" (same rack, same
    switch); multi-node gangs prefer nodes sharing it. ``fair_share``: order equals
    by the dominant-resource share of their queue and user. ``explain``: produce a
    wait reason for every job that does not start (a simulator switches it off).
    ``preemption_budget``: a job preempted this many times (``RunningJob.preemptions``, any
    preemption, quota reclaims included; resizes are not counted) is neither preempted nor
    shrunk again for the policy's ordering (LAS demotion, fair share, priority) and runs on
    until it ends; a queue reclaiming its guaranteed quota may still take it. None: no
    budget, the default, since a budget moves preemptions onto other jobs more than it saves
    them (docs/simulator.md, "Preemption: where the default lost").
    """

    policy: str = DEFAULT_POLICY
    las_thresholds: tuple[float, ...] = (3_600.0, 36_000.0)
    starvation_factor: float = 4.0
    starvation_min_wait: float = 3_600.0
    balanced_base: float = 600.0
    balanced_ratio: float = 3.0
    balanced_levels: int = 10
    balanced_margin: int = 2
    min_run_before_preempt: float = 300.0
    topology_key: str = "rack"
    fair_share: bool = True
    explain: bool = True
    preemption_budget: int | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown scheduling policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
        object.__setattr__(self, "las_thresholds", tuple(sorted(self.las_thresholds)))
        if any(threshold <= 0 for threshold in self.las_thresholds):
            raise ValueError("las_thresholds must be > 0")
        if self.balanced_base <= 0 or self.balanced_ratio <= 1 or self.balanced_levels < 1 or self.balanced_margin < 1:
            raise ValueError("balanced_base must be > 0, balanced_ratio > 1, balanced_levels and balanced_margin >= 1")
        if self.starvation_factor <= 0 or self.starvation_min_wait < 0 or self.min_run_before_preempt < 0:
            raise ValueError("starvation_factor must be > 0; starvation_min_wait and min_run_before_preempt >= 0")
        if self.preemption_budget is not None and self.preemption_budget < 0:
            raise ValueError("preemption_budget must be >= 0 (or None for no budget)")
