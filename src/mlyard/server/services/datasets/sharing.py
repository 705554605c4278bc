"""Sharing a dataset with other projects: a grant lets every reader (viewer and up) of the
granted project read its files. Its owner and its project's maintainers grant and revoke, and
answer the access requests users make from the catalog; granting a request makes the grant.
Every step is a POST, PUT or DELETE, so the audit log (`http/audit.py`) holds each with its
change."""

from __future__ import annotations

import time

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from mlyard.api.datasets import AccessRequestCreate, AccessRequestInfo, GrantInfo
from mlyard.errors import Conflict, InvalidRequest, NotFound
from mlyard.server import auth
from mlyard.server.services.datasets import access
from mlyard.server.store.dataset_rows import DatasetAccessRequestRow, DatasetGrantRow, DatasetRow
from mlyard.server.store.db import Database
from mlyard.server.store.rows import ProjectRow

PENDING, GRANTED, REFUSED = "pending", "granted", "refused"


def _grant_info(row: DatasetGrantRow) -> GrantInfo:
    return GrantInfo(project=row.project, granted_by=row.granted_by, granted_at=row.granted_at)


def _request_info(row: DatasetAccessRequestRow, dataset: DatasetRow) -> AccessRequestInfo:
    return AccessRequestInfo(id=row.id, dataset_project=dataset.project, dataset=dataset.name, project=row.project,
                             requested_by=row.requester.name, message=row.message, status=row.status,
                             created_at=row.created_at, answered_by=row.answered_by, answered_at=row.answered_at,
                             answer=row.answer)


def _existing_project(session: Session, project: str, field: str) -> str:
    if session.get(ProjectRow, project) is None:
        raise NotFound(f"project {project!r} does not exist", field=field)
    return project


def _add_grant(session: Session, dataset: DatasetRow, project: str, by: str) -> DatasetGrantRow:
    """The project's grant (made now, or kept); its pending requests are granted with it."""
    row = session.get(DatasetGrantRow, (dataset.id, project))
    now = time.time()
    if row is None:
        row = DatasetGrantRow(dataset_id=dataset.id, project=project, granted_by=by, granted_at=now)
        session.add(row)
    for pending in session.scalars(select(DatasetAccessRequestRow).where(
            DatasetAccessRequestRow.dataset_id == dataset.id, DatasetAccessRequestRow.project == project,
            DatasetAccessRequestRow.status == PENDING)):
        pending.status, pending.answered_by, pending.answered_at = GRANTED, by, now
    return row


def share(database: Database, principal: auth.Principal, project: str, name: str, grantee: str) -> GrantInfo:
    """Lets the readers of `grantee` read the dataset (its owner and its project's maintainers)."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        dataset = access.managed(session, principal, project, name, f"share dataset {project}/{name}", lock=True)
        if grantee == dataset.project:
            raise InvalidRequest(f"project {grantee!r} holds dataset {project}/{name}; its readers read it already",
                                 field="grantee_project")
        _existing_project(session, grantee, "grantee_project")
        row = _add_grant(session, dataset, grantee, principal.name)
        session.flush()
        return _grant_info(row)


def unshare(database: Database, principal: auth.Principal, project: str, name: str, grantee: str) -> None:
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        dataset = access.managed(session, principal, project, name, f"unshare dataset {project}/{name}", lock=True)
        row = session.get(DatasetGrantRow, (dataset.id, grantee))
        if row is None:
            raise NotFound(f"dataset {project}/{name} is not shared with project {grantee!r}",
                           field="grantee_project")
        session.delete(row)


def list_grants(database: Database, principal: auth.Principal, project: str, name: str) -> list[GrantInfo]:
    """The projects it is shared with (its readers may know who else reads it)."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        dataset = access.readable(session, principal, project, name)
        return [_grant_info(row) for row in session.scalars(
            select(DatasetGrantRow).where(DatasetGrantRow.dataset_id == dataset.id).order_by(DatasetGrantRow.project))]


def _requesting_project(principal: auth.Principal, dataset: DatasetRow, asked: str | None) -> str:
    if asked is not None:
        return asked
    mine = sorted(project for project, role in principal.roles.items()
                  if role >= auth.Role.MEMBER and project != dataset.project)
    if len(mine) != 1:
        raise InvalidRequest("name the project that would read it (--project): "
                             + (f"you are a member of {', '.join(mine)}" if mine else "you are a member of none"),
                             field="project")
    return mine[0]


