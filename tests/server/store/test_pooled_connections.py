"""Pooled PostgreSQL connections that died while unused (the database restarted, a failover, an
administrator's `pg_terminate_backend`) are replaced before use; connections in use a moment ago
are not checked, so a busy server pays no round trip per transaction (`store/db.py`)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, text
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


def _pings(database: Database, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The pings made from now on (the dialect's own, as the pool makes them)."""
    pings: list[object] = []
    ping = database.engine.dialect.do_ping

    def counted(dbapi_connection) -> bool:
        pings.append(dbapi_connection)
        return ping(dbapi_connection)
    monkeypatch.setattr(database.engine.dialect, "do_ping", counted)
    return pings


@pytest.fixture
def database(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.3)
    opened = Database.open(db.normalize_url(postgres.create_database()))
    yield opened
    opened.close()


def test_a_connection_that_died_while_unused_is_replaced_before_use(database: Database,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with database.reading() as session:
        assert session.execute(text("SELECT 1")).scalar_one() == 1
    pings = _pings(database, monkeypatch)
    assert _kill_the_servers_connections(database.url) == 1
    time.sleep(0.5)  # longer than PING_AFTER_IDLE_S
    with database.reading() as session:
        assert session.execute(text("SELECT 2")).scalar_one() == 2
    assert len(pings) == 1


def test_a_connection_in_use_a_moment_ago_is_not_pinged_and_one_that_died_fails_once(
        database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 60.0)  # "a moment ago", however slow the machine
    with database.reading() as session:
        session.execute(text("SELECT 1"))
    pings = _pings(database, monkeypatch)
    for _ in range(5):
        with database.reading() as session:
            session.execute(text("SELECT 1"))
    assert pings == [], "no ping between transactions moments apart"

    _kill_the_servers_connections(database.url)
    with pytest.raises(OperationalError), database.reading() as session:
        session.execute(text("SELECT 3"))
    # The failure invalidated the pool: the next transaction gets a new connection.
    with database.reading() as session:
        assert session.execute(text("SELECT 4")).scalar_one() == 4
