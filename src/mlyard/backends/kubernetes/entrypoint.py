"""What a job pod runs: `python -m mlyard.backends.kubernetes.entrypoint DIRECTORY
[--snapshot ARCHIVE] [--link PATH=DIRECTORY]... -- COMMAND...`.

It writes the launcher's configuration into the replica's directory on the shared volume and
runs mlyard's launcher there (snapshot extraction, output.log, exit.json, signal forwarding),
copying the command's output to its own stdout as well, so `kubectl logs` shows it. Before the
command starts it waits (a while) until the attempt's peers resolve in DNS: a pod's name is
published only once the pod exists, and the first connection of a rendezvous does not retry a
name that does not resolve. It exits with the command's exit code, which the pod's status shows.

Imports little: it runs in the training image.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from mlyard.runtime.launch_config import EXIT_FILE, OUTPUT_LOG, LaunchConfig, read_json, write_launch_config
from mlyard.runtime.launcher import Launcher
from mlyard.runtime.processes import copies_to_start

PEER_WAIT_SECONDS = 300.0
_FOLLOW_INTERVAL = 0.5


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mlyard.backends.kubernetes.entrypoint",
                                     usage="%(prog)s DIRECTORY [--snapshot ARCHIVE] [--max-log-bytes N] -- COMMAND...")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--snapshot", type=Path)
    parser.add_argument("--max-log-bytes", type=int)
    parser.add_argument("--peer-wait", type=float, default=PEER_WAIT_SECONDS)
    parser.add_argument("--link", action="append", default=[], metavar="PATH=DIRECTORY",
                        help="a dataset version the job reads or a volume it mounts, linked at PATH in its working directory")
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.error("no command after --")
    split = argv.index("--")
    arguments = parser.parse_args(argv[:split])
    arguments.command = argv[split + 1:]
    return arguments


def peers(environment: dict[str, str]) -> list[str]:
    """The host names this replica will connect to: MASTER_ADDR and TF_CONFIG's hosts."""
    hosts = []
    if int(environment.get("WORLD_SIZE") or "1") > 1 and environment.get("MASTER_ADDR"):
        hosts.append(environment["MASTER_ADDR"])
    try:
        cluster = json.loads(environment.get("TF_CONFIG") or "{}").get("cluster", {})
    except ValueError:
        cluster = {}
    for addresses in cluster.values():
        hosts.extend(address.rpartition(":")[0] for address in addresses)
    return sorted(set(hosts))


def wait_for_peers(hosts: list[str], timeout: float, *, sleep: float = 1.0) -> list[str]:
    """Waits until every host resolves, at most `timeout` seconds; returns those that never did."""
    deadline = time.monotonic() + timeout
    missing = list(hosts)
    while True:
        still = []
        for host in missing:
            try:
                socket.getaddrinfo(host, None)
            except OSError:
                still.append(host)
        missing = still
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(sleep)


def follow(path: Path, stop: threading.Event, out=None) -> None:
    """Copies what is appended to `path` to stdout until `stop` is set and the end is reached."""
    out = out or sys.stdout.buffer
    position = 0
    while True:
        stopping = stop.is_set()
        try:
            with open(path, "rb") as handle:
                handle.seek(position)
                while chunk := handle.read(64 * 1024):
                    out.write(chunk)
                    position += len(chunk)
            out.flush()
        except OSError:
            pass
        if stopping:
            return
        stop.wait(_FOLLOW_INTERVAL)


def fresh_directory(directory: Path) -> None:
    """Creates the replica's directory; one with an exit status (left by a database that was
    reset, whose files must not speak for this replica) is moved aside first. The backend
    does this before the pod starts: in the pod the directory is a mount point."""
    if (directory / EXIT_FILE).exists():
        directory.rename(directory.with_name(f"{directory.name}.stale-{time.time_ns()}"))
    directory.mkdir(parents=True, exist_ok=True)


def prepare(directory: Path, command: list[str], snapshot: Path | None, max_log_bytes: int | None,
            links: list[str] = ()) -> None:
    fresh_directory(directory)
    # No variables of its own (the pod's environment is the replica's), no CPU pinning (the
    # kubelet's CPU manager places the container) and no memory cgroup (the pod's limit is it).
    # The role's processes per replica are the pod's LOCAL_WORLD_SIZE.
    processes = copies_to_start(command, _positive(os.environ.get("LOCAL_WORLD_SIZE")))
    write_launch_config(directory, LaunchConfig(command=tuple(command), snapshot=snapshot, max_log_bytes=max_log_bytes,
                                                processes=processes,
                                                links=dict(link.split("=", 1) for link in links)))


def _positive(value: str | None) -> int:
    try:
        return max(1, int(value or "1"))
    except ValueError:
        return 1


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(sys.argv[1:] if argv is None else argv)
    directory: Path = arguments.directory
    # PID 1 ignores SIGTERM unless it handles it: a pod stopped before the launcher runs ends at once.
    signal.signal(signal.SIGTERM, lambda number, _frame: sys.exit(128 + number))
    prepare(directory, arguments.command, arguments.snapshot, arguments.max_log_bytes, arguments.link)
    missing = wait_for_peers(peers(dict(os.environ)), arguments.peer_wait)
    if missing:
        print(f"mlyard: peers not found in DNS after {arguments.peer_wait:g}s: {', '.join(missing)}; "
              "starting anyway", file=sys.stderr, flush=True)
    stop = threading.Event()
    follower = threading.Thread(target=follow, args=(directory / OUTPUT_LOG, stop), daemon=True)
    follower.start()
    try:
        Launcher(directory).run()
    finally:
        stop.set()
        follower.join(timeout=10)
    outcome = read_json(directory / EXIT_FILE) or {}
    return int(outcome.get("exit_code", 1))


if __name__ == "__main__":
    sys.exit(main())
