"""Who may do what with a dataset. Its project's viewers (and administrators) see it and read
its files; its members add versions and move aliases. A `catalog` dataset's card is seen by
every user, its files still only by readers. A dataset the caller may not see answers like one
that does not exist; a job's token reaches no dataset through the API."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.errors import Forbidden, NotFound
from mlyard.server import auth
from mlyard.server.store.dataset_rows import DatasetRow


def may_see(principal: auth.Principal, row: DatasetRow) -> bool:
    if principal.job_id is not None:
        return False
    return row.visibility == "catalog" or may_read(principal, row)


def may_read(principal: auth.Principal, row: DatasetRow) -> bool:
    """Whether the caller may read the dataset's files."""
    return principal.job_id is None and auth.may_read_project(principal, row.project)


def _find(session: Session, project: str, name: str, *, lock: bool = False) -> DatasetRow | None:
    query = select(DatasetRow).where(DatasetRow.project == project, DatasetRow.name == name)
    if lock:
        query = query.with_for_update(of=DatasetRow)  # not the owner, an outer join
    return session.scalars(query).first()


def seen(session: Session, principal: auth.Principal, project: str, name: str) -> DatasetRow:
    """The dataset, if the caller may see its card."""
    row = _find(session, project, name)
    if row is None or not may_see(principal, row):
        raise NotFound(f"dataset {project}/{name} does not exist", field="name")
    return row


def readable(session: Session, principal: auth.Principal, project: str, name: str) -> DatasetRow:
    """The dataset, if the caller may read its files; a catalog card's reader without access is
    told what to do."""
    row = seen(session, principal, project, name)
    if not may_read(principal, row):
        raise Forbidden(f"{principal.name} may see dataset {project}/{name} in the catalog but not read its "
                             f"files; ask a maintainer of project {project!r} for access", field="name")
    return row


def writable(session: Session, principal: auth.Principal, project: str, name: str) -> DatasetRow:
    """The dataset, locked for the transaction, if the caller may add to it (a member of its project)."""
    row = _find(session, project, name, lock=True)
    if row is None or not may_see(principal, row):
        raise NotFound(f"dataset {project}/{name} does not exist", field="name")
    auth.require_role(principal, project, auth.Role.MEMBER, f"change dataset {project}/{name}")
    return row
