"""Which blobs of the store something still keeps, and removing the others safely.

One content-addressed store holds code snapshots, dataset files and model files: the same bytes
can be several (a snapshot archive pushed as a dataset file, weights in two models), so a blob
goes only when no snapshot row and no dataset or model version's file names it.

Removing races with adding: a version being made may name a blob that a removal has just
found unkept. Both sides take one lock: whoever adds a version takes it shared and checks,
inside its transaction, that every blob it names is in the store (`keep`); a removal takes it
exclusively, decides what is unkept and moves those blobs aside before it commits, then
deletes them, or puts them back if the commit failed (`Removal`). On PostgreSQL the lock
is a transaction-scoped advisory lock; SQLite's single writer serializes the two already.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from mlyard.errors import Conflict
from mlyard.server.store.dataset_rows import DatasetFileRow
from mlyard.server.store.model_rows import ModelFileRow
from mlyard.server.store.rows import SnapshotRow
from mlyard.storage import BlobStore

log = logging.getLogger(__name__)
_LOCK_KEY = 0x6D6C796172640001  # "mlyard" and 1: the store's removals
_CHUNK = 500


def _lock(session: Session, *, shared: bool) -> None:
    if session.get_bind().dialect.name == "postgresql":
        function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        session.execute(text(f"SELECT {function}(:key)"), {"key": _LOCK_KEY})


def keep(session: Session, store: BlobStore, digests: Collection[str]) -> None:
    """Before a version naming `digests` commits: no removal can take them now, and each is
    in the store (one removed since the caller checked is refused, not referenced)."""
    _lock(session, shared=True)
    if gone := sorted(digest for digest in set(digests) if not store.exists(digest)):
        raise Conflict(f"{len(gone)} of the files were removed from the server meanwhile (the first: "
                       f"{gone[0][:12]}); push again", field="manifest")


def unkept(session: Session, digests: Collection[str]) -> set[str]:
    """Those of `digests` that no snapshot and no dataset or model version's file names (after the caller's
    deletions in this transaction)."""
    candidates = sorted(set(digests))
    kept: set[str] = set()
    for start in range(0, len(candidates), _CHUNK):
        chunk = candidates[start:start + _CHUNK]
        kept.update(session.scalars(select(SnapshotRow.digest).where(SnapshotRow.digest.in_(chunk))))
        for files in (DatasetFileRow, ModelFileRow):
            kept.update(session.scalars(select(files.digest).where(files.digest.in_(chunk)).distinct()))
    return set(candidates) - kept


class Removal:
    """Removes the blobs a transaction left unkept, around that transaction:

        with blob_refs.Removal(store) as removal:
            with database.transaction() as session:
                ...  # delete what named `digests`
                removal.take(session, digests)

    `take` moves the unkept ones aside before the commit; leaving the outer block deletes them
    after a commit, or puts them back if the transaction failed."""

    def __init__(self, store: BlobStore):
        self.store = store
        self.removed: set[str] = set()
        self._aside: Path | None = None
        self._moved: list[str] = []

    def __enter__(self) -> Removal:
        return self

    def take(self, session: Session, digests: Collection[str]) -> set[str]:
        _lock(session, shared=False)
        session.flush()
        self.removed = unkept(session, digests)
        self._aside = Path(tempfile.mkdtemp(prefix="removing-", dir=self.store.root))
        for digest in sorted(self.removed):
            try:
                os.replace(self.store.path_for(digest), self._aside / digest)
            except FileNotFoundError:
                continue
            self._moved.append(digest)
        return self.removed

    def __exit__(self, kind, error, trace) -> None:
        if self._aside is None:
            return
        if kind is not None:  # the rows stay: so do their blobs
            for digest in self._moved:
                os.replace(self._aside / digest, self.store.path_for(digest))
        else:
            for digest in self._moved:
                self.store.remove(digest)  # the extractions a snapshot's blob keeps beside it
            if self._moved:
                log.info("removed %d blob(s) nothing keeps", len(self._moved))
        shutil.rmtree(self._aside, ignore_errors=True)
