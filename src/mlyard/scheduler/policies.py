"""Ordering policies: who goes first, and who may preempt whom.

Each policy gives every job a *class* (a number; lower is more important) and
an ordering key. The round (``cycle.py``) walks pending jobs in key
order; a pending job may preempt a running one only if the policy says its
class is better. Jobs of equal class are ordered by dominant-resource fair
share (their queue's share as if the jobs ahead of them in that queue had
started, then their user's share) when ``fair_share`` is on, then by age.

* ``fifo``: submission order, strict (the first job that does not fit blocks
  everyone behind it); no preemption except quota reclaim.
* ``backfill``: FIFO with EASY backfill: the first blocked job gets a
  reservation; later jobs start only if they cannot delay it.
* ``priority``: higher ``priority`` first; preempts strictly lower priority.
* ``las``: Tiresias' discretized two-dimensional least-attained-service. A job's
  queue is set by its attained GPU-seconds and ``las_thresholds``; FIFO inside a
  queue; a starving job (waiting longer than ``starvation_factor`` × its run time)
  goes back to the top queue. Preempts jobs of lower queues.
* ``srtf-oracle``: shortest remaining service (GPUs × remaining seconds) first,
  from true durations; preempts jobs with more remaining service. A lower bound
  for the simulator, refused by the server.
* ``balanced``: least-attained-service on a fine geometric ladder of queues
  (``balanced_base`` × ``balanced_ratio``^k GPU-seconds), fair share and then
  least attained service inside a queue (or, for a job whose run time is predicted
  from jobs like it, the service it still needs), the same starvation guard, preemption
  only of jobs ``balanced_margin`` levels below and that have run
  ``min_run_before_preempt`` since they started (a preemption costs a checkpoint and
  a restart), and packing-aware placement.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, lt
from typing import ClassVar

from .config import SchedulerConfig
from .quotas import QueueBook
from .snapshot import MILLICORES, PendingJob, ReplicaPlacement, RunningJob


def pending_rate(job: PendingJob) -> float:
    """Service units per second a job consumes: its GPUs, or its cores when it has none (a share
    of a core as its fraction)."""
    gang = job.smallest_gang
    gpus = sum(replica.gpu for replica in gang)
    return float(gpus) if gpus else float(sum(replica.shape[1] for replica in gang) or 1)


def running_rate(placements: Sequence[ReplicaPlacement]) -> float:
    gpus = sum(len(placement.gpu_ids) for placement in placements)
    return float(gpus) if gpus else float(sum(placement.cpu for placement in placements) or 1)


def running_service(job: RunningJob, now: float) -> float:
    return job.attained_service + running_rate(job.placements) * max(0.0, now - job.started_at)


@dataclass(frozen=True)
class Policy:
    name: str
    preemptive: bool
    strict: bool = False
    backfill: bool = False
    fair_share: bool = True
    ahead_phrase: str = "ahead of it"
    weighs_time: bool = True
    """Whether a round's decisions may change with the clock alone (attained service grows,
    a starving job moves up, a backfill window closes). False: the same jobs, nodes and
    queues give the same decisions at any time, so nothing is gained by deciding again."""

    # --------------------------------------------------------------- classes
    def pending_class(self, job: PendingJob, now: float, config: SchedulerConfig) -> float:
        return 0.0

    def running_class(self, job: RunningJob, now: float, config: SchedulerConfig) -> float:
        return 0.0

    def running_classes(self, runs: Sequence[RunningJob], now: float, config: SchedulerConfig) -> list[float]:
        return [self.running_class(run, now, config) for run in runs]

    def pending_classes(self, pending: Sequence[PendingJob], now: float, config: SchedulerConfig) -> list[float]:
        return [self.pending_class(job, now, config) for job in pending]

    # Attributes that order equal jobs (after class and fair share), then the job id.
    tie_attributes: ClassVar[tuple[str, ...]] = ("waiting_since",)

    def tiebreak(self, job: PendingJob, now: float) -> tuple[float, ...]:
        return tuple(getattr(job, name) for name in self.tie_attributes)

    def may_preempt(self, mine: float, victim: RunningJob, theirs: float, now: float,
                    config: SchedulerConfig) -> bool:
        return self.preemptive and theirs > mine

    def victim_key(self, victim: RunningJob, theirs: float) -> tuple[float, ...]:
        """Victims are taken in ascending key order: least important, most recently started first."""
        return (-theirs, -victim.started_at, -victim.job_id)

    # --------------------------------------------------------------- order
    def by_tie(self, pending: Sequence[PendingJob]) -> list[PendingJob]:
        """``pending`` sorted by ``(*tie_attributes, job_id)``.

        Stable sorts on one number each, least significant first, give the same order as
        the tuple key (the job id is unique) at about half the cost: comparing plain
        floats is much cheaper than comparing tuples.
        """
        *major, minor = self.tie_attributes
        by_minor = attrgetter(minor)
        ranked = sorted(pending, key=by_minor)
        keys = list(map(by_minor, ranked))
        # Without ties (timestamps rarely have any) the job id decides nothing: skip its sort.
        if not all(map(lt, keys, keys[1:])):
            ranked = sorted(pending, key=attrgetter("job_id"))
            ranked.sort(key=by_minor)
        for name in reversed(major):
            ranked.sort(key=attrgetter(name))
        return ranked

    def order(self, pending: Sequence[PendingJob], book: QueueBook, now: float,
              config: SchedulerConfig) -> tuple[list[PendingJob], list[float]]:
        """The jobs in the order they are considered, and the class of each.

        Two lists rather than (job, class) pairs: ten thousand pairs that live through the
        round would mostly be work for the garbage collector.
        """
        ranked = self.by_tie(pending)
        classes = self.pending_classes(ranked, now, config)
        if not (self.fair_share and config.fair_share):
            by_class = sorted(range(len(ranked)), key=classes.__getitem__)  # stable: ties keep tie order
            return [ranked[index] for index in by_class], [classes[index] for index in by_class]
        # Progressive filling: each job's queue share counts the jobs of the same
        # queue and class ahead of it, so queues interleave the way DRF would.
        ahead: dict[tuple[float, str], list[PendingJob]] = {}
        for klass, job in zip(classes, ranked):
            group = ahead.get((klass, job.queue))
            if group is None:
                ahead[(klass, job.queue)] = [job]
            else:
                group.append(job)
        capacity = book.capacity
        gpu_scale, cpu_scale, memory_scale = (
            1.0 / total if total > 0 else 0.0 for total in (capacity.gpu, capacity.cpu, capacity.memory))
        keyed: list[tuple[float, float, float, int, int, PendingJob]] = []
        append = keyed.append
        user_shares: dict[str, float] = {}
        for (klass, queue), jobs in ahead.items():  # each group is in tie order already
            used = book.used(queue)
            gpu, cpu, memory = used.gpu, used.cpu, used.memory
            weight = book.queue(queue).weight
            gpu_weighted, cpu_weighted, memory_weighted = gpu_scale / weight, cpu_scale / weight, memory_scale / weight
            for rank, job in enumerate(jobs):
                # max() of the three, spelled out: a builtin call costs more than the compares.
                share = gpu * gpu_weighted
                cpu_part = cpu * cpu_weighted
                if cpu_part > share:  # noqa: PLR1730
                    share = cpu_part
                memory_part = memory * memory_weighted
                if memory_part > share:  # noqa: PLR1730
                    share = memory_part
                shape = job.shape
                if len(shape) == 1:  # most jobs: skip the loop's setup
                    ((replica_gpu, replica_cores, replica_memory, _),) = shape
                    gpu += replica_gpu
                    cpu += replica_cores
                    memory += replica_memory
                else:
                    for replica_gpu, replica_cores, replica_memory, _ in shape:
                        gpu += replica_gpu
                        cpu += replica_cores
                        memory += replica_memory
                user_share = user_shares.get(job.user)
                if user_share is None:
                    user_share = user_shares[job.user] = book.user_share(job.user)
                append((klass, share, user_share, rank, job.job_id, job))
        # Job ids are unique, so comparison never reaches the job itself. Each group's
        # shares only grow with rank: the list is a few long runs, which sort cheaply.
        keyed.sort()
        return [item[5] for item in keyed], [item[0] for item in keyed]


class Fifo(Policy):
    tie_attributes = ("submitted_at",)

    def order(self, pending: Sequence[PendingJob], book: QueueBook, now: float,
              config: SchedulerConfig) -> tuple[list[PendingJob], list[float]]:
        return self.by_tie(pending), [0.0] * len(pending)


class Priority(Policy):
    def pending_class(self, job: PendingJob, now: float, config: SchedulerConfig) -> float:
        return float(-job.priority)

    def pending_classes(self, pending: Sequence[PendingJob], now: float, config: SchedulerConfig) -> list[float]:
        return [float(-job.priority) for job in pending]

    def running_class(self, job: RunningJob, now: float, config: SchedulerConfig) -> float:
        return float(-job.priority)


def _starving(job: PendingJob, now: float, config: SchedulerConfig) -> bool:
    if job.attained_time <= 0:
        return False
    waited = now - job.waiting_since
    return waited >= max(config.starvation_min_wait, config.starvation_factor * job.attained_time)


class Las(Policy):
    def thresholds(self, config: SchedulerConfig) -> Sequence[float]:
        return config.las_thresholds

    def pending_class(self, job: PendingJob, now: float, config: SchedulerConfig) -> float:
        if _starving(job, now, config):
            return 0.0
        return float(bisect_right(self.thresholds(config), job.attained_service))

    def running_class(self, job: RunningJob, now: float, config: SchedulerConfig) -> float:
        return float(bisect_right(self.thresholds(config), running_service(job, now)))

    def pending_classes(self, pending: Sequence[PendingJob], now: float, config: SchedulerConfig) -> list[float]:
        thresholds = self.thresholds(config)
        # Below the first threshold is the top queue: most pending jobs never ran, no search needed.
        first = thresholds[0] if thresholds else math.inf
        factor, minimum = config.starvation_factor, config.starvation_min_wait
        classes = []
        for job in pending:
            ran = job.attained_time
            if ran > 0 and now - job.waiting_since >= max(minimum, factor * ran):
                classes.append(0.0)  # starving: back to the top queue
            elif job.attained_service < first:
                classes.append(0.0)
            else:
                classes.append(float(bisect_right(thresholds, job.attained_service)))
        return classes

    def running_classes(self, runs: Sequence[RunningJob], now: float, config: SchedulerConfig) -> list[float]:
        thresholds = self.thresholds(config)
        classes = []
        for run in runs:
            gpus = cores = 0
            for placement in run.placements:
                gpus += len(placement.gpu_ids)
                cores += placement.cpu_millicores / MILLICORES if placement.cpu_millicores else len(placement.cpu_ids)
            rate = gpus or cores or 1
            service = run.attained_service + rate * max(0.0, now - run.started_at)
            classes.append(float(bisect_right(thresholds, service)))
        return classes


class Balanced(Las):
    """Least attained service on a fine ladder. Among jobs of one level, a job whose run time is
    predicted from the history of jobs like it (``PendingJob.predicted_duration``, trusted
    predictions only) is ordered by the service it still needs, and the others by the service
    they attained, as ``las`` orders them: shortest predicted first, as SJF does where durations
    are known. A job trusted to be long thus waits behind the level's jobs nothing is known of,
    which least-attained-service takes to be short. Predictions reorder waiting jobs only; who
    may preempt whom stays the ladder's."""

    tie_attributes = ("attained_service", "waiting_since")

    def thresholds(self, config: SchedulerConfig) -> Sequence[float]:
        return _ladder(config.balanced_base, config.balanced_ratio, config.balanced_levels)

    def by_tie(self, pending: Sequence[PendingJob]) -> list[PendingJob]:
        ranked = super().by_tie(pending)
        if any(job.predicted_duration is not None for job in ranked):
            ranked.sort(key=_service_still_needed)  # stable: equal needs keep the order above
        return ranked

    def may_preempt(self, mine: float, victim: RunningJob, theirs: float, now: float,
                    config: SchedulerConfig) -> bool:
        return theirs >= mine + config.balanced_margin and now - victim.started_at >= config.min_run_before_preempt


