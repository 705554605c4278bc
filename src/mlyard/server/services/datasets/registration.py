"""Registering data that already lies on the server's disks: an administrator names a directory
under one of `MLYARD_DATA_ROOTS`; its files are hashed into the content-addressed store and become
v1 of a dataset nobody owns yet (users claim it, `claims.py`).

The directory is the administrator's, but what is under it may be anyone's: every file is
resolved and must stay under a root, and be a regular file (no device, fifo or socket: reading
one could hang or leak). Links to folders are refused rather than followed (cycles, escapes),
links to files are read as the file they name. A file is opened without following a last link
(`O_NOFOLLOW`), so one swapped for a link after the check is refused, not read. The route is a
plain `def`: all of this runs on a worker thread, never on the event loop."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path, PurePosixPath

from sqlalchemy import select

from mlyard.api.datasets import MAX_FILES, DatasetInfo, RegisterRequest
from mlyard.errors import Conflict, InvalidRequest
from mlyard.server import auth
from mlyard.server.services import blob_refs, projects
from mlyard.server.services.datasets import catalog, manifests, versions
from mlyard.server.store.dataset_rows import DatasetRow
from mlyard.server.store.db import Database
from mlyard.storage import BlobStore

_READ = 4 * 1024 * 1024


def _refuse(message: str) -> InvalidRequest:
    return InvalidRequest(message, field="path")


def inside(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def check_directory(path: str, roots: list[str]) -> str:
    if not roots:
        raise _refuse("this server registers no data: its administrator sets MLYARD_DATA_ROOTS (absolute "
                      "directories, colon-separated) to the directories data may be registered from")
    if ".." in PurePosixPath(path).parts:
        raise _refuse(f"{path!r} holds '..'; give the directory's own path")
    real = os.path.realpath(path)
    if not inside(real, roots):
        raise _refuse(f"{path} is not under the data roots ({':'.join(roots)})")
    if not os.path.isdir(real):
        raise _refuse(f"{path} is not a directory")
    return real


def scan_files(directory: str, roots: list[str]) -> list[tuple[str, str]]:
    """(relative path, real path) of every file under `directory`, each checked."""
    found: list[tuple[str, str]] = []

    def fail(error: OSError) -> None:
        raise _refuse(f"cannot read {error.filename}: {error.strerror}")

    for folder, folders, names in os.walk(directory, onerror=fail):
        folders.sort()
        for name in folders:
            if os.path.islink(os.path.join(folder, name)):
                relative = os.path.relpath(os.path.join(folder, name), directory)
                raise _refuse(f"{relative} is a link to a folder; links to folders are not followed")
        for name in sorted(names):
            full = os.path.join(folder, name)
            relative = os.path.relpath(full, directory)
            real = os.path.realpath(full)
            if not inside(real, roots):
                raise _refuse(f"{relative} leads outside the data roots (to {real})")
            try:
                mode = os.stat(real).st_mode
            except OSError as error:
                raise _refuse(f"{relative} cannot be read: {error.strerror}") from error
            if not stat.S_ISREG(mode):
                raise _refuse(f"{relative} is not a regular file (a device, fifo or socket)")
            found.append((Path(relative).as_posix(), real))
            if len(found) > MAX_FILES:
                raise _refuse(f"{directory} holds more than {MAX_FILES:,} files, the most a version holds")
    return found


def _hash(store: BlobStore, relative: str, real: str, max_bytes: int, roots: list[str]) -> tuple[str, int]:
    try:
        descriptor = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise _refuse(f"{relative} cannot be opened: {error.strerror}") from error
    with os.fdopen(descriptor, "rb") as source:
        # A folder of its path swapped for a link since the scan (a job's process left behind)
        # would have led the open elsewhere: what was opened must still lie under the roots.
        if not inside(os.readlink(f"/proc/self/fd/{descriptor}"), roots):
            raise _refuse(f"{relative} moved out of the folder while it was being read")
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise _refuse(f"{relative} changed into something other than a regular file")
        try:
            return store.put_stream(iter(lambda: source.read(_READ), b""), max_bytes=max_bytes)
        except Exception as error:  # the store's own (too large), said about this file
            raise _refuse(f"{relative}: {error}") from error


def store_files(database: Database, store: BlobStore, files: list[tuple[str, str]], max_bytes: int,
                roots: list[str]) -> list[manifests.Entry]:
    """Copies each file of `scan_files` into the store; the version's entries, checked as a
    pushed manifest's are. A file refused takes back what the files before it stored."""
    listed: list[dict] = []
    try:
        for relative, real in files:
            digest, size = _hash(store, relative, real, max_bytes, roots)
            listed.append({"path": relative, "sha256": digest, "size": size})
        try:  # the very checks a pushed manifest passes: these paths reach replicas the same way
            return manifests.parse(json.dumps({"files": listed}).encode())
        except InvalidRequest as error:
            raise _refuse(error.message) from error
    except BaseException:
        forget(database, store, [item["sha256"] for item in listed])
        raise


def forget(database: Database, store: BlobStore, digests: list[str]) -> None:
    """Removes those of `digests` that no version or snapshot keeps: what a refused collection
    stored for itself alone."""
    if digests:
        with blob_refs.Removal(store) as removal, database.transaction() as session:
            removal.take(session, digests)


def register(database: Database, store: BlobStore, principal: auth.Principal, roots: tuple[str, ...],
             request: RegisterRequest, *, max_bytes: int) -> DatasetInfo:
    """A new dataset of `request.project` with no owner, whose v1 holds the directory's files."""
    auth.authorize(principal, auth.Action.ADMIN)
    real_roots = [os.path.realpath(root) for root in roots]
    directory = check_directory(request.path, real_roots)
    with database.reading() as session:
        if session.scalar(select(DatasetRow.id).where(DatasetRow.project == request.project,
                                                      DatasetRow.name == request.name)) is not None:
            raise Conflict(f"dataset {request.project}/{request.name} exists", field="name")
    # Reads files: outside any transaction.
    entries = store_files(database, store, scan_files(directory, real_roots), max_bytes, real_roots)
    try:
        return _record(database, store, principal, request, entries)
    except BaseException:
        forget(database, store, [entry.digest for entry in entries])
        raise


def _record(database: Database, store: BlobStore, principal: auth.Principal, request: RegisterRequest,
            entries: list[manifests.Entry]) -> DatasetInfo:
    figures = manifests.statistics(entries, store.path_for)
    now = time.time()
    with database.transaction() as session:
        projects.ensure_project(session, principal, request.project)
        if session.scalar(select(DatasetRow.id).where(DatasetRow.project == request.project,
                                                      DatasetRow.name == request.name)) is not None:
            raise Conflict(f"dataset {request.project}/{request.name} exists", field="name")
        dataset = DatasetRow(project=request.project, name=request.name, owner_id=None,
                             description=request.description, licence=None, tags=[], visibility=request.visibility,
                             created_at=now, updated_at=now)
        session.add(dataset)
        session.flush()
        versions.add_version(session, store, dataset, number=1, parent=None,
                             message=f"registered from {request.path}", entries=entries, figures=figures,
                             created_by=principal.user_id, by=principal.name)
        return catalog.info(session, principal, dataset)
