"""The replica launcher as a real process: `python -m mlyard.runtime.launcher DIR` on a launch.json."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import process_gone, wait_for

from mlyard.runtime import cgroups
from mlyard.runtime.launch_config import (
    EXIT_FILE,
    HEARTBEAT_FILE,
    HEARTBEAT_INTERVAL,
    LAUNCH_CONFIG,
    OUTPUT_LOG,
    STARTED_FILE,
    LaunchConfig,
    write_launch_config,
)
from mlyard.storage import pack_directory

PYTHON = sys.executable
MEBIBYTE = 1024 * 1024


def write_config(directory: Path, command: list[str], **settings: Any) -> Path:
    """`settings` as launch.json holds them (paths as strings)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_launch_config(directory, LaunchConfig.from_data({"command": command, **settings}))
    return directory


def start_launcher(directory: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [PYTHON, "-m", "mlyard.runtime.launcher", str(directory)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def run_launcher(directory: Path, timeout: float = 15) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [PYTHON, "-m", "mlyard.runtime.launcher", str(directory)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,  # the assertion below shows stderr
    )
    assert result.returncode == 0, result.stderr
    return result


def launch(tmp_path: Path, command: list[str] | str, **settings: Any) -> Path:
    """Runs a replica to completion; returns its directory."""
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else command
    directory = write_config(tmp_path / "replica", argv, **settings)
    run_launcher(directory)
    return directory


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def output_of(directory: Path) -> str:
    return (directory / OUTPUT_LOG).read_text()


@pytest.fixture
def launched() -> Iterator[list[subprocess.Popen]]:
    """Launchers started in the background; killed with their groups if a test leaves them."""
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=5)


# --------------------------------------------------------------------------- basics


def test_command_runs_in_the_extracted_snapshot_and_its_output_is_logged(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "pkg").mkdir(parents=True)
    (source / "data.txt").write_text("snapshot contents\n")
    (source / "pkg" / "nested.txt").write_text("nested file\n")
    snapshot = pack_directory(source, tmp_path / "snapshot.tar.gz").path

    directory = launch(
        tmp_path,
        "cat data.txt pkg/nested.txt; pwd; echo to-stderr >&2",
        snapshot=str(snapshot),
    )

    output = output_of(directory)
    assert "snapshot contents\n" in output
    assert "nested file\n" in output
    assert "to-stderr\n" in output
    assert f"{(directory / 'code').resolve()}\n" in output
    assert (directory / "code" / "data.txt").read_text() == "snapshot contents\n"


def test_started_and_exit_files_are_written(tmp_path: Path) -> None:
    before = time.time()
    directory = launch(tmp_path, "echo $$ > pid.txt")
    started = read_json(directory / STARTED_FILE)
    finished = read_json(directory / EXIT_FILE)
    assert started["pid"] == int((directory / "code" / "pid.txt").read_text())
    assert before <= started["started_at"] <= finished["finished_at"] <= time.time()
    assert finished["exit_code"] == 0
    assert finished["signal"] is None


def test_a_replica_loads_no_module_it_does_not_use(tmp_path: Path) -> None:
    """Every replica pays for the launcher's imports before its command starts: extracting a
    snapshot loads neither packing's nor the blob store's modules, and a command that leaves
    no process behind ends without psutil."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "data.txt").write_text("snapshot contents\n")
    snapshot = pack_directory(source, tmp_path / "snapshot.tar.gz").path
    directory = write_config(tmp_path / "replica", ["cat", "data.txt"], snapshot=str(snapshot))
    result = subprocess.run([PYTHON, "-X", "importtime", "-m", "mlyard.runtime.launcher", str(directory)],
                            capture_output=True, text=True, timeout=15, check=True)
    loaded = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "mlyard.storage.unpacking" in loaded  # archives' own import (importlib's are not listed)
    assert output_of(directory) == "snapshot contents\n"
    assert not loaded & {"mlyard.storage.packing", "mlyard.storage.blobs", "pathspec", "psutil"}


def test_the_isolating_wrapper_loads_no_module_it_does_not_use() -> None:
    """It runs between the launcher and every command of a replica on the server's account."""
    result = subprocess.run([PYTHON, "-I", "-X", "importtime", "-c", "import mlyard.runtime.hide_home"],
                            capture_output=True, text=True, timeout=15, check=True)
    loaded = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "mlyard.runtime.hide_home" in loaded
    assert not loaded & {"subprocess", "tempfile"}


def test_a_command_with_the_home_hidden_gets_its_environment_exactly(tmp_path: Path) -> None:
    from mlyard.runtime import hide_home

    if (problem := hide_home.probe()) is not None:
        pytest.skip(f"namespaces cannot be made here: {problem}")
    home = tmp_path / "home"
    directory = home / "runs" / "1" / "1" / "worker-0"
    odd = {"WITH_EQUALS": "a=b=c", "WITH_NEWLINES": "one\ntwo\n", "EMPTY": "", "UNICODE": "grüße ✓",
           "QUOTES": "'\"\\"}
    script = "import json, os; print(json.dumps({name: os.environ.get(name) for name in %r}))" % sorted(odd)
    write_config(directory, [PYTHON, "-c", script], env=odd, hide_home=str(home), keep=[str(directory / "code")])
    run_launcher(directory)
    assert read_json(directory / EXIT_FILE)["exit_code"] == 0, output_of(directory)
    assert json.loads(output_of(directory)) == odd


def test_replicas_of_a_cached_snapshot_copy_one_extraction_of_it(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "data.txt").write_text("snapshot contents\n")
    snapshot = pack_directory(source, tmp_path / "snapshot.tar.gz").path
    for name in ("direct", "first", "second"):
        directory = write_config(tmp_path / name, ["cat", "data.txt"], snapshot=str(snapshot),
                                 cache_snapshot=name != "direct")
        run_launcher(directory)
        assert output_of(directory) == "snapshot contents\n"
        cached = [path.name for path in tmp_path.iterdir() if path.name.startswith("snapshot.tar.gz.")]
        assert len(cached) == (0 if name == "direct" else 1), cached


def test_command_without_snapshot_runs_in_an_empty_code_directory(tmp_path: Path) -> None:
    directory = launch(tmp_path, "ls -A; pwd")
    assert output_of(directory) == f"{(directory / 'code').resolve()}\n"


def test_exit_code_is_recorded(tmp_path: Path) -> None:
    directory = launch(tmp_path, "echo failing; exit 3")
    finished = read_json(directory / EXIT_FILE)
    assert set(finished) == {"exit_code", "signal", "finished_at"}
    assert (finished["exit_code"], finished["signal"]) == (3, None)
    assert output_of(directory) == "failing\n"


def test_output_is_appended_across_runs(tmp_path: Path) -> None:
    directory = launch(tmp_path, "echo first")
    run_launcher(directory)
    assert output_of(directory) == "first\nfirst\n"


def test_config_env_is_visible_to_the_command(tmp_path: Path) -> None:
    directory = launch(
        tmp_path,
        'echo "$MLYARD_TEST_VALUE|$RANK"',
        env={"MLYARD_TEST_VALUE": "hello world", "RANK": "5"},
    )
    assert output_of(directory) == "hello world|5\n"


def make_tool_directory(tmp_path: Path) -> Path:
    tools = tmp_path / "tools"
    tools.mkdir()
    tool = tools / "mlyard-test-tool"
    tool.write_text("#!/bin/sh\necho tool-from-prepended-path\n")
    tool.chmod(0o755)
    return tools


def test_prepend_path_puts_its_directory_first_on_path(tmp_path: Path) -> None:
    tools = make_tool_directory(tmp_path)
    directory = launch(tmp_path, 'echo "$PATH"; mlyard-test-tool', prepend_path=str(tools))
    path_line, tool_line = output_of(directory).splitlines()
    entries = path_line.split(os.pathsep)
    assert entries[0] == str(tools)
    assert entries[1:] == os.environ.get("PATH", "").split(os.pathsep)
    assert tool_line == "tool-from-prepended-path"


def test_prepend_path_is_ignored_when_the_config_env_sets_path(tmp_path: Path) -> None:
    tools = make_tool_directory(tmp_path)
    directory = launch(
        tmp_path,
        'echo "$PATH"',
        prepend_path=str(tools),
        env={"PATH": "/usr/bin:/bin"},
    )
    assert output_of(directory) == "/usr/bin:/bin\n"


def test_cpu_ids_pin_the_command(tmp_path: Path) -> None:
    directory = launch(
        tmp_path,
        [PYTHON, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
        cpu_ids=[0],
    )
    assert output_of(directory) == "[0]\n"
    assert read_json(directory / EXIT_FILE)["exit_code"] == 0


def test_missing_program_exits_127_with_a_readable_line(tmp_path: Path) -> None:
    directory = launch(tmp_path, ["mlyard-no-such-program-xyz", "--flag"])
    assert read_json(directory / EXIT_FILE)["exit_code"] == 127
    assert not (directory / STARTED_FILE).exists()
    output = output_of(directory)
    assert "cannot run 'mlyard-no-such-program-xyz'" in output
    assert "No such file or directory" in output


def test_shell_reports_missing_program_with_127(tmp_path: Path) -> None:
    directory = launch(tmp_path, "mlyard-no-such-program-xyz")
    assert read_json(directory / EXIT_FILE)["exit_code"] == 127
    assert "mlyard-no-such-program-xyz" in output_of(directory)


# --------------------------------------------------------------------------- signals


def test_sigterm_is_forwarded_to_the_whole_process_group(
    tmp_path: Path, launched: list[subprocess.Popen]
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    directory = write_config(
        tmp_path / "replica",
        ["/bin/sh", "-c", f"sleep 1000 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait"],
    )
    launcher = start_launcher(directory)
    launched.append(launcher)
    assert wait_for(pid_file.exists), "the command never started its grandchild"
    assert wait_for(lambda: (directory / STARTED_FILE).exists())
    grandchild = int(pid_file.read_text())
    assert not process_gone(grandchild)

    launcher.send_signal(signal.SIGTERM)
    launcher.wait(timeout=5)

    finished = read_json(directory / EXIT_FILE)
    assert finished["exit_code"] == 128 + signal.SIGTERM == 143
    assert finished["signal"] == signal.SIGTERM
    assert wait_for(lambda: process_gone(grandchild), timeout=3), "the grandchild outlived SIGTERM"


def test_processes_left_in_the_group_are_killed_when_the_command_ends(tmp_path: Path) -> None:
    pid_file = tmp_path / "leftover.pid"
    directory = launch(tmp_path, f"sleep 1000 > /dev/null 2>&1 & echo $! > {pid_file}; exit 0")
    leftover = int(pid_file.read_text())
    assert read_json(directory / EXIT_FILE)["exit_code"] == 0
    assert wait_for(lambda: process_gone(leftover), timeout=3), "a background process outlived its replica"


# --------------------------------------------------------------------------- heartbeat


def test_the_heartbeat_advances_while_the_command_runs(tmp_path: Path, launched: list[subprocess.Popen]) -> None:
    directory = write_config(tmp_path / "replica", ["sleep", "30"])
    heartbeat = directory / HEARTBEAT_FILE
    launcher = start_launcher(directory)
    launched.append(launcher)
    assert wait_for(lambda: (directory / STARTED_FILE).exists())
    assert heartbeat.exists()

    beats = [heartbeat.stat().st_mtime]
    for _ in range(2):
        assert wait_for(lambda: heartbeat.stat().st_mtime > beats[-1], timeout=3 * HEARTBEAT_INTERVAL)
        beats.append(heartbeat.stat().st_mtime)
    assert time.time() - beats[-1] < 2 * HEARTBEAT_INTERVAL

    launcher.send_signal(signal.SIGTERM)
    launcher.wait(timeout=5)
    assert read_json(directory / EXIT_FILE)["exit_code"] == 143


def test_the_launcher_beats_before_and_while_the_snapshot_is_extracted(
    tmp_path: Path, launched: list[subprocess.Popen]
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "data.txt").write_text("snapshot contents\n")
    archive = pack_directory(source, tmp_path / "snapshot.tar.gz").path
    # A snapshot that is a pipe: extraction blocks in open() until the test opens the other end.
    snapshot = tmp_path / "slow-snapshot"
    os.mkfifo(snapshot)
    directory = write_config(tmp_path / "replica", ["cat", "data.txt"], snapshot=str(snapshot))
    heartbeat = directory / HEARTBEAT_FILE
    launcher = start_launcher(directory)
    launched.append(launcher)

    assert wait_for(heartbeat.exists), "no beat while the snapshot was being extracted"
    first = heartbeat.stat().st_mtime
    assert wait_for(lambda: heartbeat.stat().st_mtime > first, timeout=3 * HEARTBEAT_INTERVAL)
    assert not (directory / "code" / "data.txt").exists()

    # The launcher reads the gzip magic through the pipe, then opens the path again to extract:
    # by then the real archive has taken the pipe's place.
    pipe = os.open(snapshot, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO, not a hang, if nobody reads
    os.replace(archive, snapshot)
    os.write(pipe, b"\x1f\x8b")
    os.close(pipe)
    launcher.wait(timeout=15)
    assert read_json(directory / EXIT_FILE)["exit_code"] == 0, output_of(directory)
    assert output_of(directory) == "snapshot contents\n"


# --------------------------------------------------------------------------- hostile snapshots


def evil_snapshot(path: Path) -> Path:
    payload = b"escaped\n"
    with tarfile.open(path, "w:gz") as archive:
        harmless = tarfile.TarInfo("ok.txt")
        harmless.size = 3
        archive.addfile(harmless, io.BytesIO(b"ok\n"))
        evil = tarfile.TarInfo("../evil")
        evil.size = len(payload)
        archive.addfile(evil, io.BytesIO(payload))
    return path


def test_snapshot_escaping_the_directory_fails_the_replica_and_writes_nothing_outside(tmp_path: Path) -> None:
    snapshot = evil_snapshot(tmp_path / "evil.tar.gz")
    marker = tmp_path / "command-ran"
    directory = launch(tmp_path, f"touch {marker}", snapshot=str(snapshot))

    finished = read_json(directory / EXIT_FILE)
    assert finished["exit_code"] != 0
    assert not marker.exists()
    assert not (directory / STARTED_FILE).exists()
    lines = output_of(directory).splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("mlyard: the replica could not start:")
    assert "'../evil'" in lines[0]
    assert "outside the target directory" in lines[0]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["evil.tar.gz", "replica"]
    assert sorted(path.name for path in directory.iterdir()) == [EXIT_FILE, HEARTBEAT_FILE, LAUNCH_CONFIG, OUTPUT_LOG]


# --------------------------------------------------------------------------- memory cgroup

ALLOCATE = (
    "b = bytearray(300 * 1024 * 1024)\n"
    "b[::4096] = b'\\x01' * len(b[::4096])\n"
    "print('allocated', flush=True)\n"
)


@pytest.fixture
def memory_parent() -> Path:
    parent, reason = cgroups.detect_memory_parent()
    if parent is None:
        pytest.skip(reason or "no memory cgroup parent")
    return parent


@pytest.fixture
def limited_replica(tmp_path: Path, memory_parent: Path) -> Iterator[Callable[..., Path]]:
    """Writes a launch config whose replica joins a memory cgroup of its own under the
    server's parent; whatever cgroup a test leaves behind is removed afterwards."""
    name = f"test-launcher-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def configure(command: list[str], memory_bytes: int) -> Path:
        return write_config(tmp_path / "replica", command, memory_cgroup_parent=str(memory_parent),
                            cgroup_name=name, memory_bytes=memory_bytes)

    configure.cgroup = memory_parent / name  # type: ignore[attr-defined]
    yield configure
    if (memory_parent / name).exists():
        cgroups.remove_cgroup(memory_parent / name)


def test_memory_limit_kills_a_replica_that_allocates_more(limited_replica) -> None:
    directory = limited_replica([PYTHON, "-c", ALLOCATE], 64 * MEBIBYTE)
    launcher_errors = run_launcher(directory, timeout=30).stderr
    assert "memory limit not enforced" not in launcher_errors
    finished = read_json(directory / EXIT_FILE)
    assert finished["exit_code"] != 0, output_of(directory)
    assert finished["exit_code"] == 137 and finished["signal"] == signal.SIGKILL, finished
    assert finished["reason"] == "out of memory: killed at its 64.0 MiB memory limit"
    assert "allocated" not in output_of(directory)
    assert not limited_replica.cgroup.exists(), "the replica's cgroup was left behind"


def test_same_allocation_succeeds_without_a_memory_cgroup(tmp_path: Path) -> None:
    directory = write_config(tmp_path / "unlimited", [PYTHON, "-c", ALLOCATE], memory_bytes=64 * MEBIBYTE)
    run_launcher(directory, timeout=30)
    assert read_json(directory / EXIT_FILE)["exit_code"] == 0, output_of(directory)
    assert output_of(directory) == "allocated\n"


def test_memory_cgroup_of_a_replica_that_stays_within_its_limit_is_removed(limited_replica) -> None:
    directory = limited_replica(["/bin/sh", "-c", "cat /proc/self/cgroup"], 256 * MEBIBYTE)
    run_launcher(directory)
    finished = read_json(directory / EXIT_FILE)
    assert finished["exit_code"] == 0 and "reason" not in finished
    memory_lines = [line for line in output_of(directory).splitlines() if "memory" in line.split(":")[1]]
    if memory_lines:  # cgroup v1: the command ran in the replica's own memory cgroup
        assert memory_lines[0].endswith(f"/{limited_replica.cgroup.name}")
    assert not limited_replica.cgroup.exists()


def test_memory_cgroup_is_removed_even_when_the_command_leaves_processes_behind(
    tmp_path: Path, limited_replica
) -> None:
    pid_file = tmp_path / "leftover.pid"
    directory = limited_replica(
        ["/bin/sh", "-c", f"sleep 1000 > /dev/null 2>&1 & echo $! > {pid_file}; exit 0"], 256 * MEBIBYTE
    )
    run_launcher(directory)
    assert read_json(directory / EXIT_FILE)["exit_code"] == 0
    assert wait_for(lambda: process_gone(int(pid_file.read_text())), timeout=3)
    assert not limited_replica.cgroup.exists(), "the replica's cgroup was left behind"


# --------------------------------------------------------------------------- CPU quota of a share of a core

BUSY_LOOP = (
    "import os, time\n"
    "start, begun = time.monotonic(), os.times()\n"
    "while time.monotonic() - start < 2.0:\n"
    "    pass\n"
    "ended = os.times()\n"
    "used = ended.user + ended.system - begun.user - begun.system\n"
    "print(f'{used / (time.monotonic() - start):.3f}')\n"
    "print(open('/proc/self/cgroup').read(), end='')\n"
)


@pytest.fixture
def cpu_parent() -> Path:
    parent, reason = cgroups.detect_cpu_parent()
    if parent is None:
        pytest.skip(reason or "no CPU cgroup parent")
    return parent


def test_a_busy_loop_under_a_quarter_core_quota_uses_about_a_quarter_of_a_core(
    tmp_path: Path, cpu_parent: Path
) -> None:
    name = f"test-launcher-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    directory = write_config(tmp_path / "quarter", [PYTHON, "-c", BUSY_LOOP], cpu_ids=[0],
                             cpu_quota_millicores=250, cpu_cgroup_parent=str(cpu_parent), cgroup_name=name)
    try:
        launcher_errors = run_launcher(directory, timeout=30).stderr
    finally:
        if (cpu_parent / name).exists():
            cgroups.remove_cgroup(cpu_parent / name)
    assert "CPU quota not enforced" not in launcher_errors
    assert read_json(directory / EXIT_FILE)["exit_code"] == 0, output_of(directory)
    share, *cgroup_lines = output_of(directory).splitlines()
    # Unlimited, the loop takes a whole core (less only on a busy machine); the quota holds it
    # near a quarter. Loose bounds: the machine may be busy, and the first period is free.
    assert 0.05 <= float(share) <= 0.4, f"the busy loop used {share} of a core"
    cpu_lines = [line for line in cgroup_lines if "cpu" in line.split(":")[1].split(",")]
    if cpu_lines:  # cgroup v1: the command ran in the replica's own CPU cgroup
        assert cpu_lines[0].endswith(f"/{name}")
    assert not (cpu_parent / name).exists(), "the replica's CPU cgroup was left behind"


def test_processes_that_leave_the_commands_session_are_killed_when_it_ends(tmp_path: Path) -> None:
    pid_file = tmp_path / "escaped.pid"
    directory = write_config(tmp_path / "escape", ["/bin/sh", "-c", f"setsid sleep 300 & echo $! > {pid_file}; sleep 0.5"])
    run_launcher(directory)
    assert read_json(directory / EXIT_FILE)["exit_code"] == 0
    assert wait_for(lambda: process_gone(int(pid_file.read_text())), timeout=3)


def test_a_program_that_is_not_executable_exits_126(tmp_path: Path) -> None:
    program = tmp_path / "not-executable.sh"
    program.write_text("#!/bin/sh\necho hi\n")
    directory = write_config(tmp_path / "noexec", [str(program)])
    run_launcher(directory)
    assert read_json(directory / EXIT_FILE)["exit_code"] == 126
    assert "cannot run" in output_of(directory)
