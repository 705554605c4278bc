"""What a replay is judged by, computed from a finished ``SimulationResult``.

Definitions (all times in seconds; only jobs that were replayed, not rejected ones):

* JCT (job completion time) = completion − submission.
* Queueing delay = JCT − run time, where run time is every second the job held
  resources (grace periods and restart overhead included), so waiting again after a
  preemption counts as queueing.
* Makespan = last completion − first submission.
* Utilization = GPU-seconds allocated / GPU-seconds available over the steady
  window between the 10th and 90th percentile of arrival times. The ramp-up at the
  start and the drain after the last arrivals say nothing about a policy and would
  dilute the difference; with fewer than two distinct arrivals the window is the
  makespan. Allocated includes jobs in their grace period or restart overhead.
* Bounded slowdown = max(1, JCT / max(duration, 10 s)): the 10 s floor keeps
  jobs of a few seconds from dominating the tail with huge ratios.
* Jain's fairness index over tenants of x = 1 / (tenant's mean bounded slowdown):
  (Σx)² / (n·Σx²), 1 when every tenant is slowed down alike, 1/n when one tenant
  gets all the service.
* Prediction error = the median relative error |predicted − duration| / duration of the
  run times predicted at arrival (``scheduler.predictions``), over the jobs that had one;
  predicted share = how many jobs had one; trusted share = how many had one the predictor
  trusted (from its key's recent errors) when they last waited, which the policy sees
  where ``EngineOptions.predictions`` hands predictions to it.
* Percentiles are nearest-rank: the value at rank ⌈p/100 · n⌉ of the sorted sample,
  always an observed value, with no interpolation and no numpy.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from mlyard.scheduler.predictions import median_relative_error

from .simulator import SimulationResult

BOUNDED_SLOWDOWN_FLOOR = 10.0
STEADY_WINDOW = (10, 90)


@dataclass(frozen=True, slots=True)
class Metrics:
    policy: str
    cluster_gpus: int
    jobs: int
    rejected: int
    avg_jct: float
    p50_jct: float
    p99_jct: float
    avg_queueing: float
    p99_queueing: float
    makespan: float
    utilization: float
    p99_bounded_slowdown: float
    preemptions_per_job: float
    jain_fairness: float
    predicted_share: float
    trusted_share: float
    prediction_error: float
    decision_p50_ms: float
    decision_p99_ms: float
    decide_calls: int
    decide_seconds: float
    wall_seconds: float

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-ready values; NaN (no jobs) becomes None."""
        return {key: None if isinstance(value, float) and math.isnan(value) else value
                for key, value in asdict(self).items()}


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of ``values`` (sorted or not); NaN for an empty sample."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def summarize(result: SimulationResult) -> Metrics:
    outcomes = result.outcomes
    jct = [job.completed_at - job.submitted_at for job in outcomes]
    queueing = [max(0.0, span - job.run_time) for span, job in zip(jct, outcomes, strict=True)]
    slowdown = [max(1.0, span / max(job.duration, BOUNDED_SLOWDOWN_FLOOR)) for span, job in zip(jct, outcomes,
                                                                                               strict=True)]
    first = min((job.submitted_at for job in outcomes), default=math.nan)
    last = max((job.completed_at for job in outcomes), default=math.nan)
    latencies = list(result.decide_seconds)
    return Metrics(
        policy=result.policy,
        cluster_gpus=result.cluster_gpus,
        jobs=len(outcomes),
        rejected=len(result.rejected),
        avg_jct=_mean(jct),
        p50_jct=percentile(jct, 50),
        p99_jct=percentile(jct, 99),
        avg_queueing=_mean(queueing),
        p99_queueing=percentile(queueing, 99),
        makespan=last - first,
        utilization=utilization(result, first, last),
        p99_bounded_slowdown=percentile(slowdown, 99),
        preemptions_per_job=sum(job.preemptions for job in outcomes) / len(outcomes) if outcomes else math.nan,
        jain_fairness=jain_index(outcomes, slowdown),
        predicted_share=_share(outcomes, lambda job: job.predicted is not None),
        trusted_share=_share(outcomes, lambda job: job.trusted),
        prediction_error=_nan_for_none(median_relative_error(
            (job.predicted, job.duration) for job in outcomes if job.predicted is not None)),
        decision_p50_ms=percentile(latencies, 50) * 1000,
        decision_p99_ms=percentile(latencies, 99) * 1000,
        decide_calls=len(latencies),
        decide_seconds=math.fsum(latencies),
        wall_seconds=result.wall_seconds,
    )


def _nan_for_none(value: float | None) -> float:
    return math.nan if value is None else value


def _share(outcomes, test) -> float:
    return sum(1 for job in outcomes if test(job)) / len(outcomes) if outcomes else math.nan


def steady_window(result: SimulationResult, first: float, last: float) -> tuple[float, float]:
    arrivals = [job.submitted_at for job in result.outcomes]
    low, high = (percentile(arrivals, p) for p in STEADY_WINDOW)
    return (low, high) if high > low else (first, last)


def utilization(result: SimulationResult, first: float, last: float) -> float:
    if not result.outcomes or not result.cluster_gpus:
        return math.nan
    start, end = steady_window(result, first, last)
    if end <= start:
        return math.nan
    times, busy = result.busy_times, result.busy_gpus
    total = 0.0
    for k, since in enumerate(times):
        until = times[k + 1] if k + 1 < len(times) else math.inf
        overlap = min(until, end) - max(since, start)
        if overlap > 0:
            total += busy[k] * overlap
    return total / (result.cluster_gpus * (end - start))


def jain_index(outcomes, slowdown: Sequence[float]) -> float:
    per_tenant: dict[str, list[float]] = defaultdict(list)
    for job, value in zip(outcomes, slowdown, strict=True):
        per_tenant[job.tenant].append(value)
    shares = [1 / _mean(values) for values in per_tenant.values()]
    if not shares:
        return math.nan
    return math.fsum(shares) ** 2 / (len(shares) * math.fsum(share * share for share in shares))
