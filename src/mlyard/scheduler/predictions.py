"""How long a job will run, predicted from the jobs that ran before it with the same key.

On a shared training cluster most jobs are reruns: the same user runs the same command again
with another seed, a sweep's trials differ in a few values, a nightly retraining repeats
itself (Tiresias and Gandiva both build on this). A job's key names what makes it a rerun
(its owner, name and command on the server; on a trace whatever the trace records, often only
the tenant and the GPU count). The prediction for a key is the median of the durations of its
last `window` finished jobs.

A prediction is *trusted* only while the key's own predictions were close: the median relative
error of its last `window` predictions, each checked when its job finished, is at most
`trusted_error`. A policy orders by trusted predictions only, so keys whose jobs vary (a tenant
that runs everything, a trace that records nothing but GPU counts) fall back to what the policy
does without predictions, and a key that stops being predictable loses its trust within a few
jobs. Durations are those of finished jobs; a job that failed or was cancelled says little
about how long its reruns take, and the caller leaves it out.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

WINDOW = 16
MIN_SAMPLES = 3
"""A key needs this many finished jobs before it predicts anything."""
TRUSTED_ERROR = 0.5
"""The largest median relative error (|predicted − actual| / actual) of a trusted key."""
MAX_KEYS = 20_000
"""Keys kept; the one whose last job finished longest ago goes first (a few hundred bytes each)."""


def relative_error(predicted: float, actual: float) -> float:
    """|predicted − actual| / actual, with a second's floor so that instant jobs do not dominate."""
    return abs(predicted - actual) / max(actual, 1.0)


@dataclass(slots=True)
class _Key:
    durations: deque[float]
    errors: deque[float]


class DurationHistory:
    """Running duration estimates per key (see the module's text). Not thread-safe: the
    controller's thread and the simulator each keep their own."""

    def __init__(self, *, window: int = WINDOW, min_samples: int = MIN_SAMPLES,
                 trusted_error: float = TRUSTED_ERROR, max_keys: int = MAX_KEYS):
        if window < 1 or not 1 <= min_samples <= window or trusted_error < 0 or max_keys < 1:
            raise ValueError("window ≥ 1, 1 ≤ min_samples ≤ window, trusted_error ≥ 0 and max_keys ≥ 1 are required")
        self.window = window
        self.max_keys = max_keys
        self.min_samples = min_samples
        self.trusted_error = trusted_error
        self._keys: dict[Hashable, _Key] = {}

    def predict(self, key: Hashable) -> float | None:
        """The key's estimate in seconds, trusted or not; None before `min_samples` finished jobs."""
        known = self._keys.get(key)
        if known is None or len(known.durations) < self.min_samples:
            return None
        return statistics.median(known.durations)

    def trusted(self, key: Hashable) -> bool:
        """Whether the key's recent predictions were close enough to order jobs by."""
        known = self._keys.get(key)
        if known is None or len(known.errors) < self.min_samples:
            return False
        return statistics.median(known.errors) <= self.trusted_error

    def trusted_prediction(self, key: Hashable) -> float | None:
        """The estimate where the key is trusted; None otherwise."""
        return self.predict(key) if self.trusted(key) else None

    def record(self, key: Hashable, seconds: float, predicted: float | None) -> None:
        """A job of `key` finished after running `seconds`; `predicted` is what `predict`
        said for it while it waited (None: nothing), whose error the key's trust is built on."""
        known = self._keys.pop(key, None)  # and back in at the end: the most recent key is kept longest
        if known is None:
            known = _Key(deque(maxlen=self.window), deque(maxlen=self.window))
            if len(self._keys) >= self.max_keys:
                del self._keys[next(iter(self._keys))]
        self._keys[key] = known
        if predicted is not None:
            known.errors.append(relative_error(predicted, seconds))
        known.durations.append(seconds)

    def recent_errors(self, key: Hashable) -> tuple[float, ...]:
        """The relative errors of the key's last predictions, oldest first (what trust is judged on)."""
        known = self._keys.get(key)
        return tuple(known.errors) if known is not None else ()

    def __len__(self) -> int:
        return len(self._keys)


def median_relative_error(pairs: Iterable[tuple[float, float]]) -> float | None:
    """The median relative error of (predicted, actual) pairs; None without any."""
    errors: Sequence[float] = [relative_error(predicted, actual) for predicted, actual in pairs]
    return statistics.median(errors) if errors else None
