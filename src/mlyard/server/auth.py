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
from dataclasses import dataclass
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.errors import Forbidden, Unauthorized
from mlyard.server.db import Database, insert_if_absent
from mlyard.server.rows import ApiTokenRow, UserRow

TOKEN_PREFIX = "mly_"


class Action(enum.Enum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"
    """Changing how the cluster is shared (queues): administrators only."""
    REPORT = "report"
    """Adding what a job measured (training metrics): its own token may."""


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user, or a job's replicas (job_id set)."""

    name: str
    user_id: int | None
    is_admin: bool = False
    job_id: int | None = None
    token_id: int | None = None
    """The token the call came with: the session a logout ends."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def issue_token(session: Session, *, name: str, user_id: int | None, job_id: int | None = None,
                kind: str | None = None, expires_at: float | None = None) -> str:
    """A new token; only its hash is stored, so the caller shows the returned secret once."""
    token = new_token()
    session.add(
        ApiTokenRow(token_hash=hash_token(token), name=name, user_id=user_id, job_id=job_id, created_at=time.time(),
                    kind=kind or ("job" if job_id is not None else "api"), expires_at=expires_at)
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


def authenticate(database: Database, authorization: str | None) -> Principal:
    if not authorization:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
    with database.transaction() as session:
        row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.token_hash == hash_token(token.strip())))
        if row is None or row.revoked_at is not None:
            raise Unauthorized("invalid or revoked token")
        if row.expires_at is not None and row.expires_at <= time.time():
            raise Unauthorized("the token has expired; log in again (mlyard login) or create a new token")
        if row.job_id is not None:
            return Principal(name=f"job-{row.job_id}", user_id=row.user_id, job_id=row.job_id, token_id=row.id)
        user = session.get(UserRow, row.user_id) if row.user_id is not None else None
        if user is None:
            raise Unauthorized("the token's user no longer exists")
        return Principal(name=user.name, user_id=user.id, is_admin=user.is_admin, token_id=row.id)


def authorize(principal: Principal, action: Action, *, job_id: int | None = None) -> None:
    """The single access check. Users may read and write everything for now (projects and
    roles come later), administrators may also administer; a job's token may only read its own job
    and report its metrics."""
    if action is Action.ADMIN:
        if principal.is_admin and principal.job_id is None:
            return
        raise Forbidden(f"{principal.name} is not an administrator; this needs an administrator's token")
    if principal.job_id is None:
        return
    if action in (Action.READ, Action.REPORT) and job_id == principal.job_id:
        return
    raise Forbidden(f"a job token may only read job {principal.job_id} and report its metrics")
