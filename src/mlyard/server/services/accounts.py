"""Users, their passwords and their tokens; logging in with a password.

A password login creates a token like any other, with an expiry: kind `login` for the CLI
(`mlyard login`), kind `session` for the web UI's cookie. The web UI's login with a token mints
a `session` of its own whose `parent_token_id` names that token, so the cookie never holds an
API token and the session dies with its parent. A password change revokes the user's sessions,
login tokens and every token made with one of them (`from_password`: whoever knew the password
could make those); tokens made with a token that never came from the password (admin.token, or
one made with it) stay: they belong to scripts, not to whoever knew the password. Secrets are
returned once and stored only as hashes. Password hashing (argon2, deliberately slow) runs
outside any database transaction.
"""

from __future__ import annotations

import functools
import secrets
import time

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from mlyard.api.accounts import (
    IssuedToken,
    LoginRequest,
    NewToken,
    NewUser,
    PasswordChange,
    TokenInfo,
    UserInfo,
)
from mlyard.errors import Conflict, Forbidden, NotFound, Unauthorized
from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.http.login_throttle import LoginThrottle
from mlyard.server.store.rows import ApiTokenRow, UserRow

SESSION_LIFETIME = 7 * 24 * 3600.0
LISTED_KINDS = ("api", "login", "session")
PASSWORD_KINDS = ("login", "session")
"""What a password change ends: what knowing the password was enough to obtain."""
PARENT_KINDS = ("api", "login")
"""The tokens a web UI session may be started with."""
"""Job tokens are the server's business: they are not listed or revoked by people."""


@functools.cache
def _stand_in_hash() -> str:
    return auth.hash_password(secrets.token_urlsafe(16))


def _user_info(row: UserRow) -> UserInfo:
    return UserInfo(name=row.name, is_admin=row.is_admin, has_password=bool(row.password_hash),
                    created_at=row.created_at)


def _token_info(row: ApiTokenRow, user: str) -> TokenInfo:
    return TokenInfo(id=row.id, name=row.name, kind=row.kind, user=user, created_at=row.created_at,
                     expires_at=row.expires_at, revoked_at=row.revoked_at)


def _user(session, name: str) -> UserRow:
    row = session.scalar(select(UserRow).where(UserRow.name == name))
    if row is None:
        raise NotFound(f"user {name!r} does not exist", field="name")
    return row


def _a_person(principal: auth.Principal) -> None:
    if principal.job_id is not None or principal.user_id is None:
        raise Forbidden("a job's token cannot manage users or tokens")


def list_users(database: Database, principal: auth.Principal) -> list[UserInfo]:
    auth.authorize(principal, auth.Action.ADMIN)
    with database.reading() as session:
        return [_user_info(row) for row in session.scalars(select(UserRow).order_by(UserRow.name))]


def whoami(database: Database, principal: auth.Principal) -> UserInfo:
    _a_person(principal)
    with database.reading() as session:
        row = session.get(UserRow, principal.user_id)
        if row is None:
            raise Unauthorized("the token's user no longer exists")
        return _user_info(row)


def create_user(database: Database, principal: auth.Principal, request: NewUser) -> UserInfo:
    auth.authorize(principal, auth.Action.ADMIN)
    password_hash = auth.hash_password(request.password) if request.password else None
    try:
        with database.transaction() as session:
            if session.scalar(select(UserRow.id).where(UserRow.name == request.name)) is not None:
                raise Conflict(f"user {request.name!r} already exists", field="name")
            row = UserRow(name=request.name, is_admin=request.admin, password_hash=password_hash,
                          created_at=time.time())
            session.add(row)
            session.flush()
            return _user_info(row)
    except IntegrityError:
        raise Conflict(f"user {request.name!r} already exists", field="name") from None


def set_password(database: Database, principal: auth.Principal, name: str, change: PasswordChange) -> UserInfo:
    """One's own password needs the current one (when there is one); an admin may set anyone's."""
    _a_person(principal)
    with database.transaction() as session:
        target = _user(session, name)
        own = target.id == principal.user_id
        current_hash = target.password_hash
    if not own:
        auth.authorize(principal, auth.Action.ADMIN)
    elif current_hash and not principal.is_admin and not auth.password_matches(current_hash,
                                                                                change.current_password or ""):
        raise Forbidden("the current password is wrong", field="current_password")
    new_hash = auth.hash_password(change.password)
    with database.transaction() as session:
        target = _user(session, name)
        target.password_hash = new_hash
        # Whoever learned the old password may hold a session or a login token: they end here,
        # except the one this change comes with (an administrator's reset keeps none of them).
        kept = principal.token_id if own else None
        for row in session.scalars(select(ApiTokenRow).where(
                ApiTokenRow.user_id == target.id, ApiTokenRow.revoked_at.is_(None),
                ApiTokenRow.kind.in_(PASSWORD_KINDS) | ApiTokenRow.from_password.is_(True))):
            if row.id != kept:
                row.revoked_at = time.time()
        return _user_info(target)


