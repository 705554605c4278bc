"""The program a job pod runs, run here as a process: it starts mlyard's launcher in the
replica's directory and exits with the command's exit code, copying its output to stdout."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from mlyard.backends.kubernetes.entrypoint import peers, prepare, wait_for_peers
from mlyard.runtime.launch_config import read_launch_config
from mlyard.storage import pack_directory

ENTRYPOINT = [sys.executable, "-m", "mlyard.backends.kubernetes.entrypoint"]


def run(arguments: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRYPOINT, *arguments], check=False, capture_output=True, timeout=timeout,
                          env={**os.environ, "WORLD_SIZE": "1", **(env or {})})


def test_the_command_runs_in_the_extracted_snapshot_and_its_exit_code_is_the_pods(tmp_path: Path):
    source = tmp_path / "source"
    source.mkdir()
    (source / "train.py").write_text("import os, sys\nprint('rank', os.environ['RANK'], open('data.txt').read().strip())\n"
                                     "sys.exit(3)\n")
    (source / "data.txt").write_text("from the snapshot\n")
    snapshot = pack_directory(source, tmp_path / "snapshot.tar.gz").path
    directory = tmp_path / "runs" / "7" / "1" / "worker-0"
    finished = run([str(directory), "--snapshot", str(snapshot), "--", sys.executable, "train.py"], env={"RANK": "0"})
    assert finished.returncode == 3, finished.stderr
    assert b"rank 0 from the snapshot" in finished.stdout  # what `kubectl logs` shows
    assert "rank 0 from the snapshot" in (directory / "output.log").read_text()  # what mlyard's log service reads
    assert json.loads((directory / "exit.json").read_text())["exit_code"] == 3
    assert stat.S_IMODE((directory / "launch.json").stat().st_mode) == 0o600


def test_a_successful_command_exits_zero(tmp_path: Path):
    directory = tmp_path / "worker-0"
    finished = run([str(directory), "--", sys.executable, "-c", "print('fine')"])
    assert finished.returncode == 0 and b"fine" in finished.stdout


def test_a_missing_program_exits_127_with_the_reason_in_the_log(tmp_path: Path):
    directory = tmp_path / "worker-0"
    finished = run([str(directory), "--", "no-such-program-anywhere"])
    assert finished.returncode == 127
    assert "cannot run 'no-such-program-anywhere'" in (directory / "output.log").read_text()


def test_files_of_an_earlier_run_are_moved_aside(tmp_path: Path):
    directory = tmp_path / "worker-0"
    directory.mkdir()
    (directory / "exit.json").write_text(json.dumps({"exit_code": 9}))
    finished = run([str(directory), "--", sys.executable, "-c", "pass"])
    assert finished.returncode == 0
    assert len(list(tmp_path.glob("worker-0.stale-*"))) == 1


def test_peers_are_the_master_and_tensorflow_hosts_of_a_gang():
    assert peers({"WORLD_SIZE": "1", "MASTER_ADDR": "worker-0.svc"}) == []
    assert peers({"WORLD_SIZE": "2", "MASTER_ADDR": "worker-0.svc"}) == ["worker-0.svc"]
    tf_config = json.dumps({"cluster": {"chief": ["chief-0.s:29501"], "worker": ["worker-0.s:29502", "worker-1.s:29500"]},
                            "task": {"type": "worker", "index": 0}})
    assert peers({"WORLD_SIZE": "3", "MASTER_ADDR": "chief-0.s", "TF_CONFIG": tf_config}) == [
        "chief-0.s", "worker-0.s", "worker-1.s"]


def test_waiting_for_peers_ends_when_they_resolve_or_the_time_is_up():
    assert wait_for_peers(["localhost"], timeout=5) == []
    began = time.monotonic()
    missing = wait_for_peers(["no-such-host.invalid"], timeout=0.5, sleep=0.1)
    assert missing == ["no-such-host.invalid"]
    assert time.monotonic() - began < 5


def test_a_pod_starts_its_roles_processes_from_its_local_world_size(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # what the pod's env holds for `processes: 4`
    prepare(tmp_path / "plain", ["python", "train.py"], None, None)
    assert read_launch_config(tmp_path / "plain").processes == 4
    prepare(tmp_path / "torchrun", ["torchrun", "train.py"], None, None)
    assert read_launch_config(tmp_path / "torchrun").processes == 1, "torchrun starts its own"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "not a number")
    prepare(tmp_path / "odd", ["python", "train.py"], None, None)
    assert read_launch_config(tmp_path / "odd").processes == 1
