"""Bearer tokens and the one access check every route goes through.

Tokens are random strings handed out once; the database keeps only their sha256. At first
start the server creates the `admin` user and writes its token to `MLYARD_HOME/admin.token`
(mode 0600), where the CLI on the same machine finds it. Each job attempt gets a token scoped
to its job, revoked when the job ends.
"""

from __future__ import annotations

import enum
import hashlib
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.errors import Forbidden, NotFound, Unauthorized
from mlyard.server import auth_cache
from mlyard.server.auth_cache import Principals
from mlyard.server.store.db import Database, insert_if_absent
from mlyard.server.store.rows import ApiTokenRow, JobRow, ProjectMemberRow, UserRow

TOKEN_PREFIX = "mly_"


class Action(enum.Enum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"
    """Changing how the cluster is shared (queues): administrators only."""
    REPORT = "report"
    """Adding what a job measured (training metrics): its own token may."""


class Role(enum.IntEnum):
    """A user's role in a project; each includes the ones below it."""

    VIEWER = 1
    """reads the project's jobs, queues, logs and metrics"""
    MEMBER = 2
    """submits jobs to it and manages their own"""
    MAINTAINER = 3
    """manages every job of the project, its queues and quotas, and its members"""

    @classmethod
    def named(cls, name: str) -> Role:
        return cls[name.upper()]

    @property
    def label(self) -> str:
        return self.name.lower()


ROLE_NAMES = tuple(role.label for role in Role)


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user, or a job's replicas (job_id set)."""

    name: str
    user_id: int | None
    is_admin: bool = False
    job_id: int | None = None
    token_id: int | None = None
    """The token the call came with: the session a logout ends."""
    roles: Mapping[str, Role] = field(default_factory=dict)
    """Project name → this user's role there (a job token holds none: it acts for its job)."""

    def role_in(self, project: str) -> Role | None:
        if self.is_admin and self.job_id is None:
            return Role.MAINTAINER
        return self.roles.get(project)

    def visible_projects(self) -> frozenset[str] | None:
        """The projects whose jobs this caller may see; None: no limit by project (an
        administrator). A job token sees no project: it reaches its own job only (`JOB_TOKEN_ROUTES`)."""
        if self.job_id is not None:
            return frozenset()
        return None if self.is_admin else frozenset(self.roles)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def issue_token(session: Session, *, name: str, user_id: int | None, job_id: int | None = None,
                kind: str | None = None, expires_at: float | None = None, parent_token_id: int | None = None,
                from_password: bool = False, bound_address: str | None = None) -> str:
    """A new token; only its hash is stored, so the caller shows the returned secret once."""
    token = new_token()
    session.add(
        ApiTokenRow(token_hash=hash_token(token), name=name, user_id=user_id, job_id=job_id, created_at=time.time(),
                    kind=kind or ("job" if job_id is not None else "api"), expires_at=expires_at,
                    parent_token_id=parent_token_id, from_password=from_password, bound_address=bound_address)
    )
    return token


# argon2id with the library's defaults (RFC 9106's second recommended setting: 64 MiB, 3 passes).
_PASSWORDS = PasswordHasher()


def hash_password(password: str) -> str:
    return _PASSWORDS.hash(password)


def password_matches(password_hash: str | None, password: str) -> bool:
    if not password_hash:
        return False
    try:
        return _PASSWORDS.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def revoke_job_tokens(session: Session, job_id: int) -> None:
    now = time.time()
    for row in session.scalars(select(ApiTokenRow).where(ApiTokenRow.job_id == job_id, ApiTokenRow.revoked_at.is_(None))):
        row.revoked_at = now


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text + "\n")
    os.replace(temporary, path)


