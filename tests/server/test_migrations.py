"""Schema migrations carry an existing database forward (and back) without losing jobs."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, text

from mlyard.server.db import MIGRATIONS, Database, make_engine
from mlyard.server.rows import JobRow, QueueRow


def migrate_to(url: str, revision: str, *, down: bool = False) -> None:
    engine = make_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)
    engine.dispose()


def test_a_database_of_the_first_schema_gains_queues_and_keeps_its_jobs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mlyard.db'}"
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
