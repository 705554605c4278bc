"""Leadership without the HTTP server: who holds the lease, what happens when it is given up,
lost or its holder dies, on SQLite (a lock file) and on PostgreSQL (an advisory lock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import wait_for
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

from mlyard.errors import MlyardError
from mlyard.server.store.db import Database
from mlyard.server.control.leadership import (
    CONTROLLER_LOCK_KEY,
    FileLease,
    Leadership,
    PostgresLease,
    SoloLease,
    lease_for,
)

FAST = {"acquire_interval": 0.05, "check_interval": 0.05}


class FakeController:
    def __init__(self, name: str, fail: bool = False):
        self.name = name
        self.fail = fail
        self.started = self.stopped = False
        self.wakes = 0

    def start(self) -> None:
        if self.fail:
            raise RuntimeError("the backend is not ready")
        self.started = True

    def stop(self) -> None:
        self.stopped = True

    def wake(self) -> None:
        self.wakes += 1

    @property
    def running(self) -> bool:
        return self.started and not self.stopped


class Contender:
    """A server's leadership with controllers that record what was done to them."""

    def __init__(self, url: str, name: str, *, failures: int = 0):
        self.name = name
        self.controllers: list[FakeController] = []
        self.failures = failures
        self.leadership = Leadership(lease_for(url), self._new_controller, **FAST)

    def _new_controller(self) -> FakeController:
        controller = FakeController(f"{self.name}-{len(self.controllers)}", fail=self.failures > 0)
        self.failures -= 1
        self.controllers.append(controller)
        return controller

    @property
    def running(self) -> list[FakeController]:
        return [controller for controller in self.controllers if controller.running]


@pytest.fixture
def contenders(database_url: str):
    Database.open(database_url).close()  # the schema exists, as it would for a server
    made: list[Contender] = []

    def make(name: str, **options) -> Contender:
        contender = Contender(database_url, name, **options)
        made.append(contender)
        return contender

    yield make
    for contender in made:
        contender.leadership.stop()


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
    assert [c.running for c in first.controllers] == [True] and second.controllers == []

    second.leadership.wake()
    first.leadership.wake()
    assert first.controllers[0].wakes == 1, "a standby's wake reaches no controller"

    first.leadership.stop()
    assert first.controllers[0].stopped and first.leadership.role == "standby"
    assert wait_for(lambda: second.leadership.role == "leader", timeout=5)
    assert len(second.running) == 1


def test_a_leader_that_loses_its_lease_stops_its_controller_and_one_server_leads_again(
    contenders, database_url: str
) -> None:
    first, second = contenders("first"), contenders("second")
    first.leadership.start()
    second.leadership.start()
    original = first.controllers[0]
    break_lease(database_url)
    assert wait_for(lambda: original.stopped, timeout=5), "the lost lease was noticed and the controller stopped"

    def one_leader() -> bool:
        roles = sorted([first.leadership.role, second.leadership.role])
        return roles == ["leader", "standby"] and len(first.running) + len(second.running) == 1

    assert wait_for(one_leader, timeout=5)
    assert wait_for(one_leader, timeout=0.5) and one_leader(), "and it stays that way"


def test_a_controller_that_does_not_start_gives_the_lease_back_and_is_tried_again(contenders) -> None:
    flaky, other = contenders("flaky", failures=1), contenders("other")
    flaky.leadership.start()
    assert wait_for(lambda: flaky.leadership.role == "leader", timeout=5)
    other.leadership.start()
    assert other.leadership.role == "standby"
    assert [c.started for c in flaky.controllers] == [False, True], "a fresh controller for the new try"


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
