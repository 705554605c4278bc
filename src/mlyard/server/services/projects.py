"""Projects, their members and roles, and their limits.

Administrators create projects and set their limits; a project's maintainers manage its
members. Every job and queue names a project (`default` exists from the start). A project an
administrator names for the first time, in a job or a queue, is created on the way, so the
embedded single-user mode needs no setup; anyone else must name an existing project.
"""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.errors import Conflict, InvalidRequest, NotFound
from mlyard.api.projects import (
    Membership,
    NewProject,
    ProjectChange,
    ProjectInfo,
    ProjectLimits,
    ProjectMember,
)
from mlyard.server import auth
from mlyard.server.auth import Role
from mlyard.server.store.db import Database, insert_if_absent
from mlyard.server.store.rows import ProjectMemberRow, ProjectRow, UserRow
from mlyard.server.services import project_storage

DEFAULT_PROJECT = "default"
_LIMITS = {"gpu": "quota_gpu", "cpu": "quota_cpu", "memory": "quota_memory", "running_jobs": "max_running_jobs",
           "storage_bytes": "max_storage_bytes"}


def limits_of(row: ProjectRow) -> ProjectLimits:
    return ProjectLimits(**{field: getattr(row, column) for field, column in _LIMITS.items()})


def _info(session: Session, principal: auth.Principal, row: ProjectRow) -> ProjectInfo:
    members = session.execute(
        select(UserRow.name, ProjectMemberRow.role).join(UserRow, UserRow.id == ProjectMemberRow.user_id)
        .where(ProjectMemberRow.project == row.name).order_by(UserRow.name))
    own = principal.roles.get(row.name)
    return ProjectInfo(name=row.name, description=row.description, limits=limits_of(row),
                       storage_used_bytes=project_storage.used_bytes(session, row.name),
                       your_role=own.label if own else None, created_at=row.created_at,
                       members=[ProjectMember(user=user, role=role) for user, role in members])


def ensure_project(session: Session, principal: auth.Principal, name: str) -> ProjectRow:
    """The project `name`, created first if an administrator names it (see the module's text)."""
    row = session.get(ProjectRow, name)
    if row is not None:
        return row
    if principal.is_admin and principal.job_id is None:
        insert_if_absent(session, ProjectRow, name=name, created_at=time.time())
        return session.get(ProjectRow, name)
    names = ", ".join(sorted(principal.roles)) or "none yet (ask an administrator to add you to one)"
    raise InvalidRequest(f"project {name!r} does not exist; your projects: {names}", field="project")


def _project(session: Session, principal: auth.Principal, name: str) -> ProjectRow:
    row = session.get(ProjectRow, name)
    # A project the caller may not see answers like one that does not exist.
    if row is None or not auth.may_read_project(principal, name):
        raise NotFound(f"project {name!r} does not exist", field="name")
    return row


def list_projects(database: Database, principal: auth.Principal) -> list[ProjectInfo]:
    auth.authorize(principal, auth.Action.READ)
    visible = principal.visible_projects()
    with database.reading() as session:
        query = select(ProjectRow).order_by(ProjectRow.name)
        if visible is not None:
            query = query.where(ProjectRow.name.in_(sorted(visible)))
        return [_info(session, principal, row) for row in session.scalars(query)]


def get_project(database: Database, principal: auth.Principal, name: str) -> ProjectInfo:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        return _info(session, principal, _project(session, principal, name))


def create_project(database: Database, principal: auth.Principal, request: NewProject) -> ProjectInfo:
    auth.authorize(principal, auth.Action.ADMIN)
    with database.transaction() as session:
        if session.get(ProjectRow, request.name) is not None:
            raise Conflict(f"project {request.name!r} already exists", field="name")
        row = ProjectRow(name=request.name, description=request.description, created_at=time.time(),
                         **{column: getattr(request.limits, field) for field, column in _LIMITS.items()})
        session.add(row)
        session.flush()
        return _info(session, principal, row)


def change_project(database: Database, principal: auth.Principal, name: str, change: ProjectChange) -> ProjectInfo:
    """The description (maintainers) and the limits (administrators: they share the cluster)."""
    with database.transaction() as session:
        row = _project(session, principal, name)
        auth.require_role(principal, name, Role.MAINTAINER, f"change project {name!r}")
        if "limits" in change.model_fields_set:
            auth.authorize(principal, auth.Action.ADMIN)
            limits = change.limits or ProjectLimits()
            for field, column in _LIMITS.items():
                if change.limits is None or field in limits.model_fields_set:
                    setattr(row, column, getattr(limits, field))
        if "description" in change.model_fields_set:
            row.description = change.description
        session.flush()
        return _info(session, principal, row)


def set_member(database: Database, principal: auth.Principal, name: str, user: str,
               membership: Membership) -> ProjectInfo:
    with database.transaction() as session:
        row = _project(session, principal, name)
        auth.require_role(principal, name, Role.MAINTAINER, f"manage the members of project {name!r}")
        user_id = session.scalar(select(UserRow.id).where(UserRow.name == user))
        if user_id is None:
            raise NotFound(f"user {user!r} does not exist", field="user")
        member = session.get(ProjectMemberRow, (name, user_id))
        if member is None:
            session.add(ProjectMemberRow(project=name, user_id=user_id, role=membership.role, created_at=time.time()))
        else:
            member.role = membership.role
        session.flush()
        return _info(session, principal, row)


def remove_member(database: Database, principal: auth.Principal, name: str, user: str) -> ProjectInfo:
    with database.transaction() as session:
        row = _project(session, principal, name)
        auth.require_role(principal, name, Role.MAINTAINER, f"manage the members of project {name!r}")
        user_id = session.scalar(select(UserRow.id).where(UserRow.name == user))
        member = session.get(ProjectMemberRow, (name, user_id)) if user_id is not None else None
        if member is None:
            raise NotFound(f"{user} is not a member of project {name!r}", field="user")
        session.delete(member)
        session.flush()
        return _info(session, principal, row)
