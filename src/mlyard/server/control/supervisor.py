"""Every background thread of the leading server, started and stopped in one place.

Each of them runs on `server/loop.py`'s `Loop`.

`Supervisor` is what `Leadership` runs while this server leads: the controller first (it
settles what a previous leader left before anything else acts), then the workers that follow
leadership — resource sampling where the backend's node is this machine, the datasets jobs
write, the dataset trees of jobs (built while they wait, removed once they end), the measure of
volumes, and environment builds where the backend builds them. Stopping stops the controller
first, then the workers.
"""

from __future__ import annotations

from typing import Protocol

from mlyard.backends.base import Backend
from mlyard.server import heap
from mlyard.server.control.controller import Controller
from mlyard.server.settings import ServerSettings
from mlyard.server.workers.dataset_checks import DatasetChecks
from mlyard.server.workers.dataset_outputs import DatasetOutputs
from mlyard.server.workers.dataset_views import DatasetViewSweep
from mlyard.server.workers.environment_builds import EnvironmentBuilds, builder_for
from mlyard.server.workers.sampling import NodeMonitor
from mlyard.server.workers.volume_usage import VolumeUsage


class Worker(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


class Supervisor:
    """Implements what `Leadership` needs (`start`, `stop`, `wake`); `adopted` is the
    controller's (the health check shows it)."""

    def __init__(self, controller: Controller, *, backend: Backend, settings: ServerSettings):
        self.controller = controller
        self.backend = backend
        self.settings = settings
        self.workers: list[Worker] = []

    @property
    def adopted(self) -> int | None:
        return self.controller.adopted

    def wake(self) -> None:
        self.controller.wake()

    def start(self) -> None:
        """Starts the controller, then the workers; if a worker cannot start, everything
        started is stopped again before the error goes on (leadership then gives the lease up,
        and no controller may run without it)."""
        self.controller.start()
        try:
            self._start_workers()
        except BaseException:
            self.stop()
            raise

    def _start_workers(self) -> None:
        database = self.controller.database
        # Sampling follows leadership: the leader's machine runs the local replicas it measures.
        monitor = NodeMonitor.start_for(database, self.backend, self.settings)
        if monitor is not None:
            self.workers.append(monitor)
        outputs = DatasetOutputs(database, self.settings.paths, self.controller.blobs, self.settings.max_blob_bytes)
        outputs.start()
        self.workers.append(outputs)
        views = DatasetViewSweep(database, self.settings.paths, self.controller.blobs)
        views.start()
        self.workers.append(views)
        usage = VolumeUsage(database, self.backend, self.settings.volume_scan_seconds)
        usage.start()
        self.workers.append(usage)
        checks = DatasetChecks(database, self.settings.paths)
        checks.start()
        self.workers.append(checks)
        builder = builder_for(self.backend, self.settings.paths, self.settings.environment_builds,
                              isolate=self.settings.job_isolation == "namespace")
        if builder is not None:
            builds = EnvironmentBuilds(database, self.settings.paths, builder)
            builds.start()
            self.workers.append(builds)

    def stop(self) -> None:
        self.controller.stop()
        for worker in self.workers:
            worker.stop()
        self.workers.clear()
        heap.release()  # the controller and the jobs it kept were frozen: let a collection free them
