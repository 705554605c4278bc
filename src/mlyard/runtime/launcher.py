"""The shim that runs inside every replica: `python -m mlyard.runtime.launcher REPLICA_DIRECTORY`.

It reads `launch.json` (a `launch_config.LaunchConfig`) from the replica directory, pins the
CPUs, joins a memory cgroup when one is configured (and a CPU cgroup that holds a replica below
one core to its share), extracts the code snapshot into `code/` (or copies the machine's
extraction of it, `storage/snapshot_cache.py`), and runs the user command there in a process
group of its own. Its stdout and stderr go through a pipe that a thread of the launcher copies
into `output.log`, up to `max_log_bytes` (MLYARD_MAX_LOG_BYTES); past that the output is read
and dropped, so the command never blocks on a full pipe, and one line says so. SIGTERM and SIGINT are forwarded to the whole group.
When the command ends, anything it left in its group is killed, the rest of its output is
copied, and `exit.json` is written (atomically), so the controller can read the outcome even
after a server restart. `started.json` says the user command is running. When the config
names an OS account (`run_as`), the code directory becomes that account's and the command runs
as it, with what `job_environment.scrubbed` keeps of the launcher's environment; otherwise it
gets the launcher's whole environment, which the local backend limits to that already (a pod's
is the job's own). When the config names `hide_home`, the command runs where MLYARD_HOME holds only the
job's own directories (`hide_home.py`).

From its start until `exit.json` is written, a thread touches `heartbeat` every
HEARTBEAT_INTERVAL seconds: a replica whose beats stop (the launcher killed, frozen, or its node
gone) is taken for lost after HEARTBEAT_TIMEOUT, even by a server that cannot see its pid.

It imports little, so a replica starts fast.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from mlyard.runtime.launch_config import (
    CODE_DIRECTORY,
    EXIT_FILE,
    HEARTBEAT_FILE,
    HEARTBEAT_INTERVAL,
    OUTPUT_LOG,
    STARTED_FILE,
    LaunchConfig,
    OsAccount,
    read_launch_config,
    write_json_atomically,
)
from mlyard.runtime.job_environment import scrubbed
from mlyard.runtime.processes import KILL_AFTER, copies_to_start, process_environment

COMMAND_NOT_FOUND = 127
COMMAND_NOT_EXECUTABLE = 126
_PR_SET_CHILD_SUBREAPER = 36
DEFAULT_MAX_LOG_BYTES = 1024**3
_COPY_CHUNK = 64 * 1024
_PIPE_SIZE = 1024 * 1024
# The command is gone and its group killed by then: what is left in the pipe is at most its size.
_COPY_DRAIN_TIMEOUT = 10.0
_POLL_INTERVAL = 0.05


def _account_environment(run_as: OsAccount) -> dict[str, str]:
    """The environment of a command run as another account, before its own `env`: nothing that
    could carry the server's secrets (MLYARD_DATABASE_URL, credentials of its own)."""
    environment = scrubbed(os.environ)
    environment.update(HOME=str(run_as.home), USER=run_as.name, LOGNAME=run_as.name, SHELL="/bin/sh")
    return environment


def _identity(run_as: OsAccount | None) -> dict:
    """Popen's arguments that run the command as the job's account, with no other groups."""
    if run_as is None:
        return {}
    return {"user": run_as.uid, "group": run_as.gid, "extra_groups": []}


def hide_home_environment(environment: dict[str, str]) -> int:
    """A descriptor holding the command's environment, for the isolating wrapper."""
    from mlyard.runtime import hide_home

    return hide_home.environment_descriptor(environment)


def _give_tree(directory: Path, uid: int, gid: int) -> None:
    """The job's code becomes its account's (links themselves, never what they point to)."""
    os.lchown(directory, uid, gid)
    for root, directories, files in os.walk(directory):
        for name in directories + files:
            os.lchown(os.path.join(root, name), uid, gid)


