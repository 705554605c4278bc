"""Headers every answer carries: a strict Content-Security-Policy (scripts and styles only from
this server's files, nothing inline, no eval, no framing), `nosniff`, a same-origin Referrer
policy and `X-Frame-Options` for browsers without `frame-ancestors`.

The web UI keeps to the policy: its scripts are files, inline styles are set from script
(`data-*` attributes applied by `static/app.js`), htmx runs with eval and its injected styles
off. A route may be given a policy of its own (`install(..., policies=...)`) where a vendored
page cannot keep to the strict one.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                           "frame-ancestors 'none'")
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


class SecurityHeaders:
    """ASGI middleware; `policies` maps an exact path to the CSP it gets instead of the strict one."""

    def __init__(self, app: ASGIApp, policies: Mapping[str, str] | None = None) -> None:
        self.app = app
        self.policies = dict(policies or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy = self.policies.get(scope["path"], CONTENT_SECURITY_POLICY)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = policy
                for name, value in HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
