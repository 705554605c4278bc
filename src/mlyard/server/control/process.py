"""The controller in a process of its own, beside the process that serves HTTP.

A round over a long queue is a stretch of pure Python (about 150–300 ms with 100,000 jobs
waiting). In the serving process it held the interpreter while requests waited for it, and
their slowest answers were the rounds' length. So `mlyard server run` leads and runs the
controller, with the workers that follow leadership (`supervisor.py`), in a child process,
and serves HTTP in its own. A server built in a test process (`create_app` without
`controller_process`) keeps the controller in a thread, as before.

The two talk over a socketpair (SOCK_SEQPACKET: whole messages, and an end of file once the
other side is gone); nobody else can reach it:
- the server sends `w` to wake the controller (a submission, a cancellation). A full buffer
  drops it: a wake already waiting there is enough;
- the controller sends its state (`{"role": "leader", "adopted": 3}`) whenever it changes, the
  seconds of each scheduling round (`{"cycle": ["fifo", 0.12]}`), which the server's `/metrics`
  shows, and `{"auth": true}` as it commits a change of who a token stands for (a job's token
  revoked as the job ends), so that the server forgets the answers it remembers
  (`auth_cache.py`).

The controller dies with its server: the kernel kills it when its parent dies
(`PR_SET_PDEATHSIG`), and it stops on its own once the socket ends. A server killed with
kill -9 thus leaves no controller leading behind it, and the next server, or a standby, takes
over. A controller process that ends while its server runs is started again after a second.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from mlyard.errors import MlyardError
from mlyard.server import auth_cache
from mlyard.server.control.leadership import Role

log = logging.getLogger("mlyard.controller")

START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
"""A stopping controller finishes its pass first; Leadership allows its loop 60 s too."""
RESTART_DELAY = 1.0
_PR_SET_PDEATHSIG = 1
_STATE_INTERVAL = 0.1


class ControllerProcess:
    """What the serving process holds in place of `Leadership`: `wake`, `role`, and `controller`
    (itself while the child leads, for the health check's `adopted`)."""

    def __init__(self, host: str, port: int, observe_cycle: Callable[[str, float], None] | None = None):
        self.arguments = ["--host", host, "--port", str(port)]
        self.observe_cycle = observe_cycle
        self.adopted: int | None = None
        self._role: Role = "standby"
        self._started = threading.Event()
        self._stopping = threading.Event()
        self._process: subprocess.Popen | None = None
        self._channel: socket.socket | None = None
        self._reader: threading.Thread | None = None

    @property
    def role(self) -> Role:
        return self._role

    @property
    def controller(self) -> ControllerProcess | None:
        return self if self._role == "leader" else None

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Starts the controller's process and waits for its first word: whether it leads."""
        self._spawn()
        self._reader = threading.Thread(target=self._read, name="mlyard-controller-process", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not self._started.wait(0.1):
            process = self._process
            if time.monotonic() > deadline or (process is not None and process.poll() is not None):
                self.stop()
                raise MlyardError("the controller's process did not start; the server's log says why")

    def wake(self) -> None:
        channel = self._channel
        if channel is None:
            return
        try:
            channel.send(b"w", socket.MSG_DONTWAIT)
        except OSError:  # full (a wake is waiting already), or the process is being started again
            pass

    def stop(self) -> None:
        self._stopping.set()
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log.warning("the controller's process did not stop within %.0fs; killing it", STOP_TIMEOUT)
                process.kill()
                process.wait()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=5)
        if self._channel is not None:
            self._channel.close()
        self._role, self.adopted = "standby", None

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "mlyard.server.control.process", "--fd", str(theirs.fileno()), *self.arguments],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._channel = ours

    def _read(self) -> None:
        """Takes the controller's messages; starts it again if it ends while the server runs."""
        while True:
            channel = self._channel
            try:
                message = channel.recv(4096) if channel is not None else b""
            except OSError:
                message = b""
            if message:
                try:
                    self._take(json.loads(message))
                except (ValueError, KeyError, TypeError):  # this thread must go on: it restarts the process
                    log.exception("an unreadable message from the controller's process: %r", message[:200])
                continue
            self._role, self.adopted = "standby", None
            # One that never started is `start`'s to report; started again, it would fail again.
            if self._stopping.is_set() or not self._started.is_set():
                return
            process = self._process
            code = process.wait() if process is not None else None
            log.error("the controller's process ended (code %s); starting it again in %.0fs", code, RESTART_DELAY)
            if self._stopping.wait(RESTART_DELAY):
                return
            if channel is not None:
                channel.close()
            self._spawn()

    def _take(self, message: dict) -> None:
        if "auth" in message:  # it ended a job (revoking its token), say: no answer remembered holds
            auth_cache.forget_all()
            return
        if "cycle" in message:
            policy, seconds = message["cycle"]
            if self.observe_cycle is not None:
                self.observe_cycle(policy, seconds)
            return
        self._role, self.adopted = message["role"], message.get("adopted")
        self._started.set()


# --------------------------------------------------------------------- the child's side
def _die_with(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the end of the socket still stops it
        return
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlyard.server.control.process")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    arguments = parser.parse_args(argv)
    _die_with(os.getppid())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    channel = socket.socket(fileno=arguments.fd)
    stopping = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stopping.set())
    try:
        _serve(channel, arguments, stopping)
    except MlyardError as error:
        log.error("the controller's process cannot run: %s", error.message)
        return 1
    return 0


def _serve(channel: socket.socket, arguments: argparse.Namespace, stopping: threading.Event) -> None:
    from mlyard.server import heap
    from mlyard.server.control.controller import Controller
    from mlyard.server.control.leadership import Leadership, lease_for
    from mlyard.server.control.supervisor import Supervisor
    from mlyard.server.opening import open_server
    from mlyard.server.settings import ServerSettings

    heap.tune()
    settings = ServerSettings.from_environment(host=arguments.host, port=arguments.port)
    database, blobs, backend = open_server(settings, None)
    sending = threading.Lock()

    def send(message: dict) -> None:
        with sending:
            try:
                channel.send(json.dumps(message).encode())
            except OSError:  # the server is gone: the reader below stops this process
                stopping.set()

    auth_cache.watch(lambda: send({"auth": True}))
    leadership = Leadership(lease_for(database.url), lambda: Supervisor(Controller(
        database=database, backend=backend, settings=settings, blobs=blobs,
        observe_cycle=lambda policy, seconds: send({"cycle": [policy, seconds]})), backend=backend, settings=settings))
    try:
        leadership.start()
        heap.settle("the controller once started")

        def read() -> None:
            while channel.recv(64):
                leadership.wake()
            stopping.set()  # the server's end closed: it is gone
        threading.Thread(target=read, name="mlyard-wakes", daemon=True).start()
        said = None
        while True:
            state = {"role": leadership.role, "adopted": getattr(leadership.controller, "adopted", None)}
            if state != said:
                send(state)
                said = state
            if stopping.wait(_STATE_INTERVAL):
                break
    finally:
        leadership.stop()
        backend.close()
        database.close()


if __name__ == "__main__":
    sys.exit(main())
