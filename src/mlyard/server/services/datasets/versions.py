"""Versions: made from a manifest whose files are all in the store and nameable by the caller
(`services/blobs.py`), numbered in order under the dataset's row lock, never changed after.
A manifest with the files of its parent makes no version: pushing the same directory twice
leaves the dataset as it was."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mlyard.api.datasets import (
    LATEST,
    MAX_MANIFEST_BYTES,
    ChangedFile,
    VersionCreated,
    VersionDiff,
    VersionFile,
    VersionFiles,
    VersionInfo,
    VersionRequest,
    version_name,
)
from mlyard.errors import InvalidRequest, NotFound
from mlyard.server import auth
from mlyard.server.services import blob_refs, blobs, project_storage
from mlyard.server.services.datasets import access, aliases, manifests
from mlyard.server.store.dataset_rows import (
    DatasetAliasRow,
    DatasetFileRow,
    DatasetReadRow,
    DatasetRow,
    DatasetVersionRow,
)
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow
from mlyard.storage import BlobStore

MAX_READERS_SHOWN = 100


def info(session: Session, dataset: DatasetRow, row: DatasetVersionRow) -> VersionInfo:
    parent = session.get(DatasetVersionRow, row.parent_id) if row.parent_id is not None else None
    names = session.scalars(select(DatasetAliasRow.name).where(DatasetAliasRow.version_id == row.id)
                            .order_by(DatasetAliasRow.name))
    return VersionInfo(project=dataset.project, dataset=dataset.name, version=version_name(row.number),
                       parent=version_name(parent.number) if parent is not None else None, message=row.message,
                       created_by=row.creator.name if row.creator else None, created_at=row.created_at,
                       file_count=row.file_count, total_bytes=row.total_bytes, statistics=row.statistics,
                       source_job=row.source_job_id, fingerprint=row.fingerprint, aliases=list(names))


def read_manifest(store: BlobStore, digest: str) -> bytes:
    """The manifest blob's bytes (models read theirs here too)."""
    path = store.path_for(digest)
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise InvalidRequest(f"the manifest is over {MAX_MANIFEST_BYTES >> 20} MiB", field="manifest")
        return path.read_bytes()
    except FileNotFoundError as error:
        raise InvalidRequest("the manifest is not in the store; upload it first (PUT /api/v1/blobs/{digest})",
                             field="manifest") from error


def check_files(session: Session, store: BlobStore, principal: auth.Principal,
                entries: list[manifests.Entry]) -> None:
    """Every file's blob is in the store, nameable by the caller, and of the size listed."""
    allowed = blobs.nameable(session, principal, [entry.digest for entry in entries])
    sizes = {digest: store.size_of(digest) for digest in {entry.digest for entry in entries} & allowed}
    absent = [entry for entry in entries if sizes.get(entry.digest) is None]
    if absent:
        shown = ", ".join(entry.path for entry in absent[:3])
        raise InvalidRequest(f"{len(absent):,} files of the manifest are not uploaded ({shown}, …); upload them "
                             "first (POST /api/v1/blobs:missing says which)", field="manifest")
    for entry in entries:
        size = sizes[entry.digest]
        if size != entry.size:
            raise InvalidRequest(f"the manifest gives {entry.path!r} {entry.size} bytes; its blob holds {size}",
                                 field="manifest")


def create_version(database: Database, store: BlobStore, principal: auth.Principal, project: str, name: str,
                   request: VersionRequest, *, source_job: int | None = None) -> VersionCreated:
    """A new version from the manifest blob of `request`, child of its parent (by default the
    version `latest` names), which `latest` then names; or the parent itself, `created` False,
    when the files are the parent's."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.reading() as session:
        dataset = access.seen(session, principal, project, name)
        auth.require_role(principal, project, auth.Role.MEMBER, f"add versions to dataset {project}/{name}")
        if request.manifest not in blobs.nameable(session, principal, [request.manifest]):
            raise InvalidRequest("the manifest is not uploaded; upload it first (PUT /api/v1/blobs/{digest})",
                                 field="manifest")
        parent = _parent(session, dataset, request.parent)
        entries = manifests.parse(read_manifest(store, request.manifest))
        fingerprint = manifests.fingerprint([(entry.path, entry.digest) for entry in entries])
        # The parent's files are in the store and the caller reads them: nothing to check.
        if parent is not None and parent.fingerprint == fingerprint:
            return VersionCreated(version=info(session, dataset, parent), created=False)
        check_files(session, store, principal, entries)
    figures = manifests.statistics(entries, store.path_for)  # reads files: outside any transaction
    with database.transaction() as session:
        dataset = access.writable(session, principal, project, name)
        row = add_version(session, store, dataset, number=next_number(session, dataset), parent=parent,
                          message=request.message,
                          entries=entries, figures=figures, created_by=principal.user_id, by=principal.name,
                          source_job=source_job)
        return VersionCreated(version=info(session, dataset, row), created=True)


def next_number(session: Session, dataset: DatasetRow) -> int:
    """The number of the dataset's next version (its row locked by the caller: `access.writable`)."""
    return (session.scalar(select(func.max(DatasetVersionRow.number))
                           .where(DatasetVersionRow.dataset_id == dataset.id)) or 0) + 1


