"""Leadership without the HTTP server: who holds the lease, what happens when it is given up,
lost or its holder dies, on SQLite (a lock file) and on PostgreSQL (an advisory lock). The
leader runs the real controller, on a fake backend."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import wait_for
from controller_support import FakeBackend
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

from mlyard.backends.base import NodeDescription
from mlyard.errors import MlyardError
from mlyard.paths import Paths
from mlyard.server.control.controller import Controller
from mlyard.server.control.leadership import (
    CONTROLLER_LOCK_KEY,
    FileLease,
    Leadership,
    PostgresLease,
    SoloLease,
    lease_for,
)
from mlyard.server.settings import ServerSettings
from mlyard.server.store.db import Database
from mlyard.storage import BlobStore

FAST = {"acquire_interval": 0.05, "check_interval": 0.05}


class WatchedBackend(FakeBackend):
    """The backend of one controller. Its nodes are looked at again on every pass (as a
    cluster's are), so the passes of the controller's loop show, and the thread they run on; an
    unready one fails the controller's start."""

    node_refresh_seconds = 0.0

    def __init__(self, *, ready: bool = True):
        super().__init__()
        self.ready = ready
        self.lookers: list[threading.Thread] = []
        """The thread of each look at the nodes: the controller's start's, then its loop's."""

    def nodes(self) -> list[NodeDescription]:
        if not self.ready:
            raise RuntimeError("the backend is not ready")
        self.lookers.append(threading.current_thread())
        return super().nodes()

    @property
    def passes(self) -> int:
        return max(0, len(self.lookers) - 1)

    @property
    def looping(self) -> bool:
        """The controller's loop runs: it has made a pass, and its thread is alive (stopping the
        controller ends it)."""
        return self.passes > 0 and self.lookers[-1].is_alive()


class Contender:
    """A server: its own connection to the database and its leadership, whose every controller
    is a real one on a backend of its own (`backends[i]` is `controllers[i]`'s)."""

    def __init__(self, url: str, home: Path, *, unready: int = 0):
        # An idle controller waits out a long tick: a pass soon after a wake is the wake's.
        self.settings = ServerSettings(paths=Paths(home), database_url=url, idle_tick_seconds=600, pass_gap_seconds=0)
        self.database = Database.open(url)
        self.blobs = BlobStore(home / "blobs")
        self.unready = unready
        self.controllers: list[Controller] = []
        self.backends: list[WatchedBackend] = []
        self.leadership = Leadership(lease_for(url), self._new_controller, **FAST)

    def _new_controller(self) -> Controller:
        backend = WatchedBackend(ready=self.unready <= 0)
        self.unready -= 1
        self.backends.append(backend)
        self.controllers.append(Controller(database=self.database, backend=backend, settings=self.settings,
                                           blobs=self.blobs))
        return self.controllers[-1]

    @property
    def running(self) -> list[WatchedBackend]:
        """The backends whose controller runs."""
        return [backend for backend in self.backends if backend.looping]

    def close(self) -> None:
        self.leadership.stop()
        self.database.close()


@pytest.fixture
def contenders(database_url: str, tmp_path: Path):
    Database.open(database_url).close()  # the schema exists, as it would for a server
    made: list[Contender] = []

    def make(name: str, **options) -> Contender:
        contender = Contender(database_url, tmp_path / name, **options)
        made.append(contender)
        return contender

    yield make
    for contender in made:
        contender.close()


def break_lease(database_url: str) -> None:
    """What a leader can lose its lease to: its lock connection killed, its lock file replaced."""
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        engine = create_engine(url, poolclass=NullPool)
        with engine.begin() as connection:
            holders = connection.execute(text(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )).scalars().all()
        engine.dispose()
        assert holders == [True]
    else:
        Path(url.database + ".controller.lock").unlink()


def test_one_server_leads_and_a_standby_takes_over_when_it_steps_down(contenders) -> None:
    first, second = contenders("first"), contenders("second")
    first.leadership.start()
    second.leadership.start()
    assert (first.leadership.role, second.leadership.role) == ("leader", "standby")
    assert len(first.controllers) == 1 and second.controllers == []
    (leading,) = first.backends
    assert wait_for(lambda: leading.looping, timeout=5), "the leader's controller runs"

    passes = leading.passes
    second.leadership.wake()
    first.leadership.wake()
    assert wait_for(lambda: leading.passes > passes, timeout=5), "the leader's wake reaches its controller"
    assert second.controllers == [], "a standby's wake reaches no controller"

    first.leadership.stop()
    assert not leading.looping and first.leadership.role == "standby"
    assert wait_for(lambda: second.leadership.role == "leader", timeout=5)
    assert wait_for(lambda: len(second.running) == 1, timeout=5)


def test_a_leader_that_loses_its_lease_stops_its_controller_and_one_server_leads_again(
    contenders, database_url: str
) -> None:
    first, second = contenders("first"), contenders("second")
    first.leadership.start()
    second.leadership.start()
    (original,) = first.backends
    assert wait_for(lambda: original.looping, timeout=5)
    break_lease(database_url)
    assert wait_for(lambda: not original.looping, timeout=5), "the lost lease was noticed and the controller stopped"

    def one_leader() -> bool:
        roles = sorted([first.leadership.role, second.leadership.role])
        return roles == ["leader", "standby"] and len(first.running) + len(second.running) == 1

    assert wait_for(one_leader, timeout=5)
    assert wait_for(one_leader, timeout=0.5) and one_leader(), "and it stays that way"


def test_a_controller_that_does_not_start_gives_the_lease_back_and_is_tried_again(contenders) -> None:
    flaky, other = contenders("flaky", unready=1), contenders("other")
    flaky.leadership.start()
    assert wait_for(lambda: flaky.leadership.role == "leader", timeout=5)
    other.leadership.start()
    assert other.leadership.role == "standby"
    started = [controller.adopted is not None for controller in flaky.controllers]
    assert started == [False, True], "a fresh controller for the new try"
    assert flaky.leadership.controller is flaky.controllers[1]
    assert wait_for(lambda: flaky.running == [flaky.backends[1]], timeout=5)


def test_the_lease_is_exclusive_and_released(database_url: str) -> None:
    Database.open(database_url).close()
    one, other = lease_for(database_url), lease_for(database_url)
    try:
        assert one.acquire() and one.held() and one.acquire()
        assert not other.acquire() and not other.held()
        one.release()
        assert not one.held()
        assert other.acquire() and other.held()
        assert not one.acquire()
    finally:
        one.close()
        other.close()


def test_a_lost_lease_is_noticed(database_url: str) -> None:
    Database.open(database_url).close()
    lease = lease_for(database_url)
    try:
        assert lease.acquire()
        break_lease(database_url)
        assert not lease.held()
        assert lease.acquire(), "taken again once it is free"
        assert lease.held()
    finally:
        lease.close()


HOLDER = """
import sys, time
from mlyard.server.control.leadership import lease_for
lease = lease_for(sys.argv[1])
assert lease.acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_the_lease_of_a_killed_holder_is_free_at_once(database_url: str) -> None:
    Database.open(database_url).close()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, database_url], stdout=subprocess.PIPE, text=True)
    lease = lease_for(database_url)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not lease.acquire()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        assert wait_for(lease.acquire, timeout=5, interval=0.1)
    finally:
        holder.kill()
        holder.wait()
        lease.close()


def test_each_database_gets_its_kind_of_lease(tmp_path: Path) -> None:
    lease = lease_for(f"sqlite:///{tmp_path / 'data' / 'mlyard.db'}")
    assert isinstance(lease, FileLease) and lease.path == tmp_path / "data" / "mlyard.db.controller.lock"
    assert isinstance(lease_for("sqlite://"), SoloLease)
    assert isinstance(lease_for("sqlite:///:memory:"), SoloLease)
    postgres = lease_for("postgres://mlyard:secret@db.example:5432/mlyard")
    assert isinstance(postgres, PostgresLease) and postgres.key == CONTROLLER_LOCK_KEY
    assert "secret" not in postgres.description
    with pytest.raises(MlyardError, match="SQLite or PostgreSQL"):
        lease_for("mysql://db/mlyard")
