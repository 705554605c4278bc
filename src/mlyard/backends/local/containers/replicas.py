"""Replicas as containers of the local container engine.

The server prepares a replica's directory as for a process (the snapshot extracted into
`code/`), then the engine runs the container `render.render_replica` describes. The replica
directory holds the same files a launcher would write, so the rest of the server (logs,
restarts, `mlyard show`) does not tell the two apart:

- `container.json`: written before the container is created; it marks the replica as a
  container's and names it, so a server that died while starting it still finds it;
- `output.log`: the engine's log of the container, copied by a follower thread (`logs.py`);
- `exit.json`: the exit code, the time and, for an out-of-memory kill, the reason, written
  once the container has exited and its log is copied; then the container is removed.

A restarted server finds containers by their labels: the ones still running are adopted (their
logs followed again), the ones that ended while it was away are recorded and removed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlyard.backends.base import (
    AttemptLaunch,
    ReplicaLaunch,
    ReplicaObservation,
    ReplicaRef,
)
from mlyard.backends.local.containers.engine import (
    ContainerState,
    Engine,
    EngineError,
    container_state,
)
from mlyard.backends.local.containers.logs import LogFollowers
from mlyard.backends.local.containers.oom import OomWatches
from mlyard.backends.local.containers.create_options import (
    LABEL_DIRECTORY,
    NOBODY,
    ContainerIdentity,
    render_replica,
    runs_torchrun,
)
from mlyard.runtime.launch_config import (
    CODE_DIRECTORY,
    CONTAINER_FILE,
    EXIT_FILE,
    OOM_FILE,
    OUTPUT_LOG,
    STARTED_FILE,
    read_json,
    write_json_atomically,
)
from mlyard.runtime.dataset_links import make_links
from mlyard.runtime.launcher import DEFAULT_MAX_LOG_BYTES, format_bytes
from mlyard.runtime.processes import in_processes

log = logging.getLogger(__name__)
_SIGNALS = {False: "SIGTERM", True: "SIGKILL"}
# How long a stop waits for a SIGKILLed container to end (the engine's cleanup takes a moment).
KILL_WAIT = 2.0


def is_container_replica(directory: Path) -> bool:
    return (directory / CONTAINER_FILE).exists()


def out_of_memory_reason(memory_bytes: int | None) -> str:
    limit = f" of {format_bytes(memory_bytes)}" if memory_bytes else ""
    return f"killed for running out of memory (over its limit{limit}; OOMKilled)"


@dataclass(frozen=True)
class ContainerPlan:
    """What launching one replica does: the create arguments and the host-side preparation."""

    replica: ReplicaLaunch
    arguments: dict[str, Any]
    identity: ContainerIdentity
    links: dict[str, str] = field(default_factory=dict)
    """Made in the code directory before the container starts (`runtime/dataset_links.py`)."""

    def as_data(self) -> dict[str, Any]:
        return {"replica": self.replica.name, "runtime": "container", "snapshot": str(self.replica.snapshot)
                if self.replica.snapshot else None, "container": self.arguments}


class ContainerReplicas:
    """Launches, observes and stops the container replicas of the local node."""

    def __init__(self, engine: Engine, *, max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
                 notify: Callable[[], None] | None = None):
        self.engine = engine
        self.max_log_bytes = max_log_bytes
        self._notify = notify
        self.followers = LogFollowers(engine, max_log_bytes, on_end=self._followed_to_end)
        self.oom_watches = OomWatches()
        self._removed: set[Path] = set()
        self._lock = threading.Lock()

    def notify_with(self, notify: Callable[[], None]) -> None:
        """`notify` is called when a followed container's log ends (it has most likely exited)."""
        self._notify = notify

    def _followed_to_end(self) -> None:
        if self._notify is not None:
            self._notify()

    # ------------------------------------------------------------------ checks
    def problem(self) -> str | None:
        return self.engine.problem()

    def check_image(self, image: str) -> str | None:
        """Why a job naming `image` cannot run here, in words; None when it can."""
        problem = self.engine.problem()
        if problem is not None:
            return f"image {image!r}: {problem}, so no job with an image can run"
        try:
            if self.engine.has_image(image):
                return None
        except EngineError as error:
            return str(error)
        return (f"image {image!r} is not on this server's container engine ({self.engine.url}); "
                "images are not pulled automatically: pull or build it there first")

    # ------------------------------------------------------------------ launch
    def plan(self, replica: ReplicaLaunch, launch: AttemptLaunch, identity: ContainerIdentity | None) -> ContainerPlan:
        identity = identity or ContainerIdentity(*NOBODY)
        arguments = render_replica(
            image=replica.image or "", job_id=launch.job_id, attempt=launch.attempt, replica=replica.name,
            directory=replica.directory, code=replica.directory / CODE_DIRECTORY,
            command=in_processes(replica.command, replica.processes),
            env=replica.env, cpu_ids=replica.cpu_ids, gpu_ids=replica.gpu_ids, memory_bytes=replica.memory_bytes,
            private_directories=launch.private_directories, identity=identity,
            share_pids=len(launch.replicas) > 1 and runs_torchrun(replica.command),
            cpu_millicores=replica.cpu_millicores, read_only_directories=[mount.view for mount in launch.datasets],
            read_write_mounts={launch.volume_directories[mount.claim]: mount.path if mount.path.startswith("/")
                               else launch.volume_directories[mount.claim] for mount in launch.volumes},
        )
        return ContainerPlan(replica=replica, arguments=arguments, identity=identity,
                             links={**launch.dataset_links, **launch.volume_links})

    def give_private_directories(self, launch: AttemptLaunch, identity: ContainerIdentity) -> None:
        """The job's own directories become the container user's, closed to everyone else."""
        if os.geteuid() != 0:
            return
        for directory in launch.private_directories:
            directory.mkdir(parents=True, exist_ok=True)
            os.chown(directory, identity.uid, identity.gid)
            directory.chmod(0o700)

    def start(self, plan: ContainerPlan) -> ReplicaRef:
        replica, identity = plan.replica, plan.identity
        write_json_atomically(replica.directory / CONTAINER_FILE,
                              {"name": plan.arguments["name"], "image": plan.arguments["image"],
                               "memory_bytes": replica.memory_bytes, "created_at": time.time()})
        code = replica.directory / CODE_DIRECTORY
        if replica.snapshot is not None:
            from mlyard.storage import extract_snapshot

            extract_snapshot(replica.snapshot, code)
        else:
            code.mkdir()
        if plan.links:
            make_links(code, plan.links)
        _readable_by(code, identity)
        state = self.engine.run(plan.arguments)
        write_json_atomically(replica.directory / STARTED_FILE,
                              {"container": state.id, "started_at": state.started_at or time.time()})
        self.followers.ensure(replica.directory, state.id, replica.directory / OUTPUT_LOG)
        self.oom_watches.ensure(replica.directory, state.pid)
        return ReplicaRef(replica_id=replica.replica_id, node=replica.node, directory=replica.directory,
                          pid=state.pid, pid_started_at=_process_start(state.pid))

    # ------------------------------------------------------------------ observe
    def _containers(self, directory: Path) -> list[ContainerState]:
        return self.engine.find({LABEL_DIRECTORY: str(directory)})

    def observe(self, ref: ReplicaRef) -> ReplicaObservation:
        exited = read_json(ref.directory / EXIT_FILE)
        if exited is not None:
            self._remove_once(ref.directory)
            return _exited(exited)
        found = self._containers(ref.directory)
        if not found:
            recorded = read_json(ref.directory / STARTED_FILE)
            return ReplicaObservation(state="lost", started_at=recorded.get("started_at") if recorded else None,
                                      reason="its container is gone without an exit status")
        state = found[0]
        if state.never_started:
            return ReplicaObservation(state="pending")
        if not state.has_ended:
            self.followers.ensure(ref.directory, state.id, ref.directory / OUTPUT_LOG)
            self.oom_watches.ensure(ref.directory, state.pid)
            return ReplicaObservation(state="running", started_at=state.started_at)
        return _exited(self._record_exit(ref.directory, state))

    def _record_exit(self, directory: Path, state: ContainerState) -> dict[str, Any]:
        """The outcome goes to `exit.json` once the log is complete; then the container goes."""
        self.followers.finish(directory, state.id, directory / OUTPUT_LOG)
        self.oom_watches.forget(directory)
        recorded = read_json(directory / CONTAINER_FILE) or {}
        exit_code = state.exit_code if state.exit_code is not None else 1
        # A process of the job killed for memory that the command survived is no reason to fail.
        out_of_memory = state.oom_killed or (exit_code != 0 and (directory / OOM_FILE).exists())
        outcome = {
            "exit_code": exit_code,
            "signal": None,
            "started_at": state.started_at,
            "finished_at": state.finished_at or time.time(),
            "reason": out_of_memory_reason(recorded.get("memory_bytes")) if out_of_memory else None,
            "container": state.id,
        }
        write_json_atomically(directory / EXIT_FILE, outcome)
        self._remove_once(directory)
        return outcome

    def _remove_once(self, directory: Path) -> None:
        """Removes what is left of a finished replica's container, once per server."""
        with self._lock:
            if directory in self._removed:
                return
        try:
            for state in self._containers(directory):
                self.engine.remove(state.id)
        except Exception as error:  # noqa: BLE001 - the outcome is recorded; removal is retried on a later look
            log.warning("removing the container of %s failed: %s", directory, error)
            return
        with self._lock:
            self._removed.add(directory)

    # ------------------------------------------------------------------ stop
    def stop(self, ref: ReplicaRef, *, force: bool) -> None:
        """SIGTERM (the container's init passes it to the command) or SIGKILL; a container
        that never started is removed at once. After SIGKILL the exit is recorded and the
        container removed here, since a stop may be the last look at an attempt (one a crashed
        server left half-launched)."""
        for state in self._containers(ref.directory):
            if state.never_started:
                self.engine.remove(state.id)
            elif not state.has_ended:
                self.engine.signal(state.id, _SIGNALS[force])
                if force and self.engine.wait(state.id, KILL_WAIT):
                    ended = self.engine.inspect(state.id)
                    if ended is not None:
                        self._record_exit(ref.directory, container_state(ended))

    def clean_up(self, ref: ReplicaRef) -> None:
        """No container of a replica that is gone stays behind."""
        for state in self._containers(ref.directory):
            self.engine.remove(state.id)

    def close(self) -> None:
        self.followers.close()
        self.engine.close()


def _exited(outcome: dict[str, Any]) -> ReplicaObservation:
    return ReplicaObservation(state="exited", exit_code=outcome["exit_code"], started_at=outcome.get("started_at"),
                              finished_at=outcome.get("finished_at"), reason=outcome.get("reason"))


def _readable_by(code: Path, identity: ContainerIdentity) -> None:
    """The extracted code becomes the container user's (the server's umask may have closed it);
    it is mounted read-only, so owning it lets the user read it, not change it."""
    if os.geteuid() != 0:
        return
    os.lchown(code, identity.uid, identity.gid)
    for root, directories, files in os.walk(code):
        for name in directories + files:
            os.lchown(os.path.join(root, name), identity.uid, identity.gid)


def _process_start(pid: int | None) -> float | None:
    """The start time of the container's first process on the host, for resource sampling."""
    if not pid:
        return None
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone already, or not visible from here
        return None

