"""Logging in and the session cookie.

A login with a user name and password, or with an API token, mints a token of kind `session`
(`accounts.log_in`, `accounts.start_session`); only that token lives in the cookie, which is
HttpOnly and SameSite=Strict, and `__Host-` prefixed with Secure behind HTTPS
(MLYARD_COOKIE_SECURE). The cookie authenticates pages only: the API refuses session tokens
(`auth.authenticate`), so a cookie that leaks to another port of the same host opens no API.
A session is also bound to the client address it was started from, and its forms' CSRF value
is keyed by the server's secret key, so a leaked cookie, replayed from elsewhere, opens no page
either (behind a proxy every address is the proxy's: there the UI's own host name protects it).
The login form is guarded against cross-site posts by `web/cross_site.py` and by a pre-login
double-submit value (`LOGIN_CSRF_COOKIE` = the form's `login_csrf` field).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
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

COOKIE = "mlyard_session"
SECURE_COOKIE = "__Host-mlyard_session"
"""Behind HTTPS: the prefix makes browsers refuse the cookie unless Secure, Path=/ and without a
Domain, so no sibling host or plain-HTTP page can plant or overwrite it."""
LOGIN_CSRF_COOKIE = "mlyard_login_csrf"
SECURE_LOGIN_CSRF_COOKIE = "__Host-mlyard_login_csrf"
LOGIN_CSRF_FIELD = "login_csrf"
COOKIE_MAX_AGE = int(accounts.SESSION_LIFETIME)
"""A week: long enough not to ask every morning, short enough that a forgotten browser forgets."""
MAX_FORM_BYTES = 16 * 1024
MAX_CHANGE_BYTES = 256 * 1024
"""The largest form that changes something: a job spec in the YAML editor."""

router = APIRouter(include_in_schema=False)


def cookie_secure(request: Request) -> bool:
    """MLYARD_COOKIE_SECURE: `on`, `off`, or `auto` (secure when this request came over HTTPS)."""
    settings = getattr(request.app.state, "settings", None)
    mode = getattr(settings, "cookie_secure", "auto")
    return mode == "on" or (mode == "auto" and request.url.scheme == "https")


def session_token(request: Request) -> str | None:
    return request.cookies.get(SECURE_COOKIE) or request.cookies.get(COOKIE)


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


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def page_principal(request: Request) -> auth.Principal:
    token = session_token(request)
    if not token:
        raise login_required(request)
    try:
        principal = auth.authenticate(request.app.state.database, f"Bearer {token}", web_session=True,
                                      address=client_address(request), principals=request.app.state.principals)
    except Unauthorized as error:
        raise login_required(request) from error
    request.state.principal = principal  # the audit log's actor (server/audit.py)
    return principal


PagePrincipal = Annotated[auth.Principal, Depends(page_principal)]

CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"


_FALLBACK_KEY = secrets.token_bytes(32)
"""For an app without the server's key (one not started by its lifespan)."""


def csrf_token(request: Request, token: str) -> str:
    """The value every form posting with this session must carry: an HMAC of the session's hash
    keyed by the server's secret key, so neither another site nor whoever holds only the cookie
    can make it, and it needs no state on the server."""
    label = f"mlyard web form {auth.hash_token(token)}"
    box = getattr(request.app.state, "secrets", None)
    if box is None:
        return hmac.new(_FALLBACK_KEY, label.encode(), hashlib.sha256).hexdigest()
    return box.fingerprint(label)


def csrf_context(request: Request) -> dict[str, str]:
    """For every template: the value the forms and htmx requests send back."""
    token = session_token(request)
    return {"csrf": csrf_token(request, token) if token else ""}


class PageRefused(Exception):
    """Ends a page request with the error page (see `install`)."""

    def __init__(self, error: MlyardError) -> None:
        super().__init__(error.message)
        self.error = error


def _form_value(body: bytes, name: str, limit: int) -> str:
    return (parse_qs(body[:limit].decode("utf-8", errors="replace")).get(name) or [""])[0]


