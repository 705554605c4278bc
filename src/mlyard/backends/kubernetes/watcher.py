"""mlyard's pods as last seen, kept current by a watch in a background thread.

The cache holds pods in the API's JSON shape. A deleted pod stays as a tombstone (its last
state) for a while, so a replica whose pod vanished is still observed as what it became:
exited with its code, or lost with the reason. The watch lists once, then follows changes
from that list's resourceVersion; when the API says the version is too old (410 Gone) or
the connection breaks, it lists again, and pods that vanished meanwhile become tombstones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

log = logging.getLogger("mlyard.backends.kubernetes")

TOMBSTONE_SECONDS = 3600.0
_RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)


class PodCache:
    def __init__(self, clock: Callable[[], float] = time.time):
        self._lock = threading.Lock()
        self._pods: dict[str, dict[str, Any]] = {}
        self._tombstones: dict[str, tuple[dict[str, Any], float]] = {}
        self._clock = clock
        self.synced = threading.Event()
        """Set once a full list has been seen: before that, a pod missing here may still exist."""

    def get(self, name: str) -> tuple[dict[str, Any] | None, bool]:
        """(pod, deleted): the pod as last seen, and whether it is gone from the API."""
        with self._lock:
            if name in self._pods:
                return self._pods[name], False
            if name in self._tombstones:
                return self._tombstones[name][0], True
            return None, False

    def pods(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._pods.values())

    def apply(self, kind: str, pod: Mapping[str, Any]) -> bool:
        """Applies a watch event (ADDED, MODIFIED, DELETED); True when the pod's phase, a
        container state or its presence changed: what the controller wants to hear of at once."""
        name = pod["metadata"]["name"]
        with self._lock:
            previous = self._pods.get(name)
            if kind == "DELETED":
                self._pods.pop(name, None)
                self._tombstones[name] = (dict(pod), self._clock())
                return True
            if previous is not None and _older(pod, previous):
                return False
            self._pods[name] = dict(pod)
            self._tombstones.pop(name, None)
            return previous is None or _summary(previous) != _summary(pod)

    def replace(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A full list: pods not in it were deleted while nobody watched."""
        listed = {pod["metadata"]["name"]: dict(pod) for pod in pods}
        now = self._clock()
        with self._lock:
            for name, pod in self._pods.items():
                if name not in listed:
                    self._tombstones[name] = (pod, now)
            self._pods = listed
            for name in listed:
                self._tombstones.pop(name, None)
            for name, (_pod, since) in list(self._tombstones.items()):
                if now - since > TOMBSTONE_SECONDS:
                    del self._tombstones[name]
        self.synced.set()


def _older(pod: Mapping[str, Any], than: Mapping[str, Any]) -> bool:
    """resourceVersions are opaque, but etcd's are increasing integers: compare them when they are."""
    new, old = pod["metadata"].get("resourceVersion", ""), than["metadata"].get("resourceVersion", "")
    return new.isdigit() and old.isdigit() and int(new) < int(old)


def _summary(pod: Mapping[str, Any]) -> tuple:
    status = pod.get("status") or {}
    containers = tuple(
        (c.get("name"), tuple(sorted((c.get("state") or {}).keys())), ((c.get("state") or {}).get("waiting") or {}).get("reason"))
        for c in status.get("containerStatuses") or ()
    )
    conditions = tuple((c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or ())
    return status.get("phase"), status.get("reason"), containers, conditions, \
        (pod.get("metadata") or {}).get("deletionTimestamp")


ListPods = Callable[[], tuple[list[dict[str, Any]], str]]
"""Lists mlyard's pods: (pods, the list's resourceVersion)."""
WatchPods = Callable[[str], Iterator[tuple[str, dict[str, Any]]]]
"""Follows changes from a resourceVersion: (event type, pod) until it ends or raises."""


class PodWatcher:
    """Runs list-then-watch in a daemon thread until `stop()`; `on_change` is told of changes."""

    def __init__(self, cache: PodCache, list_pods: ListPods, watch_pods: WatchPods,
                 on_change: Callable[[], None] | None = None):
        self.cache = cache
        self.list_pods = list_pods
        self.watch_pods = watch_pods
        self.on_change = on_change
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlyard-k8s-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            try:
                pods, version = self.list_pods()
                self.cache.replace(pods)
                self._changed()
                failures = 0
                for kind, pod in self.watch_pods(version):
                    if self._stopped.is_set():
                        return
                    if kind in ("ADDED", "MODIFIED", "DELETED") and self.cache.apply(kind, pod):
                        self._changed()
            except Exception as error:  # noqa: BLE001 - an API that is briefly away must not end the watch
                delay = _RETRY_SECONDS[min(failures, len(_RETRY_SECONDS) - 1)]
                failures += 1
                log.warning("watching pods failed (%s); listing again in %gs", error, delay)
                self._stopped.wait(delay)

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # a failing listener must not end the watch
                log.exception("change notification failed")
