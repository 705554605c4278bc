"""The run times the controller predicts for waiting jobs, from the jobs that finished before
(`scheduler/predictions.py` says how a prediction is made and when it is trusted).

A job is a rerun of another when the same owner submitted a job of the same name that runs the
same thing (its commands, its roles' commands and its image; not its environment, code
snapshot or settings, which a rerun changes). Only jobs that SUCCEEDED count, by the seconds
they ran over all their attempts (`attained_time`): a failed or cancelled run says little about
how long its reruns take.

The history lives in the controller's memory. Its first pass reads the `HISTORY_LOADED` most
recently submitted succeeded jobs (`load`, through the index on status and submission time);
later passes add the jobs that finished since, as the round's catch-up read sees them go
(`queued_jobs.QueuedJobs.refresh`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.scheduler.predictions import DurationHistory
from mlyard.server.store.rows import JobRow, UserRow
from mlyard.spec import JobStatus

HISTORY_LOADED = 5000
"""Succeeded jobs read when a controller starts (the most recently submitted)."""
RerunKey = tuple[str, str, str]


def rerun_key(owner: str | None, spec: Mapping) -> RerunKey:
    """Owner, name and a digest of what the stored `spec` runs."""
    runs = json.dumps([spec.get("command"), spec.get("image"),
                       [role.get("command") for role in spec.get("roles") or ()]], sort_keys=True)
    return owner or "", str(spec.get("name", "")), hashlib.sha256(runs.encode()).hexdigest()[:16]


def load(session: Session, revision: int) -> DurationHistory:
    """The history of the most recently submitted succeeded jobs up to `revision` (the one the
    queue was read at: later ones come with the next catch-up), replayed in submission order.
    Each job is checked against what the key predicted just before it, as near as the rows
    tell to what was predicted when it ran, so trust is about what it was."""
    rows = session.execute(
        select(JobRow.spec, JobRow.attained_time, UserRow.name).outerjoin(UserRow, JobRow.owner_id == UserRow.id)
        .where(JobRow.status == JobStatus.SUCCEEDED.value, JobRow.revision <= revision)
        .order_by(JobRow.submitted_at.desc()).limit(HISTORY_LOADED)).all()
    history = DurationHistory()
    for row in reversed(rows):
        key = rerun_key(row.name, row.spec)
        record(history, key, row.attained_time, history.predict(key))
    return history


def record(history: DurationHistory, key: RerunKey, seconds: float | None, predicted: float | None) -> None:
    """A succeeded job of `key` that ran `seconds`; `predicted`: what the key predicted for it
    when it left the queue to run, against which the key's trust is checked."""
    history.record(key, seconds or 0.0, predicted)


def predicted(history: DurationHistory, key: RerunKey, max_runtime: float | None) -> float | None:
    """The trusted prediction for a job of `key` (`capped`)."""
    return capped(history.trusted_prediction(key), max_runtime)


def capped(seconds: float | None, max_runtime: float | None) -> float | None:
    """A prediction never past the job's `max_runtime`: it is stopped there."""
    if seconds is None or max_runtime is None:
        return seconds
    return min(seconds, max_runtime)
