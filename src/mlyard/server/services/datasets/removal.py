"""Removing a dataset version, and a dataset that has none left.

Data is removed on purpose only, by the dataset's owner, its project's maintainers or an
administrator, and never from under something that needs it: a version is kept while an alias
other than `latest` names it (move the alias first), while a later version has it as parent
(its lineage), while an unfinished job reads it, and while a labeling task labels it. `latest` moves back to the newest version
left. The version's rows go, then every blob that no version and no code snapshot keeps
(`blob_refs.Removal`), and the trees of finished jobs that read it (they hold links to those
blobs, which would otherwise keep the bytes on disk).
"""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from mlyard.api.datasets import LATEST, version_name
from mlyard.errors import Conflict, Forbidden
from mlyard.paths import Paths
from mlyard.server import auth
from mlyard.server.services import blob_refs
from mlyard.server.services.datasets import access, aliases
from mlyard.server.store.dataset_rows import (
    DatasetAliasRow,
    DatasetFileRow,
    DatasetReadRow,
    DatasetRow,
    DatasetVersionRow,
)
from mlyard.server.store.db import Database
from mlyard.server.store.labeling_rows import LabelingTaskRow
from mlyard.server.store.rows import JobRow
from mlyard.spec import TERMINAL_STATUSES
from mlyard.storage import BlobStore
from mlyard.storage.trees import remove_read_only_tree

_ENDED = [status.value for status in TERMINAL_STATUSES]


def _removable(session: Session, principal: auth.Principal, project: str, name: str) -> DatasetRow:
    dataset = access.writable(session, principal, project, name)
    if not access.may_manage(principal, dataset):
        raise Forbidden(f"{principal.name} may not remove from dataset {project}/{name}: its owner and the "
                        f"maintainers of project {project!r} may", field="name")
    return dataset


def _refuse_if_needed(session: Session, dataset: DatasetRow, version: DatasetVersionRow) -> None:
    label = f"{version_name(version.number)} of {dataset.project}/{dataset.name}"
    named = sorted(session.scalars(select(DatasetAliasRow.name).where(DatasetAliasRow.version_id == version.id,
                                                                      DatasetAliasRow.name != LATEST)))
    if named:
        raise Conflict(f"alias {', '.join(named)} names {label}; move it first", field="version")
    children = sorted(session.scalars(select(DatasetVersionRow.number)
                                      .where(DatasetVersionRow.parent_id == version.id)))
    if children:
        raise Conflict(f"{label} is the parent of {', '.join(map(version_name, children))}; a version's "
                       "lineage keeps it", field="version")
    readers = sorted(session.scalars(select(DatasetReadRow.job_id).join(JobRow, JobRow.id == DatasetReadRow.job_id)
                                     .where(DatasetReadRow.version_id == version.id, JobRow.status.notin_(_ENDED))))
    if readers:
        raise Conflict(f"unfinished job{'s' if len(readers) > 1 else ''} {', '.join(map(str, readers))} "
                       f"read{'s' if len(readers) == 1 else ''} {label}; remove it once they end", field="version")
    tasks = sorted(session.scalars(select(LabelingTaskRow.name).where(LabelingTaskRow.version_id == version.id)))
    if tasks:  # its annotations would go with it
        raise Conflict(f"labeling task{'s' if len(tasks) > 1 else ''} {', '.join(tasks)} label{'s' if len(tasks) == 1 else ''} "
                       f"{label}; its annotations would be lost", field="version")


def remove_version(database: Database, store: BlobStore, paths: Paths, principal: auth.Principal, project: str,
                   name: str, reference: str) -> None:
    auth.authorize(principal, auth.Action.WRITE)
    with blob_refs.Removal(store) as removal, database.transaction() as session:
        dataset = _removable(session, principal, project, name)
        version = aliases.resolve(session, dataset, reference)
        _refuse_if_needed(session, dataset, version)
        digests = list(session.scalars(select(DatasetFileRow.digest).where(DatasetFileRow.version_id == version.id)
                                       .distinct()))
        readers = list(session.scalars(select(DatasetReadRow.job_id).where(DatasetReadRow.version_id == version.id)))
        session.execute(delete(DatasetFileRow).where(DatasetFileRow.version_id == version.id))
        session.execute(delete(DatasetAliasRow).where(DatasetAliasRow.version_id == version.id))
        session.execute(delete(DatasetReadRow).where(DatasetReadRow.version_id == version.id))
        session.delete(version)
        session.flush()
        newest = session.scalars(select(DatasetVersionRow).where(DatasetVersionRow.dataset_id == dataset.id)
                                 .order_by(DatasetVersionRow.number.desc())).first()
        if newest is not None:
            aliases.move(session, dataset, LATEST, newest, principal.name)
        removal.take(session, digests)
    for job_id in readers:  # finished: their trees only keep the bytes on disk
        remove_read_only_tree(paths.dataset_view(job_id, name))


def remove_dataset(database: Database, principal: auth.Principal, project: str, name: str) -> None:
    """A dataset without versions (remove those first: each is checked on its own)."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        dataset = _removable(session, principal, project, name)
        left = session.scalar(select(func.count()).where(DatasetVersionRow.dataset_id == dataset.id)) or 0
        if left:
            raise Conflict(f"dataset {project}/{name} still has {left} version{'s' if left > 1 else ''}; remove "
                           "them first", field="name")
        session.execute(delete(DatasetRow).where(DatasetRow.id == dataset.id))  # its rows go with it
