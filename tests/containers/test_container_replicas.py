"""Container replicas on a real engine, through the local backend and without a server:
what a container sees, its log and exit code, an out-of-memory kill, stopping, and a second
backend (a restarted server) adopting a running container."""

from __future__ import annotations

import dataclasses
import io
import os
import tarfile
import time
from pathlib import Path

import pytest
from container_support import IMAGE, SOCKET, containers_of, require_engine

from mlyard.backends.base import (
    AttemptLaunch,
    ReplicaLaunch,
    ReplicaObservation,
    ReplicaRef,
)
from mlyard.backends.local.containers import container_replicas
from mlyard.backends.local.job_accounts import JobAccounts
from mlyard.backends.local.processes import LocalBackend

MiB = 1024**2


@pytest.fixture(autouse=True)
def _engine() -> None:
    require_engine()


def local_backend(max_log_bytes: int = 1024**3) -> LocalBackend:
    return LocalBackend(cpus=1, max_log_bytes=max_log_bytes,
                        containers=container_replicas("container", SOCKET, max_log_bytes=max_log_bytes))


def snapshot(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return path


def launch_one(home: Path, command: tuple[str, ...], *, memory: int = 512 * MiB, snapshot_path: Path | None = None,
               job: int = 1) -> tuple[AttemptLaunch, ReplicaLaunch]:
    checkpoints = home / "checkpoints" / str(job)
    checkpoints.mkdir(parents=True, exist_ok=True)
    replica = ReplicaLaunch(
        replica_id=job, name="worker-0", rank=0, node="here", cpu_ids=(0,), gpu_ids=(), memory_bytes=memory,
        command=command, env={"MLYARD_CHECKPOINT_DIR": str(checkpoints), "PYTHONUNBUFFERED": "1"},
        directory=home / "runs" / str(job) / "1" / "worker-0", snapshot=snapshot_path, image=IMAGE,
    )
    return AttemptLaunch(job_id=job, attempt=1, replicas=(replica,), private_directories=(checkpoints,)), replica


def reference(replica: ReplicaLaunch) -> ReplicaRef:
    return ReplicaRef(replica_id=replica.replica_id, node="here", directory=replica.directory, pid=None,
                      pid_started_at=None)


def wait_state(backend: LocalBackend, ref: ReplicaRef, states: tuple[str, ...], timeout: float = 60) -> ReplicaObservation:
    deadline = time.monotonic() + timeout
    while True:
        observation = backend.observe([ref])[ref.replica_id]
        if observation.state in states or time.monotonic() > deadline:
            assert observation.state in states, f"still {observation} after {timeout}s"
            return observation
        time.sleep(0.2)


def start_running(backend: LocalBackend, home: Path, command: tuple[str, ...]) -> tuple[ReplicaLaunch, ReplicaRef]:
    """Launches one replica of `command` and waits until its container runs."""
    launch, replica = launch_one(home, command)
    backend.launch(launch)
    ref = reference(replica)
    wait_state(backend, ref, ("running",))
    return replica, ref


PROBE = """
import os, sys
print("uid", os.getuid(), "cwd", os.getcwd(), flush=True)
print("code", open("data.txt").read().strip(), flush=True)
try:
    open("written-into-code", "w")
    print("code is writable", flush=True)
except OSError as error:
    print("code is read-only:", error.errno, flush=True)
open(os.path.join(os.environ["MLYARD_CHECKPOINT_DIR"], "step-1"), "w").write("saved")
for path in sys.argv[1:]:
    print("sees", path, sorted(os.listdir(path)) if os.path.isdir(path) else os.path.exists(path), flush=True)
sys.stderr.write("to stderr\\n")
sys.exit(7)
"""


def test_a_container_replica_runs_as_nobody_in_its_read_only_code_and_writes_only_its_checkpoints(tmp_path: Path) -> None:
    backend = local_backend()
    home = tmp_path / "home"
    (home / "mlyard.db").parent.mkdir(parents=True)
    (home / "mlyard.db").write_text("secret")
    archive = snapshot(tmp_path / "code.tar.gz", {"probe.py": PROBE, "data.txt": "from the snapshot\n"})
    launch, replica = launch_one(home, ("python3", "probe.py", str(home / "mlyard.db"), str(home), str(tmp_path),
                                        "/work"),
                                 snapshot_path=archive)
    [started] = backend.launch(launch)
    assert started.pid is not None  # the container's first process, as the host sees it (resource sampling)
    assert (started.node, started.directory) == (replica.node, replica.directory)
    observation = wait_state(backend, reference(replica), ("exited",))
    assert observation.exit_code == 7 and observation.reason is None
    assert observation.finished_at is not None and observation.started_at is not None
    output = (replica.directory / "output.log").read_text()
    assert "uid 65534 cwd /mlyard/code" in output
    assert "code from the snapshot" in output
    assert "code is read-only: 30" in output  # EROFS
    # Of the host, only the mounted directories are there, and the empty ones leading to them.
    assert f"sees {home / 'mlyard.db'} False" in output
    assert f"sees {home} ['checkpoints']" in output and f"sees {tmp_path} ['home']" in output
    assert "sees /work False" in output
    assert "to stderr" in output
    assert (home / "checkpoints" / "1" / "step-1").read_text() == "saved"
    assert containers_of(str(home)) == []  # removed once its exit was recorded
    # Observing again (a later pass, a restarted server) reads the recorded outcome.
    again = local_backend().observe([reference(replica)])[replica.replica_id]
    assert (again.state, again.exit_code) == ("exited", 7)
    backend.stop([reference(replica)], force=True)  # stopping what is gone is harmless


def test_a_replica_over_its_memory_limit_exits_with_an_out_of_memory_reason(tmp_path: Path) -> None:
    backend = local_backend()
    launch, replica = launch_one(tmp_path, ("python3", "-c", ("import time; time.sleep(0.5); "
                                            "chunks = [bytearray(16 * 1024 * 1024) for _ in range(64)]")),
                                 memory=128 * MiB)
    backend.launch(launch)
    observation = wait_state(backend, reference(replica), ("exited",))
    assert observation.exit_code == 137
    assert observation.reason is not None and "out of memory" in observation.reason and "128.0 MiB" in observation.reason
    assert containers_of(str(tmp_path)) == []


def test_a_replica_that_exits_normally_has_no_out_of_memory_reason(tmp_path: Path) -> None:
    backend = local_backend()
    launch, replica = launch_one(tmp_path, ("python3", "-c", "x = bytearray(32 * 1024 * 1024); print(len(x))"),
                                 memory=256 * MiB)
    backend.launch(launch)
    observation = wait_state(backend, reference(replica), ("exited",))
    assert (observation.exit_code, observation.reason) == (0, None)
    assert (replica.directory / "output.log").read_text() == f"{32 * MiB}\n"


def wait_for_output(directory: Path, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in (directory / "output.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.1)


def test_sigterm_reaches_the_command_and_its_container_is_removed(tmp_path: Path) -> None:
    backend = local_backend()
    command = ("python3", "-c", ("import signal, sys, time\n"
               "signal.signal(signal.SIGTERM, lambda *_: (print('terminated', flush=True), sys.exit(143)))\n"
               "print('ready', flush=True)\ntime.sleep(120)"))
    replica, ref = start_running(backend, tmp_path, command)
    wait_for_output(replica.directory, "ready")
    backend.stop([ref], force=False)
    observation = wait_state(backend, ref, ("exited",), timeout=30)
    assert observation.exit_code == 143
    assert (replica.directory / "output.log").read_text() == "ready\nterminated\n"
    assert containers_of(str(tmp_path)) == []
    backend.stop([ref], force=True)
    backend.stop([ref], force=False)


def test_sigkill_ends_a_replica_that_ignores_sigterm(tmp_path: Path) -> None:
    backend = local_backend()
    command = ("python3", "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(120)")
    _, ref = start_running(backend, tmp_path, command)
    backend.stop([ref], force=True)
    # Recorded and removed by the stop itself: it may be the last look at the replica (an
    # attempt a crashed server left half-launched is only stopped, never observed again).
    assert containers_of(str(tmp_path)) == []
    observation = backend.observe([ref])[ref.replica_id]
    assert (observation.state, observation.exit_code, observation.reason) == ("exited", 137, None)


def test_a_restarted_backend_adopts_a_running_container_and_completes_its_log(tmp_path: Path) -> None:
    first = local_backend()
    command = ("python3", "-c", "import time\nfor i in range(8):\n    print('line', i, flush=True)\n    time.sleep(0.5)")
    replica, ref = start_running(first, tmp_path, command)
    wait_for_output(replica.directory, "line 1")
    first.close()  # the first server goes away
    # A new backend, as a restarted server makes, knows the replica only from its directory.
    second = local_backend()
    assert second.observe([ref])[ref.replica_id].state == "running"
    observation = wait_state(second, ref, ("exited",), timeout=60)
    assert observation.exit_code == 0
    assert (replica.directory / "output.log").read_text() == "".join(f"line {i}\n" for i in range(8))
    assert containers_of(str(tmp_path)) == []


def test_a_container_removed_behind_the_servers_back_is_lost(tmp_path: Path) -> None:
    backend = local_backend()
    _, ref = start_running(backend, tmp_path, ("sleep", "120"))
    [container] = containers_of(str(tmp_path))
    assert backend.containers is not None
    backend.containers.engine.remove(container["Id"])
    observation = wait_state(backend, ref, ("lost",))
    assert observation.reason is not None and "gone" in observation.reason


def test_a_containers_log_stops_at_the_cap(tmp_path: Path) -> None:
    backend = local_backend(max_log_bytes=10_000)
    launch, replica = launch_one(tmp_path, ("python3", "-c", ("import sys\nfor i in range(5000):\n"
                                            "    sys.stdout.write('x' * 99 + '\\n')")))
    backend.launch(launch)
    observation = wait_state(backend, reference(replica), ("exited",))
    assert observation.exit_code == 0
    log = (replica.directory / "output.log").read_bytes()
    assert log.startswith(b"x" * 99 + b"\n") and b"log truncated" in log
    assert 10_000 <= len(log) <= 10_200


def test_an_image_is_checked_on_the_engine(tmp_path: Path) -> None:
    backend = local_backend()
    assert backend.check_image(IMAGE) is None
    problem = backend.check_image("localhost/no-such-image:0")
    assert problem is not None and "localhost/no-such-image:0" in problem and "not on this server's" in problem


@pytest.mark.skipif(os.geteuid() != 0, reason="job accounts need a root server")
def test_with_job_accounts_a_container_runs_as_the_owners_account(tmp_path: Path) -> None:
    homes = tmp_path / "homes"
    homes.mkdir()
    accounts = JobAccounts(homes, prefix="mlyct-")
    backend = LocalBackend(cpus=1, job_accounts=accounts, containers=container_replicas("container", SOCKET))
    launch, replica = launch_one(tmp_path, ("python3", "-c", ("import os; print(os.getuid(), os.getgid()); open("
                                            "os.environ['MLYARD_CHECKPOINT_DIR'] + '/mine', 'w').write('x')")))
    launch = dataclasses.replace(launch, owner="alice")
    backend.launch(launch)
    observation = wait_state(backend, reference(replica), ("exited",))
    account = accounts.account_for("alice")
    assert observation.exit_code == 0, (replica.directory / "output.log").read_text()
    assert (replica.directory / "output.log").read_text() == f"{account.uid} {account.gid}\n"
    checkpoints = tmp_path / "checkpoints" / "1"
    assert (checkpoints.stat().st_uid, checkpoints.stat().st_mode & 0o777) == (account.uid, 0o700)
    assert (checkpoints / "mine").stat().st_uid == account.uid
