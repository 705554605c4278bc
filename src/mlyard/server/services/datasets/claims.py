"""Moving a dataset to a project and an owner. A **claim** asks for registered data nobody owns
(`registration.py`) for one of the caller's projects; an administrator decides. A **transfer** is
asked by a dataset's owner (or its project's maintainers) for another project or owner; the
receiving project's maintainers decide (administrators hold that role everywhere), since it is
that project that takes the data on. Approving moves the dataset with its versions and aliases
(refused with quota_exceeded if its blobs would take the receiving project past its storage
limit); a grant the receiving project held is dropped, being its own data now."""

from __future__ import annotations

import time

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from mlyard.api.datasets import ClaimCreate, ClaimInfo, TransferCreate
from mlyard.errors import Conflict, Forbidden, InvalidRequest, NotFound
from mlyard.server import auth
from mlyard.server.services import project_storage
from mlyard.server.services.datasets import access
from mlyard.server.store.dataset_rows import DatasetClaimRow, DatasetGrantRow, DatasetRow
from mlyard.server.store.db import Database
from mlyard.server.store.rows import ProjectMemberRow, ProjectRow, UserRow

PENDING, APPROVED, REFUSED = "pending", "approved", "refused"
CLAIM, TRANSFER = "claim", "transfer"


def _info(row: DatasetClaimRow, dataset: DatasetRow) -> ClaimInfo:
    return ClaimInfo(id=row.id, kind=row.kind, dataset_project=dataset.project, dataset=dataset.name,
                     to_project=row.to_project, to_user=row.to_user.name, requested_by=row.requester.name,
                     message=row.message, status=row.status, created_at=row.created_at, answered_by=row.answered_by,
                     answered_at=row.answered_at, answer=row.answer)


def _no_clash(session: Session, dataset: DatasetRow, project: str) -> None:
    if project != dataset.project and session.scalar(select(DatasetRow.id).where(
            DatasetRow.project == project, DatasetRow.name == dataset.name)) is not None:
        raise Conflict(f"project {project!r} has a dataset named {dataset.name!r} already", field="project")


def _add(session: Session, principal: auth.Principal, dataset: DatasetRow, kind: str, project: str, to_user: int,
         message: str) -> ClaimInfo:
    """The new pending request, or the caller's pending one of the same kind and target."""
    if session.get(ProjectRow, project) is None:
        raise NotFound(f"project {project!r} does not exist", field="project" if kind == CLAIM else "to_project")
    _no_clash(session, dataset, project)
    row = session.scalars(select(DatasetClaimRow).where(
        DatasetClaimRow.dataset_id == dataset.id, DatasetClaimRow.kind == kind, DatasetClaimRow.to_project == project,
        DatasetClaimRow.to_user_id == to_user, DatasetClaimRow.requested_by == principal.user_id,
        DatasetClaimRow.status == PENDING)).first()
    if row is None:
        row = DatasetClaimRow(dataset_id=dataset.id, kind=kind, to_project=project, to_user_id=to_user,
                              requested_by=principal.user_id, message=message, status=PENDING,
                              created_at=time.time(), answer="")
        session.add(row)
        session.flush()
        session.refresh(row)
    return _info(row, dataset)


