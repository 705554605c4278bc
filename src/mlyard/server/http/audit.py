"""Recording the audit log: every request that changes something, or tries to, leaves a row
saying who made it, which route and path, the answer's status, and from which address.

`AuditRecorder` is an ASGI middleware around the whole app, so the web pages' forms are
recorded as the API is, and so are requests no route matched. The caller is whoever the
authenticating dependencies (`routers/dependencies.principal`, `web/session.page_principal`)
put in the request's state; a request without valid credentials is `anonymous`.

The row commits with the request's change, in the first transaction of the request that
changes something (see `_Rider`); a request that changes nothing gets a transaction of its own
once its answer is produced and before it is sent. Either way a client that has its answer
finds its request in the log. A failure to write is logged and the answer goes out unchanged,
since the request happened all the same.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import parse_qsl, urlencode

from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlyard.server.store.db import Database, riders, wrote
from mlyard.server.services import audit
from mlyard.server.services.audit import ANONYMOUS, Event
from mlyard.server.http.telemetry import UNMATCHED_ROUTE, route_template

log = logging.getLogger("mlyard.server.http.audit")

AUDITED_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
UNAUDITED_ROUTES = frozenset({"/api/v1/jobs/{job_id}/metrics"})
"""A running job reports its training metrics every few steps: that is measurement, not an
action anybody takes, and recording it would bury the log."""
PRUNE_EVERY = 3600.0
MAX_QUERY = 1000
SECRET_PARAMETERS = ("token", "password", "secret", "csrf")
"""Query parameters whose values are never written down (none of the routes take them, but a
client may send them anyway)."""


def _route(scope: Scope) -> str:
    # The route of an included router knows its path without the prefix: the template is
    # rebuilt as the request timer does it.
    template = route_template(scope)
    return scope["path"] if template == UNMATCHED_ROUTE else template


def _details(scope: Scope) -> dict[str, str] | None:
    raw = scope.get("query_string", b"").decode("latin-1")
    if not raw:
        return None
    pairs = [(name, "***" if any(word in name.lower() for word in SECRET_PARAMETERS) else value)
             for name, value in parse_qsl(raw, keep_blank_values=True)]
    return {"query": urlencode(pairs)[:MAX_QUERY] if pairs else raw[:MAX_QUERY]}


def event_of(scope: Scope, status: int, at: float) -> Event:
    principal = scope.get("state", {}).get("principal")
    client = scope.get("client")
    return Event(at=at, actor=principal.name if principal is not None else ANONYMOUS, method=scope["method"],
                 route=_route(scope), target=scope["path"], status=status, address=client[0] if client else None,
                 details=_details(scope))


class _Rider:
    """A request's audit row, added to the first transaction that commits a change during the
    request (`store.db.riders`) with the status its route answers when all goes well. The change
    and its row commit together, at the cost of one transaction, not two."""

    def __init__(self, scope: Scope):
        self.scope = scope
        self.closed = False
        self.session: Session | None = None
        self.event_id: int | None = None
        self.status: int | None = None

    def add(self, session: Session) -> None:
        if self.closed or self.session is not None:
            return
        session.flush()  # the change goes in first: a savepoint that rolls back takes what it flushed
        if not wrote(session):  # a lookup (a login's, before its password is checked) is no change
            return
        status = getattr(self.scope.get("route"), "status_code", None) or 200
        event = event_of(self.scope, status, time.time())
        if event.route in UNAUDITED_ROUTES:
            self.closed = True
            return
        try:
            with session.begin_nested():  # a row that cannot go in must not take the change with it
                self.event_id, self.status, self.session = audit.add(session, event), status, session
        except Exception as error:  # noqa: BLE001 - the answer's own transaction tries again
            log.warning("could not record %s %s with its change: %s", event.method, event.target, error)

    def discard(self, session: Session) -> None:
        if self.session is session:
            self.session = self.event_id = self.status = None


class AuditRecorder:
    """ASGI middleware: one audit row per POST, PUT, PATCH or DELETE (see the module's text).
    Also deletes rows older than the retention, at most once every `PRUNE_EVERY` seconds per
    process, after an answer has gone out."""

    def __init__(self, app: ASGIApp, *, prune_every: float = PRUNE_EVERY):
        self.app = app
        self.prune_every = prune_every
        self.pruned_at: float | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in AUDITED_METHODS:
            await self.app(scope, receive, send)
            return
        recorded = False
        rider = _Rider(scope)

        async def send_recording(message: Message) -> None:
            nonlocal recorded
            if message["type"] == "http.response.start" and not recorded:
                recorded = True
                await self._record(scope, message["status"], rider)
            await send(message)

        riding = riders.set(rider)
        try:
            await self.app(scope, receive, send_recording)
        except Exception:
            if not recorded:  # the outermost middleware answers 500
                await self._record(scope, 500, rider)
            raise
        finally:
            riders.reset(riding)
        await self._prune_if_due(scope)

    @staticmethod
    def _database(scope: Scope) -> Database | None:
        app = scope.get("app")
        return getattr(app.state, "database", None) if app is not None else None

    async def _record(self, scope: Scope, status: int, rider: _Rider) -> None:
        """Writes the row unless it went in with the change; corrects its status when the
        answer is not the one the route gives on success."""
        rider.closed = True  # the transaction below is the audit log's own
        database = self._database(scope)
        if database is None:
            return
        try:
            if rider.event_id is not None:
                if status != rider.status:
                    await run_in_threadpool(audit.correct_status, database, rider.event_id, status)
                return
            event = event_of(scope, status, time.time())
            if event.route not in UNAUDITED_ROUTES:
                await run_in_threadpool(audit.record, database, event)
        except Exception as error:  # noqa: BLE001 - the request happened; its answer must go out
            log.warning("could not record %s %s in the audit log: %s", scope["method"], scope["path"], error)

    async def _prune_if_due(self, scope: Scope) -> None:
        database = self._database(scope)
        settings = getattr(scope["app"].state, "settings", None) if database is not None else None
        retention = getattr(settings, "audit_retention_seconds", 0.0)
        now = time.time()
        if not retention or (self.pruned_at is not None and now - self.pruned_at < self.prune_every):
            return
        self.pruned_at = now
        try:
            removed = await run_in_threadpool(audit.prune, database, now - retention)
        except Exception as error:  # noqa: BLE001 - the next prune catches up
            log.warning("could not delete old audit events: %s", error)
            return
        if removed:
            log.info("deleted %d audit events older than %.0f days", removed, retention / 86400)

