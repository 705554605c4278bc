"""Engine, sessions and schema migrations.

`Database.open()` applies the Alembic migrations up to head before anything else touches
the schema, so a server always runs against the schema its code expects.

Two databases are supported: SQLite (embedded mode, one machine) and PostgreSQL through
psycopg 3 (`postgresql+psycopg://…`; `postgresql://` and `postgres://` mean the same).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Engine, create_engine, event, inspect, make_url, text
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from mlyard.server.store import revisions
from mlyard.server.store.specs import SpecCache

MIGRATIONS = Path(__file__).with_name("migrations")
SCHEMA_REVISION = "0026"
"""The newest migration (a test keeps it equal to Alembic's head): a database already there is
opened without importing Alembic, which is a good part of a server's start time, and a
restarted server adopts its running jobs sooner."""
POSTGRES_DRIVER = "postgresql+psycopg"
READ_ONLY = "mlyard_read_only"
"""The execution option of `Database.reading` sessions."""
# Any 64-bit number no other application of the database is likely to use for an advisory lock.
MIGRATION_LOCK_KEY = 0x6D6C79617264_01  # "mlyard", 1
SQLITE_LOCK_WAIT_S = 30
"""How long a SQLite writer waits for another's lock: servers migrating one database together on
a loaded machine hold it for seconds."""
PING_AFTER_IDLE_S = 1.0
"""A pooled PostgreSQL connection unused for longer is checked before use (see `make_engine`)."""


def normalize_url(url: str) -> str:
    """Plain PostgreSQL URLs (as Heroku, docker images and libpq users write them) get the
    psycopg 3 driver, the only PostgreSQL driver mlyard depends on; SQLAlchemy would pick
    psycopg2 for `postgresql://` and no longer knows `postgres://` at all."""
    scheme, separator, rest = url.partition("://")
    if separator and scheme in ("postgres", "postgresql"):
        return f"{POSTGRES_DRIVER}://{rest}"
    return url


def is_postgres(url: str) -> bool:
    return normalize_url(url).startswith("postgresql")


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # SQLAlchemy, not the driver, opens transactions (see _sqlite_begin).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    # WAL lets API readers proceed while the controller writes; the busy timeout turns brief
    # write contention into a wait instead of a "database is locked" error.
    _enable_wal(cursor)
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_LOCK_WAIT_S * 1000}")
    cursor.execute("PRAGMA foreign_keys=ON")
    # FULL: a job answered 201 survives a power loss too, not only a crash of the server.
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


def _enable_wal(cursor) -> None:
    # Switching a new database to WAL needs its exclusive lock, and SQLite answers "database is
    # locked" at once, without calling the busy handler, while another connection (a second
    # server starting on the same file) holds it: retry for as long as a writer would wait.
    deadline = time.monotonic() + SQLITE_LOCK_WAIT_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _sqlite_begin(connection) -> None:
    # A deferred transaction that reads and then writes fails at once with "database is
    # locked" when another writer committed in between; taking the write lock up front makes
    # concurrent transactions (API handlers, the controller) wait their turn instead.
    # A transaction of `Database.reading` takes no lock: in WAL mode it reads a snapshot while
    # writers go on, so a long read (a metrics scrape) never holds up the controller.
    connection.exec_driver_sql("BEGIN" if connection.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")


def insert_if_absent(session: Session, row_class: type, *, unique: Sequence[str] = (), **values: Any) -> None:
    """Inserts a row unless one with the same key (the primary key, or the `unique` columns)
    exists, without an error either way. On PostgreSQL two transactions may both see no row and
    both insert, and the second would fail on the key; SQLite's BEGIN IMMEDIATE serializes them,
    but the statement suits both."""
    table = row_class.__table__
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    keys = list(unique) or [column.name for column in table.primary_key.columns]
    session.execute(insert(table).values(**values).on_conflict_do_nothing(index_elements=keys))


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": SQLITE_LOCK_WAIT_S})
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    # libpq would wait minutes for an unreachable host; a request should fail (503) in seconds.
    # Settings the URL gives itself win.
    defaults = {"connect_timeout": 10, "application_name": "mlyard"}
    connect_args = {name: value for name, value in defaults.items() if name not in make_url(url).query}
    engine = create_engine(url, connect_args=connect_args)
    _ping_idle_connections(engine)
    return engine


def _ping_idle_connections(engine: Engine) -> None:
    """A server outlives database restarts and failovers: a pooled connection that died while
    it sat unused is replaced before use instead of failing the request or the controller's
    pass. Only one unused for `PING_AFTER_IDLE_S` is checked: checking every checkout
    (`pool_pre_ping`) costs every transaction a round trip, a fifth of a submission's. A
    connection that dies in use fails its transaction (503), and the pool replaces every
    connection older than the failure."""

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_connection, record) -> None:
        record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _check(dbapi_connection, record, _proxy) -> None:
        returned_at = record.info.get("returned_at")
        if returned_at is None or time.monotonic() - returned_at < PING_AFTER_IDLE_S:
            return  # fresh from connect, or in use a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            raise DisconnectionError(f"a pooled connection died while unused: {error}") from error


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return None
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def migrate(engine: Engine) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Servers sharing a database may start together: without this both would create the
            # same tables, and one would fail. The second waits, then finds the schema at head.
            # (On SQLite, BEGIN IMMEDIATE serializes the migration transactions already.)
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


class Rider(Protocol):
    """Rows that go with whatever the running request commits: the audit log's row of a request
    that changes something (`server/http/audit.py`) commits in the transaction of the change, not
    in one of its own after it."""

    def add(self, session: Session) -> None:
        """Called in each write transaction of the request, just before it commits."""

    def discard(self, session: Session) -> None:
        """That transaction rolled back instead (a failed commit too)."""


riders: ContextVar[Rider | None] = ContextVar("mlyard_riders", default=None)
"""The running request's `Rider`; worker threads of the request see it too."""
_WROTE = "mlyard_wrote"


def wrote(session: Session) -> bool:
    """Whether the session's transaction has changed anything so far (rows flushed, or an
    INSERT, UPDATE or DELETE statement run through it)."""
    return bool(session.info.get(_WROTE))


def _note_flush(session: Session, _context) -> None:
    session.info[_WROTE] = True


def _note_statement(state) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        state.session.info[_WROTE] = True


def _listen_for_writes() -> None:
    for name, listener in (("after_flush", _note_flush), ("do_orm_execute", _note_statement)):
        if not event.contains(Session, name, listener):
            event.listen(Session, name, listener)


class Database:
    def __init__(self, url: str):
        self.url = normalize_url(url)
        self.engine = make_engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._readers = sessionmaker(self.engine.execution_options(**{READ_ONLY: True}), expire_on_commit=False)
        # PostgreSQL's default isolation gives each statement its own snapshot; a reader whose
        # statements must agree (a job counted RUNNING where its cores are counted held) asks
        # for one snapshot. SQLite's readers have one already.
        self._snapshots = self._readers if not is_postgres(self.url) else sessionmaker(
            self.engine.execution_options(**{READ_ONLY: True}, isolation_level="REPEATABLE READ"),
            expire_on_commit=False)
        # SQLite has one writer at a time, and a writer that finds the lock taken sleeps in
        # SQLite's busy handler in steps of up to 100 ms. The threads of this process queue on
        # a lock of their own instead, and each goes the moment the last one commits; other
        # processes on the file still meet the busy timeout.
        self._writer = threading.RLock() if self.url.startswith("sqlite") else nullcontext()
        revisions.listen()
        _listen_for_writes()
        self.specs = SpecCache()
        """The parsed specs of this database's jobs (`store/specs.py`)."""

    @classmethod
    def open(cls, url: str) -> Database:
        url = normalize_url(url)
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        database = cls(url)
        if current_revision(database.engine) != SCHEMA_REVISION:
            migrate(database.engine)
        return database

    @contextmanager
    def transaction(self, carrying: Sequence[Rider] | None = None) -> Iterator[Session]:
        """A session whose work is committed on success and rolled back on any error.
        No process or network call may happen inside it. The riders of `carrying` (by default,
        what `riders` holds) add their rows just before the commit: a transaction that commits
        the work of several requests carries each one's."""
        if carrying is None:
            rider = riders.get()
            carrying = () if rider is None else (rider,)
        with self._writer, self._sessions() as session:
            try:
                with session.begin():
                    yield session
                    for rider in carrying:
                        rider.add(session)
            except BaseException:
                for rider in carrying:
                    rider.discard(session)  # what it added did not commit
                raise

    @contextmanager
    def reading(self, *, one_snapshot: bool = False) -> Iterator[Session]:
        """A session that only reads. On SQLite it reads one snapshot and neither waits for
        writers nor holds them up (see `_sqlite_begin`); it must not write. On PostgreSQL each
        statement reads the latest commits unless `one_snapshot` asks for all to read the same."""
        with (self._snapshots if one_snapshot else self._readers)() as session, session.begin():
            yield session

    def close(self) -> None:
        self.engine.dispose()
