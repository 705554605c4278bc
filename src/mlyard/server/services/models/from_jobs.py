"""A model version from the files a job left in its checkpoint directory
(`MLYARD_HOME/checkpoints/<job>/`, the job's `MLYARD_CHECKPOINT_DIR`), with its lineage: the
job, its latest attempt, its code snapshot, the dataset versions its spec pinned, and the last
value of each metric it reported (the request's own metrics over them).

The folder belongs to the job's account, so what is in it is hostile: the path asked for is
relative and may not lead out (`..`, a link to anywhere, a folder swapped for a link while it is
read); only regular files are taken, at most `MAX_MODEL_FILES` of them and `MAX_VERSION_BYTES`
together, each opened with `O_NOFOLLOW` and copied into the store (a link would let the job
change the version afterwards) by the checks of registered data (`datasets/registration.py`).
Files are read outside any transaction; a refused version forgets the blobs it stored for itself.

Who: a member (and up) of the model's project who may see the job; or the job's own token,
for its own job and its own project only (`auth.JOB_TOKEN_BODY_ROUTES`). A model that does not
exist yet is made, owned by the caller (the job's owner, for a job's token)."""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mlyard.api.models import MAX_METRICS, MAX_MODEL_FILES, ModelVersionCreated, ModelVersionRequest
from mlyard.errors import Conflict, Forbidden, InvalidRequest, NotFound
from mlyard.paths import Paths
from mlyard.server import auth
from mlyard.server.services.datasets import manifests, registration
from mlyard.server.services.models import access, catalog, inspection, versions
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow, MetricRow
from mlyard.storage import BlobStore

MAX_VERSION_BYTES = 1 << 40
"""The files of one version together (each also within MLYARD_MAX_BLOB)."""


def _job(session: Session, principal: auth.Principal, project: str, job_id: int) -> JobRow:
    """The job, if the caller may register its files as a model of `project`."""
    if principal.job_id is not None:
        if job_id != principal.job_id:
            raise Forbidden(f"a job token may register only its own job's files (job {principal.job_id})",
                            field="job")
        job = session.get(JobRow, job_id)
        if job.project != project:
            raise Forbidden(f"a job token of project {job.project!r} may not register models of project "
                            f"{project!r}", field="project")
        return job
    job = session.get(JobRow, job_id)
    if job is None or not auth.may_read_project(principal, job.project):
        raise NotFound(f"job {job_id} does not exist", field="job")
    auth.require_role(principal, project, auth.Role.MEMBER, f"add versions to models of project {project!r}")
    return job


def _reported(session: Session, job_id: int) -> dict[str, float]:
    """The last value the job reported of each metric (the first `MAX_METRICS` names)."""
    last = select(func.max(MetricRow.id)).where(MetricRow.job_id == job_id).group_by(MetricRow.name)
    rows = session.execute(select(MetricRow.name, MetricRow.value).where(MetricRow.id.in_(last))
                           .order_by(MetricRow.name).limit(MAX_METRICS))
    return dict(rows.all())


def _refuse(message: str) -> InvalidRequest:
    return InvalidRequest(message, field="path")


def checkpoint_files(root: str, path: str | None, job_id: int) -> list[tuple[str, str]]:
    """(path in the version, real path) of each file `path` (a file or folder relative to the
    job's checkpoint directory `root`, all of it by default) names, each checked."""
    if not os.path.isdir(root):
        raise InvalidRequest(f"job {job_id} has no checkpoint directory (it saved nothing to "
                             "MLYARD_CHECKPOINT_DIR)", field="job")
    directory = root
    if path is not None:
        if path.startswith("/") or ".." in PurePosixPath(path).parts:
            raise _refuse(f"{path!r} is not a path relative to the job's checkpoint directory")
        target = os.path.join(root, path)
        try:
            found = os.lstat(target)
        except OSError as error:
            raise _refuse(f"job {job_id}'s checkpoint directory holds no {path!r}") from error
        real = os.path.realpath(target)
        if stat.S_ISLNK(found.st_mode) or not registration.inside(real, [root]):
            raise _refuse(f"{path!r} is a link or leads out of the checkpoint directory; links are not followed")
        if stat.S_ISREG(found.st_mode):
            return [(PurePosixPath(path).name, real)]
        if not stat.S_ISDIR(found.st_mode):
            raise _refuse(f"{path!r} is not a regular file or a folder")
        directory = real
    files = registration.scan_files(directory, [root])
    if len(files) > MAX_MODEL_FILES:
        raise _refuse(f"{path or 'the checkpoint directory'} holds {len(files):,} files; a model version holds at "
                      f"most {MAX_MODEL_FILES:,}")
    total = sum(os.stat(real).st_size for _, real in files)
    if total > MAX_VERSION_BYTES:
        raise _refuse(f"{path or 'the checkpoint directory'} holds {total:,} bytes; a model version holds at most "
                      f"{MAX_VERSION_BYTES:,}")
    return files


def register(database: Database, store: BlobStore, paths: Paths, principal: auth.Principal, project: str, name: str,
             request: ModelVersionRequest, *, max_bytes: int) -> ModelVersionCreated:
    """The next version of `project/name` (made if missing) from job `request.job`'s files."""
    if principal.job_id is None:
        auth.authorize(principal, auth.Action.WRITE)
        if request.job is None:
            raise InvalidRequest("give either manifest (uploaded files) or job (its checkpoint files)", field="job")
    with database.reading() as session:
        if principal.job_id is None and access.find(session, project, name) is not None:
            access.seen(session, principal, project, name)
        job = _job(session, principal, project, request.job)
        lineage = {"job": job.id, "attempt": job.attempt_count or None, "snapshot": job.snapshot,
                   "datasets": [{"project": item.project or job.project, "dataset": item.name,
                                 "version": item.version} for item in database.specs.of(job).datasets]}
        reported = _reported(session, job.id)
    root = os.path.realpath(paths.checkpoint_directory(job.id))
    # Reads the job's files: outside any transaction.
    entries = registration.store_files(database, store, checkpoint_files(root, request.path, job.id), max_bytes,
                                       [root])
    try:
        versions.check_count(entries, "path")
        figures = inspection.statistics(entries, store.path_for)
        return _record(database, store, principal, project, name, request, entries=entries, figures=figures,
                       lineage=lineage, reported=reported)
    except BaseException:
        registration.forget(database, store, [entry.digest for entry in entries])
        raise


def _record(database: Database, store: BlobStore, principal: auth.Principal, project: str, name: str,
            request: ModelVersionRequest, *, entries: list[manifests.Entry], figures: dict, lineage: dict,
            reported: dict[str, float]) -> ModelVersionCreated:
    own = principal.job_id is not None
    try:
        with database.transaction() as session:
            model = access.find(session, project, name, lock=True)
            if model is None:
                model = catalog.add_model(session, project=project, name=name, owner_id=principal.user_id)
            elif not own:
                model = access.writable(session, principal, project, name)
            parent = versions.parent_of(session, principal, model, request.parent, project=project if own else None)
            described = versions.describe(request, entries, parent, **lineage)
            described.metrics = dict(list({**reported, **request.metrics}.items())[:MAX_METRICS])
            row = versions.add_version(session, store, model, entries=entries, figures=figures, described=described,
                                       created_by=principal.user_id, by=principal.name)
            return ModelVersionCreated(version=versions.info(session, model, row), created=True)
    except IntegrityError as error:  # the model made meanwhile by another request (PostgreSQL)
        raise Conflict(f"model {project}/{name} was made meanwhile; register again", field="name") from error
