"""What leadership runs: the real controller first, then the workers; a worker that cannot
start takes the controller down with it, so no controller runs without the lease."""

from __future__ import annotations

from pathlib import Path

import pytest
from controller_support import FakeBackend

from mlyard.paths import Paths
from mlyard.server.control.controller import Controller
from mlyard.server.control.supervisor import Supervisor
from mlyard.server.settings import ServerSettings
from mlyard.server.store.db import Database
from mlyard.storage import BlobStore


class BrokenWorkers(Supervisor):
    def _start_workers(self) -> None:
        raise RuntimeError("the sampler cannot read this machine")


def test_a_worker_that_cannot_start_stops_the_controller_it_followed(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'mlyard.db'}")
    settings = ServerSettings(paths=Paths(tmp_path), sample_interval_seconds=0)
    backend = FakeBackend()
    controller = Controller(database=database, backend=backend, settings=settings, blobs=BlobStore(tmp_path / "b"))
    supervisor = BrokenWorkers(controller, backend=backend, settings=settings)
    with pytest.raises(RuntimeError, match="sampler"):
        supervisor.start()
    assert controller.adopted == 0  # it had started
    assert not controller.running
    database.close()


def test_the_supervisor_runs_the_controller_and_says_what_it_adopted(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'mlyard.db'}")
    settings = ServerSettings(paths=Paths(tmp_path), sample_interval_seconds=0)
    backend = FakeBackend()  # not the local backend: no sampler, no environment builds
    controller = Controller(database=database, backend=backend, settings=settings, blobs=BlobStore(tmp_path / "b"))
    supervisor = Supervisor(controller, backend=backend, settings=settings)
    supervisor.start()
    workers = list(supervisor.workers)
    try:
        assert controller.running and supervisor.adopted == 0
        # What every backend's jobs need: their datasets' outputs collected, their trees swept, their volumes
        # measured, their cleaning reports stored.
        assert [type(worker).__name__ for worker in workers] == ["DatasetOutputs", "DatasetViewSweep", "VolumeUsage",
                                                                  "DatasetChecks"]
        assert all(worker._loop.alive for worker in workers)
    finally:
        supervisor.stop()
    assert not controller.running and supervisor.workers == []
    assert not any(worker._loop.alive for worker in workers)
    database.close()
