"""Training metrics a job reports (`mlyard.sdk.report`), stored by step and read back in order."""

from __future__ import annotations

import time

from sqlalchemy import func, select

from mlyard.api.metrics import METRICS_PAGE_SIZE, MetricPoint, MetricsPage, MetricsReport
from mlyard.errors import Conflict, PayloadTooLarge
from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow, MetricRow

MAX_POINTS_PER_JOB = 1_000_000
"""A job that reports more is refused: the table stays bounded whatever a training loop does."""
PAGE_SIZE = METRICS_PAGE_SIZE


def record(database: Database, principal: auth.Principal, job_id: int, report: MetricsReport) -> int:
    """Stores one step's values for the job's latest attempt; returns how many were stored."""
    auth.authorize(principal, auth.Action.REPORT, job_id=job_id)
    now = time.time()
    with database.transaction() as session:
        job = auth.visible_job(principal, session.get(JobRow, job_id), job_id)
        if principal.job_id is None:
            auth.require_role(principal, job.project, auth.Role.MEMBER, f"report metrics for job {job_id}")
        if job.attempt_count == 0:
            raise Conflict(f"job {job_id} has not started yet; metrics belong to a running attempt")
        stored = session.scalar(select(func.count()).select_from(MetricRow).where(MetricRow.job_id == job_id))
        if stored + len(report.metrics) > MAX_POINTS_PER_JOB:
            raise PayloadTooLarge(f"job {job_id} already stored {stored} metric values, the most a job may keep "
                                  f"is {MAX_POINTS_PER_JOB}; report less often")
        session.add_all(
            MetricRow(job_id=job_id, attempt=job.attempt_count, rank=report.rank, step=report.step, name=name,
                      value=value, at=now)
            for name, value in report.metrics.items()
        )
    return len(report.metrics)


def read(database: Database, principal: auth.Principal, job_id: int, *, names: list[str] | None = None,
         after: int = 0, limit: int = PAGE_SIZE) -> MetricsPage:
    """Values stored after the point `after` (an id from an earlier page), oldest first."""
    auth.authorize(principal, auth.Action.READ, job_id=job_id)
    with database.reading() as session:
        auth.visible_job(principal, session.get(JobRow, job_id), job_id)
        query = select(MetricRow).where(MetricRow.job_id == job_id, MetricRow.id > after)
        if names:
            query = query.where(MetricRow.name.in_(names))
        rows = session.scalars(query.order_by(MetricRow.id).limit(limit)).all()
        points = [MetricPoint(id=row.id, attempt=row.attempt, rank=row.rank, step=row.step, name=row.name,
                              value=row.value, at=row.at) for row in rows]
    return MetricsPage(points=points, next_after=points[-1].id if points else after)
