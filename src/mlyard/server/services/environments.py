"""Environments through the API: asking for a build, listing, showing, removing, and the
check a job naming one passes at submission. An environment belongs to a project: its viewers
and members see it (requirements and build log included) and its jobs use it; its maintainers
and administrators build and remove it. Builds themselves run on the leading server
(`server/workers/environment_builds.py`)."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mlyard.api.environments import EnvironmentInfo, EnvironmentRequest
from mlyard.environments.build_policy import BuildPolicy
from mlyard.errors import Conflict, InvalidRequest, NotFound
from mlyard.server import auth
from mlyard.server.services import projects
from mlyard.server.store.db import Database
from mlyard.server.store.rows import EnvironmentRow, JobRow
from mlyard.spec import JobStatus

LOG_TAIL_LINES = 20
_UNFINISHED = [status.value for status in JobStatus if not status.is_terminal]


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        with open(path, errors="replace") as handle:
            return [line.rstrip("\n") for line in deque(handle, maxlen=lines)]
    except OSError:
        return []


def info(row: EnvironmentRow, log: Path | None = None, *, cached: bool | None = None,
         message: str | None = None) -> EnvironmentInfo:
    return EnvironmentInfo(
        name=row.name, project=row.project, base=row.base, requirements=row.requirements, apt=list(row.apt),
        kind=row.kind, content_hash=row.content_hash, status=row.status, message=message or row.message,
        image=row.image, cached=row.cached if cached is None else cached,
        created_by=row.creator.name if row.creator else None, created_at=row.created_at, built_at=row.built_at,
        log_tail=_tail(log) if log is not None else [])


def _same_inputs(row: EnvironmentRow, request: EnvironmentRequest) -> bool:
    return (row.base, row.requirements, list(row.apt)) == (request.base, request.requirements, request.apt)


def _visible(principal: auth.Principal, row: EnvironmentRow | None, name: str) -> EnvironmentRow:
    """The environment, if the caller may see it (a viewer of its project or more); one it may
    not see answers like one that does not exist."""
    if row is None or principal.job_id is not None or not auth.may_read_project(principal, row.project):
        raise NotFound(f"environment {name!r} does not exist", field="name")
    return row


def _unfinished_users(session: Session, name: str) -> int:
    return session.scalar(select(func.count()).select_from(JobRow).where(
        JobRow.status.in_(_UNFINISHED), JobRow.spec["environment"].as_string() == name)) or 0


def _forget_log(log: Path | None) -> None:
    """Build logs are kept by name: an environment made anew under a removed one's name (maybe
    by another project) must not show that one's log."""
    if log is not None:
        log.unlink(missing_ok=True)


def request_build(database: Database, principal: auth.Principal, request: EnvironmentRequest,
                  policy: BuildPolicy | None = None, log: Path | None = None) -> EnvironmentInfo:
    """Queues a build, unless the environment exists with these inputs (then it is answered as
    it stands: nothing is built twice). Only the project's maintainers (and administrators) build.
    `log`: the build log of this name, removed when the environment is new."""
    auth.authorize(principal, auth.Action.WRITE)
    problem = (policy or BuildPolicy()).base_problem(request.base)
    if problem is not None:
        raise InvalidRequest(problem, field="base")
    with database.transaction() as session:
        projects.ensure_project(session, principal, request.project)
        auth.require_role(principal, request.project, auth.Role.MAINTAINER,
                          f"build environments of project {request.project!r}")
        row = session.get(EnvironmentRow, request.name, with_for_update=True)
        if row is not None and row.project != request.project:
            # Names are unique on the server: the other project's environment stays unseen.
            raise Conflict(f"the name {request.name!r} is taken by an environment of another project; "
                           "choose another name", field="name")
        if row is not None and _same_inputs(row, request) and row.status != "failed":
            said = "already built with these inputs; nothing to do" if row.status == "ready" else None
            return info(row, cached=row.status == "ready" or None, message=said)
        if row is not None:
            if _unfinished_users(session, request.name):
                raise Conflict(f"unfinished jobs use environment {request.name!r}; build it under another name",
                               field="name")
        else:
            row = EnvironmentRow(name=request.name, project=request.project, created_at=time.time())
            session.add(row)
            _forget_log(log)
        row.base, row.requirements, row.apt = request.base, request.requirements, request.apt
        row.kind = row.content_hash = row.message = row.image = row.built_at = None
        row.status, row.cached, row.created_by = "queued", False, principal.user_id
        session.flush()
        session.refresh(row)
        return info(row)


def list_environments(database: Database, principal: auth.Principal,
                      project: str | None = None) -> list[EnvironmentInfo]:
    """The environments of the projects the caller sees (or of `project` alone)."""
    auth.authorize(principal, auth.Action.READ)
    query = select(EnvironmentRow).order_by(EnvironmentRow.name)
    if project:
        query = query.where(EnvironmentRow.project == project)
    if principal.job_id is not None:
        return []
    if (visible := principal.visible_projects()) is not None:
        query = query.where(EnvironmentRow.project.in_(sorted(visible)))
    with database.reading() as session:
        return [info(row) for row in session.scalars(query)]


def get_environment(database: Database, principal: auth.Principal, name: str, log: Path) -> EnvironmentInfo:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        return info(_visible(principal, session.get(EnvironmentRow, name), name), log)


def remove_environment(database: Database, principal: auth.Principal, name: str, log: Path | None = None) -> None:
    """Removes the environment and its build log (`log`); its image or virtualenv goes once no
    environment of the same content is left (the builder collects it)."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        row = _visible(principal, session.get(EnvironmentRow, name, with_for_update=True), name)
        auth.require_role(principal, row.project, auth.Role.MAINTAINER,
                          f"remove environments of project {row.project!r}")
        users = _unfinished_users(session, name)
        if users:
            raise Conflict(f"{users} unfinished job{'' if users == 1 else 's'} use{'s' if users == 1 else ''} "
                           f"environment {name!r}; remove it when they end", field="name")
        session.delete(row)
    _forget_log(log)


def check_for_job(session: Session, name: str, project: str) -> EnvironmentRow:
    """The environment a job of `project` names, ready to run it; otherwise a clear 422 on
    `environment`. Another project's environment answers like one that does not exist."""
    row = session.get(EnvironmentRow, name)
    if row is None or row.project != project:
        names = ", ".join(session.scalars(select(EnvironmentRow.name).where(EnvironmentRow.project == project)
                                          .order_by(EnvironmentRow.name))) or "none yet"
        raise InvalidRequest(f"environment {name!r} does not exist in project {project!r} (`mlyard env build "
                             f"{name} --from IMAGE --project {project}` makes it); its environments are: {names}",
                             field="environment")
    if row.status == "failed":
        raise InvalidRequest(f"environment {name!r} failed to build: {row.message}", field="environment")
    if row.status != "ready":
        raise InvalidRequest(f"environment {name!r} is {row.status}; submit once `mlyard env ls` shows it ready",
                             field="environment")
    return row
