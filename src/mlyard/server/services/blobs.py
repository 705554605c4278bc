"""File blobs of dataset and model versions: what a client must upload before a manifest may name a
digest, and the record of who uploaded what.

A digest is not a key: knowing one must not give anyone the bytes of a dataset they may not
read. A caller may name a digest in a manifest only if they uploaded it themselves, or a
dataset or model version they may read holds it. For anything else they are told to upload it, which costs
them the bytes and proves they have them (the store keeps one copy whatever the uploads).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from mlyard.server import auth
from mlyard.server.store.dataset_rows import BlobUploaderRow, DatasetFileRow, DatasetRow, DatasetVersionRow
from mlyard.server.store.db import Database, insert_if_absent
from mlyard.server.store.model_rows import ModelFileRow, ModelRow, ModelVersionRow
from mlyard.storage import BlobStore

_CHUNK = 500
_HOLDERS = ((DatasetFileRow, DatasetVersionRow, DatasetRow, DatasetVersionRow.dataset_id),
            (ModelFileRow, ModelVersionRow, ModelRow, ModelVersionRow.model_id))


def nameable(session: Session, principal: auth.Principal, digests: Iterable[str]) -> set[str]:
    """Those of `digests` the caller may name: uploaded by them, or held by a version of a
    dataset or model of a project they may read."""
    wanted = sorted(set(digests))
    allowed: set[str] = set()
    if principal.job_id is not None:
        return allowed
    visible = principal.visible_projects()
    for start in range(0, len(wanted), _CHUNK):
        chunk = wanted[start:start + _CHUNK]
        if principal.user_id is not None:
            allowed.update(session.scalars(select(BlobUploaderRow.digest).where(
                BlobUploaderRow.user_id == principal.user_id, BlobUploaderRow.digest.in_(chunk))))
        for files, versions, owners, owner in _HOLDERS:
            held = (select(files.digest).distinct()
                    .join(versions, versions.id == files.version_id)
                    .join(owners, owners.id == owner)
                    .where(files.digest.in_([digest for digest in chunk if digest not in allowed])))
            if visible is not None:
                held = held.where(owners.project.in_(sorted(visible)))
            allowed.update(session.scalars(held))
    return allowed


def missing(database: Database, store: BlobStore, principal: auth.Principal, digests: list[str]) -> list[str]:
    """The digests, in the order asked, that the caller must upload before naming them."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.reading() as session:
        allowed = nameable(session, principal, digests)
    return [digest for digest in dict.fromkeys(digests) if digest not in allowed or not store.exists(digest)]


def record_upload(database: Database, principal: auth.Principal, digest: str, size: int) -> None:
    """The caller sent these bytes: they may name the digest from now on."""
    if principal.user_id is None:
        return
    with database.transaction() as session:
        insert_if_absent(session, BlobUploaderRow, digest=digest, user_id=principal.user_id, size=size,
                         uploaded_at=time.time())


def record_uploads(database: Database, principal: auth.Principal, stored: list[tuple[str, int]]) -> None:
    """The caller sent the bytes of all these (digest, size): one transaction, one statement
    run for every row (compiled once), rows already there left as they are."""
    if principal.user_id is None or not stored:
        return
    now = time.time()
    rows = [{"digest": digest, "user_id": principal.user_id, "size": size, "uploaded_at": now}
            for digest, size in dict(stored).items()]
    with database.transaction() as session:
        table = BlobUploaderRow.__table__
        insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
        session.execute(insert(table).on_conflict_do_nothing(index_elements=["digest", "user_id"]), rows)
