"""The code a project keeps, against its storage limit.

A snapshot is stored once (content-addressed) but counted once for every project whose jobs
use it: uploading with `?project=` or submitting a job charges the project the first time,
and a charge that would take the project past `max_storage_bytes` is refused before anything
is kept. A maintainer releases a snapshot no unfinished job of the project needs; the blob
itself goes when no project keeps it.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mlyard.errors import Conflict, MlyardError, NotFound
from mlyard.api.projects import ProjectStorage, StoredSnapshot
from mlyard.server import auth
from mlyard.server.auth import Role
from mlyard.server.store.db import Database, insert_if_absent
from mlyard.server.store.rows import JobRow, ProjectRow, ProjectSnapshotRow, SnapshotRow
from mlyard.spec import JobStatus, format_bytes
from mlyard.storage import BlobStore

log = logging.getLogger(__name__)
_UNFINISHED = [status.value for status in JobStatus if not status.is_terminal]


class QuotaExceeded(MlyardError):
    http_status = 403
    code = "quota_exceeded"


def used_bytes(session: Session, project: str) -> int:
    return session.scalar(select(func.coalesce(func.sum(ProjectSnapshotRow.size), 0))
                          .where(ProjectSnapshotRow.project == project)) or 0


def check_room(session: Session, project: str, digest: str, size: int, *, field: str) -> bool:
    """Whether `project` already keeps `digest`; raises QuotaExceeded if keeping it too would
    take the project past its limit. Locks the project's row, so charges in flight add up."""
    if session.get(ProjectSnapshotRow, (project, digest)) is not None:
        return True
    row = session.get(ProjectRow, project, with_for_update=True, populate_existing=True)
    limit = row.max_storage_bytes if row is not None else None
    if limit is not None:
        used = used_bytes(session, project)
        if used + size > limit:
            raise QuotaExceeded(
                f"project {project!r} keeps {format_bytes(used)} of code of its {format_bytes(limit)} storage "
                f"limit; this snapshot needs {format_bytes(size)} more (`mlyard projects storage {project}` lists "
                "what it keeps; a maintainer can release old code)", field=field)
    return False


def charge(session: Session, project: str, digest: str, size: int, *, field: str = "snapshot") -> None:
    """Records that `project` keeps `digest` (see `check_room`)."""
    now = time.time()
    if check_room(session, project, digest, size, field=field):
        session.get(ProjectSnapshotRow, (project, digest)).last_used_at = now
        return
    insert_if_absent(session, ProjectSnapshotRow, project=project, digest=digest, size=size, first_used_at=now,
                     last_used_at=now)


def _visible_project(session: Session, principal: auth.Principal, name: str) -> ProjectRow:
    row = session.get(ProjectRow, name)
    if row is None or not auth.may_read_project(principal, name):
        raise NotFound(f"project {name!r} does not exist", field="name")
    return row


def _storage(session: Session, row: ProjectRow) -> ProjectStorage:
    jobs = dict(session.execute(
        select(JobRow.snapshot, func.count()).where(JobRow.project == row.name, JobRow.snapshot.is_not(None))
        .group_by(JobRow.snapshot)).all())
    unfinished = dict(session.execute(
        select(JobRow.snapshot, func.count())
        .where(JobRow.project == row.name, JobRow.snapshot.is_not(None), JobRow.status.in_(_UNFINISHED))
        .group_by(JobRow.snapshot)).all())
    kept = session.scalars(select(ProjectSnapshotRow).where(ProjectSnapshotRow.project == row.name)
                           .order_by(ProjectSnapshotRow.last_used_at.desc(), ProjectSnapshotRow.digest)).all()
    return ProjectStorage(
        project=row.name, used_bytes=sum(snapshot.size for snapshot in kept), limit_bytes=row.max_storage_bytes,
        snapshots=[StoredSnapshot(digest=snapshot.digest, size=snapshot.size, jobs=jobs.get(snapshot.digest, 0),
                                  unfinished_jobs=unfinished.get(snapshot.digest, 0),
                                  first_used_at=snapshot.first_used_at, last_used_at=snapshot.last_used_at)
                   for snapshot in kept])


def get_storage(database: Database, principal: auth.Principal, name: str) -> ProjectStorage:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        return _storage(session, _visible_project(session, principal, name))


def release(database: Database, blobs: BlobStore, principal: auth.Principal, name: str,
            digest: str) -> ProjectStorage:
    """Stops counting `digest` for the project (its maintainers). Finished jobs keep their
    record; resubmitting one needs the code uploaded again."""
    with database.transaction() as session:
        row = _visible_project(session, principal, name)
        auth.require_role(principal, name, Role.MAINTAINER, f"release code of project {name!r}")
        kept = session.get(ProjectSnapshotRow, (name, digest))
        if kept is None:
            raise NotFound(f"project {name!r} keeps no snapshot {digest[:12]}", field="digest")
        running = session.scalar(select(func.count()).select_from(JobRow).where(
            JobRow.project == name, JobRow.snapshot == digest, JobRow.status.in_(_UNFINISHED)))
        if running:
            raise Conflict(f"{running} unfinished job{'' if running == 1 else 's'} of project {name!r} "
                           f"use{'s' if running == 1 else ''} snapshot {digest[:12]}; release it when they end",
                           field="digest")
        session.delete(kept)
        session.flush()
        orphan = (session.scalar(select(func.count()).select_from(ProjectSnapshotRow)
                                 .where(ProjectSnapshotRow.digest == digest)) == 0
                  and session.scalar(select(func.count()).select_from(JobRow).where(
                      JobRow.snapshot == digest, JobRow.status.in_(_UNFINISHED))) == 0)
        if orphan:
            snapshot = session.get(SnapshotRow, digest)
            if snapshot is not None:
                session.delete(snapshot)
        storage = _storage(session, row)
    if orphan:
        blobs.remove(digest)
        log.info("snapshot %s removed: no project keeps it", digest[:12])
    return storage
