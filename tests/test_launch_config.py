"""`launch.json`, the typed launch configuration backends write and the launcher reads: read
back as written, private, and refused with the file and key named when it is not one."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlyard.runtime.launch_config import (
    EXIT_FILE,
    LAUNCH_CONFIG,
    OUTPUT_LOG,
    LaunchConfig,
    LaunchConfigError,
    OsAccount,
    read_launch_config,
    write_launch_config,
)

MEBIBYTE = 1024 * 1024


FULL_CONFIG = LaunchConfig(
    command=("python", "train.py", "--lr=0.1"),
    env={"RANK": "1", "MLYARD_TOKEN": "secret"},
    snapshot=Path("/home/mlyard/blobs/ab/cdef"),
    cache_snapshot=True,
    cpu_ids=(2, 3),
    memory_bytes=512 * MEBIBYTE,
    memory_cgroup_parent=Path("/sys/fs/cgroup/memory/mlyard"),
    cgroup_name="job7-1-worker-1",
    prepend_path="/opt/mlyard/venv/bin",
    max_log_bytes=4096,
    run_as=OsAccount(name="mlyard-alice", uid=1234, gid=1235, home=Path("/home/mlyard/homes/mlyard-alice")),
    hide_home=Path("/home/mlyard"),
    keep=("/home/mlyard/runs/7/1/worker-1/code", "/home/mlyard/checkpoints/7"),
    keep_read_only=("/home/mlyard/environments/abc",),
    processes=4,
    cpu_quota_millicores=250,
    cpu_cgroup_parent=Path("/sys/fs/cgroup/cpu/mlyard"),
    links={"data/digits": "/home/mlyard/dataset-views/7/digits"},
)


def test_a_launch_config_reads_back_as_written_privately_under_its_keys(tmp_path: Path) -> None:
    path = write_launch_config(tmp_path, FULL_CONFIG)
    assert path == tmp_path / LAUNCH_CONFIG
    assert read_launch_config(tmp_path) == FULL_CONFIG
    assert path.stat().st_mode & 0o777 == 0o600  # it holds the job's API token
    assert sorted(json.loads(path.read_text())) == [
        "cache_snapshot", "cgroup_name", "command", "cpu_cgroup_parent", "cpu_ids", "cpu_quota_millicores", "env", "hide_home", "keep",
        "keep_read_only", "links", "max_log_bytes", "memory_bytes", "memory_cgroup_parent", "prepend_path", "processes",
        "run_as", "snapshot"]
    assert [entry.name for entry in tmp_path.iterdir()] == [LAUNCH_CONFIG], "no temporary file is left"

    write_launch_config(tmp_path, LaunchConfig(command=("true",)))  # replaced whole
    assert read_launch_config(tmp_path) == LaunchConfig(command=("true",))


def test_a_launch_config_needs_only_its_command() -> None:
    assert LaunchConfig.from_data({"command": ["true"]}) == LaunchConfig(command=("true",))
    assert LaunchConfig.from_data(FULL_CONFIG.as_data()) == FULL_CONFIG


def test_a_launch_config_written_before_cpu_quotas_reads_as_having_none() -> None:
    older = {key: value for key, value in FULL_CONFIG.as_data().items() if not key.startswith(("cpu_quota", "cpu_cgroup"))}
    config = LaunchConfig.from_data(older)
    assert (config.cpu_quota_millicores, config.cpu_cgroup_parent) == (None, None)
    assert config.cpu_ids == FULL_CONFIG.cpu_ids


@pytest.mark.parametrize(("data", "message"), [
    ({"command": ["true"], "cpus": [0]}, "unknown key 'cpus'"),
    ({"env": {}}, "missing key 'command'"),
    ({"command": []}, "'command' must be a non-empty list of strings"),
    ({"command": "true"}, "'command' must be a non-empty list of strings"),
    ({"command": ["true"], "cpu_ids": ["0"]}, "'cpu_ids' must be a list of integers"),
    ({"command": ["true"], "memory_bytes": "1Gi"}, "'memory_bytes' must be an integer or null"),
    ({"command": ["true"], "cpu_quota_millicores": 0.25}, "'cpu_quota_millicores' must be an integer or null"),
    ({"command": ["true"], "env": {"RANK": 1}}, "'env' must map names to strings"),
    ({"command": ["true"], "cache_snapshot": 1}, "'cache_snapshot' must be true or false"),
    ({"command": ["true"], "links": {"data": "relative"}}, "'links' must map relative paths to absolute paths"),
    ({"command": ["true"], "run_as": {"name": "x", "uid": 1}}, "'run_as' must be null or an object"),
    (["true"], "expected a JSON object, not list"),
])
def test_a_launch_config_with_an_unknown_missing_or_mistyped_key_is_refused_naming_it(
    tmp_path: Path, data: Any, message: str,
) -> None:
    (tmp_path / LAUNCH_CONFIG).write_text(json.dumps(data))
    with pytest.raises(LaunchConfigError, match=re.escape(f"{tmp_path / LAUNCH_CONFIG}: {message}")):
        read_launch_config(tmp_path)


def test_a_launch_config_that_is_not_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / LAUNCH_CONFIG).write_text('{"command": ["tr')
    with pytest.raises(LaunchConfigError, match="launch.json: not JSON"):
        read_launch_config(tmp_path)


def test_the_launcher_refuses_a_launch_config_with_an_unknown_key(tmp_path: Path) -> None:
    directory = tmp_path / "replica"
    directory.mkdir()
    (directory / LAUNCH_CONFIG).write_text(json.dumps({"command": ["true"], "comand": ["false"]}))
    result = subprocess.run([sys.executable, "-m", "mlyard.runtime.launcher", str(directory)], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=15, check=False)
    assert result.returncode != 0 and "unknown key 'comand'" in result.stderr
    assert not (directory / EXIT_FILE).exists() and not (directory / OUTPUT_LOG).exists()
