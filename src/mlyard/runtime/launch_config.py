"""The contract between a backend and the launcher of a replica: the files of a replica's
directory, and `launch.json`, the typed launch configuration a backend writes there and the
launcher reads.

Files of a replica directory (`runs/<job>/<attempt>/<replica>/`), and who writes them:

- `launch.json` (LAUNCH_CONFIG): the backend (`write_launch_config`), mode 0600, since it holds
  the job's API token among its variables; read once by the launcher (`read_launch_config`);
- `launcher.json` (LAUNCHER_FILE): the local backend: the launcher's pid, its start time and
  `heartbeat_interval`;
- `heartbeat` (HEARTBEAT_FILE): the launcher touches it every HEARTBEAT_INTERVAL seconds;
  its modification time is the last beat;
- `started.json` (STARTED_FILE): the launcher, once the command runs (its pid and start time);
- `exit.json` (EXIT_FILE): the launcher, when the command has ended: `exit_code`, `signal`,
  `finished_at` and, for a kill at the memory limit, `reason`;
- `output.log` (OUTPUT_LOG), `launcher.log` (LAUNCHER_LOG) and `code/` (CODE_DIRECTORY);
- `container.json` (CONTAINER_FILE) and `oom` (OOM_FILE): only for a replica run in a container
  of the local engine (what the server started, and a mark that its command was killed for memory).

`launcher.json`, `heartbeat`, `started.json` and `exit.json` are read by a server for replicas
that outlived the server that started them: their formats stay as they are.

Imports nothing of mlyard: the launcher loads it at every replica's start.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

LAUNCH_CONFIG = "launch.json"
LAUNCHER_FILE = "launcher.json"
HEARTBEAT_FILE = "heartbeat"
STARTED_FILE = "started.json"
EXIT_FILE = "exit.json"
OUTPUT_LOG = "output.log"
LAUNCHER_LOG = "launcher.log"
CODE_DIRECTORY = "code"
CONTAINER_FILE = "container.json"
OOM_FILE = "oom"
HEARTBEAT_INTERVAL = 1.0
# Several missed beats, so a busy machine or a slow shared file system is not taken for a
# dead replica; still well within the 10 s in which a lost replica must be noticed.
HEARTBEAT_TIMEOUT = 5.0


class LaunchConfigError(ValueError):
    """A `launch.json` that is not a launch configuration: the message names the file and the key."""


@dataclass(frozen=True)
class OsAccount:
    """The OS account a replica's command runs as."""

    name: str
    uid: int
    gid: int
    home: Path


