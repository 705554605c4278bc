"""Project volumes: named, persistent, read-write directories with a size quota that jobs mount.

A project's viewers see its volumes; its members create them and mount them in jobs; the one
who made a volume, the project's maintainers and administrators remove it. The backend keeps
the storage (`Backend.create_volume`): made once the row is stored, outside any transaction
(on Kubernetes it is a call to the API server), the row removed again if the backend refuses;
removed after the row is gone. The quota counts
against the project's storage limit whole, from its creation, as a Kubernetes ResourceQuota
counts a claim's request; what the volume holds is measured by the leader
(`workers/volume_usage.py`). A volume measured above its quota cannot be mounted by new jobs.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable, Sequence

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mlyard.api.volumes import VolumeInfo, VolumeRequest
from mlyard.backends.base import Backend, VolumeMount
from mlyard.errors import Conflict, InvalidRequest, NotFound
from mlyard.server import auth
from mlyard.server.services import project_storage, projects
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow
from mlyard.server.store.volume_rows import VolumeMountRow, VolumeRow
from mlyard.spec import JobSpec, JobStatus, format_bytes

log = logging.getLogger(__name__)
UNFINISHED = [status.value for status in JobStatus if not status.is_terminal]


def _missing(project: str, name: str) -> NotFound:
    return NotFound(f"volume {project}/{name} does not exist (or you may not see it); `mlyard volumes ls` lists "
                    "the volumes you see", field="name")


def _find(session: Session, project: str, name: str, *, lock: bool = False) -> VolumeRow | None:
    query = select(VolumeRow).where(VolumeRow.project == project, VolumeRow.name == name)
    return session.scalar(query.with_for_update(of=VolumeRow) if lock else query)


def seen(session: Session, principal: auth.Principal, project: str, name: str, *, lock: bool = False) -> VolumeRow:
    row = _find(session, project, name, lock=lock)
    if row is None or not auth.may_read_project(principal, project):
        raise _missing(project, name)
    return row


def _mounted_by(session: Session, volume_ids: Sequence[int]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {volume_id: [] for volume_id in volume_ids}
    rows = session.execute(
        select(VolumeMountRow.volume_id, VolumeMountRow.job_id)
        .join(JobRow, JobRow.id == VolumeMountRow.job_id)
        .where(VolumeMountRow.volume_id.in_(volume_ids), JobRow.status.in_(UNFINISHED))
        .order_by(VolumeMountRow.job_id))
    for volume_id, job_id in rows:
        found[volume_id].append(job_id)
    return found


def info(row: VolumeRow, mounted_by: list[int]) -> VolumeInfo:
    return VolumeInfo(
        project=row.project, name=row.name, description=row.description, size_bytes=row.size_bytes,
        used_bytes=row.used_bytes, measured_at=row.measured_at, over_quota=row.over_quota_since is not None,
        enforcement=row.enforcement, created_by=row.creator.name if row.creator else None,
        created_at=row.created_at, mounted_by=mounted_by)


def create_volume(database: Database, principal: auth.Principal, request: VolumeRequest, backend: Backend) -> VolumeInfo:
    auth.authorize(principal, auth.Action.WRITE)
    project = request.project
    claim = f"mlyard-vol-{secrets.token_hex(8)}"
    try:
        with database.transaction() as session:
            projects.ensure_project(session, principal, project)
            auth.require_role(principal, project, auth.Role.MEMBER, f"create volumes in project {project!r}")
            if _find(session, project, request.name) is not None:
                raise Conflict(f"volume {project}/{request.name} exists", field="name")
            project_storage.check_volume_room(session, project, request.size_bytes)
            row = VolumeRow(project=project, name=request.name, claim=claim, description=request.description,
                            size_bytes=request.size_bytes, created_by=principal.user_id, created_at=time.time())
            session.add(row)
    except IntegrityError as error:  # made meanwhile by another request (PostgreSQL)
        raise Conflict(f"volume {project}/{request.name} exists", field="name") from error
    # Outside any transaction: on Kubernetes this is a call to the API server.
    try:
        enforcement = backend.create_volume(claim, request.size_bytes)
    except BaseException:
        with database.transaction() as session:
            session.execute(delete(VolumeRow).where(VolumeRow.claim == claim))
        backend.remove_volume(claim)
        raise
    with database.transaction() as session:
        row = session.scalar(select(VolumeRow).where(VolumeRow.claim == claim).with_for_update(of=VolumeRow))
        if row is None:  # removed meanwhile
            raise NotFound(f"volume {project}/{request.name} was removed while it was made", field="name")
        row.enforcement = enforcement
        session.flush()
        return info(row, [])


def list_volumes(database: Database, principal: auth.Principal, *, project: str | None = None) -> list[VolumeInfo]:
    auth.authorize(principal, auth.Action.READ)
    visible = principal.visible_projects()
    with database.reading() as session:
        query = select(VolumeRow).order_by(VolumeRow.project, VolumeRow.name)
        if visible is not None:
            query = query.where(VolumeRow.project.in_(sorted(visible)))
        if project is not None:
            query = query.where(VolumeRow.project == project)
        rows = list(session.scalars(query))
        mounted = _mounted_by(session, [row.id for row in rows])
        return [info(row, mounted[row.id]) for row in rows]


def get_volume(database: Database, principal: auth.Principal, project: str, name: str) -> VolumeInfo:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        row = seen(session, principal, project, name)
        return info(row, _mounted_by(session, [row.id])[row.id])


def remove_volume(database: Database, principal: auth.Principal, project: str, name: str,
                  remove_storage: Callable[[str], None]) -> None:
    """Refused while an unfinished job mounts it; its storage goes once its row has."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        row = seen(session, principal, project, name, lock=True)
        if row.created_by != principal.user_id or principal.role_in(project) is None:
            auth.require_role(principal, project, auth.Role.MAINTAINER, f"remove volume {project}/{name}")
        if jobs := _mounted_by(session, [row.id])[row.id]:
            listed = ", ".join(map(str, jobs[:10]))
            raise Conflict(f"volume {project}/{name} is mounted by unfinished jobs ({listed}); remove it once they "
                           "end (`mlyard cancel` stops them)", field="name")
        claim = row.claim
        session.execute(delete(VolumeMountRow).where(VolumeMountRow.volume_id == row.id))
        session.delete(row)
    try:
        remove_storage(claim)
    except Exception:  # the volume is gone; its files are left where the log says, not a failed request
        log.exception("volume %s/%s removed, but not its storage %s", project, name, claim)


