"""Resource accounting: GPU-hours and CPU-hours per user or project and per UTC day.

Counted from what attempts held, not from what jobs asked for: each attempt from its launch
to its end (now while it runs) × the GPUs and cores of its replicas, the same measure as a
job's attained service. Attempts that cross midnight are split across the days they cover,
and everything is clipped to the window asked for.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from sqlalchemy import or_, select

from mlyard.api.usage import UsageAmount, UsageDay, UsageReport, UsageRow
from mlyard.errors import InvalidRequest
from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobRow, ReplicaRow, UserRow

DAY = 86400.0
DEFAULT_WINDOW = 7 * DAY
NO_OWNER = "(none)"
"""The key of jobs without an owner (submitted with a token that belongs to no user)."""

Grouping = Literal["user", "project"]


@dataclass
class _Held:
    """One attempt: when it held resources and how much of each."""

    start: float
    end: float
    job_id: int
    owner: str
    project: str
    gpus: int = 0
    cpus: float = 0.0


@dataclass
class _Sums:
    gpu_seconds: float = 0.0
    cpu_seconds: float = 0.0
    days: dict[float, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0.0, 0.0]))
    jobs: set[int] = field(default_factory=set)

    def add(self, held: _Held, day: float, seconds: float) -> None:
        self.gpu_seconds += held.gpus * seconds
        self.cpu_seconds += held.cpus * seconds
        self.days[day][0] += held.gpus * seconds
        self.days[day][1] += held.cpus * seconds
        self.jobs.add(held.job_id)


def day_pieces(start: float, end: float) -> list[tuple[float, float]]:
    """(UTC midnight of the day, seconds within that day) for the interval [start, end)."""
    pieces = []
    cursor = start
    while cursor < end:
        midnight = (cursor // DAY) * DAY
        boundary = min(end, midnight + DAY)
        pieces.append((midnight, boundary - cursor))
        cursor = boundary
    return pieces


def _day_name(midnight: float) -> str:
    return datetime.fromtimestamp(midnight, UTC).date().isoformat()


def _hours(seconds: float) -> float:
    return seconds / 3600.0


def _days(days: dict[float, list[float]]) -> list[UsageDay]:
    return [UsageDay(day=_day_name(midnight), gpu_hours=_hours(gpu), cpu_hours=_hours(cpu))
            for midnight, (gpu, cpu) in sorted(days.items())]


def _held_attempts(database: Database, since: float, until: float, owner_id: int | None,
                   now: float) -> list[_Held]:
    """Attempts that held resources at some moment of [since, until), with their replicas summed."""
    query = (
        select(AttemptRow.id, AttemptRow.launched_at, AttemptRow.finished_at, JobRow.id, JobRow.project,
               UserRow.name, ReplicaRow.cpu_ids, ReplicaRow.gpu_ids, ReplicaRow.cpu_millicores)
        .join(JobRow, JobRow.id == AttemptRow.job_id)
        .join(ReplicaRow, ReplicaRow.attempt_id == AttemptRow.id)
        .outerjoin(UserRow, UserRow.id == JobRow.owner_id)
        .where(AttemptRow.launched_at.is_not(None), AttemptRow.launched_at < until,
               or_(AttemptRow.finished_at.is_(None), AttemptRow.finished_at > since))
    )
    if owner_id is not None:
        query = query.where(JobRow.owner_id == owner_id)
    attempts: dict[int, _Held] = {}
    with database.reading() as session:
        for attempt_id, launched, finished, job_id, project, owner, cpu_ids, gpu_ids, share in session.execute(query):
            held = attempts.get(attempt_id)
            if held is None:
                held = attempts[attempt_id] = _Held(
                    start=launched, end=finished if finished is not None else now, job_id=job_id,
                    owner=owner or NO_OWNER, project=project)
            held.gpus += len(gpu_ids or ())
            held.cpus += share / 1000 if share else len(cpu_ids or ())  # a share of a core: its fraction
    return list(attempts.values())


def report(database: Database, principal: auth.Principal, *, since: float | None = None, until: float | None = None,
           by: Grouping = "user", now: float | None = None) -> UsageReport:
    """Usage in [since, until) (default: the 7 days up to now). Administrators see every job;
    anyone else only the jobs they own, whatever grouping they ask for."""
    auth.authorize(principal, auth.Action.READ)
    now = time.time() if now is None else now
    until = now if until is None else until
    since = until - DEFAULT_WINDOW if since is None else since
    if since >= until:
        raise InvalidRequest(f"the window is empty: since ({_moment(since)}) is not before until ({_moment(until)})",
                             field="since")
    everyone = principal.is_admin
    owner_id = None if everyone else (principal.user_id if principal.user_id is not None else -1)
    groups: dict[str, _Sums] = defaultdict(_Sums)
    overall = _Sums()
    for held in _held_attempts(database, since, until, owner_id, now):
        start, end = max(held.start, since), min(held.end, until)
        key = held.owner if by == "user" else held.project
        for midnight, seconds in day_pieces(start, end):
            groups[key].add(held, midnight, seconds)
            overall.add(held, midnight, seconds)
    rows = [
        UsageRow(key=key, jobs=len(sums.jobs), gpu_hours=_hours(sums.gpu_seconds), cpu_hours=_hours(sums.cpu_seconds),
                 days=_days(sums.days))
        for key, sums in groups.items()
    ]
    rows.sort(key=lambda row: (-row.gpu_hours, -row.cpu_hours, row.key))
    return UsageReport(
        since=since, until=until, by=by, everyone=everyone, rows=rows, days=_days(overall.days),
        total=UsageAmount(gpu_hours=_hours(overall.gpu_seconds), cpu_hours=_hours(overall.cpu_seconds)),
    )


def _moment(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
