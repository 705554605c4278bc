"""Runs a replica's command where MLYARD_HOME shows nothing but the job's own directories:
`python -m mlyard.runtime.hide_home HOME [--keep DIR]... [--read-only DIR]... -- COMMAND...`.

A replica on the server's own account could otherwise read what file modes cannot keep from
it: `admin.token`, the database (with its `-wal`/`-shm` files), other jobs' run directories and
their launch configs. The command gets a mount namespace where HOME is an empty, read-only
tmpfs with only the `--keep` directories (and, read-only, the `--read-only` ones) mounted back
at their own paths, and a PID namespace with its own /proc, so it cannot reach the real HOME
through `/proc/<pid>/root` of a process outside. An unprivileged server makes them in a user
namespace that maps only its own uid and gid, so the command has no capability to undo them.

The first process of the PID namespace reaps for the command and passes its outcome on to the
launcher: the exit code, or the signal that killed it (this process then dies of it too).
Python 3.11 has no `os.unshare`: libc's `unshare` and `mount` are called through ctypes.

It runs between the launcher and every replica's command, so it imports only what that needs
(no subprocess or tempfile): its own start is part of every replica's.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
# A read-only remount in a user namespace must keep the flags the mount already has.
_KEPT_FLAGS = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC,
               os.ST_NOATIME: MS_NOATIME, os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME}
_COVER_OPTIONS = b"size=1m,mode=0711"
COMMAND_NOT_FOUND, COMMAND_NOT_EXECUTABLE = 127, 126
_RESET_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE, signal.SIGXFSZ)

_libc = ctypes.CDLL(None, use_errno=True)


def _call(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: bytes | None = None) -> None:
    _call(_libc.mount(source.encode() if source else None, target.encode(), kind.encode() if kind else None,
                      ctypes.c_ulong(flags), data), f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def enter_namespaces() -> None:
    """New mount and PID namespaces (for the children); unprivileged, in a user namespace of
    this process's own ids."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWPID | (CLONE_NEWUSER if uid != 0 else 0)
    _call(_libc.unshare(ctypes.c_int(flags)), "unshare")
    if uid != 0:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below leaks back to the server's view


def _read_only(path: str) -> None:
    kept = os.statvfs(path).f_flag
    flags = sum(flag for statvfs_flag, flag in _KEPT_FLAGS.items() if kept & statvfs_flag)
    _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags)


