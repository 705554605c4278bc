"""The job counts kept by triggers (`store/job_counts.py`, migration 0017) match a count over the
jobs themselves, whatever changed them: ORM flushes, bulk inserts and updates, deletes, moves
between projects and queues, on SQLite and PostgreSQL, before and after folding, and for jobs
that were there before the migration."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, delete, func, insert, select, text, update

from mlyard.server import auth
from mlyard.server.services import jobs
from mlyard.server.store import job_counts
from mlyard.server.store.db import MIGRATIONS, Database, normalize_url
from mlyard.server.store.rows import JobCountRow, JobRow
from mlyard.spec import JobSpec, JobStatus

STATUSES = [status.value for status in JobStatus]
PROJECTS = ("default", "vision", "speech")
SPEC = JobSpec.model_validate({"name": "j", "command": ["true"]}).model_dump(mode="json")
QUEUES = ("default", "gpu")


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    opened = Database.open(database_url)
    yield opened
    opened.close()


def job(rng: random.Random, number: int) -> dict:
    now = time.time()
    return dict(name=f"job-{number}", project=rng.choice(PROJECTS), queue=rng.choice(QUEUES), priority=0, spec=SPEC,
                status=rng.choice(STATUSES), attempt_count=0, submitted_at=now, updated_at=now)


def check(database: Database) -> None:
    with database.reading() as session:
        for statuses in (None, {"QUEUED"}, {"QUEUED", "RUNNING", "STARTING"}, set(STATUSES[:4])):
            for projects in (None, {"vision"}, {"vision", "speech"}, set()):
                for queue in (None, "gpu"):
                    query = select(func.count()).select_from(JobRow)
                    if statuses is not None:
                        query = query.where(JobRow.status.in_(sorted(statuses)))
                    if projects is not None:
                        query = query.where(JobRow.project.in_(sorted(projects)))
                    if queue is not None:
                        query = query.where(JobRow.queue == queue)
                    kept = job_counts.total(session, statuses=statuses, projects=projects, queue=queue)
                    assert kept == session.scalar(query), (statuses, projects, queue)
        counted = {(status, queue): count for status, queue, count in session.execute(
            select(JobRow.status, JobRow.queue, func.count()).group_by(JobRow.status, JobRow.queue))}
        assert job_counts.by_status_and_queue(session) == counted


def test_the_kept_counts_follow_every_kind_of_change(database: Database) -> None:
    rng = random.Random(7)
    numbers = iter(range(10**6))
    with database.transaction() as session:  # a bulk insert, as a batch submission does
        session.execute(insert(JobRow), [job(rng, next(numbers)) for _ in range(300)])
    with database.transaction() as session:  # ORM flushes, one by one
        for _ in range(20):
            session.add(JobRow(**job(rng, next(numbers))))
    check(database)
    for _ in range(4):
        with database.transaction() as session:
            ids = list(session.scalars(select(JobRow.id)))
            for job_id in rng.sample(ids, 30):  # ORM changes of status, project and queue
                row = session.get(JobRow, job_id)
                row.status = rng.choice(STATUSES)
                if rng.random() < 0.3:
                    row.project = rng.choice(PROJECTS)
                if rng.random() < 0.3:
                    row.queue = rng.choice(QUEUES)
            session.flush()
            chosen = rng.sample(ids, 50)
            # A bulk update of a status, one of something counts do not hold, and a delete.
            session.execute(update(JobRow).where(JobRow.id.in_(chosen[:40])).values(status="CANCELLED"))
            session.execute(update(JobRow).where(JobRow.id.in_(chosen[:40])).values(wait_reason="moved on"))
            session.execute(delete(JobRow).where(JobRow.id.in_(chosen[40:])))
        with pytest.raises(RuntimeError), database.transaction() as session:  # rolled back: counts too
            session.execute(update(JobRow).values(status="FAILED"))
            raise RuntimeError("rolled back")
        check(database)
    with database.reading() as session:
        rows = session.scalar(select(func.count()).select_from(JobCountRow))
    assert job_counts.fold(database, after=rows) == 0, "at the threshold, nothing is folded"
    folded = job_counts.fold(database, after=0)
    with database.reading() as session:
        left = session.scalar(select(func.count()).select_from(JobCountRow))
    assert folded == rows - left and left <= len(STATUSES) * len(PROJECTS) * len(QUEUES)
    check(database)


def test_jobs_stored_before_the_migration_are_counted(database_url: str) -> None:
    engine = create_engine(normalize_url(database_url))
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0016")
    rng = random.Random(3)
    with engine.begin() as connection:
        connection.execute(insert(JobRow.__table__), [job(rng, number) for number in range(120)])
    engine.dispose()
    database = Database.open(database_url)  # migrates to the head
    try:
        check(database)
        with database.reading() as session:
            assert session.execute(text("SELECT count(*) FROM job_counts")).scalar() <= 60
    finally:
        database.close()


def test_a_listings_total_counts_only_what_its_caller_may_see(database: Database) -> None:
    rng = random.Random(11)
    with database.transaction() as session:
        session.execute(insert(JobRow), [job(rng, number) for number in range(200)])
    with database.reading() as session:
        unfinished = [status.value for status in JobStatus if not status.is_terminal]

        def counted(*, projects=None, queue=None) -> int:
            query = select(func.count()).select_from(JobRow).where(JobRow.status.in_(unfinished))
            if projects is not None:
                query = query.where(JobRow.project.in_(projects))
            if queue is not None:
                query = query.where(JobRow.queue == queue)
            return session.scalar(query)

        member = auth.Principal(name="ann", user_id=None, roles={"vision": auth.Role.VIEWER})
        admin = auth.Principal(name="admin", user_id=None, is_admin=True)
        outsider = auth.Principal(name="bob", user_id=None)
        cases = (
            (admin, {}, counted()), (admin, {"project": "speech"}, counted(projects=["speech"])),
            (admin, {"queue": "gpu"}, counted(queue="gpu")),
            (member, {}, counted(projects=["vision"])),
            (member, {"queue": "gpu"}, counted(projects=["vision"], queue="gpu")),
            (member, {"project": "speech"}, 0), (outsider, {}, 0))
    for principal, filters, expected in cases:
        assert jobs.page_jobs(database, principal, limit=1, **filters).total == expected, (principal.name, filters)


def test_a_reader_of_one_snapshot_does_not_see_what_commits_between_its_statements(database: Database) -> None:
    """A scrape reads the kept counts and then the held cores: a job started between the two
    must be in both or in neither (`telemetry.collect`)."""
    rng = random.Random(3)

    def insert_one() -> None:
        with database.transaction() as writer:
            writer.execute(insert(JobRow), [job(rng, 1)])

    with database.reading(one_snapshot=True) as session:
        before = job_counts.total(session)
        insert_one()
        assert session.scalar(select(func.count()).select_from(JobRow)) == before
    with database.reading() as session:
        assert job_counts.total(session) == before + 1
