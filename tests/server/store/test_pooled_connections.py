"""Pooled PostgreSQL connections that died while unused (the database restarted, a failover, an
administrator's `pg_terminate_backend`) are replaced before use; connections in use a moment ago
are not checked, so a busy server pays no round trip per transaction (`store/db.py`)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

import postgres
from mlyard.server.store import db
from mlyard.server.store.db import Database


def _kill_the_servers_connections(url: str) -> int:
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as connection:
        killed = connection.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()")).scalar_one()
    engine.dispose()
    return killed


def _pings(database: Database) -> list[str]:
    statements: list[str] = []
    event.listen(database.engine, "before_cursor_execute",
                 lambda _conn, _cursor, statement, *_: statements.append(statement))
    return statements


@pytest.fixture
def database(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.3)
    opened = Database.open(db.normalize_url(postgres.create_database()))
    yield opened
    opened.close()


def test_a_connection_that_died_while_unused_is_replaced_before_use(database: Database) -> None:
    with database.reading() as session:
        assert session.execute(text("SELECT 1")).scalar_one() == 1
    assert _kill_the_servers_connections(database.url) == 1
    time.sleep(0.5)  # longer than PING_AFTER_IDLE_S
    with database.reading() as session:
        assert session.execute(text("SELECT 2")).scalar_one() == 2


def test_a_connection_in_use_a_moment_ago_is_not_pinged_and_one_that_died_fails_once(database: Database) -> None:
    with database.reading() as session:
        session.execute(text("SELECT 1"))
    executed = _pings(database)
    for _ in range(5):
        with database.reading() as session:
            session.execute(text("SELECT 1"))
    assert executed == ["SELECT 1"] * 5, "no ping between transactions moments apart"

    _kill_the_servers_connections(database.url)
    with pytest.raises(OperationalError), database.reading() as session:
        session.execute(text("SELECT 3"))
    # The failure invalidated the pool: the next transaction gets a new connection.
    with database.reading() as session:
        assert session.execute(text("SELECT 4")).scalar_one() == 4
