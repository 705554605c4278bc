"""Which of the servers sharing a database runs the controller.

Any number of servers may serve the API on one database, but two controllers would launch
the same job twice, so exactly one server leads: it holds a *lease* and runs the controller;
the others stand by and try to take the lease every second. A lease is one the operating
system or the database frees by itself when its holder dies, so a killed leader is replaced
without anyone having to notice and clean up:

- PostgreSQL: a session-level advisory lock (`pg_try_advisory_lock`) held on a connection of
  its own. PostgreSQL releases it when that connection ends, which a dead process's
  connection does at once (or, across a network, after the TCP keepalive settings below).
- SQLite: an exclusive `flock` on `<database file>.controller.lock`. A SQLite database is
  only ever shared by processes of one machine, whose kernel releases the lock with them.

A leader checks every couple of seconds that it still holds its lease (the connection is
alive and `pg_locks` shows the lock as its own; the lock file is still the one at the path).
One that lost it stops its controller at once and stands by again. Each time a server becomes
the leader it starts a fresh controller, which first settles what the previous leader left.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Literal, Protocol

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from mlyard.errors import MlyardError
from mlyard.server.loop import Loop
from mlyard.server.store.db import is_postgres, normalize_url

log = logging.getLogger("mlyard.leadership")

Role = Literal["leader", "standby"]
# One lock per database (PostgreSQL scopes advisory locks to the database), "mlyard", 2.
CONTROLLER_LOCK_KEY = 0x6D6C79617264_02
ACQUIRE_INTERVAL = 1.0
CHECK_INTERVAL = 2.0


class Lease(Protocol):
    description: str

    def acquire(self) -> bool:
        """Takes the lease if nobody holds it; True when this process holds it now."""

    def held(self) -> bool:
        """Whether the lease taken is still this process's (False once lost or released)."""

    def release(self) -> None:
        """Gives the lease up; safe to call when not holding it."""

    def close(self) -> None:
        """Releases the lease and whatever resources it kept for the next try."""


