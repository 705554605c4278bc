"""Creating, listing and showing datasets (see `access.py` for who sees what)."""

from __future__ import annotations

import time

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mlyard.api.datasets import DatasetInfo, DatasetRequest, version_name
from mlyard.errors import Conflict
from mlyard.server import auth
from mlyard.server.services import projects
from mlyard.server.services.datasets import access
from mlyard.server.store.db import Database
from mlyard.server.store.dataset_rows import DatasetAliasRow, DatasetGrantRow, DatasetRow, DatasetVersionRow


def info(session: Session, principal: auth.Principal, row: DatasetRow, *, grant: bool | None = None) -> DatasetInfo:
    """`grant`: whether a project of the caller's holds a grant on it, when the caller already
    knows (a listing asks once for all its rows); None: asked here."""
    if grant is None:
        grant = access.has_grant(session, principal, row)
    versions = session.scalar(select(func.count()).where(DatasetVersionRow.dataset_id == row.id)) or 0
    aliases = dict(session.execute(
        select(DatasetAliasRow.name, DatasetVersionRow.number)
        .join(DatasetVersionRow, DatasetVersionRow.id == DatasetAliasRow.version_id)
        .where(DatasetAliasRow.dataset_id == row.id).order_by(DatasetAliasRow.name)).all())
    return DatasetInfo(
        id=row.id, project=row.project, name=row.name, owner=row.owner.name if row.owner else None,
        description=row.description, licence=row.licence, tags=list(row.tags), visibility=row.visibility,
        created_at=row.created_at, updated_at=row.updated_at, versions=versions,
        aliases={alias: version_name(number) for alias, number in aliases.items()},
        readable=access.may_read(principal, row, grant=grant))


def create_dataset(database: Database, principal: auth.Principal, request: DatasetRequest) -> DatasetInfo:
    """A new, empty dataset owned by the caller; members of the project create them."""
    auth.authorize(principal, auth.Action.WRITE)
    now = time.time()
    try:
        with database.transaction() as session:
            projects.ensure_project(session, principal, request.project)
            auth.require_role(principal, request.project, auth.Role.MEMBER,
                              f"create datasets in project {request.project!r}")
            if session.scalar(select(DatasetRow.id).where(DatasetRow.project == request.project,
                                                          DatasetRow.name == request.name)) is not None:
                raise Conflict(f"dataset {request.project}/{request.name} exists", field="name")
            row = DatasetRow(project=request.project, name=request.name, owner_id=principal.user_id,
                             description=request.description, licence=request.licence, tags=list(request.tags),
                             visibility=request.visibility, created_at=now, updated_at=now)
            session.add(row)
            session.flush()
            return info(session, principal, row)
    except IntegrityError as error:  # created meanwhile by another request (PostgreSQL)
        raise Conflict(f"dataset {request.project}/{request.name} exists", field="name") from error


def list_datasets(database: Database, principal: auth.Principal, *, project: str | None = None,
                  search: str | None = None, tag: str | None = None, owner: str | None = None) -> list[DatasetInfo]:
    """The datasets the caller may see: those of their projects and the catalog's, filtered."""
    auth.authorize(principal, auth.Action.READ)
    if principal.job_id is not None:
        return []
    with database.reading() as session:
        query = select(DatasetRow).order_by(DatasetRow.project, DatasetRow.name)
        visible = principal.visible_projects()
        if visible is not None:
            shared = select(DatasetGrantRow.dataset_id).where(DatasetGrantRow.project.in_(sorted(visible)))
            query = query.where(or_(DatasetRow.visibility == "catalog", DatasetRow.project.in_(sorted(visible)),
                                    DatasetRow.id.in_(shared)))
        if project is not None:
            query = query.where(DatasetRow.project == project)
        if search:
            pattern = literal_pattern(search)
            query = query.where(or_(func.lower(DatasetRow.name).like(pattern, escape="\\"),
                                    func.lower(DatasetRow.description).like(pattern, escape="\\")))
        rows = list(session.scalars(query))
        if tag is not None:
            rows = [row for row in rows if tag in row.tags]
        if owner is not None:
            rows = [row for row in rows if row.owner is not None and row.owner.name == owner]
        grants = access.granted(session, principal, [row.id for row in rows])
        return [info(session, principal, row, grant=row.id in grants) for row in rows]


def literal_pattern(search: str) -> str:
    """A LIKE pattern (escaped with a backslash) matching what holds `search`, lower-cased: the
    words of a search are literal, LIKE's wildcards in them match themselves."""
    return "%" + search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def get_dataset(database: Database, principal: auth.Principal, project: str, name: str) -> DatasetInfo:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        return info(session, principal, access.seen(session, principal, project, name))
