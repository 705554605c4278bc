"""The local backend with real launcher processes: launch, observe, stop, and re-attach."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import process_gone, wait_for
from local_support import (
    MEBIBYTE,
    Launches,
    is_gone,
    is_running,
    make_attempt,
    make_backend,
    observe_until,
    reloaded,
)

from mlyard.backends.base import ReplicaObservation, ReplicaRef
from mlyard.backends.local.processes import NODE_ADDRESS, LocalBackend, cgroup_name
from mlyard.runtime import cgroups
from mlyard.runtime.launch_config import (
    EXIT_FILE,
    HEARTBEAT_TIMEOUT,
    LAUNCH_CONFIG,
    STARTED_FILE,
    LaunchConfig,
    read_launch_config,
)


@pytest.fixture
def launches(tmp_path: Path) -> Iterator[Launches]:
    tracker = Launches(tmp_path / "runs")
    yield tracker
    tracker.cleanup()


# --------------------------------------------------------------------------- node and ports


def test_nodes_reports_the_cpus_memory_and_notes() -> None:
    backend = make_backend()
    [node] = backend.nodes()
    assert node.cpu_ids == tuple(sorted(os.sched_getaffinity(0)))[:2]
    assert len(node.cpu_ids) == 2
    assert node.memory_bytes == psutil.virtual_memory().total
    assert node.address == NODE_ADDRESS
    assert node.gpus == ()
    assert node.labels["hostname"] == node.name
    assert isinstance(node.notes, tuple)
    assert all(isinstance(note, str) and note for note in node.notes)
    parent, reason = cgroups.detect_memory_parent()
    cpu_parent, cpu_reason = cgroups.detect_cpu_parent()
    assert node.notes == tuple(note for note in (reason, cpu_reason) if note)
    assert backend.memory_parent == parent and backend.cpu_parent == cpu_parent
    if cpu_parent is None:  # `mlyard nodes` says a share of a core is not capped here
        assert cpu_reason.startswith("fractional CPUs share cores but are not capped: ")


def test_cpu_count_and_memory_can_be_limited() -> None:
    backend = LocalBackend(cpus=1, memory_bytes=3 * 1024**3, gpus=())
    [node] = backend.nodes()
    assert len(node.cpu_ids) == 1
    assert node.memory_bytes == 3 * 1024**3


@pytest.mark.parametrize("cpus", [0, len(os.sched_getaffinity(0)) + 1])
def test_more_cpus_than_the_machine_has_are_refused(cpus: int) -> None:
    with pytest.raises(ValueError, match="CPUs"):
        LocalBackend(cpus=cpus, gpus=())


def test_reserve_ports_returns_distinct_free_ports() -> None:
    ports = make_backend().reserve_ports("local", 5)
    assert len(ports) == 5
    assert len(set(ports)) == 5
    sockets = []
    try:
        for port in ports:
            assert 1024 <= port <= 65535
            candidate = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(candidate)
            candidate.bind((NODE_ADDRESS, port))  # free again: nothing kept it bound
    finally:
        for candidate in sockets:
            candidate.close()


# --------------------------------------------------------------------------- dryrun


def test_dryrun_returns_plain_data_with_the_launcher_argv_and_config(tmp_path: Path) -> None:
    backend = make_backend()
    attempt = make_attempt(tmp_path / "runs", ["sleep", "30"], ["python", "train.py"], env={"LR": "0.1"})
    plans = backend.dryrun(attempt)

    assert json.loads(json.dumps(plans)) == plans  # plain data only
    assert [plan["replica"] for plan in plans] == ["worker-0", "worker-1"]
    for plan, replica in zip(plans, attempt.replicas, strict=True):
        assert plan["argv"] == [sys.executable, "-m", "mlyard.runtime.launcher", str(replica.directory)]
        assert plan["start_new_session"] is True
        config = plan["config"]
        assert config["command"] == list(replica.command)
        assert config["env"] == {"RANK": str(replica.rank), "LR": "0.1"}
        assert config["cpu_ids"] == list(replica.cpu_ids)
        assert config["memory_bytes"] == 256 * MEBIBYTE
        assert config["snapshot"] is None
        assert config["cache_snapshot"] is True, "the blob store is on this machine"
        assert config["cgroup_name"] == f"job{attempt.job_id}-1-{replica.name}"
        assert config["prepend_path"] == str(Path(sys.executable).parent)
        expected_parent = str(backend.memory_parent) if backend.memory_parent else None
        assert config["memory_cgroup_parent"] == expected_parent
        assert config["run_as"] is None and plan["account"] is None
    assert not (tmp_path / "runs").exists(), "dryrun must not touch the disk"


# --------------------------------------------------------------------------- launch, observe, stop


def test_launched_replicas_are_observed_running(launches: Launches) -> None:
    backend = make_backend()
    attempt, refs = launches.start(backend, ["sleep", "30"], ["sleep", "30"])
    assert [ref.replica_id for ref in refs] == [1, 2]
    assert all(ref.pid is not None and ref.pid_started_at is not None for ref in refs)
    assert [(ref.node, ref.directory) for ref in refs] == [(r.node, r.directory) for r in attempt.replicas]

    observed = observe_until(backend, refs, is_running)
    assert {replica_id: o.state for replica_id, o in observed.items()} == {1: "running", 2: "running"}
    assert all(o.started_at is not None and o.exit_code is None for o in observed.values())
    for replica, plan in zip(attempt.replicas, backend.dryrun(attempt), strict=True):
        assert (replica.directory / LAUNCH_CONFIG).stat().st_mode & 0o777 == 0o600
        assert read_launch_config(replica.directory) == LaunchConfig.from_data(plan["config"])  # as rendered


def test_stop_sends_sigterm_and_replicas_exit_with_143(launches: Launches) -> None:
    backend = make_backend()
    _, refs = launches.start(backend, ["sleep", "30"], ["sleep", "30"])
    assert all(is_running(o) for o in observe_until(backend, refs, is_running).values())

    stopped_at = time.monotonic()
    backend.stop(refs, force=False)
    observed = observe_until(backend, refs, is_gone, timeout=5)
    assert time.monotonic() - stopped_at < 5
    assert {o.state for o in observed.values()} == {"exited"}
    assert [observed[ref.replica_id].exit_code for ref in refs] == [143, 143]
    for ref in refs:
        assert json.loads((ref.directory / EXIT_FILE).read_text())["signal"] == signal.SIGTERM
        assert observed[ref.replica_id].finished_at >= observed[ref.replica_id].started_at


def test_stop_with_force_kills_the_replicas_and_their_commands(launches: Launches) -> None:
    backend = make_backend()
    _, refs = launches.start(backend, ["sleep", "30"])
    observe_until(backend, refs, is_running)
    command_pid = json.loads((refs[0].directory / STARTED_FILE).read_text())["pid"]

    backend.stop(refs, force=True)
    observed = observe_until(backend, refs, is_gone)
    assert observed[refs[0].replica_id].state == "lost"
    assert wait_for(lambda: process_gone(command_pid), timeout=3)


def test_stop_with_force_removes_the_replicas_memory_cgroup(launches: Launches) -> None:
    backend = make_backend()
    if backend.memory_parent is None:
        pytest.skip(backend.notes[0] if backend.notes else "no memory cgroup parent")
    attempt, refs = launches.start(backend, ["sleep", "30"], ["sleep", "30"])
    observe_until(backend, refs, is_running)
    groups = [backend.memory_parent / cgroup_name(attempt.job_id, attempt.attempt, replica.name)
              for replica in attempt.replicas]
    assert all(group.is_dir() for group in groups)

    backend.stop(refs, force=True)
    # A stopped replica is never stopped again (gone replicas are skipped): no later call cleans up.
    assert not any(group.exists() for group in groups), "a force-stopped replica's cgroup was left behind"


def test_replica_that_exits_zero_is_observed_exited_zero(launches: Launches) -> None:
    backend = make_backend()
    _, refs = launches.start(backend, ["true"])
    observed = observe_until(backend, refs, is_gone)
    assert observed[refs[0].replica_id].state == "exited"
    assert observed[refs[0].replica_id].exit_code == 0


def test_replica_exit_code_is_reported(launches: Launches) -> None:
    backend = make_backend()
    _, refs = launches.start(backend, ["/bin/sh", "-c", "exit 7"], ["true"])
    observed = observe_until(backend, refs, is_gone)
    assert [(observed[ref.replica_id].state, observed[ref.replica_id].exit_code) for ref in refs] == [
        ("exited", 7),
        ("exited", 0),
    ]


def test_replica_killed_with_sigkill_is_lost(launches: Launches) -> None:
    backend = make_backend()
    _, refs = launches.start(backend, ["sleep", "30"], ["sleep", "30"])
    observe_until(backend, refs, is_running)

    killed_at = time.monotonic()
    os.killpg(refs[0].pid, signal.SIGKILL)
    observed = observe_until(backend, refs[:1], is_gone)
    # At once: a local backend sees the pid die without waiting for the heartbeat to go stale.
    assert time.monotonic() - killed_at < HEARTBEAT_TIMEOUT / 2
    assert observed[refs[0].replica_id].state == "lost"
    assert observed[refs[0].replica_id].exit_code is None
    assert observed[refs[0].replica_id].started_at is not None
    assert not (refs[0].directory / EXIT_FILE).exists()
    assert backend.observe(refs[1:])[refs[1].replica_id].state == "running"


def test_stop_on_replicas_already_gone_is_a_no_op(launches: Launches) -> None:
    backend = make_backend()
    _, refs = launches.start(backend, ["true"], ["sleep", "30"])
    observe_until(backend, refs[:1], is_gone)
    os.killpg(refs[1].pid, signal.SIGKILL)
    before = observe_until(backend, refs, is_gone)
    assert [before[ref.replica_id].state for ref in refs] == ["exited", "lost"]

    for force in (False, True, False):
        backend.stop(refs, force=force)
    assert backend.observe(refs) == before


def test_a_second_backend_observes_and_stops_replicas_started_by_the_first(launches: Launches) -> None:
    first = make_backend()
    _, refs = launches.start(first, ["sleep", "30"], ["sleep", "30"])
    observe_until(first, refs, is_running)

    restarted = make_backend()  # like a restarted server: only the stored ReplicaRef data
    stored = [reloaded(ref) for ref in refs]
    assert {o.state for o in restarted.observe(stored).values()} == {"running"}

    restarted.stop(stored, force=False)
    observed = observe_until(restarted, stored, is_gone)
    assert [(observed[ref.replica_id].state, observed[ref.replica_id].exit_code) for ref in stored] == [
        ("exited", 143),
        ("exited", 143),
    ]
    assert first.observe(refs) == observed


def test_a_reused_pid_is_not_taken_for_the_replica(tmp_path: Path) -> None:
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        real_start = psutil.Process(stranger.pid).create_time()
        directory = tmp_path / "runs" / "1" / "1" / "worker-0"
        directory.mkdir(parents=True)
        backend = make_backend()

        impostor = ReplicaRef(replica_id=1, node="local", directory=directory, pid=stranger.pid,
                              pid_started_at=real_start - 100)
        assert backend.observe([impostor])[1].state == "lost"
        backend.stop([impostor], force=True)
        backend._stop_present([impostor], force=True)
        time.sleep(0.1)
        assert stranger.poll() is None, "a process that merely reuses the pid was signalled"

        # Even a matching start time does not make a process that is not this replica's launcher one.
        same_start = ReplicaRef(replica_id=1, node="local", directory=directory, pid=stranger.pid,
                                pid_started_at=real_start)
        assert backend.observe([same_start])[1].state == "lost"
        backend.stop([same_start], force=True)
        time.sleep(0.1)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_a_ref_without_pid_is_lost_unless_an_exit_was_recorded(tmp_path: Path) -> None:
    directory = tmp_path / "replica"
    directory.mkdir()
    backend = make_backend()
    ref = ReplicaRef(replica_id=5, node="local", directory=directory, pid=None, pid_started_at=None)
    assert backend.observe([ref])[5].state == "lost"
    (directory / EXIT_FILE).write_text(json.dumps({"exit_code": 2, "signal": None, "finished_at": 1.0}))
    assert backend.observe([ref])[5] == ReplicaObservation(state="exited", exit_code=2, finished_at=1.0)


def test_stopping_a_lost_replica_kills_the_command_its_launcher_left_behind(launches: Launches) -> None:
    backend = make_backend()
    _, refs = launches.start(backend, ["sleep", "30"])
    observe_until(backend, refs, is_running)
    command_pid = json.loads((refs[0].directory / STARTED_FILE).read_text())["pid"]

    os.kill(refs[0].pid, signal.SIGKILL)  # the launcher alone: its command lives on, orphaned
    assert observe_until(backend, refs, is_gone)[refs[0].replica_id].state == "lost"
    assert not process_gone(command_pid)

    backend.stop(refs, force=True)
    assert wait_for(lambda: process_gone(command_pid), timeout=3)


def test_a_directory_left_by_an_earlier_database_does_not_speak_for_a_new_replica(launches: Launches) -> None:
    backend = make_backend()
    attempt = make_attempt(launches.runs, ["sleep", "30"])
    stale = attempt.replicas[0].directory
    stale.mkdir(parents=True)
    (stale / EXIT_FILE).write_text('{"exit_code": 3, "signal": null, "finished_at": 1.0}')
    refs = backend.launch(attempt)
    launches.started.append((backend, attempt, refs))
    assert observe_until(backend, refs, is_running)[refs[0].replica_id].state == "running"
    assert [path.name for path in stale.parent.iterdir() if ".stale-" in path.name], "the old files were kept aside"


def test_a_launch_the_database_never_recorded_is_found_from_its_directory(launches: Launches) -> None:
    backend = make_backend()
    _, refs = launches.start(backend, ["sleep", "30"])
    observe_until(backend, refs, is_running)
    unrecorded = ReplicaRef(replica_id=refs[0].replica_id, node=refs[0].node, directory=refs[0].directory,
                            pid=None, pid_started_at=None)
    restarted = make_backend()
    assert restarted.observe([unrecorded])[unrecorded.replica_id].state == "running"
    restarted.stop([unrecorded], force=True)
    assert observe_until(restarted, [unrecorded], is_gone)[unrecorded.replica_id].is_gone
