"""What a project keeps, against its storage limit.

One content-addressed store holds code snapshots, dataset files and model files, and a blob is
counted once for every project that keeps it: the project keeps a snapshot (`project_snapshots`:
uploading with `?project=` or submitting a job charges the project the first time) or one of its
datasets' or models' versions has a file with those bytes. A blob both a snapshot and a dataset
or model file of the project counts once. A volume counts its whole quota from its creation, as a Kubernetes
ResourceQuota counts a claim's request, whatever it holds. Usage is one SQL aggregate over the union of the two (distinct
digests, each size once), never rows loaded into Python. A charge or a version that would take
the project past `max_storage_bytes` is refused before anything is kept. A maintainer releases
a snapshot no unfinished job of the project needs; the blob itself goes when nothing keeps it.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import Select, func, literal, select, union_all
from sqlalchemy.orm import Session, aliased

from mlyard.errors import Conflict, MlyardError, NotFound
from mlyard.api.projects import ProjectStorage, StoredDataset, StoredSnapshot, StoredVolume
from mlyard.server import auth
from mlyard.server.services import blob_refs
from mlyard.server.auth import Role
from mlyard.server.store.dataset_rows import DatasetFileRow, DatasetRow, DatasetVersionRow
from mlyard.server.store.model_rows import ModelFileRow, ModelRow, ModelVersionRow
from mlyard.server.store.db import Database, insert_if_absent
from mlyard.server.store.rows import JobRow, ProjectRow, ProjectSnapshotRow, SnapshotRow
from mlyard.server.store.volume_rows import VolumeRow
from mlyard.spec import JobStatus, format_bytes
from mlyard.storage import BlobStore

log = logging.getLogger(__name__)
_UNFINISHED = [status.value for status in JobStatus if not status.is_terminal]


class QuotaExceeded(MlyardError):
    http_status = 403
    code = "quota_exceeded"


def _dataset_files(project: str, *, but_version: int | None = None) -> Select:
    """(digest, size) of every file of the project's datasets' versions (a blob once per
    file): datasets by project, versions by dataset, files by version, all index prefixes."""
    query = (select(DatasetFileRow.digest, DatasetFileRow.size)
             .join(DatasetVersionRow, DatasetVersionRow.id == DatasetFileRow.version_id)
             .join(DatasetRow, DatasetRow.id == DatasetVersionRow.dataset_id)
             .where(DatasetRow.project == project))
    return query if but_version is None else query.where(DatasetFileRow.version_id != but_version)


def _model_files(project: str, *, but_version: int | None = None) -> Select:
    """(digest, size) of every file of the project's models' versions, as `_dataset_files`."""
    query = (select(ModelFileRow.digest, ModelFileRow.size)
             .join(ModelVersionRow, ModelVersionRow.id == ModelFileRow.version_id)
             .join(ModelRow, ModelRow.id == ModelVersionRow.model_id)
             .where(ModelRow.project == project))
    return query if but_version is None else query.where(ModelFileRow.version_id != but_version)


def _sum_once(files) -> Select:
    """The query for the bytes of the distinct digests of `files` ((digest, size) rows), each once."""
    listed = files.subquery()
    blobs = select(listed.c.digest, func.max(listed.c.size).label("size")).group_by(listed.c.digest).subquery()
    return select(func.coalesce(func.sum(blobs.c.size), 0))


def _scalar(session: Session, query) -> int:
    return int(session.scalar(query) or 0)


def _volume_quotas(session: Session, project: str) -> int:
    return _scalar(session, select(func.coalesce(func.sum(VolumeRow.size_bytes), 0)).where(VolumeRow.project == project))


def used_bytes(session: Session, project: str, *, but_version: int | None = None,
               but_model_version: int | None = None) -> int:
    """What the project keeps (without the files of dataset version `but_version` or model version
    `but_model_version`): each blob once, and its volumes' quotas."""
    snapshots = select(ProjectSnapshotRow.digest, ProjectSnapshotRow.size).where(ProjectSnapshotRow.project == project)
    blobs = _scalar(session, _sum_once(union_all(snapshots, _dataset_files(project, but_version=but_version),
                                                 _model_files(project, but_version=but_model_version))))
    return blobs + _volume_quotas(session, project)