def _become_subreaper() -> None:
    """Processes the command detaches into sessions of their own (torchrun's workers do) are
    re-parented to the launcher instead of init, so `_kill_descendants` still finds them."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _has_children() -> bool:
    """Whether any process is still the launcher's child (orphans it adopted as a subreaper
    included); True when the kernel cannot tell (no /proc/PID/task/TID/children)."""
    try:
        threads = os.listdir("/proc/self/task")
        for thread in threads:
            with open(f"/proc/self/task/{thread}/children", "rb") as children:
                if children.read().strip():
                    return True
    except OSError:
        return True
    return False


def _kill_descendants() -> None:
    """SIGKILL to every process still below the launcher, then reap them."""
    if not _has_children():  # the usual end: nothing left, and no psutil to load to say so
        return
    import psutil

    try:
        leftovers = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for process in leftovers:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(leftovers, timeout=2)


class Heartbeat:
    """Touches the heartbeat file until stopped. A daemon thread: only a live, running
    launcher beats, which is the point."""

    def __init__(self, path: Path, interval: float = HEARTBEAT_INTERVAL):
        self.path = path
        self.interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def beat(self) -> None:
        try:
            self.path.touch()
        except OSError:  # a full or briefly unreachable volume: the next beat tries again
            pass

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            self.beat()


def format_bytes(count: int) -> str:
    value, unit = float(count), "bytes"
    for larger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{count} bytes" if unit == "bytes" else f"{value:.1f} {unit}"


def truncation_line(limit: int) -> bytes:
    return (f"[mlyard] log truncated: this replica wrote more than {format_bytes(limit)}; "
            "the rest was discarded\n").encode()


class CappedLog:
    """Appends a replica's output to its log file until the file holds `limit` bytes, then
    writes `truncation_line` once and discards the rest."""

    def __init__(self, path: Path, limit: int):
        self.limit = limit
        self.file = open(path, "ab", buffering=0)  # noqa: SIM115 - open as long as the command runs; see close()
        self.size = os.fstat(self.file.fileno()).st_size  # an earlier run's output counts too
        self.truncated = False
        self._last_byte = b"\n"
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        if self.truncated or not data:
            return
        kept = data[: max(0, self.limit - self.size)]
        try:
            if kept:
                self.file.write(kept)
                self.size += len(kept)
                self._last_byte = kept[-1:]
            if len(kept) < len(data):
                self.truncated = True
                # The cut may fall inside a line: the notice starts on a line of its own.
                self.file.write((b"" if self._last_byte == b"\n" else b"\n") + truncation_line(self.limit))
        except (OSError, ValueError):  # a full volume, or closed after a drain that timed out
            pass

    def follow(self, pipe: int, prefix: bytes = b"") -> None:
        """Copies from `pipe` in a thread until every writer has closed it; with a `prefix`,
        line by line, each line starting with it (several processes share the log)."""
        thread = threading.Thread(target=self._copy_lines if prefix else self._copy, args=(pipe, prefix),
                                  name="output", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _copy(self, pipe: int, _prefix: bytes) -> None:
        try:
            while chunk := os.read(pipe, _COPY_CHUNK):
                with self._lock:
                    self.write(chunk)
        finally:
            os.close(pipe)

    def _copy_lines(self, pipe: int, prefix: bytes) -> None:
        with os.fdopen(pipe, "rb", buffering=_COPY_CHUNK) as stream:
            at_line_start = True
            # Bounded reads: a process that never ends a line cannot make the launcher hold it all.
            while chunk := stream.readline(_COPY_CHUNK):
                with self._lock:
                    self.write(prefix + chunk if at_line_start else chunk)
                at_line_start = chunk.endswith(b"\n")

    def close(self) -> None:
        deadline = time.monotonic() + _COPY_DRAIN_TIMEOUT
        for thread in self._threads:
            # A process outside the launcher's tree holding the pipe must not hold up exit.json.
            thread.join(max(0.0, deadline - time.monotonic()))
        self.file.close()


def _open_pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe()
    try:  # fewer wake-ups of the copying thread for a command that prints a lot
        import fcntl

        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    except (ImportError, AttributeError, OSError):
        pass
    return read_end, write_end


class Launcher:
    def __init__(self, directory: Path):
        self.directory = directory
        self.config: LaunchConfig = read_launch_config(directory)
        self.child: subprocess.Popen | None = None
        """The first copy of the command: its pid names the replica's process group."""
        self.children: list[subprocess.Popen] = []
        self.start_failure: int | None = None
        """The exit code of a copy of the command that could not be started, if one could not."""
        self.terminating_signal: int | None = None
        self.cgroup: Path | None = None
        self.cpu_cgroup: Path | None = None
        """The CPU cgroup holding a replica below one core to its share, when it is not `cgroup` (v1)."""
        self.output: CappedLog | None = None
        self.oom_killed = False
        self.heartbeat = Heartbeat(directory / HEARTBEAT_FILE)

    def log(self, message: str) -> None:
        print(f"mlyard-launcher: {message}", file=sys.stderr, flush=True)

    def on_signal(self, number: int, _frame) -> None:
        if self.terminating_signal is None:
            self.terminating_signal = number
        self._signal_group(number)

    def _signal_group(self, number: int) -> None:
        """To every copy of the command and what they started in their group."""
        if self.child is not None:
            try:
                os.killpg(self.child.pid, number)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        # First, since extracting a large snapshot can outlast the heartbeat timeout.
        self.heartbeat.start()
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        _become_subreaper()
        try:
            exit_code = self._run_command()
        except Exception as error:  # noqa: BLE001 - the user sees it in their log, the controller in exit.json
            self._append_output(f"mlyard: the replica could not start: {error}\n")
            self.log(f"start failed: {error!r}")
            exit_code = 1
        finally:
            self._cleanup()
        signal_number = None
        if exit_code < 0:
            signal_number, exit_code = -exit_code, 128 - exit_code
        outcome = {"exit_code": exit_code, "signal": signal_number, "finished_at": time.time()}
        if self.oom_killed and signal_number == signal.SIGKILL:
            outcome["reason"] = (f"out of memory: killed at its {format_bytes(self.config.memory_bytes or 0)} "
                                 "memory limit")
        write_json_atomically(self.directory / EXIT_FILE, outcome)
        self.heartbeat.stop()
        return 0

    def _run_command(self) -> int:
        config = self.config
        if config.cpu_ids:
            os.sched_setaffinity(0, config.cpu_ids)
        if config.memory_cgroup_parent:
            self._join_memory_cgroup(config.memory_cgroup_parent, config.cgroup_name or "", config.memory_bytes)
        if config.cpu_cgroup_parent and config.cpu_quota_millicores:
            self._join_cpu_cgroup(config.cpu_cgroup_parent, config.cgroup_name or "", config.cpu_quota_millicores)
        workdir = self.directory / CODE_DIRECTORY
        if config.snapshot and config.cache_snapshot:
            from mlyard.storage.snapshot_cache import extract_cached

            extract_cached(config.snapshot, workdir)
        elif config.snapshot:
            from mlyard.storage import extract_snapshot

            extract_snapshot(config.snapshot, workdir)
        else:
            workdir.mkdir(exist_ok=True)
        if config.links:
            from mlyard.runtime.dataset_links import make_links

            make_links(workdir, config.links)
        run_as = config.run_as
        if run_as is not None:
            _give_tree(workdir, run_as.uid, run_as.gid)
        if self.terminating_signal is not None:
            return -self.terminating_signal
        environment = _account_environment(run_as) if run_as is not None else dict(os.environ)
        environment.update(config.env)
        if "PATH" not in config.env and config.prepend_path:
            environment["PATH"] = config.prepend_path + os.pathsep + environment.get("PATH", "")
        self.output = CappedLog(self.directory / OUTPUT_LOG, config.max_log_bytes or DEFAULT_MAX_LOG_BYTES)
        copies = copies_to_start(config.command, config.processes)
        try:
            for local_rank in range(copies):
                own = environment if copies == 1 else process_environment(environment, local_rank)
                prefix = f"[rank {own['RANK']}] ".encode() if copies > 1 else b""
                self.children.append(self._spawn(own, workdir, run_as, prefix))
        except (FileNotFoundError, PermissionError) as error:
            self.output.write(f"mlyard: cannot run {config.command[0]!r}: {error.strerror}\n".encode())
            code = COMMAND_NOT_FOUND if isinstance(error, FileNotFoundError) else COMMAND_NOT_EXECUTABLE
            if not self.children:
                return code
            self.start_failure = code  # the copies already started are stopped and do not decide
            self._signal_group(signal.SIGTERM)
        # A signal that came while the children were being created had no child to go to.
        if self.terminating_signal is not None:
            self.on_signal(self.terminating_signal, None)
        write_json_atomically(self.directory / STARTED_FILE, {"pid": self.child.pid, "started_at": time.time()})
        if len(self.children) == 1:
            return self.child.wait()
        return self._wait_for_all()

    def _spawn(self, environment: dict[str, str], workdir: Path, run_as: OsAccount | None,
               prefix: bytes) -> subprocess.Popen:
        """Starts one copy of the command in the replica's process group (the first copy's);
        its output goes through a pipe of its own into the log."""
        # A pipe rather than the file itself, so the launcher can stop the log growing without
        # stopping the command.
        read_end, write_end = _open_pipe()
        handed = self._hidden() and hide_home_environment(environment)
        try:
            child = subprocess.Popen(
                self._command(handed or None),
                cwd=workdir,
                # The isolating wrapper starts with the launcher's own environment: the job's
                # (LD_PRELOAD, say) acts only on the command, inside the namespaces.
                env=dict(os.environ) if handed else environment,
                pass_fds=(handed,) if handed else (),
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=subprocess.STDOUT,
                process_group=self.child.pid if self.child is not None else 0,
                # The server keeps its own files private (umask 077); the job's are the user's.
                umask=0o022,
                **_identity(run_as),
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the command holds the only write end, so its end is the pipe's
            if handed:
                os.close(handed)
        if self.child is None:
            self.child = child
        assert self.output is not None
        self.output.follow(read_end, prefix)
        return child

    def _wait_for_all(self) -> int:
        """The replica's exit code once every copy has ended: the first non-zero one, after
        which the others get SIGTERM and, KILL_AFTER seconds later, SIGKILL (as torchrun stops
        a node's workers: a copy stuck in a collective would otherwise hold the replica), else 0."""
        first_failure = self.start_failure
        kill_at = time.monotonic() + KILL_AFTER if first_failure is not None else None
        running = list(self.children)
        while running:
            for child in list(running):
                code = child.poll()
                if code is None:
                    continue
                running.remove(child)
                if code != 0 and first_failure is None:
                    first_failure = code
                    kill_at = time.monotonic() + KILL_AFTER
                    if running:
                        self.log(f"process {child.pid} exited with {code}: stopping the replica's other processes")
                        self._signal_group(signal.SIGTERM)
            if running and kill_at is not None and time.monotonic() >= kill_at:
                self.log(f"the replica's other processes did not stop within {KILL_AFTER}s: killing them")
                self._signal_group(signal.SIGKILL)
                kill_at = None
            if running:
                time.sleep(_POLL_INTERVAL)
        return first_failure or 0

    def _hidden(self) -> bool:
        """Whether the command runs where MLYARD_HOME shows only the job's own directories."""
        return self.config.hide_home is not None and self.config.run_as is None

    def _command(self, environment_fd: int | None = None) -> list[str]:
        config = self.config
        if not self._hidden():
            return list(config.command)
        from mlyard.runtime import hide_home

        return hide_home.arguments(config.hide_home, [Path(path) for path in config.keep],
                                   [Path(path) for path in config.keep_read_only], list(config.command),
                                   environment_fd=environment_fd)

    def _append_output(self, text: str) -> None:
        with open(self.directory / OUTPUT_LOG, "a") as output:
            output.write(text)

    def _join_memory_cgroup(self, parent: Path, name: str, limit: int) -> None:
        from mlyard.runtime import cgroups

        try:
            self.cgroup = cgroups.create_memory_cgroup(parent, name, limit)
            cgroups.add_process(self.cgroup, os.getpid())
        except OSError as error:
            self.log(f"memory limit not enforced: {error}")
            self.cgroup = None

    def _join_cpu_cgroup(self, parent: Path, name: str, millicores: int) -> None:
        from mlyard.runtime import cgroups

        try:
            cgroup = cgroups.create_cpu_cgroup(parent, name, millicores)
            cgroups.add_process(cgroup, os.getpid())
        except OSError as error:
            self.log(f"CPU quota not enforced: {error}")
            return
        if cgroup != self.cgroup:  # on cgroup v2 the memory cgroup holds the quota too
            self.cpu_cgroup = cgroup

    def _cleanup(self) -> None:
        if self.child is not None:
            try:  # whatever the command left behind in its group goes with it
                os.killpg(self.child.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _kill_descendants()
        if self.output is not None:  # every writer is gone now: the copy ends with the pipe
            self.output.close()
        if self.cgroup is not None:
            from mlyard.runtime import cgroups

            self.oom_killed = cgroups.oom_kills(self.cgroup) > 0
            cgroups.remove_cgroup(self.cgroup, keep_pid=os.getpid())
        if self.cpu_cgroup is not None:
            from mlyard.runtime import cgroups

            cgroups.remove_cgroup(self.cpu_cgroup, keep_pid=os.getpid())


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1:
        print("usage: python -m mlyard.runtime.launcher REPLICA_DIRECTORY", file=sys.stderr)
        return 2
    return Launcher(Path(arguments[0])).run()


if __name__ == "__main__":
    code = main()
    # Everything is written and closed by now: the interpreter's own teardown would only
    # delay the end of the process, which is when the backend learns of the replica's end.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