async def changing_principal(request: Request) -> auth.Principal:
    """`page_principal` for requests that change something: they must also carry the session's
    CSRF value, as a form field or (htmx) a header. SameSite=Strict already keeps other sites'
    requests from carrying the cookie; this holds for browsers or proxies that do not honour it."""
    principal = page_principal(request)
    sent = request.headers.get(CSRF_HEADER)
    if sent is None:
        sent = _form_value(await request.body(), CSRF_FIELD, MAX_CHANGE_BYTES)
    if not hmac.compare_digest(sent.encode(), csrf_token(request, session_token(request) or "").encode()):
        raise PageRefused(Forbidden("this form is out of date or did not come from this site; reload the page "
                                    "and try again"))
    return principal


ChangingPrincipal = Annotated[auth.Principal, Depends(changing_principal)]
templates.context_processors.append(csrf_context)


def _login_csrf_names(request: Request) -> tuple[str, bool]:
    secure = cookie_secure(request)
    return (SECURE_LOGIN_CSRF_COOKIE if secure else LOGIN_CSRF_COOKIE), secure


def _login_page(request: Request, status_code: int = 200, **context: object) -> Response:
    """The login form with its pre-login CSRF value, set as a cookie when the browser has none."""
    name, secure = _login_csrf_names(request)
    value = request.cookies.get(name) or secrets.token_urlsafe(24)
    response = page(request, "login.html", status_code=status_code, login_csrf=value, **context)
    if request.cookies.get(name) != value:
        response.set_cookie(name, value, max_age=3600, path="/", httponly=True, samesite="strict", secure=secure)
    return response


@router.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:
    return _login_page(request, next=safe_next(next), error=None)


def _signed_in(request: Request, token: str, target: str) -> Response:
    response = RedirectResponse(target, status_code=status.HTTP_303_SEE_OTHER)
    secure = cookie_secure(request)
    response.set_cookie(SECURE_COOKIE if secure else COOKIE, token, max_age=COOKIE_MAX_AGE, path="/",
                        httponly=True, samesite="strict", secure=secure)
    response.delete_cookie(_login_csrf_names(request)[0], path="/", httponly=True, samesite="strict", secure=secure)
    return response


def _check_login_csrf(request: Request, sent: str) -> None:
    expected = request.cookies.get(_login_csrf_names(request)[0]) or ""
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise PageRefused(Forbidden("this login form is out of date or did not come from this site; open the "
                                    "login page again and retry", field=LOGIN_CSRF_FIELD))


def _start_session_with_token(database, token: str, address: str | None) -> str:
    return accounts.start_session(database, auth.authenticate(database, f"Bearer {token}"), bound_address=address)


@router.post("/login")
async def login(request: Request) -> Response:
    """A user name and password, or an API token, start a session: a token of kind `session`
    of its own, ended by logging out (and, for a token login, with that token)."""
    body = await request.body()
    fields = parse_qs(body[:MAX_FORM_BYTES].decode("utf-8", errors="replace"))

    def field(name: str) -> str:
        return (fields.get(name) or [""])[0]

    _check_login_csrf(request, field(LOGIN_CSRF_FIELD))
    token, user, password = field("token").strip(), field("user").strip(), field("password")
    target = safe_next(field("next") or None)
    database, address = request.app.state.database, client_address(request)
    bound = address if request.app.state.settings.session_bind_address else None
    try:
        if token:
            return _signed_in(request, await run_in_threadpool(_start_session_with_token, database, token, bound),
                              target)
        if not user or not password:
            raise Unauthorized("enter your user name and password")
        credentials = LoginRequest(user=user[:64], password=password[:MAX_PASSWORD], token_name="web session")
        issued = await run_in_threadpool(accounts.log_in, database, request.app.state.login_throttle, credentials,
                                         address=address, kind="session", bound_address=bound)
        return _signed_in(request, issued.token, target)
    except (Unauthorized, TooManyRequests) as error:
        return _login_page(request, status_code=error.http_status, next=target, error=error.message,
                           user=user, token_tried=bool(token))


@router.post("/logout")
def logout(request: Request, principal: ChangingPrincipal) -> Response:
    """Ends the session on the server; the token a session was started with stays valid (it is
    revoked with `mlyard tokens revoke`)."""
    accounts.end_session(request.app.state.database, principal)
    response = RedirectResponse("/login", status_code=status.HTTP_303_SEE_OTHER)
    for name, secure in ((COOKIE, False), (SECURE_COOKIE, True)):
        if name in request.cookies:
            response.delete_cookie(name, path="/", httponly=True, samesite="strict", secure=secure)
    return response