def _new_bytes(session: Session, project: str, files: Select, *, but_version: int | None = None,
               but_model_version: int | None = None) -> int:
    """Bytes of the distinct blobs of `files` ((digest, size) of dataset or model files) that the
    project keeps no other way: neither as a snapshot nor in a dataset version other than
    `but_version` nor a model version other than `but_model_version`. One index lookup by digest
    per new blob."""
    listed = files.subquery()
    blobs = select(listed.c.digest, func.max(listed.c.size).label("size")).group_by(listed.c.digest).subquery()
    other = aliased(DatasetFileRow)
    in_datasets = (select(literal(1)).select_from(other)
                   .join(DatasetVersionRow, DatasetVersionRow.id == other.version_id)
                   .join(DatasetRow, DatasetRow.id == DatasetVersionRow.dataset_id)
                   .where(other.digest == blobs.c.digest, DatasetRow.project == project))
    if but_version is not None:
        in_datasets = in_datasets.where(other.version_id != but_version)
    in_snapshots = select(literal(1)).where(ProjectSnapshotRow.project == project,
                                            ProjectSnapshotRow.digest == blobs.c.digest)
    model_file = aliased(ModelFileRow)
    in_models = (select(literal(1)).select_from(model_file)
                 .join(ModelVersionRow, ModelVersionRow.id == model_file.version_id)
                 .join(ModelRow, ModelRow.id == ModelVersionRow.model_id)
                 .where(model_file.digest == blobs.c.digest, ModelRow.project == project))
    if but_model_version is not None:
        in_models = in_models.where(model_file.version_id != but_model_version)
    return _scalar(session, select(func.coalesce(func.sum(blobs.c.size), 0))
                   .where(~in_datasets.exists(), ~in_snapshots.exists(), ~in_models.exists()))


def _limit(session: Session, project: str) -> int | None:
    """The project's storage limit, its row locked when it has one, so that charges and
    versions in flight add up (FOR NO KEY UPDATE: rows naming the project are not held up)."""
    if session.scalar(select(ProjectRow.max_storage_bytes).where(ProjectRow.name == project)) is None:
        return None
    row = session.get(ProjectRow, project, with_for_update={"key_share": True}, populate_existing=True)
    return row.max_storage_bytes if row is not None else None


def _kept_by_datasets(session: Session, project: str, digest: str) -> bool:
    """Whether a dataset or model version of the project has a file with these bytes."""
    return (session.scalar(_dataset_files(project).where(DatasetFileRow.digest == digest).limit(1)) is not None
            or session.scalar(_model_files(project).where(ModelFileRow.digest == digest).limit(1)) is not None)


