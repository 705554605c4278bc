"""Removes the dataset trees of jobs that ended (`dataset-views/<job>/`): they hold links into
the store, and a version removed later would keep its bytes on disk through them. A job that
ended never starts again (a resubmission is a new job with trees of its own)."""

from __future__ import annotations

import logging

from sqlalchemy import select

from mlyard.paths import Paths
from mlyard.server.loop import Loop
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow
from mlyard.spec import TERMINAL_STATUSES
from mlyard.storage.trees import remove_read_only_tree

log = logging.getLogger(__name__)
SWEEP_SECONDS = 60.0
_ENDED = [status.value for status in TERMINAL_STATUSES]


class DatasetViewSweep:
    def __init__(self, database: Database, paths: Paths):
        self.database = database
        self.paths = paths
        self._loop = Loop("mlyard-dataset-views", self.sweep, retry_seconds=SWEEP_SECONDS,
                          failure="dataset views: sweep failed", first_delay=SWEEP_SECONDS)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def sweep(self) -> float:
        root = self.paths.dataset_views
        present = {int(entry.name): entry for entry in root.iterdir() if entry.name.isdigit()} if root.is_dir() else {}
        if not present:
            return SWEEP_SECONDS
        with self.database.reading() as session:
            ended = set(session.scalars(select(JobRow.id).where(JobRow.id.in_(sorted(present)),
                                                                JobRow.status.in_(_ENDED))))
        for job_id in sorted(ended):
            remove_read_only_tree(present[job_id])
        if ended:
            log.info("removed the dataset trees of %d ended job(s)", len(ended))
        return SWEEP_SECONDS