def claim(database: Database, principal: auth.Principal, project: str, name: str, request: ClaimCreate) -> ClaimInfo:
    """Asks for an unowned dataset for a project the caller is a member of."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        dataset = access.seen(session, principal, project, name)
        if dataset.owner_id is not None:
            raise Conflict(f"dataset {project}/{name} is owned by {dataset.owner.name}; its owner may transfer it",
                           field="name")
        auth.require_role(principal, request.project, auth.Role.MEMBER,
                          f"claim datasets for project {request.project!r}")
        return _add(session, principal, dataset, CLAIM, request.project, principal.user_id, request.message)


def _member(session: Session, user: UserRow, project: str) -> bool:
    role = session.scalar(select(ProjectMemberRow.role).where(ProjectMemberRow.project == project,
                                                              ProjectMemberRow.user_id == user.id))
    return user.is_admin or (role is not None and auth.Role.named(role) >= auth.Role.MEMBER)


def transfer(database: Database, principal: auth.Principal, project: str, name: str,
             request: TransferCreate) -> ClaimInfo:
    """Asks to move an owned dataset to `to_project` with `to_user` (by default the caller) as
    its owner (its owner and its project's maintainers ask)."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        dataset = access.managed(session, principal, project, name, f"transfer dataset {project}/{name}")
        if dataset.owner_id is None:
            raise Conflict(f"dataset {project}/{name} has no owner; claim it (mlyard datasets claim)", field="name")
        user = session.scalar(select(UserRow).where(UserRow.name == (request.to_user or principal.name)))
        if user is None:
            raise NotFound(f"user {request.to_user!r} does not exist", field="to_user")
        if session.get(ProjectRow, request.to_project) is not None and not _member(session, user, request.to_project):
            raise InvalidRequest(f"{user.name} is not a member of project {request.to_project!r}, so cannot own "
                                 "a dataset there", field="to_user")
        if request.to_project == dataset.project and user.id == dataset.owner_id:
            raise InvalidRequest(f"dataset {project}/{name} is {user.name}'s in project {project!r} already",
                                 field="to_project")
        return _add(session, principal, dataset, TRANSFER, request.to_project, user.id, request.message)


def _decidable(principal: auth.Principal, row: DatasetClaimRow) -> bool:
    if principal.job_id is not None:
        return False
    if row.kind == CLAIM:
        return principal.is_admin
    held = principal.role_in(row.to_project)
    return held is not None and held >= auth.Role.MAINTAINER


def list_claims(database: Database, principal: auth.Principal, *, mine: bool, status: str | None,
                dataset: tuple[str, str] | None = None) -> list[ClaimInfo]:
    """`mine`: what the caller asked, with the answers; else what the caller may decide
    (claims: administrators; transfers: the receiving project's maintainers); newest first.
    `dataset`: only those of this (project, name)."""
    auth.authorize(principal, auth.Action.READ)
    if principal.job_id is not None or principal.user_id is None:
        return []
    query = select(DatasetClaimRow, DatasetRow).join(DatasetRow, DatasetRow.id == DatasetClaimRow.dataset_id)
    if mine:
        query = query.where(DatasetClaimRow.requested_by == principal.user_id)
    elif not principal.is_admin:
        maintained = sorted(project for project, role in principal.roles.items() if role >= auth.Role.MAINTAINER)
        query = query.where(DatasetClaimRow.kind == TRANSFER, DatasetClaimRow.to_project.in_(maintained))
    if status is not None:
        query = query.where(DatasetClaimRow.status == status)
    if dataset is not None:
        query = query.where(DatasetRow.project == dataset[0], DatasetRow.name == dataset[1])
    with database.reading() as session:
        rows = session.execute(query.order_by(DatasetClaimRow.id.desc()).limit(1000))
        return [_info(row, dataset) for row, dataset in rows]


def decide(database: Database, principal: auth.Principal, claim_id: int, *, approve: bool,
           message: str = "") -> ClaimInfo:
    """Approves (the dataset moves) or refuses a pending claim or transfer."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        row = session.scalars(select(DatasetClaimRow).where(DatasetClaimRow.id == claim_id)
                              .with_for_update(of=DatasetClaimRow)).first()
        if row is None:
            raise NotFound(f"claim {claim_id} does not exist", field="claim_id")
        if not _decidable(principal, row):
            deciders = "an administrator" if row.kind == CLAIM else f"a maintainer of project {row.to_project!r}"
            raise Forbidden(f"{principal.name} may not decide {row.kind} {claim_id}; that needs {deciders}",
                            field="claim_id")
        dataset = session.scalars(select(DatasetRow).where(DatasetRow.id == row.dataset_id)
                                  .with_for_update(of=DatasetRow)).one()
        if row.status != PENDING:
            raise Conflict(f"{row.kind} {claim_id} was {row.status} by {row.answered_by}", field="claim_id")
        now = time.time()
        if approve:
            if row.kind == CLAIM and dataset.owner_id is not None:
                raise Conflict(f"dataset {dataset.project}/{dataset.name} was claimed meanwhile", field="claim_id")
            _no_clash(session, dataset, row.to_project)
            project_storage.check_move(session, dataset, row.to_project, field="claim_id")  # its limit
            session.execute(delete(DatasetGrantRow).where(DatasetGrantRow.dataset_id == dataset.id,
                                                          DatasetGrantRow.project == row.to_project))
            dataset.project, dataset.owner_id, dataset.updated_at = row.to_project, row.to_user_id, now
        row.status, row.answered_by, row.answered_at, row.answer = (
            APPROVED if approve else REFUSED, principal.name, now, message)
        session.flush()
        session.refresh(dataset)
        return _info(row, dataset)
