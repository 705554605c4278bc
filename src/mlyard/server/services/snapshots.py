"""Code snapshots: validated before they enter the content-addressed blob store."""

from __future__ import annotations

import time
from collections.abc import Iterable

from mlyard.api.snapshots import SnapshotInfo
from mlyard.errors import MlyardError, NotFound, PayloadTooLarge
from mlyard.server import auth
from mlyard.server.store.db import Database, insert_if_absent
from mlyard.server.store.rows import SnapshotRow
from mlyard.server.services import project_storage, projects
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


def admit_upload(database: Database, principal: auth.Principal, project: str | None, digest: str,
                 declared_size: int) -> None:
    """Refuses an upload before its body is read when the caller may not add code to `project`
    or the declared size would take the project past its storage limit."""
    auth.authorize(principal, auth.Action.WRITE)
    if project is None:
        return
    with database.transaction() as session:
        projects.ensure_project(session, principal, project)
        auth.require_role(principal, project, auth.Role.MEMBER, f"add code to project {project!r}")
        project_storage.check_room(session, project, digest, declared_size, field="project")


def store_snapshot(
    database: Database,
    store: BlobStore,
    principal: auth.Principal,
    chunks: Iterable[bytes],
    *,
    expected_digest: str | None = None,
    max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
    project: str | None = None,
) -> SnapshotInfo:
    """Streams an upload into the store; an unsafe or oversized archive, or one over the
    project's storage limit, leaves nothing behind. With a project, the project keeps it."""
    auth.authorize(principal, auth.Action.WRITE)
    try:
        digest, size = store.put_stream(
            chunks, expected_digest=expected_digest, validate=validate_archive, max_bytes=max_bytes
        )
    except SnapshotTooLarge as error:
        raise PayloadTooLarge(str(error)) from error
    except SnapshotError as error:
        raise InvalidSnapshot(f"snapshot rejected: {error}") from error
    try:
        with database.transaction() as session:
            # The same code is often uploaded by parallel submissions (a CI matrix): the first row stays.
            insert_if_absent(session, SnapshotRow, digest=digest, size=size, created_at=time.time(),
                             uploaded_by=principal.user_id)
            if project is not None:
                projects.ensure_project(session, principal, project)
                auth.require_role(principal, project, auth.Role.MEMBER, f"add code to project {project!r}")
                project_storage.charge(session, project, digest, size, field="project")
    except MlyardError:
        with database.transaction() as session:
            known = session.get(SnapshotRow, digest) is not None
        if not known:  # stored just now for nobody
            store.remove(digest)
        raise
    return SnapshotInfo(digest=digest, size=size)


def get_snapshot(database: Database, principal: auth.Principal, digest: str) -> SnapshotInfo:
    auth.authorize(principal, auth.Action.READ, job_id=principal.job_id)
    with database.transaction() as session:
        row = session.get(SnapshotRow, digest)
        if row is None:
            raise NotFound(f"snapshot {digest[:12]} does not exist")
        return SnapshotInfo(digest=row.digest, size=row.size)