def add_version(session: Session, store: BlobStore, dataset: DatasetRow, *, number: int,
                parent: DatasetVersionRow | None, message: str, entries: list[manifests.Entry], figures: dict,
                created_by: int | None, by: str, source_job: int | None = None) -> DatasetVersionRow:
    """Inserts a checked version with its files; `latest` moves to it (a move `by` whom).
    QuotaExceeded if the blobs its project does not keep yet take it past its storage limit."""
    blob_refs.keep(session, store, [entry.digest for entry in entries])  # none removed meanwhile
    now = time.time()
    row = DatasetVersionRow(dataset_id=dataset.id, number=number, parent_id=parent.id if parent else None,
                            message=message, created_by=created_by, created_at=now,
                            fingerprint=manifests.fingerprint([(entry.path, entry.digest) for entry in entries]),
                            file_count=len(entries), total_bytes=sum(entry.size for entry in entries),
                            statistics=figures, source_job_id=source_job)
    session.add(row)
    session.flush()
    manifests.insert_files(session, DatasetFileRow, row.id, entries)
    # Past the project's storage limit: refused, and the rollback leaves nothing.
    project_storage.check_version(session, dataset.project, row.id, row.total_bytes)
    aliases.move(session, dataset, LATEST, row, by)
    dataset.updated_at = now
    session.flush()
    return row


def _parent(session: Session, dataset: DatasetRow, reference: str | None) -> DatasetVersionRow | None:
    if reference is not None:
        return aliases.resolve(session, dataset, reference, field="parent")
    if session.get(DatasetAliasRow, (dataset.id, LATEST)) is None:
        return None
    return aliases.resolve(session, dataset, LATEST, field="parent")


def list_versions(database: Database, principal: auth.Principal, project: str, name: str) -> list[VersionInfo]:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        dataset = access.seen(session, principal, project, name)
        rows = session.scalars(select(DatasetVersionRow).where(DatasetVersionRow.dataset_id == dataset.id)
                               .order_by(DatasetVersionRow.number))
        return [info(session, dataset, row) for row in rows]


def get_version(database: Database, principal: auth.Principal, project: str, name: str,
                reference: str) -> VersionInfo:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        dataset = access.seen(session, principal, project, name)
        version = aliases.resolve(session, dataset, reference)
        readers = session.execute(
            select(JobRow.id, JobRow.project).join(DatasetReadRow, DatasetReadRow.job_id == JobRow.id)
            .where(DatasetReadRow.version_id == version.id).order_by(JobRow.id.desc()).limit(MAX_READERS_SHOWN * 4))
        seen = [job_id for job_id, job_project in readers if auth.may_read_project(principal, job_project)]
        return info(session, dataset, version).model_copy(update={"read_by": seen[:MAX_READERS_SHOWN]})


def _file(row) -> VersionFile:
    return VersionFile(path=row.path, sha256=row.digest, size=row.size, media_type=row.media_type)


def list_files(database: Database, principal: auth.Principal, project: str, name: str, reference: str, *,
               after: str | None, limit: int, prefix: str | None = None) -> VersionFiles:
    """A page of the version's files in path order, those past `after` (keyset paging)."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        dataset = access.readable(session, principal, project, name)
        version = aliases.resolve(session, dataset, reference)
        return files_page(session, DatasetFileRow, version, after=after, limit=limit, prefix=prefix)


def files_page(session: Session, files: type, version, *, after: str | None, limit: int,
               prefix: str | None) -> VersionFiles:
    """A page of the files (`files`: the file rows of a dataset or model version) of `version`
    in path order, those past `after`."""
    query = select(files).where(files.version_id == version.id)
    if after is not None:
        query = query.where(files.path > after)
    if prefix:
        query = query.where(files.path.startswith(prefix, autoescape=True))
    rows = list(session.scalars(query.order_by(files.path).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return VersionFiles(version=version_name(version.number), files=[_file(row) for row in rows],
                        next_after=rows[-1].path if more else None)


def file_blob(database: Database, store: BlobStore, principal: auth.Principal, project: str, name: str,
              reference: str, path: str) -> tuple[Path, VersionFile]:
    """Where the bytes of one file of the version lie, and what it is."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        dataset = access.readable(session, principal, project, name)
        version = aliases.resolve(session, dataset, reference)
        return blob_of(session, store, DatasetFileRow, version, f"{project}/{name}", path)


def blob_of(session: Session, store: BlobStore, files: type, version, label: str,
            path: str) -> tuple[Path, VersionFile]:
    """Where the bytes of the file `path` of `version` lie (`files`: its file rows), and what it is."""
    row = session.get(files, (version.id, path))
    if row is None:
        raise NotFound(f"{version_name(version.number)} of {label} has no file {path!r}", field="path")
    return store.path_for(row.digest), _file(row)


def diff(database: Database, principal: auth.Principal, project: str, name: str, before: str,
         after: str) -> VersionDiff:
    """The files added, removed and changed from `before` to `after`."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        dataset = access.readable(session, principal, project, name)
        old, new = aliases.resolve(session, dataset, before, field="before"), \
            aliases.resolve(session, dataset, after, field="after")
        files = {version.id: {row.path: _file(row) for row in session.scalars(
            select(DatasetFileRow).where(DatasetFileRow.version_id == version.id))} for version in (old, new)}
    first, second = files[old.id], files[new.id]
    return VersionDiff(
        before=version_name(old.number), after=version_name(new.number),
        added=[second[path] for path in sorted(second.keys() - first.keys())],
        removed=[first[path] for path in sorted(first.keys() - second.keys())],
        changed=[ChangedFile(path=path, before=first[path], after=second[path])
                 for path in sorted(first.keys() & second.keys()) if first[path].sha256 != second[path].sha256])
