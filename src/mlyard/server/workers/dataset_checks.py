"""Stores the cleaning reports of dataset versions once the jobs that make them end
(`services/datasets/checks.py`): the report the job left in its checkpoint directory when it
succeeded, or why there is none.

The report comes from a job, so it is read as hostile data: at most `MAX_REPORT_BYTES`, JSON
(never anything executable), and only a dict of this format is kept.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import time

from sqlalchemy import select

from mlyard.paths import Paths
from mlyard.server.loop import Loop
from mlyard.server.services.datasets.checks import REPORT_FILE
from mlyard.server.store.dataset_rows import DatasetCheckRow
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobEventRow, JobRow
from mlyard.spec import TERMINAL_STATUSES, JobStatus

log = logging.getLogger(__name__)
POLL_SECONDS = 2.0
BATCH = 16
MAX_REPORT_BYTES = 64 * 1024 * 1024
REPORT_FORMAT = 1


class DatasetChecks:
    def __init__(self, database: Database, paths: Paths):
        self.database = database
        self.paths = paths
        self._loop = Loop("mlyard-dataset-checks", self._pass, retry_seconds=POLL_SECONDS,
                          failure="dataset checks: pass failed")

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _pass(self) -> float:
        with self.database.reading() as session:
            due = session.execute(
                select(DatasetCheckRow.id, DatasetCheckRow.job_id, JobRow.status, JobRow.message)
                .join(JobRow, JobRow.id == DatasetCheckRow.job_id)
                .where(DatasetCheckRow.state == "running",
                       JobRow.status.in_([status.value for status in TERMINAL_STATUSES]))
                .order_by(DatasetCheckRow.id).limit(BATCH)).all()
        for check_id, job_id, status, job_message in due:
            if status != JobStatus.SUCCEEDED.value:
                self._settle(check_id, job_id, None, f"the job ended {status}: {job_message or 'no report'}")
                continue
            report, problem = self._read(job_id)
            self._settle(check_id, job_id, report, problem or "")
        return 0.0 if len(due) == BATCH else POLL_SECONDS

    def _read(self, job_id: int) -> tuple[dict | None, str | None]:
        """The job's report, or why it cannot be kept. The job's account owns its checkpoint
        directory and may put anything there: a link (to another job's report, to a file the
        leader may read and the job may not) or a FIFO that would block the leader. Only a
        regular file named there is read, opened without following a link or waiting."""
        try:
            content = _read_regular(self.paths.checkpoint_directory(job_id), REPORT_FILE, MAX_REPORT_BYTES + 1)
        except OSError as error:
            return None, f"the job left no report ({error.strerror or error})"
        if len(content) > MAX_REPORT_BYTES:
            return None, f"the job's report is over {MAX_REPORT_BYTES >> 20} MiB"
        try:
            report = json.loads(content)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            return None, f"the job's report is not JSON: {error}"
        if not well_formed(report):
            return None, f"the job's report is not a cleaning report of format {REPORT_FORMAT}"
        return report, None

    def _settle(self, check_id: int, job_id: int, report: dict | None, problem: str) -> None:
        now = time.time()
        with self.database.transaction() as session:
            row = session.get(DatasetCheckRow, check_id, with_for_update={"of": DatasetCheckRow})
            if row is None or row.state != "running":
                return
            row.state, row.finished_at, row.report, row.message = ("done" if report is not None else "failed",
                                                                     now, report, problem)
            row.summary = report["summary"] if report is not None else None
            job = session.get(JobRow, job_id)
            said = (f"cleaning report {check_id} stored: {_counts(report['summary'])}" if report is not None
                    else f"cleaning report {check_id} failed: {problem}")
            if job is not None:
                session.add(JobEventRow(job_id=job_id, at=now, from_status=job.status, to_status=job.status,
                                        message=said))
        log.info("job %s: %s", job_id, said)


_GROUPS = {"exact_duplicates": "paths", "near_duplicates": "paths", "leaks": "paths", "label_conflicts": "paths",
           "corrupt": "path", "wrong_extension": "path", "label_issues": "path"}


def well_formed(report: object) -> bool:
    """A dict of this format whose groups hold what `clean` reads: a report that is not is kept
    out, so that nothing later trips on its shape."""
    if not isinstance(report, dict) or report.get("format") != REPORT_FORMAT or not isinstance(report.get("summary"), dict):
        return False
    for key, field in _GROUPS.items():
        listed = report.get(key) or []
        if not isinstance(listed, list) or not all(isinstance(item, dict) for item in listed):
            return False
        values = [item.get(field) for item in listed]
        if field == "paths" and not all(isinstance(paths, list) and all(isinstance(path, str) for path in paths)
                                        for paths in values):
            return False
        if field == "path" and not all(isinstance(path, str) for path in values):
            return False
    empty = report.get("empty") or []
    return isinstance(empty, list) and all(isinstance(path, str) for path in empty)


def _read_regular(folder, name: str, limit: int) -> bytes:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    directory = os.open(folder, flags | os.O_DIRECTORY)
    try:
        descriptor = os.open(name, flags | os.O_NONBLOCK, dir_fd=directory)
    finally:
        os.close(directory)
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(errno.EINVAL, "it is not a regular file")
        return handle.read(limit)


def _counts(summary: dict) -> str:
    found = [f"{value} {key.replace('_', ' ')}" for key, value in summary.items()
             if isinstance(value, int) and not isinstance(value, bool) and value]
    return ", ".join(found) or "no problem found"
