"""Running the server in the foreground, and starting/stopping it in the background.

A background server is `python -m mlyard server run` in a session of its own, with its pid in
`MLYARD_HOME/server.pid`, its output in `server.log` and its URL in `server.json`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from mlyard.paths import Paths
from mlyard.errors import MlyardError
from mlyard.server.settings import ServerSettings

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
SWITCH_INTERVAL = 0.0002
"""Seconds a thread of the server holds the interpreter before one that waits gets it (Python's
default is 0.005)."""


@dataclass(frozen=True)
class ServerState:
    running: bool
    pid: int | None
    url: str | None


def _lock_path(paths: Paths) -> Path:
    return paths.home / "server.lock"


def _lock_held(paths: Paths) -> bool:
    """True while a server of this home runs: it holds `server.lock` for its whole life, so a
    stale pid file (after a crash or a reboot) can never be mistaken for a server."""
    try:
        with open(_lock_path(paths), "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False
    except OSError:
        return False


def state(paths: Paths) -> ServerState:
    if not paths.home.is_dir() or not _lock_held(paths):
        return ServerState(running=False, pid=None, url=None)
    try:
        info = json.loads(paths.server_info.read_text())
        return ServerState(running=True, pid=int(info["pid"]), url=info["url"])
    except (OSError, ValueError, KeyError):
        return ServerState(running=True, pid=None, url=None)


def _prepare_home(paths: Paths) -> None:
    """Job specs (with their env values), logs and tokens live here: private to the owner."""
    os.umask(0o077)
    paths.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths.home.chmod(0o700)


def run_foreground(settings: ServerSettings) -> None:
    import uvicorn

    from mlyard.server.app import create_app
    from mlyard.server import heap

    paths = settings.paths
    _prepare_home(paths)
    lock = open(_lock_path(paths), "a")  # held, not closed, until this process ends
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise MlyardError(f"another mlyard server is running with MLYARD_HOME={paths.home}") from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        _check_backend(settings)
        _check_job_accounts(settings)
    except BaseException:
        lock.close()
        raise
    # The controller runs in a process of its own (`control/process.py`), but requests still
    # share the interpreter with each other and the server's threads. A handler blocks on I/O a
    # dozen times a request and waits for the interpreter each time, up to a whole switch
    # interval: 0.2 ms rather than 5 ms keeps requests quick.
    sys.setswitchinterval(SWITCH_INTERVAL)
    heap.tune()
    app = create_app(settings, settle_heap=True, controller_process=True)
    paths.server_pid.write_text(str(os.getpid()))
    paths.server_info.write_text(json.dumps({"url": settings.url, "pid": os.getpid()}))
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning",
                    timeout_graceful_shutdown=5)
    finally:
        paths.server_pid.unlink(missing_ok=True)
        lock.close()


def _check_backend(settings: ServerSettings) -> None:
    """Raises, as a plain error, what would otherwise stop the app's startup with a traceback
    from the ASGI server: no cluster for the Kubernetes backend, no engine where containers
    are required. The app builds its backend again; both are cheap."""
    if settings.backend == "kubernetes":
        from mlyard.backends.kubernetes import KubernetesSettings, api_client

        api_client(KubernetesSettings.from_environment()).close()
    elif settings.runtime == "container":
        from mlyard.backends.local.containers import container_replicas

        replicas = container_replicas(settings.runtime, settings.container_socket)
        if replicas is not None:
            replicas.close()


def _check_job_accounts(settings: ServerSettings) -> None:
    """What would stop the app's startup over job accounts, raised as a plain error first."""
    if settings.backend == "local":
        from mlyard.server.control import job_accounts

        job_accounts.check(settings)


def start_background(settings: ServerSettings) -> ServerState:
    paths = settings.paths
    current = state(paths)
    if current.running:
        return current
    _check_port_free(settings)
    # A setting the server would refuse at start is reported here, not only in its log.
    _check_job_accounts(settings)
    _prepare_home(paths)
    with open(paths.server_log, "ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "mlyard.server", "--host", settings.host, "--port", str(settings.port)],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "MLYARD_HOME": str(paths.home)},
        )
    import httpx  # here, not at the top: the server process itself starts faster without it

    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise MlyardError(f"the server exited at start (code {process.returncode}); "
                              f"its log ends with: {_log_tail(paths)}")
        try:
            if httpx.get(f"{settings.url}/api/v1/health", timeout=1).is_success:
                return ServerState(running=True, pid=process.pid, url=settings.url)
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.terminate()
    raise MlyardError(f"the server did not answer within {START_TIMEOUT:.0f}s; see {paths.server_log}")


def _check_port_free(settings: ServerSettings) -> None:
    """Another process on the port would answer our health checks: refuse before starting."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((settings.host, settings.port))
        except OSError as error:
            raise MlyardError(
                f"cannot listen on {settings.host}:{settings.port}: {error.strerror} "
                "(another server? choose a port with --port or MLYARD_PORT)"
            ) from None


def stop_background(paths: Paths) -> ServerState:
    current = state(paths)
    if not current.running or current.pid is None:
        paths.server_pid.unlink(missing_ok=True)
        return current
    os.kill(current.pid, signal.SIGTERM)
    try:
        psutil.Process(current.pid).wait(timeout=STOP_TIMEOUT)
    except psutil.TimeoutExpired:
        os.kill(current.pid, signal.SIGKILL)
    except psutil.NoSuchProcess:
        pass
    paths.server_pid.unlink(missing_ok=True)
    return current


def _log_tail(paths: Paths) -> str:
    try:
        lines = [line for line in paths.server_log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(empty log)"
