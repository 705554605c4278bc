"""Schema migrations carry an existing database forward (and back) without losing jobs, on
SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
import time

from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, select, text

from mlyard.server.store.db import (
    MIGRATIONS,
    SCHEMA_REVISION,
    SQLITE_LOCK_WAIT_S,
    Database,
    current_revision,
    make_engine,
)
from mlyard.server.store.rows import Base, JobEventRow, JobRow, ProjectSnapshotRow, QueueRow


def migrate_to(url: str, revision: str, *, down: bool = False) -> None:
    engine = make_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)
    engine.dispose()


def test_a_database_of_the_first_schema_gains_queues_and_keeps_its_jobs(database_url: str) -> None:
    url = database_url
    migrate_to(url, "0001")
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO jobs (id, name, project, queue, priority, spec, status, attempt_count, submitted_at, "
            "updated_at) VALUES (1, 'old', 'default', 'default', 0, '{\"name\": \"old\", \"command\": [\"true\"]}', "
            "'QUEUED', 0, 1.0, 1.0)"
        ))
    engine.dispose()

    database = Database.open(url)
    try:
        with database.transaction() as session:
            job = session.get(JobRow, 1)
            assert (job.attained_service, job.attained_time, job.preemption_count) == (0, 0, 0)
            assert job.queued_since is None and job.wait_reason is None
            session.add(QueueRow(name="team", project="default", weight=1.0, created_at=1.0, updated_at=1.0))
    finally:
        database.close()

    migrate_to(url, "0001", down=True)
    engine = make_engine(url)
    try:
        inspector = inspect(engine)
        assert "queues" not in inspector.get_table_names()
        assert "preemption_count" not in {column["name"] for column in inspector.get_columns("jobs")}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT name FROM jobs")).scalars().all() == ["old"]
    finally:
        engine.dispose()


def test_times_keep_double_precision(database_url: str) -> None:
    """Epoch seconds need 53 bits of mantissa: a single-precision column would round today's
    times to minutes."""
    database = Database.open(database_url)
    try:
        if database.engine.dialect.name == "postgresql":
            with database.engine.connect() as connection:
                types = dict(connection.execute(text(
                    "SELECT table_name || '.' || column_name, data_type FROM information_schema.columns "
                    "WHERE table_schema = current_schema()"
                )).all())
            floats = [f"{table.name}.{column.name}" for table in Base.metadata.tables.values()
                      for column in table.columns if column.type.python_type is float]
            assert floats and {types[name] for name in floats} == {"double precision"}
        now = 1_767_225_600.123456  # 2026-01-01, to the microsecond
        with database.transaction() as session:
            job = JobRow(name="t", project="default", queue="default", priority=0, spec={}, status="QUEUED",
                         attempt_count=0, submitted_at=now, updated_at=now)
            session.add(job)
            session.flush()
            session.add(JobEventRow(job_id=job.id, at=now + 1e-6, to_status="QUEUED"))
        with database.transaction() as session:
            assert session.scalars(select(JobRow.submitted_at)).one() == now
            assert session.scalars(select(JobEventRow.at)).one() == now + 1e-6
    finally:
        database.close()


def open_together(url: str, servers: int = 3) -> tuple[list[Database], list[BaseException]]:
    """`Database.open` from several threads at once, as servers starting together do: the
    databases opened and the errors raised."""
    opened: list[Database] = []
    failures: list[BaseException] = []

    def open_database() -> None:
        try:
            opened.append(Database.open(url))
        except BaseException as error:  # noqa: BLE001 - collected for the assertion
            failures.append(error)

    threads = [threading.Thread(target=open_database) for _ in range(servers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return opened, failures


def test_servers_starting_together_on_an_empty_database_both_get_the_schema(database_url: str) -> None:
    opened, failures = open_together(database_url)
    try:
        assert failures == []
        assert len(opened) == 3
        with opened[0].transaction() as session:
            session.add(QueueRow(name="team", project="default", weight=1.0, created_at=time.time(),
                                 updated_at=time.time()))
    finally:
        for database in opened:
            database.close()


def test_new_sqlite_files_opened_by_several_servers_at_once_never_report_locked(tmp_path) -> None:
    """Switching a new file to WAL takes its exclusive lock without SQLite's busy wait; the race
    is lost in a few per cent of starts, so it is run on many fresh files."""
    failures: list[BaseException] = []
    for round_ in range(25):
        opened, failed = open_together(f"sqlite:///{tmp_path / f'round-{round_}.db'}")
        failures += failed
        for database in opened:
            with database.engine.connect() as connection:
                assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
                # Other writers (a server migrating the file) are waited for, not failed at once.
                assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == SQLITE_LOCK_WAIT_S * 1000
            database.close()
    assert failures == []


def test_the_revision_a_database_is_opened_at_without_alembic_is_alembic_head(database_url: str) -> None:
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_current_head() == SCHEMA_REVISION
    migrate_to(database_url, "0002")
    Database.open(database_url).close()  # below head: migrated
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) == SCHEMA_REVISION
    finally:
        engine.dispose()


def test_the_code_of_existing_jobs_counts_for_their_projects(database_url: str) -> None:
    url = database_url
    migrate_to(url, "0008")
    engine = make_engine(url)
    digest = "a" * 64
    with engine.begin() as connection:
        connection.execute(text(f"INSERT INTO snapshots (digest, size, created_at) VALUES ('{digest}', 5000, 1.0)"))
        for job_id, submitted in ((1, 10.0), (2, 20.0)):
            connection.execute(text(
                "INSERT INTO jobs (id, name, project, queue, priority, spec, status, attempt_count, submitted_at, "
                f"updated_at, snapshot) VALUES ({job_id}, 'old', 'default', 'default', 0, '{{}}', 'SUCCEEDED', 1, "
                f"{submitted}, {submitted}, '{digest}')"))
    engine.dispose()

    database = Database.open(url)
    try:
        with database.transaction() as session:
            (kept,) = session.scalars(select(ProjectSnapshotRow)).all()
            assert (kept.project, kept.digest, kept.size) == ("default", digest, 5000)
            assert (kept.first_used_at, kept.last_used_at) == (10.0, 20.0)
    finally:
        database.close()
