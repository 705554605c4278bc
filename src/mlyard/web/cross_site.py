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


def _host_and_port(netloc: str, scheme: str) -> tuple[str, int | None]:
    parts = urlsplit(f"//{netloc}")
    try:
        port = parts.port
    except ValueError:
        return netloc, None
    return (parts.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme)


def cross_site_reason(headers: dict[str, str], scheme: str) -> str | None:
    """Why a changing request looks cross-site, or None. The scheme of `Origin` is not
    compared: a proxy that ends TLS hands the server plain HTTP for an https page."""
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.lower() not in SAME_SITE_FETCHES:
        return f"the browser says this request came from another site (Sec-Fetch-Site: {fetch_site})"
    origin = headers.get("origin")
    if origin is None:
        return None
    parts = urlsplit(origin)
    if origin == "null" or not parts.netloc:
        return "the request's Origin is hidden (null), so it cannot be told from another site's"
    own = _host_and_port(headers.get("host", ""), scheme)
    if _host_and_port(parts.netloc, parts.scheme) != own:
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
            reason = cross_site_reason(headers, scope.get("scheme", "http"))
            if reason is not None:
                error = Forbidden(f"refused: {reason}. Open the page on this server and submit it from there.")
                await page(Request(scope, receive), "error.html", status_code=403, error=error)(scope, receive, send)
                return
        await self.app(scope, receive, send)