def ensure_admin(database: Database, token_file: Path) -> None:
    """Creates the admin user and its token file when missing. A lost token file gets a new
    token (the old one cannot be recovered from its hash), so the local CLI always works.
    Servers sharing a database have homes of their own: each home gets a token of its own for
    the one admin user, and every such token works on all of them."""
    with database.transaction() as session:
        # Servers sharing a database may start at the same moment: one of them creates the user.
        insert_if_absent(session, UserRow, unique=["name"], name="admin", is_admin=True, created_at=time.time())
        admin = session.scalar(select(UserRow).where(UserRow.name == "admin"))
        if token_file.exists():
            stored = token_file.read_text().strip()
            row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.token_hash == hash_token(stored)))
            if row is not None and row.revoked_at is None:
                return
        token = issue_token(session, name="admin (local CLI)", user_id=admin.id)
    _write_private(token_file, token)


def _in_force(row: ApiTokenRow | None, now: float) -> bool:
    return row is not None and row.revoked_at is None and (row.expires_at is None or row.expires_at > now)


def _bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
    return token.strip()


def _cache_key(token: str, web_session: bool, address: str | None) -> tuple:
    # A bound session's answer holds for its address only.
    return hash_token(token), web_session, address if web_session else None


def remembered(principals: Principals, authorization: str | None, *, web_session: bool = False,
               address: str | None = None) -> Principal | None:
    """The caller `authenticate` answered for this header a moment ago, without reading the
    database; None when it must be read (or the header is malformed, which `authenticate` says)."""
    try:
        token = _bearer_token(authorization)
    except Unauthorized:
        return None
    return principals.get(_cache_key(token, web_session, address))


def authenticate(database: Database, authorization: str | None, *, web_session: bool = False,
                 address: str | None = None, principals: Principals | None = None) -> Principal:
    """The caller of a bearer token. A browser session's token (kind `session`) is taken only
    with `web_session` (the web UI's cookie), which takes nothing else, so a cookie never
    authenticates an API call and an API token never lives in a cookie. A session started with
    a token ends when that token is revoked or expires. A session bound to a client address
    (`bound_address`) is taken only from that `address`, so a cookie caught elsewhere opens nothing.
    `principals` remembers the answer for a moment (`auth_cache.py`)."""
    token = _bearer_token(authorization)
    key = _cache_key(token, web_session, address)
    if principals is not None and (known := principals.get(key)) is not None:
        return known
    read_at = auth_cache.generation()
    principal, expires_at = _look_up(database, key[0], web_session=web_session, address=address)
    if principals is not None:
        principals.put(key, principal, read_at_generation=read_at, expires_at=expires_at)
    return principal


def _look_up(database: Database, token_hash: str, *, web_session: bool,
             address: str | None) -> tuple[Principal, float | None]:
    """The caller, and when the answer stops holding by the clock (the earliest expiry of the
    token and of the token its session was started with)."""
    now = time.time()
    with database.reading() as session:  # every request comes here: it must not wait for a writer
        row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.token_hash == token_hash))
        if row is None or row.revoked_at is not None:
            raise Unauthorized("invalid or revoked token")
        if row.expires_at is not None and row.expires_at <= now:
            raise Unauthorized("the token has expired; log in again (mlyard login) or create a new token")
        if (row.kind == "session") != web_session:
            raise Unauthorized("a web UI session works only in the web UI; the API takes an API token"
                               if not web_session else "not a web UI session; log in again")
        if web_session and row.bound_address is not None and address != row.bound_address:
            raise Unauthorized("this session was started from another address; log in again")
        expiries = [row.expires_at]
        if row.parent_token_id is not None:
            parent = session.get(ApiTokenRow, row.parent_token_id)
            if not _in_force(parent, now):
                raise Unauthorized("the token this session was started with has been revoked or has expired")
            expiries.append(parent.expires_at)
        expires_at = min((at for at in expiries if at is not None), default=None)
        if row.job_id is not None:
            return Principal(name=f"job-{row.job_id}", user_id=row.user_id, job_id=row.job_id,
                             token_id=row.id), expires_at
        user = session.get(UserRow, row.user_id) if row.user_id is not None else None
        if user is None:
            raise Unauthorized("the token's user no longer exists")
        roles = {project: Role.named(role) for project, role in session.execute(
            select(ProjectMemberRow.project, ProjectMemberRow.role).where(ProjectMemberRow.user_id == user.id))}
        return Principal(name=user.name, user_id=user.id, is_admin=user.is_admin, token_id=row.id,
                         roles=MappingProxyType(roles)), expires_at


