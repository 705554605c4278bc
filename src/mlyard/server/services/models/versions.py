"""Model versions: made from a manifest whose files are all in the store and nameable by the
caller (as a dataset version's: `services/datasets/versions.py`), or from a job's files
(`from_jobs.py`); numbered in order under the model's row lock, never changed after. A pushed
manifest with the files of `latest` and nothing else to say makes no version."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mlyard.api.datasets import VersionFile, VersionFiles, version_name
from mlyard.api.models import (
    LATEST,
    MAX_MODEL_FILES,
    DatasetRead,
    Lineage,
    ModelVersionCreated,
    ModelVersionInfo,
    ModelVersionRequest,
    split_reference,
)
from mlyard.errors import InvalidRequest
from mlyard.server import auth
from mlyard.server.services import blob_refs, blobs, project_storage
from mlyard.server.services.datasets import manifests
from mlyard.server.services.datasets import versions as dataset_versions
from mlyard.server.services.models import access, aliases, inspection
from mlyard.server.store.db import Database
from mlyard.server.store.model_rows import ModelFileRow, ModelRow, ModelVersionRow
from mlyard.storage import BlobStore


@dataclass
class Described:
    """What a version says besides its files: from the request, and (for a job's) its lineage."""

    format: str
    framework_version: str = ""
    signature: dict | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    message: str = ""
    parent: ModelVersionRow | None = None
    job: int | None = None
    attempt: int | None = None
    snapshot: str | None = None
    datasets: list[dict] = field(default_factory=list)


def reference(session: Session, row: ModelVersionRow) -> str:
    """PROJECT/NAME:vN of a version."""
    model = session.get(ModelRow, row.model_id)
    return f"{model.project}/{model.name}:{version_name(row.number)}"


def info(session: Session, model: ModelRow, row: ModelVersionRow, *, children: bool = False) -> ModelVersionInfo:
    parent = session.get(ModelVersionRow, row.parent_id) if row.parent_id is not None else None
    lineage = Lineage(job=row.job_id, attempt=row.attempt, snapshot=row.snapshot,
                      datasets=[DatasetRead.model_validate(item) for item in row.datasets],
                      parent=reference(session, parent) if parent is not None else None)
    made_from = []
    if children:
        made_from = [reference(session, child) for child in session.scalars(
            select(ModelVersionRow).where(ModelVersionRow.parent_id == row.id).order_by(ModelVersionRow.id))]
    return ModelVersionInfo(
        project=model.project, model=model.name, version=version_name(row.number), format=row.format,
        framework_version=row.framework_version, signature=row.signature, metrics=dict(row.metrics),
        message=row.message, created_by=row.creator.name if row.creator else None, created_at=row.created_at,
        file_count=row.file_count, total_bytes=row.total_bytes, statistics=row.statistics,
        fingerprint=row.fingerprint, lineage=lineage, aliases=aliases.names(session, row), children=made_from)


def parent_of(session: Session, principal: auth.Principal, model: ModelRow, named: str | None, *,
              project: str | None = None) -> ModelVersionRow | None:
    """The version `named` names (`[PROJECT/]NAME:vN`, `…@ALIAS`, or `vN` of `model`), if the
    caller may see it; `project`: the only project a job's token may name."""
    if named is None:
        return None
    wanted_project, wanted, version = split_reference(named, model.project, model.name)
    if project is not None and wanted_project != project:
        raise access.missing(wanted_project, wanted)
    if wanted_project == model.project and wanted == model.name:
        found = model
    elif project is not None:  # a job's token: its own project's models, seen by no role
        found = access.find(session, wanted_project, wanted)
        if found is None:
            raise access.missing(wanted_project, wanted)
    else:
        found = access.seen(session, principal, wanted_project, wanted)
    return aliases.resolve(session, found, version, field="parent")


def add_version(session: Session, store: BlobStore, model: ModelRow, *, entries: list[manifests.Entry],
                figures: dict, described: Described, created_by: int | None, by: str) -> ModelVersionRow:
    """Inserts a checked version with its files (the model's row locked by the caller); `latest`
    moves to it (a move `by` whom)."""
    blob_refs.keep(session, store, [entry.digest for entry in entries])  # none removed meanwhile
    now = time.time()
    number = (session.scalar(select(func.max(ModelVersionRow.number))
                             .where(ModelVersionRow.model_id == model.id)) or 0) + 1
    row = ModelVersionRow(
        model_id=model.id, number=number, format=described.format, framework_version=described.framework_version,
        signature=described.signature, metrics=described.metrics, message=described.message, created_by=created_by,
        created_at=now, fingerprint=manifests.fingerprint([(entry.path, entry.digest) for entry in entries]),
        file_count=len(entries), total_bytes=sum(entry.size for entry in entries), statistics=figures,
        job_id=described.job, attempt=described.attempt, snapshot=described.snapshot, datasets=described.datasets,
        parent_id=described.parent.id if described.parent is not None else None)
    session.add(row)
    session.flush()
    manifests.insert_files(session, ModelFileRow, row.id, entries)
    project_storage.check_model_version(session, model.project, row.id, row.total_bytes)  # refused: rolled back
    aliases.move(session, model, LATEST, row, by)
    model.updated_at = now
    session.flush()
    return row


def check_count(entries: list[manifests.Entry], field_name: str) -> None:
    if not entries:
        raise InvalidRequest("a model version holds at least one file", field=field_name)
    if len(entries) > MAX_MODEL_FILES:
        raise InvalidRequest(f"{len(entries):,} files; a model version holds at most {MAX_MODEL_FILES:,}",
                             field=field_name)


def describe(request: ModelVersionRequest, entries: list[manifests.Entry], parent: ModelVersionRow | None,
             **lineage) -> Described:
    return Described(format=request.format or inspection.guess_format([entry.path for entry in entries]),
                     framework_version=request.framework_version, signature=request.signature,
                     metrics=dict(request.metrics), message=request.message, parent=parent, **lineage)


def _says_nothing_new(request: ModelVersionRequest) -> bool:
    return not (request.metrics or request.parent or request.signature or request.format
                or request.framework_version)


def create_version(database: Database, store: BlobStore, principal: auth.Principal, project: str, name: str,
                   request: ModelVersionRequest) -> ModelVersionCreated:
    """A new version from the manifest blob of `request`, which `latest` then names; or the
    version `latest` names, `created` False, when the files are its files and nothing else is said."""
    auth.authorize(principal, auth.Action.WRITE)
    if request.job is not None or request.path is not None:
        raise InvalidRequest("give either manifest (uploaded files) or job (its checkpoint files, with path)",
                             field="job" if request.job is not None else "path")
    with database.reading() as session:
        model = access.seen(session, principal, project, name)
        auth.require_role(principal, project, auth.Role.MEMBER, f"add versions to model {project}/{name}")
        if request.manifest not in blobs.nameable(session, principal, [request.manifest]):
            raise InvalidRequest("the manifest is not uploaded; upload it first (PUT /api/v1/blobs/{digest})",
                                 field="manifest")
        entries = manifests.parse(dataset_versions.read_manifest(store, request.manifest))
        check_count(entries, "manifest")
        latest = session.get(aliases.FAMILY.alias, (model.id, LATEST))
        if latest is not None and _says_nothing_new(request):
            newest = session.get(ModelVersionRow, latest.version_id)
            if newest.fingerprint == manifests.fingerprint([(entry.path, entry.digest) for entry in entries]):
                return ModelVersionCreated(version=info(session, model, newest), created=False)
        dataset_versions.check_files(session, store, principal, entries)
    figures = inspection.statistics(entries, store.path_for)  # reads headers: outside any transaction
    with database.transaction() as session:
        model = access.writable(session, principal, project, name)
        described = describe(request, entries, parent_of(session, principal, model, request.parent))
        row = add_version(session, store, model, entries=entries, figures=figures, described=described,
                          created_by=principal.user_id, by=principal.name)
        return ModelVersionCreated(version=info(session, model, row), created=True)


def list_versions(database: Database, principal: auth.Principal, project: str, name: str) -> list[ModelVersionInfo]:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        model = access.seen(session, principal, project, name)
        rows = session.scalars(select(ModelVersionRow).where(ModelVersionRow.model_id == model.id)
                               .order_by(ModelVersionRow.number))
        return [info(session, model, row) for row in rows]


def get_version(database: Database, principal: auth.Principal, project: str, name: str,
                version: str) -> ModelVersionInfo:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        model = access.seen(session, principal, project, name)
        return info(session, model, aliases.resolve(session, model, version), children=True)


def list_files(database: Database, principal: auth.Principal, project: str, name: str, version: str, *,
               after: str | None, limit: int, prefix: str | None = None) -> VersionFiles:
    """A page of the version's files in path order, those past `after` (keyset paging)."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        model = access.seen(session, principal, project, name)
        row = aliases.resolve(session, model, version)
        return dataset_versions.files_page(session, ModelFileRow, row, after=after, limit=limit, prefix=prefix)


def file_blob(database: Database, store: BlobStore, principal: auth.Principal, project: str, name: str,
              version: str, path: str) -> tuple[Path, VersionFile]:
    """Where the bytes of one file of the version lie, and what it is."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        model = access.seen(session, principal, project, name)
        row = aliases.resolve(session, model, version)
        return dataset_versions.blob_of(session, store, ModelFileRow, row, f"model {project}/{name}", path)
