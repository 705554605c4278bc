"""Parsed specs are kept per job: each is parsed once, a chunked load reads only the unseen,
and `retain` lets go of the rest (a real SQLite database)."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import defer

from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow
from mlyard.server.store.specs import SpecCache
from mlyard.spec import JobSpec, JobStatus


def add_jobs(database: Database, count: int) -> None:
    now = time.time()
    with database.transaction() as session:
        for number in range(count):
            spec = JobSpec.model_validate({"name": f"j{number}", "command": ["python", "-c", str(number)]})
            session.add(JobRow(name=spec.name, spec=spec.model_dump(mode="json"), status=JobStatus.QUEUED.value,
                               attempt_count=0, submitted_at=now, updated_at=now))


def test_each_spec_is_parsed_once_and_only_the_retained_stay(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'mlyard.db'}")
    add_jobs(database, 1201)  # more than two chunks
    cache = SpecCache()
    with database.reading() as session:
        jobs = session.scalars(select(JobRow).options(defer(JobRow.spec)).order_by(JobRow.id)).all()
        specs = cache.load(session, jobs)
        assert cache.parsed == 1201 and [specs[job.id].command[-1] for job in jobs[:3]] == ["0", "1", "2"]
        assert cache.load(session, jobs) == specs and cache.parsed == 1201
        assert cache.of(jobs[5]) is specs[jobs[5].id] and cache.parsed == 1201
        cache.retain([jobs[0].id, jobs[1].id])
        assert len(cache) == 2
        assert cache.of(jobs[7]).command[-1] == "7" and cache.parsed == 1202  # read from the deferred column
    database.close()


def test_past_its_limit_the_oldest_go_first(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'mlyard.db'}")
    add_jobs(database, 5)
    cache = SpecCache(limit=3)
    with database.reading() as session:
        jobs = session.scalars(select(JobRow).order_by(JobRow.id)).all()
        cache.load(session, jobs)
        assert len(cache) == 3
        cache.of(jobs[4])
        assert cache.parsed == 5  # the newest was kept
        cache.of(jobs[0])
        assert cache.parsed == 6  # the oldest had gone
    database.close()
