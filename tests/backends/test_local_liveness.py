"""How the local backend tells a live replica from a lost one: the launcher's heartbeat, and
its command line, which names the launcher's module (of this version or an earlier one) and
the replica's directory."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import process_gone, wait_for
from local_support import Launches, fake_launcher, is_gone, is_running, make_backend, observe_until

from mlyard.backends.local.processes import is_launcher_of
from mlyard.runtime.launch_config import (
    HEARTBEAT_FILE,
    HEARTBEAT_INTERVAL,
    HEARTBEAT_TIMEOUT,
    LAUNCHER_FILE,
    STARTED_FILE,
)


@pytest.fixture
def launches(tmp_path: Path) -> Iterator[Launches]:
    tracker = Launches(tmp_path / "runs")
    yield tracker
    tracker.cleanup()


# --------------------------------------------------------------------------- heartbeats


def test_a_running_replica_keeps_beating_and_stays_running_past_the_timeout(launches: Launches) -> None:
    backend = make_backend()
    _, refs = launches.start(backend, ["sleep", "30"])
    observe_until(backend, refs, is_running)
    heartbeat = refs[0].directory / HEARTBEAT_FILE
    recorded = json.loads((refs[0].directory / LAUNCHER_FILE).read_text())
    assert recorded["heartbeat_interval"] == HEARTBEAT_INTERVAL

    beats = set()
    deadline = time.monotonic() + HEARTBEAT_TIMEOUT + HEARTBEAT_INTERVAL
    while time.monotonic() < deadline:
        assert backend.observe(refs)[refs[0].replica_id].state == "running"
        beats.add(heartbeat.stat().st_mtime)
        time.sleep(0.2)
    assert len(beats) >= HEARTBEAT_TIMEOUT / HEARTBEAT_INTERVAL - 1, "the heartbeat did not advance"


def test_a_frozen_launcher_is_lost_within_the_timeout_and_force_stop_removes_it_and_its_command(
    launches: Launches,
) -> None:
    backend = make_backend()
    _, refs = launches.start(backend, ["sleep", "30"], ["sleep", "30"])
    observe_until(backend, refs, is_running)
    frozen = refs[0]
    command_pid = json.loads((frozen.directory / STARTED_FILE).read_text())["pid"]

    frozen_at = time.monotonic()
    os.kill(frozen.pid, signal.SIGSTOP)  # the pid stays; only its beats stop
    observed = observe_until(backend, [frozen], is_gone, timeout=HEARTBEAT_TIMEOUT + 3)
    waited = time.monotonic() - frozen_at
    assert observed[frozen.replica_id].state == "lost", observed
    assert observed[frozen.replica_id].exit_code is None
    # Lost once the last beat before the freeze is older than the timeout, and well within 10 s.
    assert HEARTBEAT_TIMEOUT - HEARTBEAT_INTERVAL - 0.5 <= waited <= HEARTBEAT_TIMEOUT + 2
    assert psutil.Process(frozen.pid).status() == psutil.STATUS_STOPPED
    assert backend.observe(refs[1:])[refs[1].replica_id].state == "running", "its sibling still beats"

    backend.stop([frozen], force=True)  # what the controller does with a replica first seen lost
    assert wait_for(lambda: process_gone(frozen.pid), timeout=3), "the frozen launcher was left"
    assert wait_for(lambda: process_gone(command_pid), timeout=3), "the frozen launcher's command was left"
    assert backend.observe(refs[1:])[refs[1].replica_id].state == "running"


def test_a_launcher_that_never_beats_is_lost_once_the_timeout_has_passed_since_its_start(tmp_path: Path) -> None:
    backend = make_backend()  # first: asking for the container engine can take a while on a busy machine
    backend.heartbeat_timeout = 1.0  # the rule, not the production wait
    process, ref = fake_launcher(tmp_path / "replica", beats=True)
    try:
        assert backend.observe([ref])[1].state == "pending"
        assert observe_until(backend, [ref], is_gone, timeout=3)[1].state == "lost"
        assert process.poll() is None

        backend.stop([ref], force=True)
        assert process.wait(timeout=3) == -signal.SIGKILL
    finally:
        process.kill()
        process.wait()


def test_a_launcher_from_before_heartbeats_is_judged_by_its_pid_alone(tmp_path: Path) -> None:
    process, ref = fake_launcher(tmp_path / "replica", beats=False)
    try:
        backend = make_backend()
        backend.heartbeat_timeout = 0.2
        time.sleep(0.5)
        assert backend.observe([ref])[1].state == "pending"
        process.kill()
        process.wait()
        assert backend.observe([ref])[1].state == "lost"
    finally:
        process.kill()
        process.wait()


# --------------------------------------------------------------------------- upgrades


def test_a_launcher_is_recognised_by_its_module_of_this_or_the_earlier_version_and_its_directory(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "runs" / "1" / "1" / "worker-0"
    python = sys.executable
    assert is_launcher_of([python, "-m", "mlyard.runtime.launcher", str(directory)], directory)
    assert is_launcher_of([python, "-m", "mlyard.launcher", str(directory)], directory)  # started before an upgrade
    assert not is_launcher_of([python, "-m", "mlyard.runtime.launcher", str(directory.with_name("worker-1"))],
                              directory)
    assert not is_launcher_of([python, "-m", "http.server", str(directory)], directory)
    assert not is_launcher_of(["sleep", "30"], directory)
    assert not is_launcher_of([], directory)


def test_a_replica_started_by_the_earlier_version_is_adopted_and_can_be_stopped(tmp_path: Path) -> None:
    process, ref = fake_launcher(tmp_path / "replica", beats=False, module="mlyard.launcher")
    try:
        backend = make_backend()
        assert backend.observe([ref])[1].state == "pending"
        backend.stop([ref], force=True)
        assert process.wait(timeout=3) == -signal.SIGKILL
    finally:
        process.kill()
        process.wait()
