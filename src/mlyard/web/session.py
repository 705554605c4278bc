"""Logging in: with a user name and password (a session token) or an API token. Either lives
in an HttpOnly, SameSite=Strict cookie and is checked by `auth.authenticate` on every request,
exactly as a bearer token of the API is."""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from mlyard.api.accounts import MAX_PASSWORD, LoginRequest
from mlyard.errors import Forbidden, MlyardError, TooManyRequests, Unauthorized
from mlyard.server import auth
from mlyard.server.services import accounts
from mlyard.web.templating import page, templates

COOKIE = "mlyard_token"
COOKIE_MAX_AGE = 7 * 24 * 3600
"""A week: long enough not to ask every morning, short enough that a forgotten browser forgets."""
MAX_FORM_BYTES = 16 * 1024
MAX_CHANGE_BYTES = 256 * 1024
"""The largest form that changes something: a job spec in the YAML editor."""

router = APIRouter(include_in_schema=False)


def safe_next(target: str | None) -> str:
    """Only a path on this server: an open redirect would turn the login page into a phishing aid."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/jobs"
    return target


def login_required(request: Request) -> HTTPException:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    location = f"/login?next={quote(target, safe='')}"
    if request.headers.get("hx-request"):
        # A fragment swapped in by htmx must not become a login form inside a table: htmx turns
        # this header into a whole-page navigation.
        return HTTPException(status.HTTP_401_UNAUTHORIZED, headers={"HX-Redirect": location})
    return HTTPException(status.HTTP_303_SEE_OTHER, headers={"Location": location})


def page_principal(request: Request) -> auth.Principal:
    token = request.cookies.get(COOKIE)
    if not token:
        raise login_required(request)
    try:
        principal = auth.authenticate(request.app.state.database, f"Bearer {token}")
    except Unauthorized as error:
        raise login_required(request) from error
    request.state.principal = principal  # the audit log's actor (server/audit.py)
    return principal


PagePrincipal = Annotated[auth.Principal, Depends(page_principal)]

CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"


def csrf_token(token: str) -> str:
    """The value every form posting with this login must carry. Derived from the login's token,
    which other sites cannot read, so they cannot forge it, and it needs no state on the server."""
    return hmac.new(token.encode(), b"mlyard web form", hashlib.sha256).hexdigest()


def csrf_context(request: Request) -> dict[str, str]:
    """For every template: the value the forms and htmx requests send back."""
    token = request.cookies.get(COOKIE)
    return {"csrf": csrf_token(token) if token else ""}


class PageRefused(Exception):
    """Ends a page request with the error page (see `install`)."""

    def __init__(self, error: MlyardError) -> None:
        super().__init__(error.message)
        self.error = error


async def changing_principal(request: Request) -> auth.Principal:
    """`page_principal` for requests that change something: they must also carry the login's
    CSRF value, as a form field or (htmx) a header. SameSite=Strict already keeps other sites'
    requests from carrying the cookie; this holds for browsers or proxies that do not honour it."""
    principal = page_principal(request)
    sent = request.headers.get(CSRF_HEADER)
    if sent is None:
        body = await request.body()
        sent = (parse_qs(body[:MAX_CHANGE_BYTES].decode("utf-8", errors="replace")).get(CSRF_FIELD) or [""])[0]
    if not hmac.compare_digest(sent.encode(), csrf_token(request.cookies[COOKIE]).encode()):
        raise PageRefused(Forbidden("this form is out of date or did not come from this site; reload the page "
                                    "and try again"))
    return principal


ChangingPrincipal = Annotated[auth.Principal, Depends(changing_principal)]
templates.context_processors.append(csrf_context)


@router.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:
    return page(request, "login.html", next=safe_next(next), error=None)


def _signed_in(request: Request, token: str, target: str) -> Response:
    response = RedirectResponse(target, status_code=status.HTTP_303_SEE_OTHER)
    response.set_cookie(COOKIE, token, max_age=COOKIE_MAX_AGE, path="/", httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    """A user name and password start a session (a token of kind `session`, ended by logging
    out); an API token is taken as it is."""
    body = await request.body()
    fields = parse_qs(body[:MAX_FORM_BYTES].decode("utf-8", errors="replace"))

    def field(name: str) -> str:
        return (fields.get(name) or [""])[0]

    token, user, password = field("token").strip(), field("user").strip(), field("password")
    target = safe_next(field("next") or None)
    database = request.app.state.database
    try:
        if token:
            await run_in_threadpool(auth.authenticate, database, f"Bearer {token}")
            return _signed_in(request, token, target)
        if not user or not password:
            raise Unauthorized("enter your user name and password")
        credentials = LoginRequest(user=user[:64], password=password[:MAX_PASSWORD], token_name="web session")
        address = request.client.host if request.client else "unknown"
        issued = await run_in_threadpool(accounts.log_in, database, request.app.state.login_throttle, credentials,
                                         address=address, kind="session")
        return _signed_in(request, issued.token, target)
    except (Unauthorized, TooManyRequests) as error:
        return page(request, "login.html", status_code=error.http_status, next=target, error=error.message,
                    user=user, token_tried=bool(token))


@router.post("/logout")
def logout(request: Request, principal: ChangingPrincipal) -> Response:
    """Ends a password login's session on the server too; an API token stays valid (it is
    revoked with `mlyard tokens revoke`)."""
    accounts.end_session(request.app.state.database, principal)
    response = RedirectResponse("/login", status_code=status.HTTP_303_SEE_OTHER)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response
