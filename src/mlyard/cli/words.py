"""How the CLI words times and statuses: durations, ages, run times, and the colour of each
status (a Rich style name). No Rich here: `mlyard jobs` prints without it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mlyard.job_status import JobStatus

if TYPE_CHECKING:
    from mlyard.api.jobs import JobInfo

STATUS_STYLES = {
    JobStatus.QUEUED: "yellow",
    JobStatus.SCHEDULED: "cyan",
    JobStatus.STARTING: "cyan",
    JobStatus.RUNNING: "blue",
    JobStatus.RESTARTING: "magenta",
    JobStatus.PREEMPTED: "magenta",
    JobStatus.SUCCEEDED: "green",
    JobStatus.FAILED: "red",
    JobStatus.CANCELLED: "dim",
}


def ago(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return duration(time.time() - timestamp) + " ago"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def job_runtime(job: JobInfo) -> float | None:
    if job.started_at is None:
        return None
    return (job.finished_at or time.time()) - job.started_at
