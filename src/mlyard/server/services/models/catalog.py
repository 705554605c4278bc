"""Creating, listing and showing models (see `access.py` for who sees what)."""

from __future__ import annotations

import time

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mlyard.api.datasets import version_name
from mlyard.api.models import ModelInfo, ModelRequest
from mlyard.errors import Conflict
from mlyard.server import auth
from mlyard.server.services import projects
from mlyard.server.services.datasets.catalog import literal_pattern
from mlyard.server.services.models import access
from mlyard.server.store.db import Database
from mlyard.server.store.model_rows import ModelAliasRow, ModelRow, ModelVersionRow


def info(session: Session, row: ModelRow) -> ModelInfo:
    versions = session.scalar(select(func.count()).where(ModelVersionRow.model_id == row.id)) or 0
    aliases = session.execute(
        select(ModelAliasRow.name, ModelVersionRow.number)
        .join(ModelVersionRow, ModelVersionRow.id == ModelAliasRow.version_id)
        .where(ModelAliasRow.model_id == row.id).order_by(ModelAliasRow.name)).all()
    return ModelInfo(id=row.id, project=row.project, name=row.name, owner=row.owner.name if row.owner else None,
                     description=row.description, tags=list(row.tags), task=row.task, created_at=row.created_at,
                     updated_at=row.updated_at, versions=versions,
                     aliases={alias: version_name(number) for alias, number in aliases})


def add_model(session: Session, *, project: str, name: str, owner_id: int | None, description: str = "",
              tags: list[str] | None = None, task: str = "") -> ModelRow:
    """A new model row (the caller checked who may make it); Conflict if the name is taken."""
    if session.scalar(select(ModelRow.id).where(ModelRow.project == project, ModelRow.name == name)) is not None:
        raise Conflict(f"model {project}/{name} exists", field="name")
    now = time.time()
    row = ModelRow(project=project, name=name, owner_id=owner_id, description=description, tags=list(tags or []),
                   task=task, created_at=now, updated_at=now)
    session.add(row)
    session.flush()
    return row


def create_model(database: Database, principal: auth.Principal, request: ModelRequest) -> ModelInfo:
    """A new model with no version, owned by the caller; members of the project create them."""
    auth.authorize(principal, auth.Action.WRITE)
    try:
        with database.transaction() as session:
            projects.ensure_project(session, principal, request.project)
            auth.require_role(principal, request.project, auth.Role.MEMBER,
                              f"create models in project {request.project!r}")
            row = add_model(session, project=request.project, name=request.name, owner_id=principal.user_id,
                            description=request.description, tags=request.tags, task=request.task)
            return info(session, row)
    except IntegrityError as error:  # created meanwhile by another request (PostgreSQL)
        raise Conflict(f"model {request.project}/{request.name} exists", field="name") from error


def list_models(database: Database, principal: auth.Principal, *, project: str | None = None,
                search: str | None = None, tag: str | None = None, task: str | None = None) -> list[ModelInfo]:
    """The models of the caller's projects, filtered."""
    auth.authorize(principal, auth.Action.READ)
    if principal.job_id is not None:
        return []
    with database.reading() as session:
        query = select(ModelRow).order_by(ModelRow.project, ModelRow.name)
        visible = principal.visible_projects()
        if visible is not None:
            query = query.where(ModelRow.project.in_(sorted(visible)))
        if project is not None:
            query = query.where(ModelRow.project == project)
        if task is not None:
            query = query.where(ModelRow.task == task)
        if search:
            pattern = literal_pattern(search)
            query = query.where(or_(func.lower(ModelRow.name).like(pattern, escape="\\"),
                                    func.lower(ModelRow.description).like(pattern, escape="\\")))
        rows = [row for row in session.scalars(query) if tag is None or tag in row.tags]
        return [info(session, row) for row in rows]


def get_model(database: Database, principal: auth.Principal, project: str, name: str) -> ModelInfo:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        return info(session, access.seen(session, principal, project, name))
