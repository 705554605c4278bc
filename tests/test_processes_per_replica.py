"""Processes per replica: which commands the launcher fans out, the ranks each copy gets, and
one exit code for the replica (the launcher as a real process, and the shell of containers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_launcher import run_launcher, write_config

from mlyard.runtime.launch_config import EXIT_FILE, OUTPUT_LOG
from mlyard.runtime.processes import copies_to_start, in_processes, process_environment, starts_own_workers

PRINT_RANKS = [sys.executable, "-c", "import os; print('rank', os.environ['RANK'], 'local', os.environ['LOCAL_RANK'])"]


@pytest.mark.parametrize("command", [
    ["torchrun", "--nproc-per-node=2", "train.py"],
    ["/opt/venv/bin/torchrun", "train.py"],
    ["python", "-m", "torch.distributed.run", "train.py"],
    ["accelerate", "launch", "--cpu", "train.py"],
    ["/bin/sh", "-c", "cd src && torchrun train.py --lr 0.1"],
])
def test_commands_that_start_their_own_workers_are_started_once(command: list[str]) -> None:
    assert starts_own_workers(command)
    assert copies_to_start(command, 8) == 1


@pytest.mark.parametrize("command", [["python", "train.py"], ["/bin/sh", "-c", "python train.py --name torchrunner"]])
def test_a_plain_command_is_started_once_per_process(command: list[str]) -> None:
    assert not starts_own_workers(command)
    assert copies_to_start(command, 4) == 4
    assert copies_to_start(command, 1) == 1


def test_each_copy_ranks_after_the_replicas_first_rank() -> None:
    base = {"RANK": "6", "LOCAL_RANK": "0", "WORLD_SIZE": "12"}
    assert [process_environment(base, local)["RANK"] for local in range(3)] == ["6", "7", "8"]
    assert process_environment(base, 2)["LOCAL_RANK"] == "2"
    assert process_environment(base, 2)["WORLD_SIZE"] == "12"


def test_the_launcher_starts_each_copy_with_its_rank_and_prefixes_its_lines(tmp_path: Path) -> None:
    directory = write_config(tmp_path / "replica", PRINT_RANKS, env={"RANK": "2", "LOCAL_RANK": "0"}, processes=2)
    run_launcher(directory)
    lines = (directory / OUTPUT_LOG).read_text().splitlines()
    assert sorted(lines) == ["[rank 2] rank 2 local 0", "[rank 3] rank 3 local 1"]
    assert json.loads((directory / EXIT_FILE).read_text())["exit_code"] == 0


def test_the_first_failing_copy_gives_the_replica_its_exit_code_and_stops_the_others(tmp_path: Path) -> None:
    script = "import os, sys, time\nif os.environ['LOCAL_RANK'] == '1': sys.exit(3)\ntime.sleep(60)"
    directory = write_config(tmp_path / "replica", [sys.executable, "-c", script], env={"RANK": "0"}, processes=3)
    began = time.monotonic()
    run_launcher(directory, timeout=30)
    assert json.loads((directory / EXIT_FILE).read_text())["exit_code"] == 3
    assert time.monotonic() - began < 20, "the sleeping copies were stopped, not waited out"


def test_the_containers_shell_starts_the_copies_and_reports_the_first_failure() -> None:
    # One write per line: the copies share the pipe.
    command = in_processes([sys.executable, "-c", "import os, sys; sys.stdout.write("
                            "os.environ['RANK'] + ' ' + os.environ['LOCAL_RANK'] + '\\n')"], 3)
    result = subprocess.run(command, env={**os.environ, "RANK": "3"}, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    assert sorted(result.stdout.split("\n")[:-1]) == ["3 0", "4 1", "5 2"]
    failing = in_processes([sys.executable, "-c", "import os, sys; sys.exit(int(os.environ['LOCAL_RANK']) * 2)"], 3)
    assert subprocess.run(failing, env={**os.environ, "RANK": "0"}, timeout=30).returncode == 2
    assert in_processes(["torchrun", "train.py"], 4) == ("torchrun", "train.py")


def test_the_containers_shell_sees_a_later_ranks_failure_while_rank_zero_runs() -> None:
    script = "import os, sys, time\nif os.environ['LOCAL_RANK'] == '1': sys.exit(3)\ntime.sleep(60)"
    began = time.monotonic()
    result = subprocess.run(in_processes([sys.executable, "-c", script], 2), env={**os.environ, "RANK": "0"},
                            timeout=50)
    assert result.returncode == 3
    assert time.monotonic() - began < 20, "rank 0 was stopped, not waited out"


def test_the_containers_shell_waits_for_every_copy_to_finish_stopping(tmp_path: Path) -> None:
    """SIGTERM to the shell reaches every copy, and the shell ends only once the slow one has
    saved: in a container, its end would kill a rank still writing its checkpoint."""
    script = ("import os, signal, sys, time\n"
              "def stop(*_):\n"
              "    time.sleep(1.5 if os.environ['LOCAL_RANK'] == '0' else 0)\n"
              "    open(os.path.join(sys.argv[1], os.environ['LOCAL_RANK']), 'w').close()\n"
              "    sys.exit(0)\n"
              "signal.signal(signal.SIGTERM, stop)\n"
              "open(os.path.join(sys.argv[1], 'ready' + os.environ['LOCAL_RANK']), 'w').close()\n"
              "time.sleep(60)\n")
    shell = subprocess.Popen(in_processes([sys.executable, "-c", script, str(tmp_path)], 2),
                             env={**os.environ, "RANK": "0"})
    deadline = time.monotonic() + 20
    while not ((tmp_path / "ready0").exists() and (tmp_path / "ready1").exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    shell.terminate()
    assert shell.wait(timeout=30) == 0
    assert (tmp_path / "0").exists() and (tmp_path / "1").exists(), "the shell ended before rank 0 had saved"


@pytest.mark.parametrize("command", [
    ["python", "train.py", "--strategy", "deepspeed"],
    ["python", "train.py", "--framework", "lightning"],
    ["/bin/sh", "-c", "OUT=/data/torchrun python train.py"],
    ["accelerate", "config"],
])
def test_a_launcher_named_only_as_an_argument_does_not_count(command: list[str]) -> None:
    assert not starts_own_workers(command)


def test_the_worker_starter_is_named_and_containers_share_host_pids_for_torchrun_only() -> None:
    from mlyard.backends.local.containers.create_options import runs_torchrun
    from mlyard.runtime.processes import worker_starter

    torchrun = ["sh", "-c", "exec python3 -m torch.distributed.run --rdzv-backend c10d ddp.py"]
    assert worker_starter(torchrun) == "torchrun" and runs_torchrun(torchrun)
    accelerate = ["/bin/sh", "-c", "accelerate launch --cpu x.py"]
    assert worker_starter(accelerate) == "accelerate" and not runs_torchrun(accelerate)
    assert worker_starter(["python", "train.py", "--launcher", "torchrun"]) is None
