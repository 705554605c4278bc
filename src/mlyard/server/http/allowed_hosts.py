"""Answers 400 to a request whose `Host` is not one this server is known by
(MLYARD_ALLOWED_HOSTS), so that a name an attacker points at 127.0.0.1 (DNS rebinding) cannot
reach even the routes that need no token.

By default the server is known by the address it listens on (each address of the machine when
that is 0.0.0.0 or ::), `localhost`, `127.0.0.1`, `::1`, the machine's host name, and the
host of MLYARD_JOB_API_URL (how replicas reach it). `*` allows any host.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::"})


def parse_hosts(text: str) -> tuple[str, ...]:
    """`MLYARD_ALLOWED_HOSTS`: names separated by commas or spaces."""
    return tuple(name.strip().lower().strip("[]") for name in re.split(r"[,\s]+", text) if name.strip())


def _machine_addresses() -> set[str]:
    import psutil

    return {address.address.split("%")[0].lower() for addresses in psutil.net_if_addrs().values()
            for address in addresses if address.family in (socket.AF_INET, socket.AF_INET6)}


def default_hosts(listen_host: str, job_api_url: str | None) -> tuple[str, ...]:
    names = {"localhost", "127.0.0.1", "::1", listen_host.lower().strip("[]")}
    for name in (socket.gethostname(), socket.getfqdn()):
        names.add(name.lower())
    if listen_host in WILDCARD_ADDRESSES or not listen_host:
        names |= _machine_addresses()
    if job_api_url:
        names.add((urlsplit(job_api_url).hostname or "").lower())
    # The listening address itself stays, even 0.0.0.0: the server's own clients use its URL
    # (`mlyard server start` waits on it; local replicas get it as MLYARD_API).
    return tuple(sorted(name for name in names if name))


def host_of(header: str) -> str:
    """The host part of a `Host` header: without its port, an IPv6 address without brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class AllowedHosts:
    """ASGI middleware: 400 with a JSON error naming the setting for any other `Host`."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app = app
        self.hosts = frozenset(hosts)
        self.any = "*" in self.hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.any or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"host"), "")
        if host_of(header) in self.hosts:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        message = (f"this server does not answer to the host {header[:100]!r}; an administrator adds it to "
                   "MLYARD_ALLOWED_HOSTS")
        body = json.dumps({"error": "invalid_host", "message": message, "details": [
            {"field": "Host", "message": message}]}).encode()
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