def check_room(session: Session, project: str, digest: str, size: int, *, field: str) -> bool:
    """Whether `project` already keeps `digest` as a snapshot; raises QuotaExceeded if keeping it
    too would take the project past its limit (bytes it keeps through a dataset already count).
    Locks the project's row, so charges in flight add up."""
    if session.get(ProjectSnapshotRow, (project, digest)) is not None:
        return True
    limit = _limit(session, project)
    if limit is not None and not _kept_by_datasets(session, project, digest):
        used = used_bytes(session, project)
        if used + size > limit:
            raise QuotaExceeded(
                f"project {project!r} keeps {format_bytes(used)} of its {format_bytes(limit)} storage limit; "
                f"this snapshot needs {format_bytes(size)} more (`mlyard projects storage {project}` shows "
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


def check_volume_room(session: Session, project: str, size: int) -> None:
    """Raises QuotaExceeded if a new volume of `size` would take the project past its limit: its
    quota counts whole from the start, as a claim's request does."""
    limit = _limit(session, project)
    if limit is None:
        return
    used = used_bytes(session, project)
    if used + size > limit:
        raise QuotaExceeded(
            f"project {project!r} keeps {format_bytes(used)} of its {format_bytes(limit)} storage limit; a volume "
            f"of {format_bytes(size)} does not fit (`mlyard projects storage {project}` shows what it keeps)",
            field="size")


def check_version(session: Session, project: str, version_id: int, total_bytes: int) -> None:
    """Raises QuotaExceeded if the version just inserted (its files flushed, `total_bytes` in
    all) takes the project past its limit: only blobs the project kept no other way count."""
    limit = _limit(session, project)
    if limit is None:
        return
    used = used_bytes(session, project, but_version=version_id)
    if used + total_bytes <= limit:  # an upper bound: most versions need no closer look
        return
    files = select(DatasetFileRow.digest, DatasetFileRow.size).where(DatasetFileRow.version_id == version_id)
    added = _new_bytes(session, project, files, but_version=version_id)
    if used + added > limit:
        raise QuotaExceeded(
            f"project {project!r} keeps {format_bytes(used)} of its {format_bytes(limit)} storage limit; this "
            f"version adds {format_bytes(added)} it does not keep yet (`mlyard projects storage {project}` shows "
            "what it keeps)")


def check_model_version(session: Session, project: str, version_id: int, total_bytes: int) -> None:
    """`check_version` for a model version just inserted."""
    limit = _limit(session, project)
    if limit is None:
        return
    used = used_bytes(session, project, but_model_version=version_id)
    if used + total_bytes <= limit:
        return
    files = select(ModelFileRow.digest, ModelFileRow.size).where(ModelFileRow.version_id == version_id)
    added = _new_bytes(session, project, files, but_model_version=version_id)
    if used + added > limit:
        raise QuotaExceeded(
            f"project {project!r} keeps {format_bytes(used)} of its {format_bytes(limit)} storage limit; this "
            f"model version adds {format_bytes(added)} it does not keep yet (`mlyard projects storage {project}` "
            "shows what it keeps)")


def check_move(session: Session, dataset: DatasetRow, project: str, *, field: str) -> None:
    """Raises QuotaExceeded if taking `dataset` (all its versions) on would take `project` past
    its limit."""
    if project == dataset.project:
        return
    limit = _limit(session, project)
    if limit is None:
        return
    used = used_bytes(session, project)
    files = (select(DatasetFileRow.digest, DatasetFileRow.size)
             .join(DatasetVersionRow, DatasetVersionRow.id == DatasetFileRow.version_id)
             .where(DatasetVersionRow.dataset_id == dataset.id))
    added = _new_bytes(session, project, files)
    if used + added > limit:
        raise QuotaExceeded(
            f"project {project!r} keeps {format_bytes(used)} of its {format_bytes(limit)} storage limit; dataset "
            f"{dataset.project}/{dataset.name} would add {format_bytes(added)} it does not keep yet", field=field)


def _visible_project(session: Session, principal: auth.Principal, name: str) -> ProjectRow:
    row = session.get(ProjectRow, name)
    if row is None or not auth.may_read_project(principal, name):
        raise NotFound(f"project {name!r} does not exist", field="name")
    return row


def _datasets(session: Session, project: str) -> list[StoredDataset]:
    """Each dataset of the project with its versions and the bytes of its distinct blobs."""
    files = (select(DatasetVersionRow.dataset_id, DatasetFileRow.digest, func.max(DatasetFileRow.size).label("size"))
             .join(DatasetVersionRow, DatasetVersionRow.id == DatasetFileRow.version_id)
             .join(DatasetRow, DatasetRow.id == DatasetVersionRow.dataset_id).where(DatasetRow.project == project)
             .group_by(DatasetVersionRow.dataset_id, DatasetFileRow.digest).subquery())
    sizes = dict(session.execute(select(files.c.dataset_id, func.sum(files.c.size)).group_by(files.c.dataset_id)).all())
    versions = (select(func.count()).select_from(DatasetVersionRow)
                .where(DatasetVersionRow.dataset_id == DatasetRow.id).scalar_subquery())
    rows = session.execute(select(DatasetRow.id, DatasetRow.name, versions)
                           .where(DatasetRow.project == project).order_by(DatasetRow.name)).all()
    return [StoredDataset(name=name, versions=versions, bytes=int(sizes.get(dataset_id) or 0))
            for dataset_id, name, versions in rows]


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
        project=row.name, used_bytes=used_bytes(session, row.name), limit_bytes=row.max_storage_bytes,
        snapshots_bytes=sum(snapshot.size for snapshot in kept),
        datasets_bytes=_scalar(session, _sum_once(_dataset_files(row.name))),
        models_bytes=_scalar(session, _sum_once(_model_files(row.name))),
        snapshots=[StoredSnapshot(digest=snapshot.digest, size=snapshot.size, jobs=jobs.get(snapshot.digest, 0),
                                  unfinished_jobs=unfinished.get(snapshot.digest, 0),
                                  first_used_at=snapshot.first_used_at, last_used_at=snapshot.last_used_at)
                   for snapshot in kept],
        datasets=_datasets(session, row.name), volumes_bytes=_volume_quotas(session, row.name),
        volumes=[StoredVolume(name=volume.name, size_bytes=volume.size_bytes, used_bytes=volume.used_bytes)
                 for volume in session.scalars(select(VolumeRow).where(VolumeRow.project == row.name)
                                               .order_by(VolumeRow.name))])


def get_storage(database: Database, principal: auth.Principal, name: str) -> ProjectStorage:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        return _storage(session, _visible_project(session, principal, name))


def release(database: Database, blobs: BlobStore, principal: auth.Principal, name: str,
            digest: str) -> ProjectStorage:
    """Stops counting `digest` for the project (its maintainers). Finished jobs keep their
    record; resubmitting one needs the code uploaded again."""
    with blob_refs.Removal(blobs) as removal, database.transaction() as session:
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
            # The blob goes unless a dataset version holds the same bytes.
            removal.take(session, [digest])
        storage = _storage(session, row)
    if removal.removed:
        log.info("snapshot %s removed: no project keeps it", digest[:12])
    return storage