def cover(home: Path, keep: list[Path], read_only: list[Path]) -> None:
    """HOME becomes an empty read-only tmpfs with `keep` and `read_only` mounted back at their paths."""
    home = home.resolve()
    inside = [(path.resolve(), False) for path in keep] + [(path.resolve(), True) for path in read_only]
    # Only directories strictly below HOME come back: HOME itself would undo the cover.
    inside = [(path, ro) for path, ro in inside if path != home and path.is_relative_to(home) and path.is_dir()]
    # Opened before the cover hides them, mounted back from their descriptors afterwards.
    handles = [(path, ro, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path, ro in inside]
    _mount("tmpfs", str(home), "tmpfs", MS_NOSUID | MS_NODEV, _COVER_OPTIONS)
    for path, ro, handle in handles:
        path.mkdir(parents=True, exist_ok=True)
        _mount(f"/proc/self/fd/{handle}", str(path), None, MS_BIND | MS_REC)
        if ro:
            _read_only(str(path))
        os.close(handle)
    _read_only(str(home))


def _exec(command: list[str], workdir: str, environment: dict[str, str] | None) -> None:
    """In the command's process: default signals, its directory, then the command itself."""
    for number in _RESET_SIGNALS:
        signal.signal(number, signal.SIG_DFL)
    try:
        os.chdir(workdir)
        if environment is None:
            os.execvp(command[0], command)
        os.execvpe(command[0], command, environment)
    except OSError as error:
        sys.stdout.write(f"mlyard: cannot run {command[0]!r}: {error.strerror}\n")
        sys.stdout.flush()
        os._exit(COMMAND_NOT_FOUND if isinstance(error, FileNotFoundError) else COMMAND_NOT_EXECUTABLE)


def _host_pid() -> int | None:
    """This process's pid outside its PID namespace (the first of `NSpid` in the host's /proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _number_after(host_pid: int | None) -> None:
    """The namespace's next pids follow this process's host pid. Every namespace would otherwise
    number its command 2, and two replicas on one machine would then be one node to torchrun's
    c10d rendezvous, which tells nodes apart by host name and pid. Best effort: where the kernel
    refuses, pids start at 2 as usual."""
    if host_pid is None or host_pid <= 1:
        return
    try:
        _write("/proc/sys/kernel/ns_last_pid", str(host_pid))
    except OSError:
        pass


def _init(command: list[str], workdir: str, report: int, environment: dict[str, str] | None) -> None:
    """PID 1 of the namespace: its /proc, the command, and the command's outcome on `report`."""
    for number in _RESET_SIGNALS:
        signal.signal(number, signal.SIG_IGN)  # signals for the job go to the command's group
    host_pid = _host_pid()  # before the namespace's own /proc hides it
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _number_after(host_pid)
    child = os.fork()
    if child == 0:
        os.close(report)
        _exec(command, workdir, environment)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            break
    os.write(report, str(os.waitstatus_to_exitcode(status)).encode())
    os._exit(0)


def read_environment(descriptor: int) -> dict[str, str]:
    """The command's environment, handed over on a descriptor rather than in this process's own
    environment: variables such as LD_PRELOAD would otherwise act on this process, before the
    namespaces exist."""
    with os.fdopen(descriptor, "rb") as handle:
        environment = json.loads(handle.read())
    return {str(key): str(value) for key, value in environment.items()}


def environment_descriptor(environment: dict[str, str]) -> int:
    """A memory file holding `environment`, for `--environment-fd` (the caller passes it on)."""
    descriptor = os.memfd_create("mlyard-job-environment")
    os.write(descriptor, json.dumps(environment).encode())
    os.lseek(descriptor, 0, os.SEEK_SET)
    return descriptor


def run(home: Path, keep: list[Path], read_only: list[Path], command: list[str],
        environment: dict[str, str] | None = None) -> int:
    workdir = os.getcwd()
    try:
        enter_namespaces()
        cover(home, keep, read_only)
    except OSError as error:
        print(f"mlyard: cannot hide MLYARD_HOME from the job: {error}", flush=True)
        return 1
    read_end, write_end = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(read_end)
        _init(command, workdir, write_end, environment)
    os.close(write_end)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda *_: None)  # the command gets them itself: wait for its outcome
    os.waitpid(init, 0)
    with os.fdopen(read_end, "rb") as report:
        outcome = report.read().decode() or "1"
    code = int(outcome)
    if code < 0:  # the command died of a signal: so does this process, for the launcher to see
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    return code


def arguments(home: Path, keep: list[Path], read_only: list[Path], command: list[str],
              environment_fd: int | None = None) -> list[str]:
    """The command line that runs `command` this way, with the Python running now; with
    `environment_fd` (see `environment_descriptor`) the command gets that environment."""
    options = [item for path in keep for item in ("--keep", str(path))]
    options += [item for path in read_only for item in ("--read-only", str(path))]
    if environment_fd is not None:
        options += ["--environment-fd", str(environment_fd)]
    # -I: the job's PYTHON* variables are for its own Python, not this one.
    return [sys.executable, "-I", "-m", __name__, str(home), *options, "--", *command]


def probe() -> str | None:
    """Why commands cannot be run this way here; None when they can."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mlyard-isolation-") as directory:
        home = Path(directory)
        (home / "kept").mkdir()
        try:
            completed = subprocess.run(
                arguments(home, [home / "kept"], [], [sys.executable, "-c", "import os; os.listdir('/proc/1')"]),
                capture_output=True, text=True, timeout=30, check=False, cwd=directory)
        except (OSError, subprocess.TimeoutExpired) as error:
            return str(error)
    if completed.returncode != 0:
        said = (completed.stdout + completed.stderr).strip().splitlines()
        return said[-1] if said else f"exit code {completed.returncode}"
    return None


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") < 1 or argv.index("--") == len(argv) - 1:
        print("usage: python -m mlyard.runtime.hide_home HOME [--keep DIR]... [--read-only DIR]... -- COMMAND...",
              file=sys.stderr)
        return 2
    split = argv.index("--")
    home, options, command = Path(argv[0]), argv[1:split], argv[split + 1:]
    keep = [Path(value) for flag, value in zip(options[::2], options[1::2], strict=True) if flag == "--keep"]
    read_only = [Path(value) for flag, value in zip(options[::2], options[1::2], strict=True) if flag == "--read-only"]
    descriptors = [int(value) for flag, value in zip(options[::2], options[1::2], strict=True)
                   if flag == "--environment-fd"]
    environment = read_environment(descriptors[0]) if descriptors else None
    return run(home, keep, read_only, command, environment)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