def _service_still_needed(job: PendingJob) -> float:
    """The service a predicted job still needs; for any other, what it attained (its LAS key)."""
    if job.predicted_duration is None:
        return job.attained_service
    return pending_rate(job) * max(0.0, job.predicted_duration - job.attained_time)


_LADDERS: dict[tuple[float, float, int], tuple[float, ...]] = {}


def _ladder(base: float, ratio: float, levels: int) -> tuple[float, ...]:
    key = (base, ratio, levels)
    if key not in _LADDERS:  # a pure function's memo: same inputs, same ladder
        _LADDERS[key] = tuple(base * ratio**k for k in range(levels - 1))
    return _LADDERS[key]


class SrtfOracle(Policy):
    # Remaining service decides; equal remaining service is ordered by age.
    def pending_class(self, job: PendingJob, now: float, config: SchedulerConfig) -> float:
        if job.expected_duration is None:
            return math.inf
        return pending_rate(job) * max(0.0, job.expected_duration - job.attained_time)

    def running_class(self, job: RunningJob, now: float, config: SchedulerConfig) -> float:
        if job.expected_duration is None:
            return math.inf
        ran = job.attained_time + max(0.0, now - job.started_at)
        return running_rate(job.placements) * max(0.0, job.expected_duration - ran)


POLICY_TABLE: dict[str, Policy] = {
    "fifo": Fifo("fifo", preemptive=False, strict=True, fair_share=False, ahead_phrase="submitted before it",
                 weighs_time=False),
    "backfill": Fifo("backfill", preemptive=False, backfill=True, fair_share=False,
                     ahead_phrase="submitted before it"),
    "priority": Priority("priority", preemptive=True, ahead_phrase="of higher priority"),
    "las": Las("las", preemptive=True, fair_share=False, ahead_phrase="with less attained service"),
    "srtf-oracle": SrtfOracle("srtf-oracle", preemptive=True, fair_share=False,
                              ahead_phrase="with less remaining service"),
    "balanced": Balanced("balanced", preemptive=True, ahead_phrase="with less attained service"),
}


def weighs_time(policy: str) -> bool:
    """Whether `policy`'s decisions may change with the clock alone (`Policy.weighs_time`)."""
    return POLICY_TABLE[policy].weighs_time