def require_role(principal: Principal, project: str, role: Role, doing: str) -> None:
    """Raises Forbidden unless the caller holds at least `role` in `project` (administrators
    hold every role). `doing` completes "… may not {doing}" in the message."""
    held = principal.role_in(project)
    if principal.job_id is None and held is not None and held >= role:
        return
    if principal.job_id is not None:
        raise Forbidden(f"a job token may not {doing}")
    having = f"is only a {held.label} of project {project!r}" if held else f"is not a member of project {project!r}"
    raise Forbidden(f"{principal.name} {having} and may not {doing}; that needs the {role.label} role",
                    field="project")


def may_read_project(principal: Principal, project: str) -> bool:
    visible = principal.visible_projects()
    return visible is None or project in visible


def visible_job(principal: Principal, job: JobRow | None, job_id: int) -> JobRow:
    """The job, if the caller may see it; one it may not see answers like one that does not exist."""
    if principal.job_id is not None:
        visible = job is not None and job.id == principal.job_id
    else:
        visible = job is not None and may_read_project(principal, job.project)
    if not visible:
        raise NotFound(f"job {job_id} does not exist")
    return job


JOB_TOKEN_ROUTES: frozenset[tuple[str, str]] = frozenset({
    ("GET", "/jobs/{job_id}"),
    ("GET", "/jobs/{job_id}/logs"),
    ("GET", "/jobs/{job_id}/metrics"),
    ("POST", "/jobs/{job_id}/metrics"),
    ("GET", "/jobs/{job_id}/resources"),
    ("GET", "/jobs/{job_id}/tensorboard"),
})
"""The only routes (below /api/v1) a job's token may call, each with its own job's id: read the
job (its logs, metrics, resources, TensorBoard) and report its metrics (`mlyard.sdk`). A route not
listed here or in `JOB_TOKEN_BODY_ROUTES` is refused to job tokens."""
JOB_TOKEN_BODY_ROUTES: frozenset[tuple[str, str]] = frozenset({
    ("POST", "/models/{project}/{name}/versions"),
})
"""Routes a job's token may call for its own job named in the body rather than the path: register
the job's checkpoint files as a model version of its own project (`mlyard.sdk.models.register`).
The service checks the job and the project (`services/models/from_jobs.py`) and refuses any other
use (a manifest push)."""


def admit_route(principal: Principal, method: str, route: str | None, job_id: object) -> None:
    """Refuses a job token any route outside `JOB_TOKEN_ROUTES` (or naming another job) and
    `JOB_TOKEN_BODY_ROUTES`; every API route's caller passes through here
    (`routers/dependencies.py`) before its service runs."""
    if principal.job_id is None:
        return
    if (method.upper(), route) in JOB_TOKEN_ROUTES and str(job_id) == str(principal.job_id):
        return
    if (method.upper(), route) in JOB_TOKEN_BODY_ROUTES:
        return
    raise Forbidden(f"a job token may only read job {principal.job_id} and report its metrics")


def authorize(principal: Principal, action: Action, *, job_id: int | None = None) -> None:
    """The check every service makes first: administrators may administer; a job's token may
    only read its own job and report its metrics (`job_id`: the job touched; a listing passes
    none, so a job token may list nothing). What a user may do inside a project is checked
    next, by `require_role` and `visible_job` against the project of what is touched."""
    if action is Action.ADMIN:
        if principal.is_admin and principal.job_id is None:
            return
        raise Forbidden(f"{principal.name} is not an administrator; this needs an administrator's token")
    if principal.job_id is None:
        return
    if action in (Action.READ, Action.REPORT) and job_id is not None and job_id == principal.job_id:
        return
    raise Forbidden(f"a job token may only read job {principal.job_id} and report its metrics")