def pin(session: Session, principal: auth.Principal, spec: JobSpec) -> list[VolumeRow]:
    """The volumes a job being submitted mounts, in the order of its spec: each must exist in a
    project where the submitter is a member, and not be over its quota."""
    rows = []
    for index, item in enumerate(spec.volumes):
        project = item.project or spec.project
        field = f"volumes.{index}.name"
        # Held against a removal until the job's mounts are stored (FOR KEY SHARE on PostgreSQL).
        row = session.scalar(select(VolumeRow).where(VolumeRow.project == project, VolumeRow.name == item.name)
                             .with_for_update(read=True, key_share=True, of=VolumeRow))
        if row is None or not auth.may_read_project(principal, project):
            raise NotFound(f"volume {project}/{item.name} does not exist (or you may not see it); "
                           f"`mlyard volumes create {item.name} --size 10Gi --project {project}` makes it", field=field)
        auth.require_role(principal, project, auth.Role.MEMBER, f"mount volume {project}/{item.name}")
        if row.over_quota_since is not None:
            raise InvalidRequest(over_quota(row) + "; new jobs cannot mount it until files are removed", field=field)
        rows.append(row)
    return rows


def over_quota(row: VolumeRow) -> str:
    return (f"volume {row.project}/{row.name} holds {format_bytes(row.used_bytes or 0)}, over its quota of "
            f"{format_bytes(row.size_bytes)}")


def record_mounts(session: Session, job_id: int, volumes: Iterable[VolumeRow]) -> None:
    session.add_all(VolumeMountRow(job_id=job_id, volume_id=row.id, position=position)
                    for position, row in enumerate(volumes))


def mounts_of(session: Session, job_id: int, spec: JobSpec, *,
              first_attempt: bool) -> tuple[list[VolumeMount], list[str]]:
    """What a starting job mounts, and why it may not: a volume gone, or one over its quota
    that the job's first attempt would mount."""
    rows = session.execute(select(VolumeMountRow.position, VolumeRow)
                           .join(VolumeRow, VolumeRow.id == VolumeMountRow.volume_id)
                           .where(VolumeMountRow.job_id == job_id)).all()
    found = {position: row for position, row in rows}
    mounts, problems = [], []
    for position, item in enumerate(spec.volumes):
        row = found.get(position)
        if row is None:
            problems.append(f"volume {item.project or spec.project}/{item.name} was removed")
        elif row.over_quota_since is not None and first_attempt:
            problems.append(over_quota(row))
        else:
            mounts.append(VolumeMount(name=item.name, claim=row.claim, path=item.directory))
    return mounts, problems


def total_bytes(session: Session, project: str) -> int:
    """The quotas of the project's volumes: what its storage limit counts for them."""
    return int(session.scalar(select(func.coalesce(func.sum(VolumeRow.size_bytes), 0))
                              .where(VolumeRow.project == project)) or 0)