class Controlling(Protocol):
    """What leadership needs of what it runs while leading (`control/supervisor.py`'s `Supervisor`)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wake(self) -> None: ...


class FileLease:
    """An exclusive flock: per open file, so two leases of one process exclude each other too."""

    def __init__(self, path: Path):
        self.path = path
        self.description = f"lock file {path}"
        self._handle = None

    def acquire(self) -> bool:
        if self._handle is not None:
            if self.held():
                return True
            self.release()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a")  # noqa: SIM115 - held open: the lock lives as long as the handle
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        self._handle = handle
        return True

    def held(self) -> bool:
        if self._handle is None:
            return False
        # A lock file deleted or replaced under us no longer excludes anyone: the next server
        # locks the new file and leads too, so ours counts as lost.
        try:
            ours, current = os.fstat(self._handle.fileno()), os.stat(self.path)
        except OSError:
            return False
        return (ours.st_dev, ours.st_ino) == (current.st_dev, current.st_ino)

    def release(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.close()

    def close(self) -> None:
        self.release()


class PostgresLease:
    """A session-level advisory lock on a connection that does nothing else."""

    # Statement and TCP timeouts bound every call, so a network partition shows up as an error
    # within seconds instead of a leader blocked on a socket while another one takes over.
    # The server-side keepalives let PostgreSQL notice a vanished leader machine and free the
    # lock after about 10 s instead of the operating system's default of two hours.
    _SESSION_SETTINGS = ("SET statement_timeout = 5000", "SET tcp_keepalives_idle = 5",
                         "SET tcp_keepalives_interval = 2", "SET tcp_keepalives_count = 3",
                         "SET tcp_user_timeout = 10000")
    _CONNECT_ARGS: ClassVar[dict[str, object]] = {
        "connect_timeout": 5, "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
        "tcp_user_timeout": 10000, "application_name": "mlyard leadership",
    }

    def __init__(self, url: str, key: int = CONTROLLER_LOCK_KEY):
        self.key = key
        self.description = f"advisory lock {key} on {make_url(url).render_as_string(hide_password=True)}"
        # Autocommit: the lock belongs to the session, and a transaction held open for the
        # life of the leader would only keep vacuum from doing its work.
        self._engine = create_engine(normalize_url(url), poolclass=NullPool, isolation_level="AUTOCOMMIT",
                                     connect_args=self._CONNECT_ARGS)
        self._connection: Connection | None = None
        self._holding = False

    def _connect(self) -> Connection:
        if self._connection is None:
            connection = self._engine.connect()
            for statement in self._SESSION_SETTINGS:
                try:
                    connection.execute(text(statement))
                except DBAPIError as error:
                    if error.connection_invalidated:
                        connection.close()
                        raise
                    # An older server without one of the settings still gives a working lease.
                    log.debug("leadership connection: %s failed: %s", statement, error)
            self._connection = connection
        return self._connection

    def _discard(self) -> None:
        connection, self._connection, self._holding = self._connection, None, False
        if connection is not None:
            try:
                connection.invalidate()
                connection.close()
            except SQLAlchemyError:
                pass

    def acquire(self) -> bool:
        if self._holding and self.held():
            return True
        try:
            # The standby keeps its connection between tries rather than reconnecting every second.
            got = self._connect().execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}).scalar()
        except SQLAlchemyError:
            self._discard()
            raise
        self._holding = bool(got)
        return self._holding

    def held(self) -> bool:
        if not self._holding or self._connection is None:
            return False
        high, low = (self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF
        try:
            # objsubid 1: the lock was taken with one bigint key (2 would be two int keys).
            mine = self._connection.execute(text(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND pid = pg_backend_pid() AND classid::bigint = :high AND objid::bigint = :low"
                " AND objsubid = 1"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
            ), {"high": high, "low": low}).scalar()
        except SQLAlchemyError:
            self._discard()
            return False
        if not mine:
            self._holding = False
        return bool(mine)

    def release(self) -> None:
        if self._connection is None:
            return
        if self._holding:
            try:
                # All of them: the lock counts re-entries, and this connection holds nothing else.
                self._connection.execute(text("SELECT pg_advisory_unlock_all()"))
            except SQLAlchemyError:
                self._discard()  # a connection that ended took the lock with it
                return
        self._holding = False

    def close(self) -> None:
        self.release()
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._engine.dispose()


class SoloLease:
    """An in-memory SQLite database belongs to one process: that process leads."""

    description = "an in-memory database (no other server can share it)"

    def __init__(self) -> None:
        self._holding = False

    def acquire(self) -> bool:
        self._holding = True
        return True

    def held(self) -> bool:
        return self._holding

    def release(self) -> None:
        self._holding = False

    def close(self) -> None:
        self.release()


def lease_for(url: str) -> Lease:
    url = normalize_url(url)
    if is_postgres(url):
        return PostgresLease(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if not database or database == ":memory:" or parsed.query.get("mode") == "memory":
            return SoloLease()
        path = Path(database).absolute()
        return FileLease(path.with_name(path.name + ".controller.lock"))
    raise MlyardError(f"no leadership lease for the {parsed.get_backend_name()} database of "
                      f"MLYARD_DATABASE_URL; mlyard runs on SQLite or PostgreSQL")


class Leadership:
    """Runs a controller (from `controller_factory`, a new one each time) while this server leads.

    `start()` makes a first attempt before returning, so a lone server serves with its
    controller already running; a background thread keeps trying (standby) or checking
    (leader) after that. `wake()` reaches the controller when leading and does nothing on a
    standby, whose submissions the leader finds on its next tick."""

    def __init__(self, lease: Lease, controller_factory: Callable[[], Controlling], *,
                 acquire_interval: float = ACQUIRE_INTERVAL, check_interval: float = CHECK_INTERVAL):
        self.lease = lease
        self.controller_factory = controller_factory
        self.acquire_interval = acquire_interval
        self.check_interval = check_interval
        self._controller: Controlling | None = None
        self._loop: Loop | None = None
        self._last_error: str | None = None

    @property
    def role(self) -> Role:
        return "leader" if self._controller is not None else "standby"

    @property
    def controller(self) -> Controlling | None:
        return self._controller

    def wake(self) -> None:
        controller = self._controller
        if controller is not None:
            controller.wake()

    def start(self) -> None:
        if not self._try_to_lead():
            log.info("controller: standby; another server leads (%s); trying every %gs",
                     self.lease.description, self.acquire_interval)
        first = self.acquire_interval if self._controller is None else self.check_interval
        self._loop = Loop("mlyard-leadership", self._tick, retry_seconds=self.acquire_interval, first_delay=first)
        self._loop.start()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop(timeout=60)
        self._step_down()
        self.lease.close()

    @property
    def _closing(self) -> bool:
        return self._loop is not None and self._loop.stopping

    def _tick(self) -> float:
        """Standby: tries for the lease. Leader: checks it is still held, and steps down if not."""
        if self._controller is None:
            self._try_to_lead()
            return self.acquire_interval
        if self._still_leading():
            return self.check_interval
        log.warning("controller: lost the lease (%s); stopping the controller", self.lease.description)
        self._step_down()
        return self.acquire_interval

    def _still_leading(self) -> bool:
        try:
            return self.lease.held()
        except Exception:  # a check that cannot tell is a lease we cannot count on
            log.exception("controller: checking the lease failed")
            return False

    def _try_to_lead(self) -> bool:
        try:
            if not self.lease.acquire():
                self._last_error = None
                return False
        except (SQLAlchemyError, OSError) as error:  # the database may be down a while: keep trying, log once
            if str(error) != self._last_error:
                log.warning("controller: cannot try for the lease (%s): %s", self.lease.description, error)
            self._last_error = str(error)
            return False
        self._last_error = None
        if self._closing:
            self.lease.release()
            return False
        try:
            controller = self.controller_factory()
            controller.start()
        except Exception:
            log.exception("controller: leading, but the controller did not start; giving the lease up")
            self.lease.release()
            return False
        self._controller = controller
        log.info("controller: this server leads (%s)", self.lease.description)
        return True

    def _step_down(self) -> None:
        controller, self._controller = self._controller, None
        if controller is not None:
            # Stopped before the lease goes, so two controllers never run by our doing.
            controller.stop()
        self.lease.release()
