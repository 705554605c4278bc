"""Run times the controller predicts for waiting jobs from the reruns that succeeded before
(`control/run_times.py`), with a real database: loaded when its first pass reads the queue, and
brought up to date as reruns end."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import update

from mlyard.server.control import run_times
from mlyard.server.control.queued_jobs import QueuedJobs
from mlyard.server.store import revisions
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow
from mlyard.spec import JobStatus
from test_rounds import make_world, submit


def succeeded(database: Database, seconds: float, **fields) -> int:
    """A job that ran `seconds` over its attempts and succeeded."""
    job_id = submit(database, **fields)
    with database.transaction() as session:
        session.execute(update(JobRow).where(JobRow.id == job_id).values(
            status=JobStatus.SUCCEEDED.value, attained_time=seconds, finished_at=time.time()))
        revisions.touch(session, [job_id])
    return job_id


def predictions(database: Database, queued: QueuedJobs) -> dict[int, float | None]:
    with database.reading() as session:
        queued.refresh(session)
    return {job.job_id: job.pending.predicted_duration for job in queued.schedulable(time.time())}


def test_waiting_reruns_are_predicted_from_the_succeeded_ones_and_others_are_not(tmp_path: Path,
                                                                                  database_url: str) -> None:
    database, _, _ = make_world(tmp_path, database_url)
    for seconds in (3500, 3600, 3700, 3600, 3550, 3650):
        succeeded(database, seconds, name="train", command=["python", "train.py"])
    succeeded(database, 60, name="train", command=["python", "train.py"], max_runtime=30)
    rerun = submit(database, name="train", command=["python", "train.py"])
    limited = submit(database, name="train", command=["python", "train.py"], max_runtime=600)
    other_command = submit(database, name="train", command=["python", "evaluate.py"])
    other_name = submit(database, name="finetune", command=["python", "train.py"])
    queued = QueuedJobs()
    predicted = predictions(database, queued)
    assert 3500 <= predicted[rerun] <= 3650
    assert predicted[limited] == 600, "no job is predicted to outlive its max_runtime"
    assert predicted[other_command] is None and predicted[other_name] is None

    # Reruns that end change the prediction of those still waiting, without reading the queue again.
    version = queued.version
    for _ in range(8):
        succeeded(database, 100, name="train", command=["python", "train.py"])
    predicted = predictions(database, queued)
    assert queued.version > version
    assert predicted[rerun] is None, "predictions that stopped coming true are not trusted"
    for _ in range(8):
        succeeded(database, 100, name="train", command=["python", "train.py"])
    assert predictions(database, queued)[rerun] == 100
    database.close()


def test_failed_and_cancelled_runs_predict_nothing(tmp_path: Path, database_url: str) -> None:
    database, _, _ = make_world(tmp_path, database_url)
    for _ in range(8):
        job_id = submit(database, name="train")
        with database.transaction() as session:
            session.execute(update(JobRow).where(JobRow.id == job_id).values(
                status=JobStatus.FAILED.value, attained_time=10.0, finished_at=time.time()))
    rerun = submit(database, name="train")
    assert predictions(database, QueuedJobs())[rerun] is None
    database.close()


def test_a_run_is_checked_against_what_its_key_predicted_when_it_started(tmp_path: Path, database_url: str) -> None:
    database, _, _ = make_world(tmp_path, database_url)
    command = ["python", "train.py"]
    for _ in range(3):
        succeeded(database, 100, name="train", command=command)
    started = submit(database, name="train", command=command)
    queued = QueuedJobs()
    predictions(database, queued)  # the key predicts 100 s
    with database.transaction() as session:
        session.execute(update(JobRow).where(JobRow.id == started).values(status=JobStatus.RUNNING.value))
        revisions.touch(session, [started])
    predictions(database, queued)  # it left the queue to run
    for _ in range(3):
        succeeded(database, 1000, name="train", command=command)
    predictions(database, queued)  # the key now predicts 1,000 s
    with database.transaction() as session:
        session.execute(update(JobRow).where(JobRow.id == started).values(
            status=JobStatus.SUCCEEDED.value, attained_time=100, finished_at=time.time()))
        revisions.touch(session, [started])
    predictions(database, queued)
    with database.reading() as session:
        key = run_times.rerun_key(None, session.get(JobRow, started).spec)  # ADMIN owns no user row
    assert queued.history.recent_errors(key)[-1] == 0.0, "checked against the 100 s predicted when it started"
    database.close()
