"""Code snapshots: validated before they enter the content-addressed blob store.

A digest is not a key: a caller may name one only if they sent its bytes themselves
(`SnapshotUploaderRow`) or a project they submit to keeps it (`ProjectSnapshotRow`). Anyone
else is told it does not exist and uploads it, which makes them an uploader too.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.api.snapshots import SnapshotInfo
from mlyard.errors import InvalidRequest, MlyardError, NotFound, PayloadTooLarge
from mlyard.server import auth
from mlyard.server.store.db import Database, insert_if_absent
from mlyard.server.store.rows import ProjectSnapshotRow, SnapshotRow, SnapshotUploaderRow
from mlyard.server.services import blob_refs, project_storage, projects
from mlyard.storage import (
    DEFAULT_MAX_SNAPSHOT_BYTES,
    BlobStore,
    SnapshotError,
    SnapshotTooLarge,
    UnpackLimits,
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
    limits: UnpackLimits | None = None,
) -> SnapshotInfo:
    """Streams an upload into the store; an unsafe or oversized archive (`limits`: what it may
    unpack to), or one over the project's storage limit, leaves nothing behind. The caller
    becomes one of its uploaders; with a project, the project keeps it."""
    auth.authorize(principal, auth.Action.WRITE)
    try:
        digest, size = store.put_stream(
            chunks, expected_digest=expected_digest, max_bytes=max_bytes,
            validate=lambda path: validate_archive(path, limits=limits or UnpackLimits.for_upload(max_bytes)),
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
            if principal.user_id is not None:
                insert_if_absent(session, SnapshotUploaderRow, digest=digest, user_id=principal.user_id,
                                 uploaded_at=time.time())
            if project is not None:
                projects.ensure_project(session, principal, project)
                auth.require_role(principal, project, auth.Role.MEMBER, f"add code to project {project!r}")
                project_storage.charge(session, project, digest, size, field="project")
    except MlyardError:
        with blob_refs.Removal(store) as removal, database.transaction() as session:
            removal.take(session, [digest])  # stored just now for nobody, unless a dataset has the same bytes
        raise
    return SnapshotInfo(digest=digest, size=size)


def may_use(session: Session, principal: auth.Principal, digest: str, project: str | None) -> bool:
    """Whether the caller may name `digest`: they uploaded it, or `project` (None: any project
    they may submit to) keeps it and they may submit there."""
    if principal.job_id is not None:
        return False
    if principal.user_id is not None and session.get(SnapshotUploaderRow, (digest, principal.user_id)) is not None:
        return True
    keepers = session.scalars(select(ProjectSnapshotRow.project).where(ProjectSnapshotRow.digest == digest)).all()
    candidates = keepers if project is None else [name for name in keepers if name == project]
    return any((principal.role_in(name) or 0) >= auth.Role.MEMBER for name in candidates)


def require_usable(session: Session, principal: auth.Principal, digest: str, project: str) -> SnapshotRow:
    """The snapshot a job of `project` names, if the caller may use it there; otherwise a 422 on
    `snapshot` that says to upload it (whether it exists for others is not disclosed)."""
    row = session.get(SnapshotRow, digest)
    if row is None or not may_use(session, principal, digest, project):
        raise InvalidRequest(f"snapshot {digest[:12]} is not available to you in project {project!r}; upload it "
                             f"first (PUT /api/v1/snapshots/{digest}; mlyard submit does this)", field="snapshot")
    return row


def get_snapshot(database: Database, principal: auth.Principal, digest: str,
                 project: str | None = None) -> SnapshotInfo:
    """The snapshot if the caller may use it (in `project`, when given); 404 otherwise, so the
    client uploads it."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        row = session.get(SnapshotRow, digest)
        if row is None or not may_use(session, principal, digest, project):
            raise NotFound(f"snapshot {digest[:12]} does not exist", field="digest")
        return SnapshotInfo(digest=row.digest, size=row.size)
