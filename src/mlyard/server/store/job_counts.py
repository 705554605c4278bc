"""How many jobs each (status, project, queue) holds, read from a few rows.

Triggers on `jobs` (migration 0017) add a row to `job_counts` for each job inserted (+1 where it
is) or deleted (-1 where it was), and two for each change of a job's status, project or queue
(-1 where it was, +1 where it is now); on PostgreSQL an insert or a delete of many jobs adds one
row per group. Rows are only ever added, so concurrent transactions never wait on each other
for a counter, and every way a job changes is counted, ORM flushes and bulk statements alike. A
listing's total sums the rows of the statuses, projects and queue it asks for: a few dozen rows
once folded, instead of a count over every unfinished job (24–48 ms with 100,000 queued on
PostgreSQL). `fold` sums the rows into one per group; the controller folds them every few
seconds once they have piled up.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.orm import Session

from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobCountRow

FOLD_AFTER = 256
"""Rows past which `fold` sums them up."""


def total(session: Session, *, statuses: Collection[str] | None = None, projects: Collection[str] | None = None,
          queue: str | None = None) -> int:
    """How many jobs have one of `statuses`, in one of `projects` and in `queue` (None: any)."""
    query = select(func.coalesce(func.sum(JobCountRow.n), 0))
    if statuses is not None:
        query = query.where(JobCountRow.status.in_(sorted(statuses)))
    if projects is not None:
        query = query.where(JobCountRow.project.in_(sorted(projects)))
    if queue is not None:
        query = query.where(JobCountRow.queue == queue)
    return int(session.scalar(query) or 0)


def by_status_and_queue(session: Session) -> dict[tuple[str, str], int]:
    return {(status, queue): int(count) for status, queue, count in session.execute(
        select(JobCountRow.status, JobCountRow.queue, func.sum(JobCountRow.n))
        .group_by(JobCountRow.status, JobCountRow.queue)) if count}


def fold(database: Database, after: int = FOLD_AFTER) -> int:
    """Sums the rows into one per group once there are more than `after`; how many went."""
    with database.reading() as session:
        if (session.scalar(select(func.count()).select_from(JobCountRow)) or 0) <= after:
            return 0
    with database.transaction() as session:
        if session.get_bind().dialect.name == "postgresql":
            # Writers of jobs wait for the few milliseconds this takes: a row added meanwhile
            # would be deleted below without being summed. (SQLite has one writer anyway.)
            session.execute(text("LOCK TABLE job_counts IN SHARE ROW EXCLUSIVE MODE"))
        groups = session.execute(select(JobCountRow.status, JobCountRow.project, JobCountRow.queue,
                                        func.sum(JobCountRow.n), func.count())
                                 .group_by(JobCountRow.status, JobCountRow.project, JobCountRow.queue)).all()
        session.execute(delete(JobCountRow))
        kept = [{"status": status, "project": project, "queue": queue, "n": int(n)}
                for status, project, queue, n, _rows in groups if n]
        if kept:
            session.execute(insert(JobCountRow), kept)
        return sum(rows for *_, rows in groups) - len(kept)
