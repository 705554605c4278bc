"""Collects the datasets jobs write (`outputs:` of their spec) once they end.

A job that names `outputs: [{dataset: NAME}]` has `MLYARD_OUTPUT_DIR` (`outputs/<job>/`, one
of its own directories, writable by its replicas). When the job has succeeded, the leading
server walks the output's folder with the checks of registered data (regular files only, no
link leading out of the folder, at most MAX_FILES), copies each file into the store (the job's
account keeps its files, so a link could change under the version), and makes the dataset's
next version, child of `latest`, with the job as its source and an event on the job; the same
files as `latest` make no version. A job that did not succeed writes nothing. Files are read
outside any transaction; a server that stops halfway leaves the output `pending` and the next
one collects it again (a blob stored twice is stored once).
"""

from __future__ import annotations

import logging
import os
import time

from sqlalchemy import func, select

from mlyard.api.datasets import LATEST
from mlyard.errors import MlyardError
from mlyard.paths import Paths
from mlyard.server.loop import Loop
from mlyard.server.services.datasets import manifests, registration, versions
from mlyard.server.store.dataset_rows import DatasetAliasRow, DatasetOutputRow, DatasetRow, DatasetVersionRow
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobEventRow, JobRow
from mlyard.spec import TERMINAL_STATUSES, JobStatus
from mlyard.storage import BlobStore

log = logging.getLogger(__name__)
POLL_SECONDS = 2.0
BATCH = 16


class DatasetOutputs:
    def __init__(self, database: Database, paths: Paths, store: BlobStore, max_blob_bytes: int):
        self.database = database
        self.paths = paths
        self.store = store
        self.max_blob_bytes = max_blob_bytes
        self._loop = Loop("mlyard-dataset-outputs", self._pass, retry_seconds=POLL_SECONDS,
                          failure="dataset outputs: pass failed")

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _pass(self) -> float:
        with self.database.reading() as session:
            due = session.execute(
                select(DatasetOutputRow.job_id, DatasetOutputRow.position, JobRow.status)
                .join(JobRow, JobRow.id == DatasetOutputRow.job_id)
                .where(DatasetOutputRow.state == "pending",
                       JobRow.status.in_([status.value for status in TERMINAL_STATUSES]))
                .order_by(DatasetOutputRow.job_id, DatasetOutputRow.position).limit(BATCH)).all()
        for job_id, position, status in due:
            if self._loop.stopping:
                break
            if status != JobStatus.SUCCEEDED.value:
                self._settle(job_id, position, "skipped", f"the job ended {status}: it wrote no version")
                continue
            try:
                self._collect(job_id, position)
            except MlyardError as error:
                self._settle(job_id, position, "failed", error.message)
            except OSError as error:  # a disk that filled, a file that went: said, not retried forever
                self._settle(job_id, position, "failed", f"cannot store the job's files: {error}")
        return 0.0 if len(due) == BATCH else POLL_SECONDS

    def _collect(self, job_id: int, position: int) -> None:
        with self.database.reading() as session:
            output = session.get(DatasetOutputRow, (job_id, position))
            project, name, folder = output.project, output.dataset, output.path
        root = os.path.realpath(self.paths.output_directory(job_id))
        directory = os.path.realpath(os.path.join(root, folder)) if folder else root
        where = f"MLYARD_OUTPUT_DIR/{folder}" if folder else "MLYARD_OUTPUT_DIR"
        if not os.path.isdir(directory) or not registration.inside(directory, [root]):
            raise MlyardError(f"dataset {project}/{name}: the job left no folder {where}")
        files = registration.scan_files(directory, [root])
        if not files:
            raise MlyardError(f"dataset {project}/{name}: the job left {where} empty")
        entries = registration.store_files(self.database, self.store, files, self.max_blob_bytes, [root])
        try:
            figures = manifests.statistics(entries, self.store.path_for)  # reads files: outside any transaction
            said = self._record(job_id, position, project, name, entries, figures)
        except MlyardError:  # refused (the project's storage limit): what only this output stored goes
            registration.forget(self.database, self.store, [entry.digest for entry in entries])
            raise
        log.info("job %s: %s", job_id, said)

    def _record(self, job_id: int, position: int, project: str, name: str, entries: list[manifests.Entry],
                figures: dict) -> str:
        """The version (or none, for the files of `latest`), the output's state and the job's event."""
        with self.database.transaction() as session:
            job = session.get(JobRow, job_id)
            dataset = self._dataset(session, job, project, name)
            parent = session.scalars(select(DatasetVersionRow).join(
                DatasetAliasRow, DatasetAliasRow.version_id == DatasetVersionRow.id)
                .where(DatasetAliasRow.dataset_id == dataset.id, DatasetAliasRow.name == LATEST)).first()
            fingerprint = manifests.fingerprint([(entry.path, entry.digest) for entry in entries])
            output = session.get(DatasetOutputRow, (job_id, position))
            if parent is not None and parent.fingerprint == fingerprint:
                output.state, output.version_id = "unchanged", parent.id
                said = f"wrote dataset {project}/{name}: the files of v{parent.number}, no new version"
            else:
                number = (session.scalar(select(func.max(DatasetVersionRow.number))
                                         .where(DatasetVersionRow.dataset_id == dataset.id)) or 0) + 1
                version = versions.add_version(
                    session, self.store, dataset, number=number, parent=parent, entries=entries, figures=figures,
                    message=self._message(session, job, position), created_by=job.owner_id, by=f"job {job_id}",
                    source_job=job_id)
                output.state, output.version_id = "stored", version.id
                said = f"wrote dataset {project}/{name} v{number} ({len(entries):,} files)"
            output.message = said
            session.add(JobEventRow(job_id=job_id, at=time.time(), from_status=job.status, to_status=job.status,
                                    message=said))
        return said

    @staticmethod
    def _dataset(session, job: JobRow, project: str, name: str) -> DatasetRow:
        """The dataset, locked; made (owned by the job's owner) if it does not exist yet."""
        dataset = session.scalars(select(DatasetRow).where(DatasetRow.project == project, DatasetRow.name == name)
                                  .with_for_update(of=DatasetRow)).first()
        if dataset is None:
            now = time.time()
            dataset = DatasetRow(project=project, name=name, owner_id=job.owner_id, description="", licence=None,
                                 tags=[], visibility="project", created_at=now, updated_at=now)
            session.add(dataset)
            session.flush()
        return dataset

    def _message(self, session, job: JobRow, position: int) -> str:
        spec = self.database.specs.of(job)
        return spec.outputs[position].message or f"written by job {job.id} ({job.name})"

    def _settle(self, job_id: int, position: int, state: str, message: str) -> None:
        with self.database.transaction() as session:
            output = session.get(DatasetOutputRow, (job_id, position))
            output.state, output.message = state, message
            if state == "failed":
                job = session.get(JobRow, job_id)
                session.add(JobEventRow(job_id=job_id, at=time.time(), from_status=job.status, to_status=job.status,
                                        message=f"no version written: {message}"))
        log.info("job %s output %s: %s (%s)", job_id, position, state, message)
