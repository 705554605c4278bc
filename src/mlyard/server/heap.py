"""Keeps Python's cyclic garbage collector from pausing the server for long.

A full collection walks every object the process holds and stops every thread meanwhile: the
modules of the server (about 200,000 objects: FastAPI, SQLAlchemy, pydantic, the app) and the
waiting jobs the controller keeps in memory. Measured on a 2-core machine, such collections
paused the server for 100–160 ms, several times a second while a queue of 10,000 jobs filled:
the slowest answers were those pauses, not the work of the requests.

`settle()` collects once, then freezes what is left (`gc.freeze`): objects alive at that moment
are never walked again. They are still freed by reference counting when let go (a job leaving
the queue); only a reference cycle among them would stay for good, which is why it runs rarely:
once the server has started, and each time the waiting jobs the controller keeps double in number
(from 1,000: `control/queued_jobs.py`). A queue filled to 100,000 is settled 7 times, each
collection walking what came since the last, where Python's own full collections would come
every quarter of growth and walk everything each time.

A controller that stops (this server no longer leads) leaves a cycle among frozen objects (it
and its loop point at each other, with the whole queue kept behind them): `release()` unfreezes
everything then, so that the next full collection frees it.

`tune()` raises the threshold of the youngest generation (`YOUNG_OBJECTS`)."""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)


YOUNG_OBJECTS = 50_000
"""Allocations (less deallocations) between collections of the youngest generation (700 by
default up to Python 3.12). A request allocates thousands of objects that live until its
answer: at 700 a collection finds many of them still alive and promotes them towards the oldest
generation, whose growth is what brings on full collections."""


def tune() -> None:
    gc.set_threshold(YOUNG_OBJECTS, *gc.get_threshold()[1:])


def settle(what: str) -> None:
    began = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info("froze %s objects (%s) in %.0f ms; collections no longer walk them", f"{gc.get_freeze_count():,}",
             what, 1000 * (time.perf_counter() - began))


def release() -> None:
    log.info("unfroze %s objects: the next full collection walks them again", f"{gc.get_freeze_count():,}")
    gc.unfreeze()
