"""Job revisions around savepoints (the audit log's row goes in one within the change's
transaction): only the transaction's own commit takes a revision, and a savepoint rolled back
leaves the changes of the rest noted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRevisionRow, JobRow


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    opened = Database.open(database_url)
    yield opened
    opened.close()


def counter(database: Database) -> int:
    with database.reading() as session:
        return session.scalar(select(JobRevisionRow.value).where(JobRevisionRow.id == 1)) or 0


def test_a_job_changed_around_savepoints_takes_one_revision_at_the_commit(database: Database) -> None:
    before = counter(database)
    now = time.time()
    with database.transaction() as session:
        job = JobRow(name="saved", project="default", queue="default", priority=0, spec={}, status="QUEUED",
                     attempt_count=0, submitted_at=now, updated_at=now)
        session.add(job)
        session.flush()
        with pytest.raises(RuntimeError), session.begin_nested():
            raise RuntimeError("rolled back")
        with session.begin_nested():  # released
            pass
        taken = session.scalar(select(JobRevisionRow.value).where(JobRevisionRow.id == 1)) or 0
        assert taken == before, "no revision taken at a savepoint's release"
    with database.reading() as session:
        revision = session.scalar(select(JobRow.revision).where(JobRow.id == job.id))
    assert counter(database) == before + 1 and revision == before + 1