@dataclass(frozen=True)
class LaunchConfig:
    """What the launcher of one replica does: the JSON keys of `launch.json` are the field names.

    Only `command` must be given; the others default to doing nothing (no CPU pinning, no
    memory cgroup, the launcher's own log cap, the environment the launcher was started with).
    """

    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    """Set on top of the launcher's own environment (or the account's, with `run_as`)."""
    snapshot: Path | None = None
    """The code archive extracted into `code/`, the command's working directory."""
    cache_snapshot: bool = False
    """Copy `code/` from the machine's extraction of `snapshot` beside it, made by the first
    launcher that needs it (`storage/snapshot_cache.py`), rather than extract the archive again:
    for a store on the machine's own disk. A pod, which sees the archive alone and would throw
    such a copy away with itself, extracts directly."""
    cpu_ids: tuple[int, ...] = ()
    memory_bytes: int | None = None
    memory_cgroup_parent: Path | None = None
    """Where the replica's memory cgroup (`cgroup_name`, limited to `memory_bytes`) is made."""
    cgroup_name: str | None = None
    prepend_path: str | None = None
    """Put before PATH unless `env` sets PATH: where the server's Python is."""
    max_log_bytes: int | None = None
    run_as: OsAccount | None = None
    hide_home: Path | None = None
    """MLYARD_HOME, which the command sees only as `keep` (and `keep_read_only`): `hide_home.py`."""
    keep: tuple[str, ...] = ()
    keep_read_only: tuple[str, ...] = ()
    processes: int = 1
    """Copies of the command the launcher starts, each with its own RANK and LOCAL_RANK
    (`processes.py`); 1 for a command that starts its workers itself (torchrun)."""
    cpu_quota_millicores: int | None = None
    """A replica's share of its one core, in thousandths, that a CPU quota holds it to: in a
    cgroup (`cgroup_name`) made under `cpu_cgroup_parent`. None: no quota."""
    cpu_cgroup_parent: Path | None = None
    links: Mapping[str, str] = field(default_factory=dict)
    """Symbolic links made in `code/` once it is ready: a path relative to it → the absolute
    directory it leads to (the dataset versions the job reads, `runtime/dataset_links.py`)."""

    def as_data(self) -> dict[str, Any]:
        """The configuration as the JSON object `launch.json` holds."""
        return {
            "command": list(self.command),
            "env": dict(self.env),
            "snapshot": str(self.snapshot) if self.snapshot is not None else None,
            "cache_snapshot": self.cache_snapshot,
            "cpu_ids": list(self.cpu_ids),
            "memory_bytes": self.memory_bytes,
            "memory_cgroup_parent": str(self.memory_cgroup_parent) if self.memory_cgroup_parent is not None else None,
            "cgroup_name": self.cgroup_name,
            "prepend_path": self.prepend_path,
            "max_log_bytes": self.max_log_bytes,
            "run_as": None if self.run_as is None else {
                "name": self.run_as.name, "uid": self.run_as.uid, "gid": self.run_as.gid,
                "home": str(self.run_as.home)},
            "hide_home": str(self.hide_home) if self.hide_home is not None else None,
            "keep": list(self.keep),
            "keep_read_only": list(self.keep_read_only),
            "processes": self.processes,
            "cpu_quota_millicores": self.cpu_quota_millicores,
            "cpu_cgroup_parent": str(self.cpu_cgroup_parent) if self.cpu_cgroup_parent is not None else None,
            "links": dict(self.links),
        }

    @classmethod
    def from_data(cls, data: Any, source: str = LAUNCH_CONFIG) -> LaunchConfig:
        """The configuration a JSON object describes; LaunchConfigError names what is wrong."""
        if not isinstance(data, dict):
            raise LaunchConfigError(f"{source}: expected a JSON object, not {type(data).__name__}")
        known = [item.name for item in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise LaunchConfigError(f"{source}: unknown key {unknown[0]!r} (known: {', '.join(known)})")
        if "command" not in data:
            raise LaunchConfigError(f"{source}: missing key 'command'")
        values = {}
        for key, value in data.items():
            try:
                values[key] = _PARSERS[key](value)
            except (TypeError, ValueError) as error:
                raise LaunchConfigError(f"{source}: {key!r} {error}") from None
        return cls(**values)


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
        raise TypeError(f"must be a non-empty list of strings, not {value!r}")
    return tuple(value)


def _paths(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item.startswith("/") for item in value):
        raise TypeError(f"must be a list of absolute paths, not {value!r}")
    return tuple(value)


def _environment(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(item, str) for item in value.values()):
        raise TypeError(f"must map names to strings, not {value!r}")
    return dict(value)


def _links(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(target, str) and target.startswith("/")
                                              for target in value.values()):
        raise TypeError(f"must map relative paths to absolute paths, not {value!r}")
    return dict(value)


def _integers(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_is_integer(item) for item in value):
        raise TypeError(f"must be a list of integers, not {value!r}")
    return tuple(value)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional(kind: type, convert: Any = None) -> Any:
    def parse(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, kind) or isinstance(value, bool):
            raise TypeError(f"must be {'an integer' if kind is int else 'a string'} or null, not {value!r}")
        return convert(value) if convert is not None else value

    return parse


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"must be true or false, not {value!r}")
    return value


def _count(value: Any) -> int:
    if not _is_integer(value) or value < 1:
        raise TypeError(f"must be a positive integer, not {value!r}")
    return value


def _account(value: Any) -> OsAccount | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"name", "uid", "gid", "home"}:
        raise TypeError(f"must be null or an object of name, uid, gid and home, not {value!r}")
    if not (isinstance(value["name"], str) and _is_integer(value["uid"]) and _is_integer(value["gid"])
            and isinstance(value["home"], str)):
        raise TypeError(f"has a name and home that are not strings or ids that are not integers: {value!r}")
    return OsAccount(name=value["name"], uid=value["uid"], gid=value["gid"], home=Path(value["home"]))


_PARSERS = {
    "command": _strings,
    "env": _environment,
    "snapshot": _optional(str, Path),
    "cache_snapshot": _boolean,
    "cpu_ids": _integers,
    "memory_bytes": _optional(int),
    "memory_cgroup_parent": _optional(str, Path),
    "cgroup_name": _optional(str),
    "prepend_path": _optional(str),
    "max_log_bytes": _optional(int),
    "run_as": _account,
    "hide_home": _optional(str, Path),
    "keep": _paths,
    "keep_read_only": _paths,
    "processes": _count,
    "cpu_quota_millicores": _optional(int),
    "cpu_cgroup_parent": _optional(str, Path),
    "links": _links,
}


def write_launch_config(directory: Path, config: LaunchConfig) -> Path:
    """Writes `directory/launch.json` atomically, readable by its owner only; returns its path."""
    path = directory / LAUNCH_CONFIG
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            os.fchmod(handle.fileno(), 0o600)  # a file left by an earlier try keeps its mode otherwise
            json.dump(config.as_data(), handle)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def read_launch_config(directory: Path) -> LaunchConfig:
    """The configuration in `directory/launch.json`; LaunchConfigError when it is not one."""
    path = directory / LAUNCH_CONFIG
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise LaunchConfigError(f"{path}: not JSON: {error}") from None
    return LaunchConfig.from_data(data, str(path))


def write_json_atomically(path: Path, payload: dict) -> None:
    """Readers see the old content or the new, never part of it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(payload))
    os.replace(temporary, path)


def read_json(path: Path) -> dict | None:
    """The object in `path`; None when it is missing or not (yet) JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
