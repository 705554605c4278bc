"""Who may do what with a model. Its project's viewers (and administrators) see it and read its
files; its project's members add versions and move aliases; its owner and its project's
maintainers remove. A model the caller may not see answers like one that does not exist. A job's
token sees none, and may only add to its own project's models the files of its own job
(`from_jobs.py`)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.errors import Forbidden, NotFound
from mlyard.server import auth
from mlyard.server.services.datasets import access as dataset_access
from mlyard.server.store.model_rows import ModelRow


def find(session: Session, project: str, name: str, *, lock: bool = False) -> ModelRow | None:
    query = select(ModelRow).where(ModelRow.project == project, ModelRow.name == name)
    if lock:
        query = query.with_for_update(of=ModelRow)  # not the owner, an outer join
    return session.scalars(query).first()


def missing(project: str, name: str) -> NotFound:
    return NotFound(f"model {project}/{name} does not exist", field="name")


def seen(session: Session, principal: auth.Principal, project: str, name: str, *, lock: bool = False) -> ModelRow:
    """The model, if the caller may see it (and read its files)."""
    row = find(session, project, name, lock=lock)
    if row is None or principal.job_id is not None or not auth.may_read_project(principal, project):
        raise missing(project, name)
    return row


def writable(session: Session, principal: auth.Principal, project: str, name: str) -> ModelRow:
    """The model, locked for the transaction, if the caller may add to it (a member of its project)."""
    row = seen(session, principal, project, name, lock=True)
    auth.require_role(principal, project, auth.Role.MEMBER, f"change model {project}/{name}")
    return row


def removable(session: Session, principal: auth.Principal, project: str, name: str) -> ModelRow:
    """The model, locked, if the caller may remove from it: its owner, its project's maintainers."""
    row = writable(session, principal, project, name)
    if not dataset_access.may_manage(principal, row):
        raise Forbidden(f"{principal.name} may not remove from model {project}/{name}: its owner and the "
                        f"maintainers of project {project!r} may", field="name")
    return row