def request_access(database: Database, principal: auth.Principal, project: str, name: str,
                   request: AccessRequestCreate) -> tuple[AccessRequestInfo, bool]:
    """Asks the dataset's managers to let a project of the caller's read it; (the request,
    whether it is new: a pending one of the same project is answered as it is)."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        dataset = access.seen(session, principal, project, name)
        asking = _requesting_project(principal, dataset, request.project)
        auth.require_role(principal, asking, auth.Role.MEMBER, f"ask for access for project {asking!r}")
        _existing_project(session, asking, "project")
        if asking == dataset.project or session.get(DatasetGrantRow, (dataset.id, asking)) is not None:
            raise Conflict(f"project {asking!r} reads dataset {project}/{name} already", field="project")
        pending = session.scalars(select(DatasetAccessRequestRow).where(
            DatasetAccessRequestRow.dataset_id == dataset.id, DatasetAccessRequestRow.project == asking,
            DatasetAccessRequestRow.status == PENDING)).first()
        if pending is not None:
            return _request_info(pending, dataset), False
        row = DatasetAccessRequestRow(dataset_id=dataset.id, project=asking, user_id=principal.user_id,
                                      message=request.message, status=PENDING, created_at=time.time(), answer="")
        session.add(row)
        session.flush()
        session.refresh(row)
        return _request_info(row, dataset), True


def _with_status(query, status: str | None):
    return query if status is None else query.where(DatasetAccessRequestRow.status == status)


def list_requests(database: Database, principal: auth.Principal, project: str, name: str, *,
                  status: str | None = PENDING) -> list[AccessRequestInfo]:
    """A dataset's requests, newest first (its owner and its project's maintainers)."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        dataset = access.managed(session, principal, project, name, f"see the requests of dataset {project}/{name}")
        rows = session.scalars(_with_status(select(DatasetAccessRequestRow).where(
            DatasetAccessRequestRow.dataset_id == dataset.id), status).order_by(DatasetAccessRequestRow.id.desc()))
        return [_request_info(row, dataset) for row in rows]


def list_all_requests(database: Database, principal: auth.Principal, *, mine: bool,
                      status: str | None) -> list[AccessRequestInfo]:
    """`mine`: the caller's own requests, with their answers; else the requests of every dataset
    the caller manages (owns, or of a project they maintain; all, for an administrator)."""
    auth.authorize(principal, auth.Action.READ)
    if principal.job_id is not None or principal.user_id is None:
        return []
    query = select(DatasetAccessRequestRow, DatasetRow).join(
        DatasetRow, DatasetRow.id == DatasetAccessRequestRow.dataset_id)
    if mine:
        query = query.where(DatasetAccessRequestRow.user_id == principal.user_id)
    elif not principal.is_admin:
        maintained = sorted(project for project, role in principal.roles.items() if role >= auth.Role.MAINTAINER)
        query = query.where(or_(DatasetRow.owner_id == principal.user_id, DatasetRow.project.in_(maintained)))
    with database.reading() as session:
        rows = session.execute(_with_status(query, status).order_by(DatasetAccessRequestRow.id.desc()).limit(1000))
        return [_request_info(request, dataset) for request, dataset in rows]


def answer_request(database: Database, principal: auth.Principal, project: str, name: str, request_id: int, *,
                   grant: bool, message: str = "") -> AccessRequestInfo:
    """Grants (the project's grant is made) or refuses a pending request."""
    auth.authorize(principal, auth.Action.WRITE)
    doing = f"answer requests for dataset {project}/{name}"
    with database.transaction() as session:
        dataset = access.managed(session, principal, project, name, doing, lock=True)
        row = session.get(DatasetAccessRequestRow, request_id)
        if row is None or row.dataset_id != dataset.id:
            raise NotFound(f"dataset {project}/{name} has no request {request_id}", field="request_id")
        if row.status != PENDING:
            raise Conflict(f"request {request_id} was {row.status} by {row.answered_by}", field="request_id")
        if grant:
            _add_grant(session, dataset, row.project, principal.name)
            row.answer = message
        else:
            row.status, row.answered_by, row.answered_at, row.answer = REFUSED, principal.name, time.time(), message
        session.flush()
        return _request_info(row, dataset)
