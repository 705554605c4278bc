"""Who a bearer token stands for, remembered for a moment.

Nearly every request authenticates, and reading its token, the token's user and their roles
costs a small request (a job submission, a metrics report) more than its own work, and a hop
to a worker thread on top. So a `Principals` keeps each answer for `LIFETIME` seconds, never
past the token's expiry (or the expiry of the token a web session was started with).

Any commit in this process that changes a token, a user, a project or a membership forgets every
answer at once: revoking a token, ending a job, taking a role away act on the next request. The
controller's process says so to the serving one as it commits (`watch`, `forget_all`). A
change another server makes to a shared database takes effect here within `LIFETIME`. Failed
authentications are never remembered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session, SessionTransaction

from mlyard.server.store.rows import ApiTokenRow, ProjectMemberRow, ProjectRow, UserRow

if TYPE_CHECKING:
    from mlyard.server.auth import Principal

LIFETIME = 2.0
CAPACITY = 10_000
"""Answers kept at most; a full cache starts over rather than track which is oldest."""

_WATCHED = (ApiTokenRow, UserRow, ProjectRow, ProjectMemberRow)
_WATCHED_TABLES = frozenset(row.__tablename__ for row in _WATCHED)
_CHANGED = "mlyard.auth_changed"
_lock = threading.Lock()
_generation = 0


_watchers: list[Callable[[], None]] = []


def watch(callback: Callable[[], None]) -> None:
    """Calls `callback` after every commit of this process that changed who a token stands for:
    the controller's process tells the serving one (`control/process.py`)."""
    _watchers.append(callback)
    listen()


def forget_all() -> None:
    """Forgets every answer: another process of this server committed such a change."""
    global _generation
    with _lock:
        _generation += 1


def generation() -> int:
    """Goes up with every commit of this process that changed who a token stands for."""
    return _generation


class Principals:
    def __init__(self, lifetime: float = LIFETIME, capacity: int = CAPACITY):
        self.lifetime = lifetime
        self.capacity = capacity
        self._entries: dict[Hashable, tuple[Principal, float, int]] = {}
        listen()

    def get(self, key: Hashable) -> Principal | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        principal, until, taken_at_generation = entry
        if taken_at_generation != _generation or time.time() >= until:
            self._entries.pop(key, None)
            return None
        return principal

    def put(self, key: Hashable, principal: Principal, *, read_at_generation: int, expires_at: float | None) -> None:
        """`read_at_generation`: `generation()` from before the rows were read, so that an answer
        read while a revocation committed is never taken."""
        if len(self._entries) >= self.capacity:
            self._entries.clear()
        until = time.time() + self.lifetime
        self._entries[key] = (principal, until if expires_at is None else min(until, expires_at), read_at_generation)


def listen() -> None:
    """Registers, once per process, the session events that note such changes."""
    for name, listener in (("after_flush", _note_flushed), ("do_orm_execute", _note_statement),
                           ("after_commit", _forget_if_changed), ("after_soft_rollback", _drop_note)):
        if not event.contains(Session, name, listener):
            event.listen(Session, name, listener)


def _note_flushed(session: Session, _context) -> None:
    # A new token, user or project changes no answer given; a new membership adds a role.
    if (any(isinstance(row, ProjectMemberRow) for row in session.new)
            or any(isinstance(row, _WATCHED) for rows in (session.dirty, session.deleted) for row in rows)):
        session.info[_CHANGED] = True


def _note_statement(state: ORMExecuteState) -> None:
    if state.is_update or state.is_delete:
        table = getattr(state.statement, "table", None)
        if getattr(table, "name", None) in _WATCHED_TABLES:
            state.session.info[_CHANGED] = True


def _drop_note(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # the transaction itself, not a savepoint of it
        session.info.pop(_CHANGED, None)


def _forget_if_changed(session: Session) -> None:
    # A savepoint's release comes here too, before the change is committed: the answers are
    # forgotten at the transaction's own commit, or a request in between would keep the old one.
    if session.in_nested_transaction():
        return
    if session.info.pop(_CHANGED, False):
        forget_all()
        for callback in _watchers:
            callback()
