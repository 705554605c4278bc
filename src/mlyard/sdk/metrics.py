"""Training metrics from inside a job: `report(step=…, loss=…, accuracy=…)`.

Only rank 0 reports unless told otherwise (data-parallel ranks see the same numbers). A report
never breaks, nor stalls, the training it measures: `report` checks the values at once and
returns, and a thread of the SDK sends the points in order (W&B and MLflow's asynchronous
logging work alike). A value that is not a finite number is refused at once (`report` returns
False); a server that does not answer, or a refusal, is written to stderr as one clear line
when the point is sent. At a normal exit of the process the SDK waits up to `FLUSH_SECONDS` for
the points not sent yet (a process killed, or ended by SIGTERM without a handler, loses them); `flush()` waits for them at any time and says whether all were stored. Outside
mlyard (no MLYARD_API) it does nothing.
"""

from __future__ import annotations

import atexit
import math
import os
import queue
import sys
import threading
import time
from typing import Any

API_VARIABLE = "MLYARD_API"
TOKEN_VARIABLE = "MLYARD_TOKEN"
JOB_VARIABLE = "MLYARD_JOB_ID"
TIMEOUT_SECONDS = 5.0
FLUSH_SECONDS = 10.0
MAX_WAITING = 10_000
"""Points waiting to be sent at most: a server that does not keep up costs points, not memory."""
_client: Any = None
_sender: _Sender | None = None
_sender_lock = threading.Lock()


def report(step: int, *, all_ranks: bool = False, **metrics: Any) -> bool:
    """Sends `metrics` (name=number) for `step` from the SDK's thread; True once they are
    checked and on their way (`flush()` says whether the server stored them)."""
    rank = int(os.environ.get("RANK") or 0)
    if rank != 0 and not all_ranks:
        return False
    if not os.environ.get(API_VARIABLE) or not os.environ.get(JOB_VARIABLE):
        return False
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return _refuse(f"step must be a non-negative integer, not {step!r}")
    if not metrics:
        return _refuse("no metrics given; call report(step=…, loss=…)")
    values = {}
    for name, value in metrics.items():
        number = _number(value)
        if number is None or not math.isfinite(number):
            return _refuse(f"{name}={value!r} is not a finite number; nothing of step {step} was reported")
        values[name] = number
    return _started_sender().put((int(os.environ[JOB_VARIABLE]), step, values, rank))


def flush(timeout: float = FLUSH_SECONDS) -> bool:
    """Waits up to `timeout` seconds for the points reported so far to be sent; True when every
    one since the last `flush` was stored."""
    return _sender.flush(timeout) if _sender is not None else True


class _Sender:
    """Sends the points of `report`, in order, from a daemon thread of its own."""

    def __init__(self) -> None:
        self.points: queue.Queue = queue.Queue(maxsize=MAX_WAITING)
        self.all_stored = True
        self.thread = threading.Thread(target=self._run, name="mlyard-report", daemon=True)
        self.thread.start()

    def put(self, point: tuple[int, int, dict[str, float], int]) -> bool:
        try:
            self.points.put_nowait(point)
        except queue.Full:
            self.all_stored = False
            return _refuse(f"step {point[1]} was dropped: {MAX_WAITING:,} points are still waiting to be sent")
        return True

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.points.all_tasks_done:
            while self.points.unfinished_tasks and time.monotonic() < deadline:
                self.points.all_tasks_done.wait(max(0.0, deadline - time.monotonic()))
            sent = not self.points.unfinished_tasks
        stored, self.all_stored = self.all_stored, True
        return sent and stored

    def _run(self) -> None:
        while True:
            job_id, step, values, rank = self.points.get()
            try:
                _connection().report(job_id, step, values, rank=rank)
            except Exception as error:  # noqa: BLE001 - reporting must never end the training
                self.all_stored = False
                _refuse(f"step {step} was not stored: {error}")
            finally:
                self.points.task_done()


def _forget_sender() -> None:
    # A forked child (a data loader's worker) has no copy of the thread, and the parent's
    # connections are not its own: it starts a sender and a client of its own if it reports.
    global _sender, _sender_lock, _client
    _sender, _sender_lock, _client = None, threading.Lock(), None


os.register_at_fork(after_in_child=_forget_sender)
atexit.register(flush)


def _started_sender() -> _Sender:
    global _sender
    with _sender_lock:
        if _sender is None:
            _sender = _Sender()
        return _sender


def _number(value: Any) -> float | None:
    """Python and NumPy numbers, one-element arrays and tensors; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    item = getattr(value, "item", None)
    if callable(item):
        try:
            value = item()
        except (ValueError, RuntimeError, TypeError):  # more than one element
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _connection():
    global _client
    if _client is None:
        from mlyard.client import Client

        # No retries across a server restart here: a lost point is better than a stalled step.
        _client = Client(os.environ[API_VARIABLE], os.environ.get(TOKEN_VARIABLE), timeout=TIMEOUT_SECONDS,
                         retry_seconds=0)
    return _client


def _refuse(message: str) -> bool:
    print(f"mlyard.sdk.report: {message}", file=sys.stderr, flush=True)
    return False
