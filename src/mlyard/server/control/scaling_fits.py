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
every epoch, and its size changes far less often. Each fit reads only the reports that came
since the last (through the index on job and id) and keeps the latest `REPORTS_KEPT` of each
attempt, so a job that has run for days costs what it reported in the last minute.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mlyard.server.store.rows import AttemptRow, MetricRow, ReplicaRow

THROUGHPUT = "samples_per_second"
REFIT_SECONDS = 60.0
REPORTS_KEPT = 64
"""Throughput reports of one attempt its median is taken over (the latest)."""


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


def _sizes(session: Session, job_id: int) -> dict[int, int]:
    """Replicas of each attempt of the job."""
    return dict(session.execute(
        select(AttemptRow.number, func.count(ReplicaRow.id)).join(ReplicaRow, ReplicaRow.attempt_id == AttemptRow.id)
        .where(AttemptRow.job_id == job_id).group_by(AttemptRow.number)).all())


@dataclass(slots=True)
class _Job:
    read_up_to: int = 0
    """The id of the last metric row read: each fit reads only the rows reported since."""
    reports: dict[int, deque[float]] = field(default_factory=dict)
    """Attempt → its latest throughput reports, `REPORTS_KEPT` at most."""
    fitted_at: float = -math.inf
    fraction: float | None = None


class ScalingFits:
    """The fitted serial fraction of each running elastic job, kept between passes. Only the
    controller's thread uses an instance."""

    def __init__(self, *, refit_seconds: float = REFIT_SECONDS):
        self.refit_seconds = refit_seconds
        self._jobs: dict[int, _Job] = {}
        self.fitted = 0
        """Fits made so far (the tests read it)."""

    def fractions(self, session: Session, job_ids: Iterable[int], now: float) -> dict[int, float]:
        """The serial fraction of each of `job_ids` that has a curve; the jobs not asked about
        any more are forgotten."""
        wanted = set(job_ids)
        for gone in self._jobs.keys() - wanted:
            del self._jobs[gone]
        for job_id in wanted:
            job = self._jobs.setdefault(job_id, _Job())
            if now - job.fitted_at >= self.refit_seconds:
                job.fraction = fit_serial_fraction(self._points(session, job_id, job))
                job.fitted_at = now
                self.fitted += 1
        return {job_id: job.fraction for job_id, job in self._jobs.items() if job.fraction is not None}

    @staticmethod
    def _points(session: Session, job_id: int, job: _Job) -> list[tuple[int, float]]:
        """(replicas, median throughput) of each attempt of the job that reported its throughput.
        The rows read are those past the last read, through the index on (job, id)."""
        for row_id, attempt, value in session.execute(
                select(MetricRow.id, MetricRow.attempt, MetricRow.value).where(
                    MetricRow.job_id == job_id, MetricRow.id > job.read_up_to, MetricRow.name == THROUGHPUT,
                    MetricRow.rank == 0).order_by(MetricRow.id)):
            job.reports.setdefault(attempt, deque(maxlen=REPORTS_KEPT)).append(value)
            job.read_up_to = row_id
        if len(job.reports) < 2:
            return []
        sizes = _sizes(session, job_id)
        return [(sizes[attempt], statistics.median(values)) for attempt, values in job.reports.items()
                if attempt in sizes]
