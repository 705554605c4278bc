"""Failed logins slow down guessing: after MAX_FAILURES failures within WINDOW for one account
(or MAX_ADDRESS_FAILURES from one address, higher because many people may share an address
behind a proxy), further attempts are refused until the oldest of them leaves the window.

Kept in the server's memory: a restart forgets it, and servers sharing a database count
separately. That bounds a guesser to a few attempts per window per server, which is what the
throttle is for; argon2's cost bounds it further.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque

from mlyard.errors import TooManyRequests

MAX_FAILURES = 5
MAX_ADDRESS_FAILURES = 30
WINDOW = 300.0


class LoginThrottle:
    def __init__(self, max_failures: int = MAX_FAILURES, max_address_failures: int = MAX_ADDRESS_FAILURES,
                 window: float = WINDOW) -> None:
        self.limits = {"user": max_failures, "address": max_address_failures}
        self.window = window
        self._failures: dict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        failures = self._failures[key]
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        return failures

    def check(self, user: str, address: str, now: float | None = None) -> None:
        """Raises TooManyRequests while the account or the address is locked out."""
        now = time.monotonic() if now is None else now
        with self._lock:
            for kind, value, what in (("user", user, f"user {user!r}"), ("address", address, f"address {address}")):
                failures = self._recent(f"{kind}:{value}", now)
                limit = self.limits[kind]
                if len(failures) >= limit:
                    wait = max(1, math.ceil(failures[-limit] + self.window - now))
                    raise TooManyRequests(f"too many failed logins for {what}; try again in {wait} s",
                                          retry_after=wait)

    def failed(self, user: str, address: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            for key in (f"user:{user}", f"address:{address}"):
                self._recent(key, now).append(now)
            # Bounded memory: addresses and names that stopped failing are forgotten.
            if len(self._failures) > 10_000:
                for key in [key for key, failures in self._failures.items() if not self._recent(key, now)]:
                    del self._failures[key]

    def succeeded(self, user: str) -> None:
        with self._lock:
            self._failures.pop(f"user:{user}", None)
