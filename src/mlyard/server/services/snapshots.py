"""Code snapshots: validated before they enter the content-addressed blob store."""

from __future__ import annotations

import time
from collections.abc import Iterable

from mlyard.api_models import SnapshotInfo
from mlyard.errors import MlyardError, NotFound, PayloadTooLarge
from mlyard.server import auth
from mlyard.server.db import Database, insert_if_absent
from mlyard.server.rows import SnapshotRow
from mlyard.storage import (
    DEFAULT_MAX_SNAPSHOT_BYTES,
    BlobStore,
    SnapshotError,
    SnapshotTooLarge,
    validate_archive,
)


class InvalidSnapshot(MlyardError):
    http_status = 422
    code = "invalid_snapshot"


def store_snapshot(
    database: Database,
    store: BlobStore,
    principal: auth.Principal,
    chunks: Iterable[bytes],
    *,
    expected_digest: str | None = None,
    max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
) -> SnapshotInfo:
    """Streams an upload into the store; an unsafe or oversized archive leaves nothing behind."""
    auth.authorize(principal, auth.Action.WRITE)
    try:
        digest, size = store.put_stream(
            chunks, expected_digest=expected_digest, validate=validate_archive, max_bytes=max_bytes
        )
    except SnapshotTooLarge as error:
        raise PayloadTooLarge(str(error)) from error
    except SnapshotError as error:
        raise InvalidSnapshot(f"snapshot rejected: {error}") from error
    with database.transaction() as session:
        # The same code is often uploaded by parallel submissions (a CI matrix): the first row stays.
        insert_if_absent(session, SnapshotRow, digest=digest, size=size, created_at=time.time(),
                         uploaded_by=principal.user_id)
    return SnapshotInfo(digest=digest, size=size)


def get_snapshot(database: Database, principal: auth.Principal, digest: str) -> SnapshotInfo:
    auth.authorize(principal, auth.Action.READ, job_id=principal.job_id)
    with database.transaction() as session:
        row = session.get(SnapshotRow, digest)
        if row is None:
            raise NotFound(f"snapshot {digest[:12]} does not exist")
        return SnapshotInfo(digest=row.digest, size=row.size)

