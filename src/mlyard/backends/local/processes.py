"""Replicas as local processes: one node, this machine.

Each replica is `python -m mlyard.runtime.launcher DIR` in a session of its own, started with the
Python that runs the server (so `python` in a job is the server's environment unless the job
sets PATH), on the `launch.json` written into DIR. The launcher's pid and start time identify
the replica; the files it writes (`started.json`, `exit.json`, `heartbeat`) say how it is
doing, so a restarted server can observe replicas it did not start, those of an earlier
version (`python -m mlyard.launcher DIR`) included.

A replica of a job that names an `image` runs in a container of the local engine instead
(`containers/`), when the server's runtime allows it; its directory holds the same status
files, so everything above the backend treats both alike.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from mlyard.runtime import cgroups
from mlyard.backends.local import containers as container_runtime
from mlyard.backends.base import (
    AttemptLaunch,
    Backend,
    GpuDescription,
    NodeDescription,
    ReplicaLaunch,
    ReplicaObservation,
    ReplicaRef,
)
from mlyard.backends.local.containers import ContainerReplicas, is_container_replica
from mlyard.backends.local.containers.create_options import ContainerIdentity
from mlyard.backends.local.containers.replicas import ContainerPlan
from mlyard.backends.local.gpus import local_gpus
from mlyard.backends.local.job_accounts import JobAccounts, make_passable
from mlyard.backends.local.volumes import DirectoryVolumes, process_volume_links
from mlyard.errors import MlyardError
from mlyard.runtime.job_environment import scrubbed
from mlyard.runtime.launch_config import (
    CODE_DIRECTORY,
    EXIT_FILE,
    HEARTBEAT_FILE,
    HEARTBEAT_INTERVAL,
    HEARTBEAT_TIMEOUT,
    LAUNCHER_FILE,
    LAUNCHER_LOG,
    STARTED_FILE,
    LaunchConfig,
    OsAccount,
    read_json,
    write_json_atomically,
    write_launch_config,
)
from mlyard.runtime.launcher import DEFAULT_MAX_LOG_BYTES
from mlyard.runtime.processes import copies_to_start

log = logging.getLogger(__name__)
NODE_ADDRESS = "127.0.0.1"
# A pid is the same process only if it started when we recorded it (pids are reused).
# Start times derive from the boot time, which moves a little when the clock is stepped; the
# command line check below is what tells a reused pid apart.
START_TIME_TOLERANCE = 1.0
LAUNCHER_MODULE = "mlyard.runtime.launcher"
# The launcher's module in earlier versions: their replicas are adopted after an upgrade too.
EARLIER_LAUNCHER_MODULES = ("mlyard.launcher",)
# started.json is written just after the command's process is created.
ORPHAN_START_TOLERANCE = 2.0
# `containers=FROM_ENVIRONMENT`: the container runtime MLYARD_RUNTIME and MLYARD_CONTAINER_SOCKET ask for.
FROM_ENVIRONMENT: Any = object()


def is_launcher_of(command_line: Sequence[str], directory: Path) -> bool:
    """Whether a process's command line is a launcher's (of this version or an earlier one)
    on `directory`."""
    words = set(command_line)
    return str(directory) in words and any(module in words for module in (LAUNCHER_MODULE, *EARLIER_LAUNCHER_MODULES))


@dataclass(frozen=True)
class ProcessPlan:
    """What launching one replica as a process does: the launcher's arguments and its
    `launch.json`."""

    replica: ReplicaLaunch
    argv: tuple[str, ...]
    config: LaunchConfig

    def as_data(self) -> dict[str, Any]:
        return {"replica": self.replica.name, "argv": list(self.argv), "start_new_session": True,
                "config": self.config.as_data()}


class LocalBackend(DirectoryVolumes, Backend):
    name = "local"
    heartbeat_timeout = HEARTBEAT_TIMEOUT

    def __init__(self, *, cpus: int | None = None, memory_bytes: int | None = None,
                 gpus: tuple[GpuDescription, ...] | None = None, max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
                 job_accounts: JobAccounts | None = None, notes: tuple[str, ...] = (),
                 containers: ContainerReplicas | None = FROM_ENVIRONMENT, hide_home: Path | None = None,
                 env_passthrough: tuple[str, ...] = (), volumes_root: Path | None = None):
        available = sorted(os.sched_getaffinity(0))
        if cpus is not None and not 1 <= cpus <= len(available):
            raise ValueError(f"the node can offer 1 to {len(available)} CPUs, not {cpus}")
        self.cpu_ids = tuple(available[:cpus] if cpus else available)
        self.memory_bytes = memory_bytes or psutil.virtual_memory().total
        self.gpus = local_gpus() if gpus is None else gpus
        self.node_name = socket.gethostname() or "local"
        self.memory_parent, memory_note = cgroups.detect_memory_parent()
        # A replica below one core shares its core with others, held to its share by a CPU quota.
        self.cpu_parent, cpu_note = cgroups.detect_cpu_parent()
        self.notes = tuple(note for note in (memory_note, cpu_note) if note) + tuple(notes)
        self._children: dict[int, subprocess.Popen] = {}
        self.max_log_bytes = max_log_bytes
        self.job_accounts = job_accounts
        # Replicas on the server's own account see only their own directories of it (`hide_home.py`).
        self.hide_home = hide_home if job_accounts is None else None
        self.env_passthrough = env_passthrough
        self.volumes_root = volumes_root
        if containers is FROM_ENVIRONMENT:
            containers = container_runtime.from_environment(max_log_bytes)
        self.containers: ContainerReplicas | None = containers
        if containers is not None:
            containers.notify_with(self._notify)

    def close(self) -> None:
        if self.containers is not None:
            self.containers.close()

    def _notify(self) -> None:
        if self.notify is not None:
            self.notify()

    def check_image(self, image: str) -> str | None:
        if self.containers is None:
            return (f"image {image!r}: this server runs replicas as processes (MLYARD_RUNTIME=process) "
                    "and cannot run a job in a container; remove `image` from the job")
        return self.containers.check_image(image)

    def _in_container(self, replica: ReplicaLaunch) -> bool:
        if replica.image is None:
            return False
        if self.containers is None:
            raise MlyardError(f"replica {replica.name} names the image {replica.image!r}, but this server runs "
                              "replicas as processes only (MLYARD_RUNTIME=process)")
        return True

    @staticmethod
    def _container_identity(account: OsAccount | None) -> ContainerIdentity | None:
        if account is None:
            return None
        return ContainerIdentity(uid=account.uid, gid=account.gid)

    def nodes(self) -> list[NodeDescription]:
        return [
            NodeDescription(
                name=self.node_name,
                address=NODE_ADDRESS,
                cpu_ids=self.cpu_ids,
                memory_bytes=self.memory_bytes,
                gpus=self.gpus,
                labels={"hostname": self.node_name},
                notes=self.notes,
            )
        ]

    def reserve_ports(self, node: str, count: int) -> list[int]:
        sockets = []
        try:
            for _ in range(count):
                candidate = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                candidate.bind((NODE_ADDRESS, 0))
                sockets.append(candidate)
            return [candidate.getsockname()[1] for candidate in sockets]
        finally:
            for candidate in sockets:
                candidate.close()

    def _process_plan(self, replica: ReplicaLaunch, launch: AttemptLaunch, account: OsAccount | None) -> ProcessPlan:
        config = LaunchConfig(
            command=replica.command,
            env=dict(replica.env),
            snapshot=replica.snapshot,
            cache_snapshot=True,  # the blob store is on this machine: replicas copy one extraction of it
            cpu_ids=replica.cpu_ids,
            memory_bytes=replica.memory_bytes,
            memory_cgroup_parent=self.memory_parent,
            cgroup_name=cgroup_name(launch.job_id, launch.attempt, replica.name),
            prepend_path=str(Path(sys.executable).parent),
            max_log_bytes=self.max_log_bytes,
            run_as=account,
            hide_home=self.hide_home,
            keep=(str(replica.directory / CODE_DIRECTORY), *map(str, launch.private_directories),
                  *launch.volume_directories.values()) if self.hide_home is not None else (),
            keep_read_only=(*self._virtualenv_of(replica), *(str(mount.view) for mount in launch.datasets)),
            links={**launch.dataset_links, **process_volume_links(launch)},
            processes=copies_to_start(replica.command, replica.processes),
            cpu_quota_millicores=replica.cpu_millicores or None,
            cpu_cgroup_parent=self.cpu_parent if replica.cpu_millicores else None,
        )
        return ProcessPlan(replica=replica, argv=(sys.executable, "-m", LAUNCHER_MODULE, str(replica.directory)),
                           config=config)

    def _virtualenv_of(self, replica: ReplicaLaunch) -> tuple[str, ...]:
        """The built virtualenv the replica runs in, shown to it read-only. VIRTUAL_ENV may be
        the job's own `env`, so only a directory of the environments' root counts."""
        if self.hide_home is None or "VIRTUAL_ENV" not in replica.env:
            return ()
        root = (self.hide_home / "environments").resolve()
        virtualenv = Path(os.path.realpath(replica.env["VIRTUAL_ENV"]))
        if virtualenv.parent != root or not re.fullmatch(r"[0-9a-f]{64}", virtualenv.name):
            return ()
        return (str(virtualenv),)

    def _plans(self, launch: AttemptLaunch, account: OsAccount | None) -> list[ProcessPlan | ContainerPlan]:
        """One plan per replica, run as `account`; pure."""
        plans: list[ProcessPlan | ContainerPlan] = []
        for replica in launch.replicas:
            if self._in_container(replica):
                assert self.containers is not None
                plans.append(self.containers.plan(replica, launch, self._container_identity(account)))
            else:
                plans.append(self._process_plan(replica, launch, account))
        return plans

    def dryrun(self, launch: AttemptLaunch) -> list[dict[str, Any]]:
        """As `Backend.dryrun`. Each plan names the OS account its replica runs as (`account`;
        None: the server's). That account is created, if need be, by `launch`, which only then
        knows its uid and gid: they fill the config's `run_as` and a container's `user`, which
        here name the account alone."""
        account_name = self.job_accounts.name_for(launch.owner) if self.job_accounts is not None else None
        rendered = []
        for plan in self._plans(launch, account=None):
            data = plan.as_data()
            if account_name is not None and isinstance(plan, ContainerPlan):
                data["container"] = {**data["container"], "user": account_name}
            rendered.append({**data, "account": account_name})
        return rendered

    def launch(self, launch: AttemptLaunch) -> list[ReplicaRef]:
        for replica in launch.replicas:
            self._in_container(replica)  # what cannot run here is refused before anything changes
        account = self.job_accounts.account_for(launch.owner) if self.job_accounts is not None else None
        if account is not None:
            JobAccounts.give(account, launch.private_directories)
            JobAccounts.lend(account, {mount.view.parent for mount in launch.datasets})
        plans = self._plans(launch, account)
        container_plans = [plan for plan in plans if isinstance(plan, ContainerPlan)]
        if container_plans and account is None:
            assert self.containers is not None
            self.containers.give_private_directories(launch, container_plans[0].identity)
        references: list[ReplicaRef] = []
        try:
            for plan in plans:
                if isinstance(plan, ContainerPlan):
                    assert self.containers is not None
                    self._prepare_directory(plan.replica)
                    references.append(self.containers.start(plan))
                else:
                    references.append(self._start(plan))
        except Exception:
            self._stop_present(references, force=True)
            raise
        return references

    @staticmethod
    def _prepare_directory(replica: ReplicaLaunch) -> None:
        if replica.directory.exists():
            # Left by a database that was reset: its files must not speak for this replica.
            replica.directory.rename(replica.directory.with_name(f"{replica.directory.name}.stale-{time.time_ns()}"))
        replica.directory.mkdir(parents=True)

    def _start(self, plan: ProcessPlan) -> ReplicaRef:
        replica = plan.replica
        self._prepare_directory(replica)
        if plan.config.run_as is not None:
            # The account reaches its code directory (made its own by the launcher) through these.
            make_passable([replica.directory.parent.parent, replica.directory.parent, replica.directory])
        write_launch_config(replica.directory, plan.config)  # it holds the job's API token: 0600
        with open(replica.directory / LAUNCHER_LOG, "ab") as launcher_log:
            process = subprocess.Popen(
                list(plan.argv),
                stdin=subprocess.DEVNULL,
                stdout=launcher_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env=scrubbed(os.environ, self.env_passthrough),
            )
        self._children[process.pid] = process
        threading.Thread(target=self._watch, args=(process,), name=f"watch-{process.pid}", daemon=True).start()
        try:
            started_at = psutil.Process(process.pid).create_time()
        except psutil.NoSuchProcess:
            started_at = None
        # Found again by a restarted server even if the launch was never recorded in the database.
        # `heartbeat_interval` says this launcher beats; one started before heartbeats existed
        # (by an older server) is judged by its pid alone.
        write_json_atomically(replica.directory / LAUNCHER_FILE,
                              {"pid": process.pid, "started_at": started_at, "heartbeat_interval": HEARTBEAT_INTERVAL})
        return ReplicaRef(replica_id=replica.replica_id, node=replica.node, directory=replica.directory,
                          pid=process.pid, pid_started_at=started_at)

    def _watch(self, process: subprocess.Popen) -> None:
        process.wait()
        if self.notify is not None:
            self.notify()

    @staticmethod
    def _resolve(ref: ReplicaRef) -> ReplicaRef:
        """Fills in the launcher's pid from its directory when the database never got it."""
        if ref.pid is not None:
            return ref
        recorded = read_json(ref.directory / LAUNCHER_FILE)
        if recorded is None:
            return ref
        return ReplicaRef(replica_id=ref.replica_id, node=ref.node, directory=ref.directory,
                          pid=recorded["pid"], pid_started_at=recorded["started_at"])

    def _alive(self, ref: ReplicaRef) -> bool:
        ref = self._resolve(ref)
        if ref.pid is None:
            return False
        child = self._children.get(ref.pid)
        if child is not None:
            if child.poll() is None:
                return True
            del self._children[ref.pid]  # reaped: the pid may now be reused by anyone
            return False
        try:
            process = psutil.Process(ref.pid)
            if ref.pid_started_at is not None and abs(process.create_time() - ref.pid_started_at) > START_TIME_TOLERANCE:
                return False
            # A process is this replica's launcher only if it runs the launcher on this directory.
            if not is_launcher_of(process.cmdline(), ref.directory):
                return False
            return process.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    def _beats_missed(self, ref: ReplicaRef) -> bool:
        """The launcher stopped beating: frozen (SIGSTOP), stuck, or on a node that is gone,
        whether or not its pid is still there."""
        recorded = read_json(ref.directory / LAUNCHER_FILE)
        if recorded is None or "heartbeat_interval" not in recorded:
            return False
        try:
            last_beat = (ref.directory / HEARTBEAT_FILE).stat().st_mtime
        except FileNotFoundError:  # not a single beat yet: the launcher has had since its start
            last_beat = recorded.get("started_at") or ref.pid_started_at
        except OSError:
            return False
        return last_beat is not None and time.time() - last_beat > self.heartbeat_timeout

    @staticmethod
    def _command_group(ref: ReplicaRef) -> int | None:
        """The user command's process group, if its leader is still the process the launcher
        started (and not a later process that reused the pid)."""
        started = read_json(ref.directory / STARTED_FILE)
        if started is None:
            return None
        try:
            leader = psutil.Process(started["pid"])
            if abs(leader.create_time() - started["started_at"]) < ORPHAN_START_TOLERANCE:
                return started["pid"]
        except psutil.Error:
            pass
        return None

    def _split(self, replicas: Sequence[ReplicaRef]) -> tuple[list[ReplicaRef], list[ReplicaRef]]:
        """(process replicas, container replicas); a container replica is one whose directory
        says so, so a restarted server tells them apart without the database."""
        processes: list[ReplicaRef] = []
        in_containers: list[ReplicaRef] = []
        for ref in replicas:
            (in_containers if self.containers is not None and is_container_replica(ref.directory)
             else processes).append(ref)
        return processes, in_containers

    def observe(self, replicas: Sequence[ReplicaRef]) -> dict[int, ReplicaObservation]:
        result = {}
        replicas, in_containers = self._split(replicas)
        for ref in in_containers:
            assert self.containers is not None
            try:
                result[ref.replica_id] = self.containers.observe(ref)
            except Exception as error:  # noqa: BLE001 - an engine outage must not stop process jobs' observation
                # Left out: the controller keeps what it knew, and looks again on its next pass.
                log.warning("replica %s: the container engine did not answer: %s", ref.directory, error)
        for ref in replicas:
            alive = self._alive(ref)
            exited = read_json(ref.directory / EXIT_FILE)
            started = read_json(ref.directory / STARTED_FILE)
            started_at = started.get("started_at") if started else None
            if exited is not None:
                # The launcher may still be finishing its last write: the outcome is final.
                result[ref.replica_id] = ReplicaObservation(
                    state="exited", exit_code=exited["exit_code"], started_at=started_at,
                    finished_at=exited.get("finished_at"), reason=exited.get("reason"),
                )
            elif alive and not self._beats_missed(ref):
                result[ref.replica_id] = ReplicaObservation(
                    state="running" if started else "pending", started_at=started_at
                )
            else:
                result[ref.replica_id] = ReplicaObservation(state="lost", started_at=started_at)
        return result

    def stop(self, replicas: Sequence[ReplicaRef], *, force: bool) -> None:
        """As `Backend.stop`; a replica the engine could not say anything about counts as present."""
        observed = self.observe(replicas)
        present = [ref for ref in replicas if ref.replica_id not in observed or not observed[ref.replica_id].is_gone]
        gone = [ref for ref in replicas if ref.replica_id in observed and observed[ref.replica_id].is_gone]
        if present:
            self._stop_present(present, force=force)
        if gone:
            self._clean_up_gone(gone)

    def _stop_present(self, replicas: Sequence[ReplicaRef], *, force: bool) -> None:
        replicas, in_containers = self._split(replicas)
        for ref in in_containers:
            assert self.containers is not None
            try:
                self.containers.stop(ref, force=force)
            except Exception as error:  # noqa: BLE001 - retried on the controller's next pass
                log.warning("replica %s: stopping its container failed: %s", ref.directory, error)
        for ref in replicas:
            if not self._alive(ref):
                self._kill_cgroup(ref)
                continue
            ref = self._resolve(ref)
            try:
                if force:
                    # SIGKILL cannot be forwarded: reach the launcher's and the command's groups.
                    command_group = self._command_group(ref)
                    os.killpg(ref.pid, signal.SIGKILL)
                    if command_group is not None:
                        os.killpg(command_group, signal.SIGKILL)
                else:
                    os.kill(ref.pid, signal.SIGTERM)  # the launcher forwards it to the command's group
            except (ProcessLookupError, PermissionError):
                pass
            if force:
                self._kill_cgroup(ref)

    def _clean_up_gone(self, replicas: Sequence[ReplicaRef]) -> None:
        """A launcher killed outright leaves its command's process group running; one that
        stopped beating (frozen) may be there still, and is killed with it. A container
        replica's container is removed."""
        replicas, in_containers = self._split(replicas)
        for ref in in_containers:
            assert self.containers is not None
            try:
                self.containers.clean_up(ref)
            except Exception as error:  # noqa: BLE001 - an engine outage must not stop the others' clean-up
                log.warning("replica %s: removing its container failed: %s", ref.directory, error)
        for ref in replicas:
            if not (ref.directory / EXIT_FILE).exists() and self._alive(ref):
                try:  # SIGKILL ends a stopped process too, without it being continued first
                    os.killpg(self._resolve(ref).pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            command_group = self._command_group(ref)
            if command_group is not None:
                try:
                    os.killpg(command_group, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self._kill_cgroup(ref)

    def _kill_cgroup(self, ref: ReplicaRef) -> None:
        """Processes that left their process group are still in the replica's cgroup."""
        directory = ref.directory
        name = cgroup_name(directory.parent.parent.name, directory.parent.name, directory.name)
        for parent in dict.fromkeys((self.memory_parent, self.cpu_parent)):  # one on cgroup v2
            if parent is None:
                continue
            cgroup = parent / name
            if cgroup.is_dir():
                # Short: the controller waits on this; a busy cgroup is retried on a later pass.
                cgroups.remove_cgroup(cgroup, timeout=0.2)


def cgroup_name(job_id: int | str, attempt: int | str, replica: str) -> str:
    return f"job{job_id}-{attempt}-{replica}"
