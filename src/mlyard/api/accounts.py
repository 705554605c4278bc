"""What the API takes and returns about users, logins and tokens (shared by server, client and CLI)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlyard.spec import parse_duration

USER_NAME_PATTERN = r"^[a-z][a-z0-9._-]{0,63}$"
MIN_PASSWORD = 8
MAX_PASSWORD = 1024
"""argon2 takes any length; the bound keeps a request from making the server hash megabytes."""
MAX_TOKEN_LIFETIME = 366 * 24 * 3600.0
LOGIN_TOKEN_LIFETIME = 30 * 24 * 3600.0


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _lifetime(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("a lifetime is a number of seconds or a string such as 12h or 30d")  # noqa: TRY004 - pydantic reports ValueError
    seconds = parse_duration(value)
    if seconds > MAX_TOKEN_LIFETIME:
        raise ValueError("a token lives at most 366 days")
    return seconds


class UserInfo(BaseModel):
    name: str
    is_admin: bool
    has_password: bool = Field(description="false for an account that uses tokens only")
    created_at: float


class NewUser(_Input):
    name: str = Field(pattern=USER_NAME_PATTERN, description="lowercase letters, digits, '.', '_' and '-'")
    password: str | None = Field(default=None, min_length=MIN_PASSWORD, max_length=MAX_PASSWORD)
    admin: bool = False


class PasswordChange(_Input):
    password: str = Field(min_length=MIN_PASSWORD, max_length=MAX_PASSWORD)
    current_password: str | None = Field(
        default=None, max_length=MAX_PASSWORD, description="needed to change one's own password; admins may omit it "
        "for another user")


class LoginRequest(_Input):
    user: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=MAX_PASSWORD)
    token_name: str = Field(default="mlyard login", min_length=1, max_length=128)
    expires_in: float | None = Field(default=LOGIN_TOKEN_LIFETIME, description="seconds, or e.g. 12h, 30d")

    _lifetime = field_validator("expires_in", mode="before")(_lifetime)


class NewToken(_Input):
    name: str = Field(min_length=1, max_length=128, description="what the token is for, e.g. 'laptop' or 'ci'")
    expires_in: float | None = Field(default=None, description="seconds, or e.g. 12h, 90d; null: until revoked")

    _lifetime = field_validator("expires_in", mode="before")(_lifetime)


class TokenInfo(BaseModel):
    id: int
    name: str
    kind: str = Field(description="api (made by a person), login (`mlyard login` with a password), "
                                  "session (a browser login)")
    user: str
    created_at: float
    expires_at: float | None
    revoked_at: float | None


class IssuedToken(BaseModel):
    token: str = Field(description="the secret: shown this once, stored by the server only as a hash")
    info: TokenInfo
