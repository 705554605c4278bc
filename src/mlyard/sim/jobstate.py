"""Progress bookkeeping of one simulated job across attempts, preemptions and resizes.

Progress is measured in seconds of work at full size: a job of duration ``d``
is done when ``done == d``. Holding ``k`` of the ``n`` GPUs it asks for, it
progresses at ``k / n`` (elastic jobs), or, with a serial fraction, at
``speedup(k) / speedup(n)`` of its replicas (``scheduler.scaling``); a restarted
job first spends its restart overhead, in wall seconds, making no progress.

Attained service is folded into ``attained_service``/``attained_time`` whenever
the holding changes (a stop or a resize) and ``attempt_started`` moves to that
moment, so the scheduler's rule "earlier attempts plus rate × (now − started_at)"
holds for the snapshot at all times.
"""

from __future__ import annotations

from mlyard.scheduler import ReplicaPlacement, ReplicaRequest
from mlyard.scheduler.scaling import speedup

from .traces import TraceJob

PENDING, RUNNING, COMPLETED = "pending", "running", "completed"
COMPLETE, STOPPED = 0, 1
"""Event kinds; at equal times a completion is handled before the end of a grace period."""


class JobState:
    __slots__ = (
        "asked_units",
        "attained_service",
        "attained_time",
        "attempt_started",
        "attempts",
        "done",
        "gpus_held",
        "held_since",
        "job",
        "job_min_replicas",
        "overhead_left",
        "phase",
        "placements",
        "predicted",
        "preemptions",
        "queued_since",
        "rate",
        "replicas",
        "run_time",
        "since",
        "stopping",
        "trusted",
        "units_held",
        "version",
    )

    def __init__(self, job: TraceJob, replicas: tuple[ReplicaRequest, ...]) -> None:
        self.job = job
        self.replicas = replicas
        self.job_min_replicas = job.min_replicas
        gpus = sum(replica.gpu for replica in replicas)
        # Service is GPU-seconds, or core-seconds for a job without GPUs, as the scheduler counts it.
        # (a share of a core counts as its fraction: ``shape[1]`` is the CPU a replica holds)
        self.asked_units = gpus if gpus else sum(replica.shape[1] for replica in replicas)
        self.phase = PENDING
        self.stopping = False
        self.predicted: float | None = None
        """The run time predicted at arrival (`scheduler.predictions`), trusted or not."""
        self.trusted: float | None = None
        """The prediction where it was trusted: what the policy sees."""
        self.version = 0
        self.done = 0.0
        self.overhead_left = 0.0
        self.rate = 1.0
        self.since = job.submitted_at
        self.attempt_started = job.submitted_at
        self.held_since = job.submitted_at
        self.attained_service = 0.0
        self.attained_time = 0.0
        self.run_time = 0.0
        self.preemptions = 0
        self.attempts = 0
        self.queued_since: float | None = None
        self.placements: tuple[ReplicaPlacement, ...] = ()
        self.gpus_held = 0
        self.units_held = 0

    def begin_attempt(self, now: float, restart_overhead: float) -> None:
        self.overhead_left = restart_overhead if self.attempts else 0.0
        self.attempts += 1
        self.phase = RUNNING
        self.attempt_started = now

    def hold(self, placements: tuple[ReplicaPlacement, ...], now: float) -> None:
        """Start holding ``placements`` at ``now`` (a start, or the new set of a resize)."""
        self.placements = placements
        self.gpus_held = sum(len(placement.gpu_ids) for placement in placements)
        gpu_job = any(replica.gpu for replica in self.replicas)
        self.units_held = self.gpus_held if gpu_job else sum(placement.cpu for placement in placements)
        serial = self.job.serial_fraction
        if serial:
            self.rate = speedup(len(placements), serial) / speedup(len(self.replicas), serial)
        else:
            self.rate = self.units_held / self.asked_units if self.asked_units else 1.0
        self.since = self.held_since = now

    def advance(self, now: float) -> None:
        elapsed = now - self.since
        if self.overhead_left:
            spent = min(elapsed, self.overhead_left)
            self.overhead_left -= spent
            elapsed -= spent
        self.done = min(self.job.duration, self.done + elapsed * self.rate)
        self.since = now

    def finish_time(self) -> float:
        remaining = self.job.duration - self.done
        if remaining <= 0:
            return self.since + self.overhead_left
        return self.since + self.overhead_left + remaining / self.rate if self.rate > 0 else float("inf")

    def let_go(self, now: float) -> None:
        """Stop holding anything at ``now``: bank the progress, run time and service up to then."""
        self.advance(now)
        self.run_time += now - self.held_since
        self.attained_service += self.units_held * (now - self.attempt_started)
        self.attained_time += now - self.attempt_started
        self.attempt_started = now
        self.placements = ()
        self.gpus_held = self.units_held = 0

    def end_attempt(self, now: float) -> None:
        """Back to the queue after a preemption's grace period."""
        self.phase = PENDING
        self.stopping = False
        self.queued_since = now
        self.version += 1
