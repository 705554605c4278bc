"""Replaying a trace at another load, and what load a trace offers a cluster.

A load factor L divides every interarrival time by L: jobs arrive L times as fast
(L = 1.2 offers 1.2× the GPU-hours per unit of time, L = 0.5 half), with the same
durations and GPU counts. Policies differ most near saturation, which a trace run
on one cluster size shows at only one point; a sweep over L shows the whole curve.

Offered load = offered GPU-seconds / (cluster GPUs × span of arrivals), where
offered is Σ GPUs × duration over every job of the trace (rejected ones too: they
were asked for) and the span runs from the first submission to the last. Above 1
the cluster cannot keep up on average and the queue grows until arrivals stop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .traces import TraceJob


@dataclass(frozen=True, slots=True)
class Offered:
    """What a trace, rescaled by ``load``, offers a cluster of ``cluster_gpus`` GPUs."""

    load: float
    gpu_seconds: float
    arrival_span: float
    """Seconds from the first submission to the last."""
    cluster_gpus: int

    @property
    def offered_load(self) -> float:
        """NaN when every job arrives at once or there is no GPU: no rate to speak of."""
        if self.arrival_span <= 0 or self.cluster_gpus <= 0:
            return math.nan
        return self.gpu_seconds / (self.cluster_gpus * self.arrival_span)

    def as_dict(self) -> dict[str, object]:
        ratio = self.offered_load
        return {"load": self.load, "offered_load": None if math.isnan(ratio) else ratio,
                "offered_gpu_hours": self.gpu_seconds / 3600, "arrival_span": self.arrival_span,
                "cluster_gpus": self.cluster_gpus}


def _check(load: float) -> None:
    if not (math.isfinite(load) and load > 0):
        raise ValueError(f"a load factor must be a positive number, not {load!r}")


def rescale(jobs: Sequence[TraceJob], load: float) -> list[TraceJob]:
    """The jobs with each submission time (from the first one's) divided by ``load``."""
    _check(load)
    if load == 1 or not jobs:
        return list(jobs)
    origin = min(job.submitted_at for job in jobs)
    # Dividing keeps the order, so the loaders' (submitted_at, job_id) sort still holds.
    return [replace(job, submitted_at=origin + (job.submitted_at - origin) / load) for job in jobs]


def offered(jobs: Sequence[TraceJob], cluster_gpus: int, load: float = 1.0) -> Offered:
    """What the trace ``jobs`` (as loaded, not yet rescaled) offers the cluster at ``load``."""
    _check(load)
    arrivals = [job.submitted_at for job in jobs]
    span = (max(arrivals) - min(arrivals)) / load if arrivals else 0.0
    gpu_seconds = math.fsum(job.gpus * job.duration for job in jobs)
    return Offered(load, gpu_seconds, span, cluster_gpus)
