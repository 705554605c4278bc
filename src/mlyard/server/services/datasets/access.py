"""Who may do what with a dataset. Its project's viewers (and administrators) see it and read
its files; so do the viewers of every project it is granted to (`dataset_grants`). Its project's
members add versions and move aliases; its owner and its project's maintainers share it and
answer access requests. A `catalog` dataset's card is seen by every user, its files still only
by readers. A dataset the caller may not see answers like one that does not exist; a job's
token reaches no dataset through the API."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.errors import Forbidden, NotFound
from mlyard.server import auth
from mlyard.server.store.dataset_rows import DatasetGrantRow, DatasetRow


def granted(session: Session, principal: auth.Principal, dataset_ids: Iterable[int]) -> set[int]:
    """Those of the datasets granted to a project the caller holds a role in, in one query
    (a listing asks once for all its rows)."""
    wanted = sorted(set(dataset_ids))
    if principal.job_id is not None or principal.is_admin or not principal.roles or not wanted:
        return set()
    return set(session.scalars(select(DatasetGrantRow.dataset_id).distinct().where(
        DatasetGrantRow.dataset_id.in_(wanted), DatasetGrantRow.project.in_(sorted(principal.roles)))))


def may_see(principal: auth.Principal, row: DatasetRow, *, grant: bool = False) -> bool:
    if principal.job_id is not None:
        return False
    return row.visibility == "catalog" or may_read(principal, row, grant=grant)


def may_read(principal: auth.Principal, row: DatasetRow, *, grant: bool = False) -> bool:
    """Whether the caller may read the dataset's files; `grant`: one of their projects holds a
    grant on it (`granted`)."""
    return principal.job_id is None and (grant or auth.may_read_project(principal, row.project))


def may_manage(principal: auth.Principal, row) -> bool:
    """Its owner and its project's maintainers (administrators among them) share it, and remove
    from it; `row`: a dataset's or a model's (its `project` and `owner_id`)."""
    if principal.job_id is not None:
        return False
    held = principal.role_in(row.project)
    return (row.owner_id is not None and row.owner_id == principal.user_id) or (
        held is not None and held >= auth.Role.MAINTAINER)


def has_grant(session: Session, principal: auth.Principal, row: DatasetRow) -> bool:
    """Whether a project of the caller's holds a grant on it; no query when their own project reads it."""
    if auth.may_read_project(principal, row.project):
        return False
    return row.id in granted(session, principal, [row.id])


def _find(session: Session, project: str, name: str, *, lock: bool = False) -> DatasetRow | None:
    query = select(DatasetRow).where(DatasetRow.project == project, DatasetRow.name == name)
    if lock:
        query = query.with_for_update(of=DatasetRow)  # not the owner, an outer join
    return session.scalars(query).first()


def _missing(project: str, name: str) -> NotFound:
    return NotFound(f"dataset {project}/{name} does not exist", field="name")


def seen(session: Session, principal: auth.Principal, project: str, name: str, *,
         lock: bool = False) -> DatasetRow:
    """The dataset, if the caller may see its card."""
    row = _find(session, project, name, lock=lock)
    if row is None or not may_see(principal, row, grant=row is not None and has_grant(session, principal, row)):
        raise _missing(project, name)
    return row


def readable(session: Session, principal: auth.Principal, project: str, name: str) -> DatasetRow:
    """The dataset, if the caller may read its files; a catalog card's reader without access is
    told what to do."""
    row = _find(session, project, name)
    grant = row is not None and has_grant(session, principal, row)
    if row is None or not may_see(principal, row, grant=grant):
        raise _missing(project, name)
    if not may_read(principal, row, grant=grant):
        raise Forbidden(f"{principal.name} may see dataset {project}/{name} in the catalog but not read its "
                        f"files; ask for access: mlyard datasets request {project}/{name}", field="name")
    return row


def writable(session: Session, principal: auth.Principal, project: str, name: str) -> DatasetRow:
    """The dataset, locked for the transaction, if the caller may add to it (a member of its
    project; a grant gives reading only)."""
    row = seen(session, principal, project, name, lock=True)
    auth.require_role(principal, project, auth.Role.MEMBER, f"change dataset {project}/{name}")
    return row


def managed(session: Session, principal: auth.Principal, project: str, name: str, doing: str, *,
            lock: bool = False) -> DatasetRow:
    """The dataset, if the caller may share it and answer its requests (`may_manage`)."""
    row = seen(session, principal, project, name, lock=lock)
    if not may_manage(principal, row):
        raise Forbidden(f"{principal.name} is neither the owner of dataset {project}/{name} nor a maintainer of "
                        f"project {project!r} and may not {doing}", field="name")
    return row
