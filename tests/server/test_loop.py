"""The one loop helper of the server's background threads: steps, wakes, survives a failing
step, waits its first delay, and stops."""

from __future__ import annotations

import threading
import time

from conftest import wait_for

from mlyard.server.loop import Loop


def test_a_loop_steps_on_its_delay_or_a_wake_and_stops() -> None:
    calls: list[float] = []
    stepped = threading.Event()

    def step() -> float:
        calls.append(time.monotonic())
        stepped.set()
        return 60.0  # only a wake brings the next step

    loop = Loop("test-loop", step, retry_seconds=60.0)
    loop.start()
    assert stepped.wait(5) and loop.alive
    stepped.clear()
    loop.wake()
    assert stepped.wait(5)
    assert len(calls) == 2
    loop.stop()
    assert not loop.alive and loop.stopping


def test_a_failing_step_is_retried_after_its_retry_delay_and_the_first_waits() -> None:
    outcomes = iter([RuntimeError("database hiccup"), 0.01, 60.0])
    calls: list[float] = []

    def step() -> float:
        calls.append(time.monotonic())
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    began = time.monotonic()
    loop = Loop("test-loop", step, retry_seconds=0.05, first_delay=0.2)
    loop.start()
    assert wait_for(lambda: len(calls) == 3, timeout=5)
    loop.stop()
    assert calls[0] - began >= 0.2  # the first delay
    assert calls[1] - calls[0] >= 0.05  # the retry after the failure
    assert not loop.alive
