"""The dataset trees of jobs (`dataset-views/<job>/<dataset>/`, `control/dataset_views.py`):
built while jobs wait, removed once they end.

Building a tree makes a hard link per file, seconds for a big version; made here, it holds up
no other job's start, and the controller, which builds what is still missing as it starts a job,
finds it there. About every second a pass reads the `dataset_reads` rows of the newest waiting
jobs (QUEUED, or RESTARTING where a server stopped before their trees were made) with the name
of each version's dataset, which names its tree, and builds the missing trees of a few jobs,
newest first, outside any transaction; a window of rows that holds nothing more to build moves
on to older jobs, back to the newest once it reaches the oldest. A job whose tree cannot be
built is logged and not tried again here: its start tries once more, and fails the job with the
reason if that fails too.

Every minute the trees of jobs that ended are removed: they hold links into the store, and a
version removed later would keep its bytes on disk through them. A job that ended never starts
again (a resubmission is a new job with trees of its own). Both run in one thread, so a tree is
never removed while it is being built.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import select

from mlyard.paths import Paths
from mlyard.server.loop import Loop
from mlyard.server.services.datasets import job_inputs
from mlyard.server.store.dataset_rows import DatasetReadRow, DatasetRow, DatasetVersionRow
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow
from mlyard.spec import TERMINAL_STATUSES, JobStatus
from mlyard.storage import BlobStore
from mlyard.storage.trees import TreeError, build, remove_read_only_tree

log = logging.getLogger(__name__)
BUILD_SECONDS = 1.0
SWEEP_SECONDS = 60.0
RETRY_SECONDS = 10.0
JOBS_PER_PASS = 4
SCAN_ROWS = 256
"""The reads one pass looks at: at least 8 jobs (a job reads at most 32 versions)."""
_ENDED = [status.value for status in TERMINAL_STATUSES]
_WAITING = [JobStatus.QUEUED.value, JobStatus.RESTARTING.value]


class DatasetViewSweep:
    def __init__(self, database: Database, paths: Paths, blobs: BlobStore):
        self.database = database
        self.paths = paths
        self.blobs = blobs
        self._loop = Loop("mlyard-dataset-views", self._pass, retry_seconds=RETRY_SECONDS,
                          failure="dataset views: pass failed")
        self._swept_at = time.monotonic()
        self._window_top: int | None = None
        """The newest job the next pass reads; None: the newest there is."""
        self._failed: set[int] = set()

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _pass(self) -> float:
        built = self.build_waiting()
        if time.monotonic() - self._swept_at >= SWEEP_SECONDS:
            self._swept_at = time.monotonic()
            self.sweep()
        return 0.0 if built == JOBS_PER_PASS else BUILD_SECONDS

    def build_waiting(self) -> int:
        """Builds the missing trees of up to JOBS_PER_PASS waiting jobs, newest first; returns
        how many jobs it took up."""
        reads = self._waiting_reads()
        missing: dict[int, list[tuple[int, str]]] = {}
        for job_id, version_id, name in reads:
            if job_id not in self._failed and not self.paths.dataset_view(job_id, name).is_dir():
                missing.setdefault(job_id, []).append((version_id, name))
        if len(missing) <= JOBS_PER_PASS:
            # The window's oldest job may have more reads past its end: the next window starts with it.
            self._window_top = reads[-1][0] if len(reads) == SCAN_ROWS else None
        due = list(missing.items())[:JOBS_PER_PASS]
        for job_id, trees in due:
            if self._loop.stopping:
                break
            self._build(job_id, trees)
        return len(due)

    def _waiting_reads(self) -> list[tuple[int, int, str]]:
        """(job, version, dataset name) of the waiting jobs' reads, newest job first."""
        query = (select(DatasetReadRow.job_id, DatasetReadRow.version_id, DatasetRow.name)
                 .join(JobRow, JobRow.id == DatasetReadRow.job_id)
                 .join(DatasetVersionRow, DatasetVersionRow.id == DatasetReadRow.version_id)
                 .join(DatasetRow, DatasetRow.id == DatasetVersionRow.dataset_id)
                 .where(JobRow.status.in_(_WAITING)))
        if self._window_top is not None:
            query = query.where(DatasetReadRow.job_id <= self._window_top)
        with self.database.reading() as session:
            rows = session.execute(query.order_by(DatasetReadRow.job_id.desc()).limit(SCAN_ROWS))
            return [(job_id, version_id, name) for job_id, version_id, name in rows]

    def _build(self, job_id: int, trees: list[tuple[int, str]]) -> None:
        try:
            with self.database.reading() as session:
                listed = [(name, job_inputs.files_of(session, version_id)) for version_id, name in trees]
            for name, files in listed:
                build(self.paths.dataset_view(job_id, name), files, self.blobs)
        except Exception as error:  # noqa: BLE001 - the job's start fails it with the reason
            self._failed.add(job_id)
            log.warning("job %s: its dataset trees were not built ahead of its start: %s", job_id, error,
                        exc_info=not isinstance(error, (TreeError, OSError)))
            return
        log.info("job %s: built %d dataset tree(s)", job_id, len(trees))

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
        self._failed -= ended
        if ended:
            log.info("removed the dataset trees of %d ended job(s)", len(ended))
        return SWEEP_SECONDS
