"""A replica as the arguments of a container create call, as plain data.

`render_replica` is what `dryrun` shows and what `launch` passes to the engine (the docker
SDK's `containers.create(**arguments)`), so what a container may see and do is decided here,
testable without an engine:

- mounts: the replica's extracted code, read-only, as the working directory, the job's own
  directories (checkpoints, TensorBoard logs) read-write and the dataset versions it reads
  read-only, at the same paths as on the host, so `MLYARD_CHECKPOINT_DIR` and
  `MLYARD_DATASET_<NAME>` mean the same inside; nothing else of the host;
- a user that is not root (the job's OS account with job accounts, else `nobody`), never
  privileged, every capability dropped, no privilege gain through setuid files;
- the replica's cores (`cpuset_cpus`, and as many CPUs' worth of time; a replica below one
  core: its share of its one core's time), its memory with no swap on top, its GPUs as a
  device request;
- the host's network, so rendezvous on 127.0.0.1 works as for processes; the host's process
  namespace only where torchrun runs more than one node here (its agents tell each other
  apart by host name and pid, which would be the same in separate namespaces);
- an init process as pid 1, which forwards SIGTERM to the command and reaps what it leaves
  (except in the host's process namespace, where the command is not pid 1);
- labels naming the job, attempt and replica, which is how a restarted server finds them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlyard.runtime.processes import worker_starter

CODE_MOUNT = "/mlyard/code"
LABEL_JOB = "mlyard.job"
LABEL_ATTEMPT = "mlyard.attempt"
LABEL_REPLICA = "mlyard.replica"
LABEL_DIRECTORY = "mlyard.directory"
"""The replica's directory on the host: tells apart replicas of servers with different homes
that share one engine (job 1 of each)."""
NOBODY = (65534, 65534)
# What a job without a HOME of its own writes its dotfiles to: `nobody` has no home.
DEFAULT_HOME = "/tmp"


@dataclass(frozen=True)
class ContainerIdentity:
    """Who a replica's command runs as inside its container."""

    uid: int
    gid: int
    home: str | None = None

    @property
    def user(self) -> str:
        return f"{self.uid}:{self.gid}"


def container_name(directory: Path) -> str:
    """A name unique to the replica directory (so to the server's home, job, attempt and
    replica), readable in `podman ps`: `mlyard-<job>-<attempt>-<replica>-<hash>`."""
    job, attempt, replica = directory.parent.parent.name, directory.parent.name, directory.name
    digest = hashlib.sha256(str(directory).encode()).hexdigest()[:10]
    return f"mlyard-{job}-{attempt}-{replica}-{digest}"


def replica_labels(job_id: int | str, attempt: int | str, replica: str, directory: Path) -> dict[str, str]:
    return {LABEL_JOB: str(job_id), LABEL_ATTEMPT: str(attempt), LABEL_REPLICA: replica,
            LABEL_DIRECTORY: str(directory)}


def runs_torchrun(command: Sequence[str]) -> bool:
    """`torchrun …` or `python -m torch.distributed.run …` as the program, also inside `sh -c "…"`."""
    return worker_starter(command) == "torchrun"


def container_environment(env: Mapping[str, str], gpu_count: int, identity: ContainerIdentity) -> dict[str, str]:
    """The replica's variables, adjusted to the container: the GPUs it was given are its
    devices 0…n-1 there, and it gets a writable HOME unless the job set one."""
    environment = dict(env)
    if gpu_count:
        environment["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in range(gpu_count))
    else:
        environment.pop("CUDA_VISIBLE_DEVICES", None)
    environment.setdefault("HOME", identity.home or DEFAULT_HOME)
    return environment


def render_replica(*, image: str, job_id: int, attempt: int, replica: str, directory: Path, code: Path,
                   command: Sequence[str], env: Mapping[str, str], cpu_ids: Sequence[int],
                   gpu_ids: Sequence[int], memory_bytes: int, private_directories: Sequence[Path],
                   identity: ContainerIdentity, share_pids: bool = False, cpu_millicores: int = 0,
                   read_only_directories: Sequence[Path] = (),
                   read_write_mounts: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The keyword arguments of `containers.create` for one replica; `cpu_millicores`: its share, in
    thousandths, of its one core (0: `cpu_ids` are its own); `read_only_directories`: the dataset
    versions it reads, at their host paths; `read_write_mounts`: its volumes, host directory →
    where the container sees it."""
    volumes: dict[str, dict[str, str]] = {str(code): {"bind": CODE_MOUNT, "mode": "ro"}}
    for private in private_directories:
        volumes[str(private)] = {"bind": str(private), "mode": "rw"}
    for read_only in read_only_directories:
        volumes[str(read_only)] = {"bind": str(read_only), "mode": "ro"}
    for host, mount_point in (read_write_mounts or {}).items():
        volumes[host] = {"bind": mount_point, "mode": "rw"}
    arguments: dict[str, Any] = {
        "image": image,
        "command": list(command),
        "name": container_name(directory),
        "labels": replica_labels(job_id, attempt, replica, directory),
        "environment": container_environment(env, len(gpu_ids), identity),
        "working_dir": CODE_MOUNT,
        "volumes": volumes,
        "user": identity.user,
        "privileged": False,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "network_mode": "host",
        # Not with the host's process namespace, where pid 1 is the host's: there the command
        # is not pid 1 either, so SIGTERM has its usual effect.
        "init": not share_pids,
        "detach": True,
        "stdin_open": False,
        "tty": False,
        "mem_limit": memory_bytes,
        "memswap_limit": memory_bytes,  # the limit is the memory: no swap on top of it
        # /dev/shm (DataLoader workers, gloo) counts against the memory limit anyway.
        "shm_size": max(64 * 1024**2, memory_bytes // 4),
    }
    if cpu_ids:
        arguments["cpuset_cpus"] = ",".join(str(cpu) for cpu in cpu_ids)
        arguments["nano_cpus"] = cpu_millicores * 1_000_000 if cpu_millicores else len(cpu_ids) * 1_000_000_000
    if gpu_ids:
        arguments["device_requests"] = [
            {"driver": "nvidia", "device_ids": [str(gpu) for gpu in gpu_ids], "capabilities": [["gpu"]]}
        ]
    if share_pids:
        arguments["pid_mode"] = "host"
    return arguments
