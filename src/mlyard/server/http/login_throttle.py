"""Failed logins slow down guessing without letting anyone lock a user out.

Failures are counted per (user, address): after FREE_FAILURES of them, each further attempt
from that address for that user waits a delay that doubles from FIRST_DELAY up to MAX_DELAY
after the last failure. A guesser's failures from one address never delay the same user from
another, so a flood of wrong passwords cannot keep the right one out.

There is deliberately no limit per address alone: behind a proxy or an Ingress every user
arrives from the proxy's address, so such a limit (or a delay for one address trying many
names) would let one guesser, or one mistyping colleague, lock everyone out. Trying many names
from one address (password spraying) is bounded instead by each name's own delays and by
argon2's cost, which every attempt pays, known name or not. Behind a proxy the (user, address)
pairs of different people merge into one per user: a guesser there delays that user's logins
through the proxy, never those of other users.

Kept in the server's memory: a restart forgets it, and servers sharing a database count
separately. A per-user lock would hand everyone a way to lock anyone out.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from mlyard.errors import TooManyRequests

FREE_FAILURES = 3
FIRST_DELAY = 1.0
MAX_DELAY = 300.0
FORGET_AFTER = 3600.0
"""A (user, address) whose last failure is older than this starts again from no failures."""


@dataclass
class _Failures:
    count: int = 0
    last: float = 0.0


class LoginThrottle:
    def __init__(self, free_failures: int = FREE_FAILURES, first_delay: float = FIRST_DELAY,
                 max_delay: float = MAX_DELAY) -> None:
        self.free_failures, self.first_delay, self.max_delay = free_failures, first_delay, max_delay
        self._pairs: dict[tuple[str, str], _Failures] = defaultdict(_Failures)
        self._lock = threading.Lock()

    def delay(self, failures: int) -> float:
        """How long after its last failure a (user, address) waits, having failed `failures` times."""
        if failures < self.free_failures:
            return 0.0
        return min(self.max_delay, self.first_delay * 2 ** (failures - self.free_failures))

    def check(self, user: str, address: str, now: float | None = None) -> None:
        """Raises TooManyRequests while this user must wait at this address."""
        now = time.monotonic() if now is None else now
        with self._lock:
            pair = self._pairs.get((user, address))
            if pair is not None:
                wait = pair.last + self.delay(pair.count) - now
                if wait > 0:
                    seconds = max(1, math.ceil(wait))
                    raise TooManyRequests(f"too many failed logins for user {user!r} from this address; try "
                                          f"again in {seconds} s", retry_after=seconds)

    def failed(self, user: str, address: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            pair = self._pairs[(user, address)]
            if now - pair.last > FORGET_AFTER:
                pair.count = 0
            pair.count, pair.last = pair.count + 1, now
            # Bounded memory: pairs that stopped failing are forgotten.
            if len(self._pairs) > 10_000:
                for key in [key for key, value in self._pairs.items() if now - value.last > FORGET_AFTER]:
                    del self._pairs[key]

    def succeeded(self, user: str, address: str) -> None:
        with self._lock:
            self._pairs.pop((user, address), None)
