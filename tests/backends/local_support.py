"""What the tests of the local backend share: attempts laid out like the server's, waiting on
observations, and cleaning up whatever a test leaves running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil
from conftest import wait_for

from mlyard.backends.base import AttemptLaunch, ReplicaLaunch, ReplicaObservation, ReplicaRef
from mlyard.backends.local.processes import LocalBackend, cgroup_name
from mlyard.runtime import cgroups
from mlyard.runtime.launch_config import HEARTBEAT_INTERVAL, LAUNCHER_FILE, STARTED_FILE

MEBIBYTE = 1024 * 1024


def make_backend() -> LocalBackend:
    return LocalBackend(cpus=2, gpus=())


def unique_job_id() -> int:
    return 900_000_000 + uuid.uuid4().int % 100_000_000


def make_attempt(runs: Path, *commands: Sequence[str], env: dict[str, str] | None = None) -> AttemptLaunch:
    """One replica per command, in directories laid out like the server's: runs/JOB/ATTEMPT/NAME."""
    job_id, attempt = unique_job_id(), 1
    replicas = tuple(
        ReplicaLaunch(
            replica_id=index + 1,
            name=f"worker-{index}",
            rank=index,
            node="local",
            cpu_ids=(index % 2,),
            gpu_ids=(),
            memory_bytes=256 * MEBIBYTE,
            command=tuple(command),
            env={"RANK": str(index), **(env or {})},
            directory=runs / str(job_id) / str(attempt) / f"worker-{index}",
            snapshot=None,
        )
        for index, command in enumerate(commands)
    )
    return AttemptLaunch(job_id=job_id, attempt=attempt, replicas=replicas)


def reloaded(ref: ReplicaRef) -> ReplicaRef:
    """The ref as a server would read it back from its database: through plain JSON."""
    row = json.loads(json.dumps({
        "replica_id": ref.replica_id, "node": ref.node, "directory": str(ref.directory),
        "pid": ref.pid, "pid_started_at": ref.pid_started_at,
    }))
    return ReplicaRef(**{**row, "directory": Path(row["directory"])})


def observe_until(backend: LocalBackend, refs: Sequence[ReplicaRef], predicate: Callable[[ReplicaObservation], bool],
                  timeout: float = 5.0) -> dict[int, ReplicaObservation]:
    """Observations once every replica satisfies `predicate` (or the last ones seen)."""
    seen: dict[int, ReplicaObservation] = {}

    def satisfied() -> bool:
        seen.update(backend.observe(refs))
        return all(predicate(seen[ref.replica_id]) for ref in refs)

    wait_for(satisfied, timeout=timeout)
    return seen


def is_running(observation: ReplicaObservation) -> bool:
    return observation.state == "running"


def is_gone(observation: ReplicaObservation) -> bool:
    return observation.is_gone


class Launches:
    """Started attempts; whatever a test leaves running is killed afterwards."""

    def __init__(self, runs: Path):
        self.runs = runs
        self.started: list[tuple[LocalBackend, AttemptLaunch, list[ReplicaRef]]] = []
        self.since = time.time() - 1

    def start(self, backend: LocalBackend, *commands: Sequence[str]) -> tuple[AttemptLaunch, list[ReplicaRef]]:
        attempt = make_attempt(self.runs, *commands)
        refs = backend.launch(attempt)
        self.started.append((backend, attempt, refs))
        return attempt, refs

    def _kill_group(self, pid: int | None) -> None:
        if pid is None:
            return
        try:  # only a group this test started: not a reused pid
            if psutil.Process(pid).create_time() >= self.since and os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
        except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
            pass

    def cleanup(self) -> None:
        for backend, attempt, refs in self.started:
            for ref, replica in zip(refs, attempt.replicas, strict=True):
                self._kill_group(ref.pid)
                started = replica.directory / STARTED_FILE
                if started.exists():
                    self._kill_group(json.loads(started.read_text())["pid"])
                for parent in (backend.memory_parent, backend.cpu_parent):
                    if parent is not None:
                        cgroup = parent / cgroup_name(attempt.job_id, attempt.attempt, replica.name)
                        if cgroup.is_dir():
                            cgroups.remove_cgroup(cgroup)
            for child in backend._children.values():
                try:
                    child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass


def fake_launcher(directory: Path, *, beats: bool, module: str = "mlyard.runtime.launcher",
                  ) -> tuple[subprocess.Popen, ReplicaRef]:
    """A process the backend takes for this directory's launcher, which never beats; its
    launcher.json says whether a launcher of its version would."""
    directory.mkdir(parents=True)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", module, str(directory)],
                               start_new_session=True)
    started_at = psutil.Process(process.pid).create_time()
    recorded = {"pid": process.pid, "started_at": started_at}
    if beats:
        recorded["heartbeat_interval"] = HEARTBEAT_INTERVAL
    (directory / LAUNCHER_FILE).write_text(json.dumps(recorded))
    return process, ReplicaRef(replica_id=1, node="local", directory=directory, pid=process.pid,
                               pid_started_at=started_at)
