from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status

from mlyard.api.accounts import (
    USER_NAME_PATTERN,
    IssuedToken,
    LoginRequest,
    NewToken,
    NewUser,
    PasswordChange,
    TokenInfo,
    UserInfo,
)
from mlyard.api.errors import ErrorBody
from mlyard.server.http.login_throttle import LoginThrottle
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services import accounts

router = APIRouter(tags=["users and tokens"])
UserName = Annotated[str, Path(pattern=USER_NAME_PATTERN, description="the user's name")]
TokenId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the token's id")]
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}}


def throttle(request: Request) -> LoginThrottle:
    return request.app.state.login_throttle


@router.post("/login", response_model=IssuedToken, status_code=status.HTTP_201_CREATED,
             responses={401: {"model": ErrorBody}, 422: {"model": ErrorBody}, 429: {"model": ErrorBody}})
def log_in(login: LoginRequest, request: Request, database: DatabaseDependency) -> IssuedToken:
    """A new API token for a user name and password (no token needed). Repeated failures for
    one user or from one address are refused for a while (429 with Retry-After)."""
    address = request.client.host if request.client else "unknown"
    return accounts.log_in(database, throttle(request), login, address=address)


@router.get("/whoami", response_model=UserInfo, responses=ERRORS)
def whoami(database: DatabaseDependency, caller: PrincipalDependency) -> UserInfo:
    return accounts.whoami(database, caller)


@router.get("/users", response_model=list[UserInfo], responses=ERRORS)
def list_users(database: DatabaseDependency, caller: PrincipalDependency) -> list[UserInfo]:
    """Every user (administrators only)."""
    return accounts.list_users(database, caller)


@router.post("/users", response_model=UserInfo, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def create_user(user: NewUser, database: DatabaseDependency, caller: PrincipalDependency) -> UserInfo:
    """Adds a user (administrators only)."""
    return accounts.create_user(database, caller, user)


@router.put("/users/{name}/password", response_model=UserInfo, responses=ERRORS)
def set_password(name: UserName, change: PasswordChange, database: DatabaseDependency,
                 caller: PrincipalDependency) -> UserInfo:
    """Sets a password: one's own (with the current one), or anyone's as an administrator."""
    return accounts.set_password(database, caller, name, change)


@router.get("/tokens", response_model=list[TokenInfo], responses=ERRORS)
def list_tokens(database: DatabaseDependency, caller: PrincipalDependency,
                every_user: Annotated[bool, Query(alias="all", description="everyone's (administrators)")] = False,
                ) -> list[TokenInfo]:
    """The caller's tokens in force: API tokens and browser sessions, never their secrets."""
    return accounts.list_tokens(database, caller, every_user=every_user)


@router.post("/tokens", response_model=IssuedToken, status_code=status.HTTP_201_CREATED, responses=ERRORS)
def create_token(token: NewToken, database: DatabaseDependency, caller: PrincipalDependency) -> IssuedToken:
    """A new token of the caller's; its secret is in this answer only."""
    return accounts.create_token(database, caller, token)


@router.delete("/tokens/{token_id}", response_model=TokenInfo, responses=ERRORS)
def revoke_token(token_id: TokenId, database: DatabaseDependency, caller: PrincipalDependency) -> TokenInfo:
    """Revokes a token at once (one's own; any as an administrator)."""
    return accounts.revoke_token(database, caller, token_id)
