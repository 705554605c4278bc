"""Parsed job specs, kept by job id for the life of the server process.

A job's spec is written once, when the job is submitted, and never changed, so it is parsed
(JSON decoded and validated into a `JobSpec`) once per job rather than on every read. The
controller's queries leave the `spec` column out (`defer(JobRow.spec)`) and ask this cache;
`load` reads the specs it has not seen in one query per chunk of jobs. Entries are dropped by
`retain` (the controller keeps those of the jobs it still handles) and, past `limit`, oldest
first. Callers must not change a returned spec: it is shared.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.server.store.rows import JobRow
from mlyard.spec import JobSpec

DEFAULT_LIMIT = 250_000
_CHUNK = 500


class SpecCache:
    """Thread-safe: the controller and request handlers share it."""

    def __init__(self, limit: int = DEFAULT_LIMIT):
        self.limit = limit
        self._specs: OrderedDict[int, JobSpec] = OrderedDict()
        self._lock = threading.Lock()
        self.parsed = 0
        """How many specs were parsed so far (the tests read it)."""

    def of(self, job: JobRow) -> JobSpec:
        """The job's spec; parsed from the row (loading a deferred column) the first time."""
        with self._lock:
            spec = self._specs.get(job.id)
        if spec is None:
            spec = self._remember(job.id, job.spec)
        return spec

    def load(self, session: Session, jobs: Iterable[JobRow]) -> dict[int, JobSpec]:
        """The specs of `jobs` by id, reading those not kept yet in a few queries."""
        ids = [job.id for job in jobs]
        with self._lock:
            found = {job_id: self._specs[job_id] for job_id in ids if job_id in self._specs}
        missing = [job_id for job_id in ids if job_id not in found]
        for start in range(0, len(missing), _CHUNK):
            chunk = missing[start:start + _CHUNK]
            for job_id, data in session.execute(select(JobRow.id, JobRow.spec).where(JobRow.id.in_(chunk))):
                found[job_id] = self._remember(job_id, data)
        return found

    def retain(self, job_ids: Iterable[int]) -> None:
        """Forgets every spec but those of `job_ids`."""
        keep = set(job_ids)
        with self._lock:
            for job_id in [job_id for job_id in self._specs if job_id not in keep]:
                del self._specs[job_id]

    def clear(self) -> None:
        with self._lock:
            self._specs.clear()

    def __len__(self) -> int:
        return len(self._specs)

    def _remember(self, job_id: int, data: dict) -> JobSpec:
        spec = JobSpec.model_validate(data)
        with self._lock:
            self.parsed += 1
            self._specs[job_id] = spec
            while len(self._specs) > self.limit:
                self._specs.popitem(last=False)
        return spec
