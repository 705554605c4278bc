"""The audit log: one row per request that changed something or tried to (see
`server/audit.py`, which records them), read back by administrators, pruned after
`MLYARD_AUDIT_RETENTION`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.orm import Session

from mlyard.api.audit import DEFAULT_PAGE, AuditEvent, AuditPage
from mlyard.errors import InvalidRequest
from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AuditEventRow

ANONYMOUS = "anonymous"
"""The actor of a request that carried no valid credentials (a failed login, say)."""


@dataclass(frozen=True)
class Event:
    """What is known of a request once its answer is produced."""

    at: float
    actor: str
    method: str
    route: str
    target: str | None
    status: int
    address: str | None
    details: dict[str, Any] | None = None


def _clip(text: str | None, length: int) -> str | None:
    return None if text is None else text[:length].replace("\x00", "\ufffd")


def record(database: Database, event: Event) -> None:
    """Adds one row in a transaction of its own."""
    with database.transaction() as session:
        add(session, event)


_INSERT = insert(AuditEventRow.__table__).returning(AuditEventRow.__table__.c.id)


def add(session: Session, event: Event) -> int:
    """Adds one row to the session's transaction; its id. Values are cut to the columns' sizes
    and lose any NUL (which PostgreSQL cannot hold): a request for such a path happened all the same."""
    values = asdict(event)
    values.update(actor=_clip(event.actor, 160), method=_clip(event.method, 10), route=_clip(event.route, 255),
                  target=_clip(event.target, 255), address=_clip(event.address, 64))
    # A Core insert built once: the ORM's flush of one row, or a statement built per row, costs
    # several times executing it.
    return session.execute(_INSERT, values).scalar_one()


def correct_status(database: Database, event_id: int, status: int) -> None:
    """The status of a row written with the change it records, when the answer turned out
    otherwise (an error after the commit)."""
    with database.transaction() as session:
        session.execute(update(AuditEventRow).where(AuditEventRow.id == event_id).values(status=status))


def prune(database: Database, before: float) -> int:
    """Deletes the rows older than `before`; how many went."""
    with database.transaction() as session:
        return session.execute(delete(AuditEventRow).where(AuditEventRow.at < before)).rowcount or 0


def _no_nul(value: str | None, field: str) -> str | None:
    # PostgreSQL cannot hold NUL in text, not even as a parameter of a comparison.
    if value is not None and "\x00" in value:
        raise InvalidRequest(f"{field} may not contain NUL characters", field=field)
    return value


def list_events(database: Database, principal: auth.Principal, *, since: float | None = None,
                until: float | None = None, actor: str | None = None, route: str | None = None,
                limit: int = DEFAULT_PAGE, before_id: int | None = None) -> AuditPage:
    """Administrators only. Events at or after `since` and before `until`, by `actor` (exactly),
    whose route template or path contains `route`, older than event `before_id`; newest first."""
    auth.authorize(principal, auth.Action.ADMIN)
    if since is not None and until is not None and since >= until:
        raise InvalidRequest("the window is empty: since must be before until", field="since")
    query = select(AuditEventRow).order_by(AuditEventRow.id.desc()).limit(limit)
    if since is not None:
        query = query.where(AuditEventRow.at >= since)
    if until is not None:
        query = query.where(AuditEventRow.at < until)
    if _no_nul(actor, "actor") is not None:
        query = query.where(AuditEventRow.actor == actor)
    if _no_nul(route, "route"):
        query = query.where(or_(AuditEventRow.route.contains(route, autoescape=True),
                                AuditEventRow.target.contains(route, autoescape=True)))
    if before_id is not None:
        query = query.where(AuditEventRow.id < before_id)
    with database.reading() as session:
        rows = session.scalars(query).all()
        events = [AuditEvent(id=row.id, at=row.at, actor=row.actor, method=row.method, route=row.route,
                             target=row.target, status=row.status, address=row.address, details=row.details)
                  for row in rows]
    return AuditPage(events=events, next_before_id=events[-1].id if len(events) == limit else None)
