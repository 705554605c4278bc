"""Environments through the API: asking for a build, listing, showing, removing, and the
check a job naming one passes at submission. Builds themselves run on the leading server
(`server/environment_builds.py`)."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mlyard.api.environments import EnvironmentInfo, EnvironmentRequest
from mlyard.errors import Conflict, Forbidden, InvalidRequest, NotFound
from mlyard.server import auth
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
        name=row.name, base=row.base, requirements=row.requirements, apt=list(row.apt), kind=row.kind,
        content_hash=row.content_hash, status=row.status, message=message or row.message, image=row.image,
        cached=row.cached if cached is None else cached, created_by=row.creator.name if row.creator else None,
        created_at=row.created_at, built_at=row.built_at, log_tail=_tail(log) if log is not None else [])


def _same_inputs(row: EnvironmentRow, request: EnvironmentRequest) -> bool:
    return (row.base, row.requirements, list(row.apt)) == (request.base, request.requirements, request.apt)


def _may_change(principal: auth.Principal, row: EnvironmentRow, doing: str) -> None:
    if not principal.is_admin and row.created_by != principal.user_id:
        raise Forbidden(f"environment {row.name!r} belongs to {row.creator.name if row.creator else 'nobody'}; "
                        f"only they or an administrator may {doing}", field="name")


def request_build(database: Database, principal: auth.Principal, request: EnvironmentRequest) -> EnvironmentInfo:
    """Queues a build, unless the environment exists with these inputs (then it is answered as
    it stands: nothing is built twice)."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        row = session.get(EnvironmentRow, request.name, with_for_update=True)
        if row is not None and _same_inputs(row, request) and row.status != "failed":
            said = "already built with these inputs; nothing to do" if row.status == "ready" else None
            return info(row, cached=row.status == "ready" or None, message=said)
        if row is not None:
            _may_change(principal, row, "change it")
            if session.scalar(select(func.count()).select_from(JobRow).where(
                    JobRow.status.in_(_UNFINISHED), JobRow.spec["environment"].as_string() == request.name)):
                raise Conflict(f"unfinished jobs use environment {request.name!r}; build it under another name",
                               field="name")
        else:
            row = EnvironmentRow(name=request.name, created_at=time.time())
            session.add(row)
        row.base, row.requirements, row.apt = request.base, request.requirements, request.apt
        row.kind = row.content_hash = row.message = row.image = row.built_at = None
        row.status, row.cached, row.created_by = "queued", False, principal.user_id
        session.flush()
        session.refresh(row)
        return info(row)


def list_environments(database: Database, principal: auth.Principal) -> list[EnvironmentInfo]:
    auth.authorize(principal, auth.Action.READ)
    with database.transaction() as session:
        return [info(row) for row in session.scalars(select(EnvironmentRow).order_by(EnvironmentRow.name))]


def get_environment(database: Database, principal: auth.Principal, name: str, log: Path) -> EnvironmentInfo:
    auth.authorize(principal, auth.Action.READ)
    with database.transaction() as session:
        row = session.get(EnvironmentRow, name)
        if row is None:
            raise NotFound(f"environment {name!r} does not exist", field="name")
        return info(row, log)


def remove_environment(database: Database, principal: auth.Principal, name: str) -> None:
    """Removes the environment; its image or virtualenv goes once no environment of the same
    content is left (the builder collects it)."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        row = session.get(EnvironmentRow, name, with_for_update=True)
        if row is None:
            raise NotFound(f"environment {name!r} does not exist", field="name")
        _may_change(principal, row, "remove it")
        users = session.scalar(select(func.count()).select_from(JobRow).where(
            JobRow.status.in_(_UNFINISHED), JobRow.spec["environment"].as_string() == name))
        if users:
            raise Conflict(f"{users} unfinished job{'' if users == 1 else 's'} use{'s' if users == 1 else ''} "
                           f"environment {name!r}; remove it when they end", field="name")
        session.delete(row)


def check_for_job(session: Session, name: str) -> EnvironmentRow:
    """The environment a job names, ready to run it; otherwise a clear 422 on `environment`."""
    row = session.get(EnvironmentRow, name)
    if row is None:
        names = ", ".join(session.scalars(select(EnvironmentRow.name).order_by(EnvironmentRow.name))) or "none yet"
        raise InvalidRequest(f"environment {name!r} does not exist (`mlyard env build {name} --from IMAGE` makes "
                             f"it); the environments are: {names}", field="environment")
    if row.status == "failed":
        raise InvalidRequest(f"environment {name!r} failed to build: {row.message}", field="environment")
    if row.status != "ready":
        raise InvalidRequest(f"environment {name!r} is {row.status}; submit once `mlyard env ls` shows it ready",
                             field="environment")
    return row