def log_in(database: Database, throttle: LoginThrottle, request: LoginRequest, *, address: str,
           kind: str = "login", bound_address: str | None = None) -> IssuedToken:
    """A new token (`login`, or a web UI `session` bound to `bound_address`) for the user whose
    password this is; failures are counted by `throttle`."""
    throttle.check(request.user, address)
    with database.transaction() as session:
        row = session.scalar(select(UserRow).where(UserRow.name == request.user))
        user_id, password_hash = (row.id, row.password_hash) if row is not None else (None, None)
    # An unknown user's attempt costs a hash too, so that timing does not tell who exists.
    matches = auth.password_matches(password_hash or _stand_in_hash(), request.password)
    if user_id is None or password_hash is None or not matches:
        throttle.failed(request.user, address)
        raise Unauthorized("wrong user name or password")
    throttle.succeeded(request.user, address)
    lifetime = SESSION_LIFETIME if kind == "session" else request.expires_in
    with database.transaction() as session:
        secret = auth.issue_token(session, name=request.token_name, user_id=user_id, kind=kind,
                                  expires_at=time.time() + lifetime if lifetime else None, from_password=True,
                                  bound_address=bound_address)
        row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.token_hash == auth.hash_token(secret)))
        return IssuedToken(token=secret, info=_token_info(row, request.user))


def create_token(database: Database, principal: auth.Principal, request: NewToken) -> IssuedToken:
    """A token made with one the password gave (or with one made so) is `from_password`: a
    password change ends it too, so whoever knew the old password keeps nothing."""
    _a_person(principal)
    with database.transaction() as session:
        caller = session.get(ApiTokenRow, principal.token_id) if principal.token_id is not None else None
        from_password = caller is not None and (caller.kind in PASSWORD_KINDS or caller.from_password)
        expires_at = time.time() + request.expires_in if request.expires_in else None
        secret = auth.issue_token(session, name=request.name, user_id=principal.user_id, expires_at=expires_at,
                                  from_password=from_password)
        row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.token_hash == auth.hash_token(secret)))
        return IssuedToken(token=secret, info=_token_info(row, principal.name))


def list_tokens(database: Database, principal: auth.Principal, *, every_user: bool = False) -> list[TokenInfo]:
    """The caller's tokens still in force (an admin may ask for everyone's)."""
    _a_person(principal)
    if every_user:
        auth.authorize(principal, auth.Action.ADMIN)
    now = time.time()
    query = (select(ApiTokenRow, UserRow.name).join(UserRow, UserRow.id == ApiTokenRow.user_id)
             .where(ApiTokenRow.kind.in_(LISTED_KINDS), ApiTokenRow.revoked_at.is_(None),
                    (ApiTokenRow.expires_at.is_(None)) | (ApiTokenRow.expires_at > now))
             .order_by(ApiTokenRow.id))
    if not every_user:
        query = query.where(ApiTokenRow.user_id == principal.user_id)
    with database.reading() as session:
        return [_token_info(row, name) for row, name in session.execute(query)]


def revoke_token(database: Database, principal: auth.Principal, token_id: int) -> TokenInfo:
    """Takes effect at once: every request checks its token. One's own, or anyone's for an admin."""
    _a_person(principal)
    with database.transaction() as session:
        row = session.get(ApiTokenRow, token_id)
        if row is None or row.kind not in LISTED_KINDS or (row.user_id != principal.user_id
                                                           and not principal.is_admin):
            # Another user's token is "not found" too: its existence is not the caller's business.
            raise NotFound(f"token {token_id} does not exist", field="token_id")
        if row.revoked_at is None:
            row.revoked_at = time.time()
        owner = session.get(UserRow, row.user_id)
        return _token_info(row, owner.name if owner else "?")


def start_session(database: Database, principal: auth.Principal, bound_address: str | None = None) -> str:
    """A web UI session for the caller of an API or login token: a token of its own, ending at
    the latest when that one does (see `auth.authenticate`), taken only from `bound_address`."""
    with database.transaction() as session:
        parent = session.get(ApiTokenRow, principal.token_id) if principal.token_id is not None else None
        if parent is None or parent.kind not in PARENT_KINDS or principal.user_id is None:
            raise Unauthorized("only an API token of a user can start a web UI session")
        expires_at = time.time() + SESSION_LIFETIME
        if parent.expires_at is not None:
            expires_at = min(expires_at, parent.expires_at)
        return auth.issue_token(session, name=f"web session (token {parent.name})"[:128], user_id=principal.user_id,
                                kind="session", expires_at=expires_at, parent_token_id=parent.id,
                                from_password=parent.kind in PASSWORD_KINDS or parent.from_password,
                                bound_address=bound_address)


def end_session(database: Database, principal: auth.Principal) -> None:
    """Revokes the token of this call if it is a browser session (a logout)."""
    if principal.token_id is None:
        return
    with database.transaction() as session:
        row = session.get(ApiTokenRow, principal.token_id)
        if row is not None and row.kind == "session" and row.revoked_at is None:
            row.revoked_at = time.time()
