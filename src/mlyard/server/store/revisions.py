"""Job revisions: which jobs changed, in commit order, so the controller reads only those.

A transaction that inserts a job or changes what the scheduler reads of one (its status,
backoff, queue, priority, service …) takes the next value of the one-row `job_revisions`
table just before it commits and stamps it on those jobs. Taking the value locks that row
until the commit, so a transaction that saw revision R committed sees every revision below R
committed too: a reader that keeps the highest revision it read never misses a change. The
lock is taken last, after every row lock of the transaction, so it cannot close a cycle of
waits. Changes the scheduler does not read (a waiting reason, an idle warning) take none.

Statements that bypass the ORM's flush (Core inserts and updates of `jobs`) call `touch`, or
take and stamp the revision themselves (`stamping`), as the last statement before the commit.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import ARRAY, Insert, Integer, any_, bindparam, event, inspect, select, update
from sqlalchemy.orm import Session

from mlyard.server.store.rows import JobRevisionRow, JobRow

SCHEDULED_COLUMNS = ("status", "restart_at", "project", "queue", "priority", "owner_id", "attained_service",
                     "attained_time", "queued_since", "submitted_at", "spec")
"""What the scheduler reads of a job; a change of anything else takes no revision."""
_CHANGED = "mlyard_changed_jobs"
_REVISION, _JOBS = JobRevisionRow.__table__, JobRow.__table__
# Built once: building a statement costs more than executing it.
_TAKE = (update(_REVISION).where(_REVISION.c.id == 1).values(value=_REVISION.c.value + 1)
         .returning(_REVISION.c.value))
_STAMP = (update(_JOBS).where(_JOBS.c.id.in_(bindparam("ids", expanding=True)))
          .values(revision=bindparam("taken")))
# PostgreSQL takes and stamps in one statement, one round trip rather than two.
_TAKE_AND_STAMP = (update(_JOBS).where(_JOBS.c.id.in_(bindparam("ids", expanding=True)))
                   .values(revision=select(_TAKE.cte("taken").c.value).scalar_subquery()))
_STAMP_CHUNK = 500


def stamping(statement: Insert) -> Insert:
    """`statement` (built once, on PostgreSQL) made to also take the next revision and stamp it
    on the jobs whose ids its parameter `job_ids` (an array) holds: one round trip for both. The
    transaction must run it after every other statement that may wait on a row lock (see the
    module's text), and then change no other job's scheduled columns."""
    taken = _TAKE.cte("taken")
    stamped = (update(_JOBS).where(_JOBS.c.id == any_(bindparam("job_ids", type_=ARRAY(Integer))))
               .values(revision=select(taken.c.value).scalar_subquery()).cte("stamped"))
    return statement.add_cte(taken).add_cte(stamped)


def touch(session: Session, job_ids: Iterable[int]) -> None:
    """Marks jobs changed by this transaction outside the ORM's flush."""
    session.info.setdefault(_CHANGED, set()).update(job_ids)


def _scheduled_change(job: JobRow) -> bool:
    state = inspect(job)
    return any(state.attrs[name].history.has_changes() for name in SCHEDULED_COLUMNS)


def _note_changes(session: Session, _context) -> None:
    changed = [job.id for job in session.new if isinstance(job, JobRow)]
    changed += [job.id for job in session.dirty if isinstance(job, JobRow) and _scheduled_change(job)]
    if changed:
        touch(session, changed)


def _stamp(session: Session) -> None:
    # A savepoint's release (and rollback) comes to these listeners too: only the transaction's
    # own commit takes the revision, and a savepoint rolled back forgets nothing of the rest.
    if session.in_nested_transaction():
        return
    session.flush()  # a change not flushed yet is noted too
    changed = session.info.pop(_CHANGED, None)
    if not changed:
        return
    ids = sorted(changed)
    if len(ids) <= _STAMP_CHUNK and session.get_bind().dialect.name == "postgresql":
        session.execute(_TAKE_AND_STAMP, {"ids": ids})
        return
    value = session.execute(_TAKE).scalar_one()
    for start in range(0, len(ids), _STAMP_CHUNK):
        session.execute(_STAMP, {"ids": ids[start:start + _STAMP_CHUNK], "taken": value})


def _forget(session: Session) -> None:
    if not session.in_nested_transaction():
        session.info.pop(_CHANGED, None)


def listen() -> None:
    """Stamps revisions in every session from now on (once per process)."""
    for name, listener in (("after_flush", _note_changes), ("before_commit", _stamp), ("after_rollback", _forget)):
        if not event.contains(Session, name, listener):
            event.listen(Session, name, listener)
