"""Elastic jobs' scaling curves, learned from the throughput they report as they run.

A job reports its throughput with `mlyard.sdk.report(samples_per_second=…)` (all of its
replicas' samples, from rank 0, as `examples/digits_ddp.py` does). Every attempt of an elastic
job runs at one size, so each attempt that reported gives one point: its number of replicas and
the median of its reports (the first epoch's warm-up does not move a median). Once a job has
run at two sizes or more, Amdahl's law is fitted to its points: ``1 / throughput`` is linear in
``1 / replicas`` (``(s + (1 - s) / k) / T1``), so a least-squares line gives the serial fraction
``s`` that the scheduler weighs idle GPUs by (`scheduler/scaling.py`). A job seen at one size
only has no curve yet and is taken to scale linearly, as before.

The controller refits a running elastic job at most every `REFIT_SECONDS`: its reports come
every epoch, and its size changes far less often.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mlyard.server.store.rows import AttemptRow, MetricRow, ReplicaRow

THROUGHPUT = "samples_per_second"
REFIT_SECONDS = 60.0


def fit_serial_fraction(points: Sequence[tuple[int, float]]) -> float | None:
    """Amdahl's serial fraction (0 to 1) of (replicas, throughput) points; None with fewer than
    two sizes, or points no curve of the law comes near (throughput falling as replicas grow
    fits ``s = 1``: more replicas add nothing)."""
    usable = [(replicas, throughput) for replicas, throughput in points
              if replicas > 0 and throughput > 0 and math.isfinite(throughput)]
    if len({replicas for replicas, _ in usable}) < 2:
        return None
    xs = [1.0 / replicas for replicas, _ in usable]
    ys = [1.0 / throughput for _, throughput in usable]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
             / sum((x - mean_x) ** 2 for x in xs))
    intercept = mean_y - slope * mean_x
    if slope <= 0:
        return 1.0
    return min(1.0, max(0.0, intercept / (intercept + slope)))


def observed_points(session: Session, job_id: int) -> list[tuple[int, float]]:
    """(replicas, median throughput) of each attempt of the job that reported its throughput."""
    sizes = dict(session.execute(
        select(AttemptRow.number, func.count(ReplicaRow.id)).join(ReplicaRow, ReplicaRow.attempt_id == AttemptRow.id)
        .where(AttemptRow.job_id == job_id).group_by(AttemptRow.number)).all())
    reports: dict[int, list[float]] = defaultdict(list)
    for attempt, value in session.execute(select(MetricRow.attempt, MetricRow.value).where(
            MetricRow.job_id == job_id, MetricRow.name == THROUGHPUT, MetricRow.rank == 0)):
        reports[attempt].append(value)
    return [(sizes[attempt], statistics.median(values)) for attempt, values in reports.items() if attempt in sizes]


class ScalingFits:
    """The fitted serial fraction of each running elastic job, kept between passes. Only the
    controller's thread uses an instance."""

    def __init__(self, *, refit_seconds: float = REFIT_SECONDS):
        self.refit_seconds = refit_seconds
        self._fits: dict[int, tuple[float, float | None]] = {}
        """Job → (when it was fitted, its serial fraction or None)."""
        self.fitted = 0
        """Fits made so far (the tests read it)."""

    def fractions(self, session: Session, job_ids: Iterable[int], now: float) -> dict[int, float]:
        """The serial fraction of each of `job_ids` that has a curve; the jobs not asked about
        any more are forgotten."""
        wanted = set(job_ids)
        for gone in self._fits.keys() - wanted:
            del self._fits[gone]
        for job_id in wanted:
            known = self._fits.get(job_id)
            if known is None or now - known[0] >= self.refit_seconds:
                self._fits[job_id] = (now, fit_serial_fraction(observed_points(session, job_id)))
                self.fitted += 1
        return {job_id: fraction for job_id, (_, fraction) in self._fits.items() if fraction is not None}
