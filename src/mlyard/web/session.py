"""Login by API token: the token lives in an HttpOnly, SameSite=Strict cookie and is checked
by `auth.authenticate` on every request, exactly as a bearer token of the API is."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from mlyard.errors import Unauthorized
from mlyard.server import auth
from mlyard.web.render import page

COOKIE = "mlyard_token"
COOKIE_MAX_AGE = 7 * 24 * 3600
"""A week: long enough not to ask every morning, short enough that a forgotten browser forgets."""
MAX_FORM_BYTES = 16 * 1024

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
        return auth.authenticate(request.app.state.database, f"Bearer {token}")
    except Unauthorized as error:
        raise login_required(request) from error


PagePrincipal = Annotated[auth.Principal, Depends(page_principal)]


@router.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:
    return page(request, "login.html", next=safe_next(next), error=None)


@router.post("/login")
async def login(request: Request) -> Response:
    body = await request.body()
    fields = parse_qs(body[:MAX_FORM_BYTES].decode("utf-8", errors="replace"))
    token = (fields.get("token") or [""])[0].strip()
    target = safe_next((fields.get("next") or [None])[0])
    try:
        if not token:
            raise Unauthorized("enter an API token")
        await run_in_threadpool(auth.authenticate, request.app.state.database, f"Bearer {token}")
    except Unauthorized as error:
        return page(request, "login.html", status_code=status.HTTP_401_UNAUTHORIZED, next=target,
                    error=error.message)
    response = RedirectResponse(target, status_code=status.HTTP_303_SEE_OTHER)
    response.set_cookie(COOKIE, token, max_age=COOKIE_MAX_AGE, path="/", httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


@router.post("/logout")
def logout() -> Response:
    response = RedirectResponse("/login", status_code=status.HTTP_303_SEE_OTHER)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response
