"""Measures what each volume holds (`Backend.volume_usage`), on the leader, every
MLYARD_VOLUME_SCAN_INTERVAL. A volume that goes past its quota is marked (new jobs cannot mount
it: `services/volumes.py`) and every unfinished job that mounts it is told in an event; one that
comes back under its quota is unmarked, and they are told that too.

The walk runs outside any transaction: a volume of many files takes a while, and its figure is
a moment's measure anyway. A volume removed meanwhile is skipped.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import select

from mlyard.backends.base import Backend
from mlyard.errors import MlyardError
from mlyard.server.loop import Loop
from mlyard.server.services import volumes
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobEventRow, JobRow
from mlyard.server.store.volume_rows import VolumeMountRow, VolumeRow
from mlyard.spec import format_bytes

log = logging.getLogger(__name__)


class VolumeUsage:
    def __init__(self, database: Database, backend: Backend, interval: float):
        self.database = database
        self.backend = backend
        self.interval = interval
        self._loop = Loop("mlyard-volume-usage", self.measure, retry_seconds=interval,
                          failure="volumes: measuring failed")

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def measure(self) -> float:
        with self.database.reading() as session:
            claims = list(session.execute(select(VolumeRow.id, VolumeRow.claim)).all())
        now = time.time()
        for volume_id, claim in claims:
            try:
                used = self.backend.volume_usage(claim)
            except MlyardError as error:  # what it holds is unknown: kept from new jobs as if over its quota
                self._unmeasurable(volume_id, error.message, now)
                continue
            if used is not None:
                self._record(volume_id, used, now)
        return self.interval

    def _unmeasurable(self, volume_id: int, reason: str, now: float) -> None:
        with self.database.transaction() as session:
            row = session.get(VolumeRow, volume_id, with_for_update={"of": VolumeRow})
            if row is None or row.over_quota_since is not None:
                return
            row.over_quota_since = now
            self._tell(session, row, f"volume {row.project}/{row.name} cannot be measured ({reason}); new jobs "
                                     "cannot mount it until it can", now)

    def _record(self, volume_id: int, used: int, now: float) -> None:
        with self.database.transaction() as session:
            # Only the volume's row: PostgreSQL locks no row of an outer join's nullable side (its creator).
            row = session.get(VolumeRow, volume_id, with_for_update={"of": VolumeRow})
            if row is None:
                return
            row.used_bytes, row.measured_at = used, now
            over = used > row.size_bytes
            if over == (row.over_quota_since is not None):
                return
            row.over_quota_since = now if over else None
            if over:
                message = volumes.over_quota(row) + "; new jobs cannot mount it until files are removed"
            else:
                message = (f"volume {row.project}/{row.name} is back under its quota "
                           f"({format_bytes(used)} of {format_bytes(row.size_bytes)})")
            self._tell(session, row, message, now)

    @staticmethod
    def _tell(session, row: VolumeRow, message: str, now: float) -> None:
        """An event on every unfinished job that mounts the volume."""
        log.info("%s", message)
        jobs = session.execute(
            select(JobRow.id, JobRow.status).join(VolumeMountRow, VolumeMountRow.job_id == JobRow.id)
            .where(VolumeMountRow.volume_id == row.id, JobRow.status.in_(volumes.UNFINISHED)))
        session.add_all(JobEventRow(job_id=job_id, at=now, from_status=status, to_status=status, message=message)
                        for job_id, status in jobs)
