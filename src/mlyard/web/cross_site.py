"""Refuses state-changing requests (POST, PUT, PATCH, DELETE) to the web UI that another site
made: a `Sec-Fetch-Site` other than `same-origin` or `none` (typed or bookmarked), or an
`Origin` that is not this server's own. Browsers send at least one of them on every such
request; the forms' CSRF values (`session.py`) hold where neither arrives.

The API (`/api/`) is left alone: it authenticates by an `Authorization` header, which no other
site can make a browser send, and it refuses the session cookie (`auth.authenticate`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from mlyard.errors import Forbidden
from mlyard.web.templating import page

CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SAME_SITE_FETCHES = frozenset({"same-origin", "none"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_and_port(netloc: str) -> tuple[str, int | None] | None:
    """The host name and explicit port of `netloc`; None when it does not parse."""
    parts = urlsplit(f"//{netloc}")
    try:
        port = parts.port
    except ValueError:
        return None
    return (parts.hostname or "").lower(), port


def same_server(origin: str, host: str) -> bool:
    """Whether an `Origin` names the server the `Host` header names. Neither the scheme nor a
    port derived from the request's own scheme is compared: behind a proxy that ends TLS the
    server sees plain HTTP for an https page, and a Host without a port. So host names must
    match; a Host with a port must match the Origin's (explicit, or its scheme's default); a
    Host without one takes an Origin on its own scheme's default port."""
    parts = urlsplit(origin)
    theirs, own = _host_and_port(parts.netloc), _host_and_port(host)
    if theirs is None or own is None or not own[0] or theirs[0] != own[0]:
        return False
    default = DEFAULT_PORTS.get(parts.scheme.lower())
    origin_port = theirs[1] if theirs[1] is not None else default
    if own[1] is None:
        return origin_port is not None and origin_port == default
    return origin_port == own[1]


def cross_site_reason(headers: dict[str, str]) -> str | None:
    """Why a changing request looks cross-site, or None (see `same_server`)."""
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.lower() not in SAME_SITE_FETCHES:
        return f"the browser says this request came from another site (Sec-Fetch-Site: {fetch_site})"
    origin = headers.get("origin")
    if origin is None:
        return None
    parts = urlsplit(origin)
    if origin == "null" or not parts.netloc:
        return "the request's Origin is hidden (null), so it cannot be told from another site's"
    if not same_server(origin, headers.get("host", "")):
        return f"the request came from {origin}, not from this server"
    return None


class CrossSiteRefusal:
    """ASGI middleware: a 403 page for cross-site changing requests outside the API."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] in CHANGING_METHODS
                and not scope["path"].startswith("/api/")):
            headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
            reason = cross_site_reason(headers)
            if reason is not None:
                error = Forbidden(f"refused: {reason}. Open the page on this server and submit it from there.")
                await page(Request(scope, receive), "error.html", status_code=403, error=error)(scope, receive, send)
                return
        await self.app(scope, receive, send)
