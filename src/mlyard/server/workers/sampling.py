"""The leader's sampling thread: measures its node and the replicas running there every
`sample_interval_seconds`, stores the figures through `services.monitoring`, compacts the
sample tables every minute, applies the utilization policies (`idleness.py`) about as often, and
every few seconds looks for distributed PyTorch jobs whose replicas never met (`connections.py`).

It belongs to the controller because the controller's server is the one that started (or
adopted) the local replicas and is the only one that can see their processes; standbys
measure nothing, so a node is never sampled twice. Only the local backend's node is this
machine; other backends' nodes need an agent of their own.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import select

from mlyard.api.nodes import GpuUsage, NodeInventory, NodeUsage
from mlyard.api.resources import ReplicaUsage
from mlyard.backends.base import Backend
from mlyard.monitor import Root, Sample, Sampler
from mlyard.server.workers import connections, idleness
from mlyard.server.store.db import Database
from mlyard.server.loop import Loop
from mlyard.server.store.rows import AttemptRow, ReplicaRow
from mlyard.server.services import resources
from mlyard.server.settings import ServerSettings

log = logging.getLogger("mlyard.sampling")

COMPACT_INTERVAL = 60.0

# (job id, attempt number, replica name, rank)
ReplicaKey = tuple[int, int, str, int]


class NodeMonitor:
    def __init__(self, database: Database, node: str, settings: ServerSettings):
        self.database = database
        self.node = node
        self.settings = settings
        self._loop = Loop("mlyard-sampler", self._beat, retry_seconds=settings.sample_interval_seconds,
                          failure="sampling failed")
        self._next_at: float | None = None
        self.sampler = Sampler()  # from now on its deltas count
        self._compacted_at = 0.0
        self._idleness_checked_at = 0.0
        self.connections = connections.ConnectionWatch(node)
        self._connections_checked_at = 0.0

    @classmethod
    def start_for(cls, database: Database, backend: Backend, settings: ServerSettings) -> NodeMonitor | None:
        """A running monitor of this machine, or None where sampling is off or the backend's
        nodes are not this machine."""
        if settings.sample_interval_seconds <= 0 or backend.name != "local":
            return None
        nodes = backend.nodes()
        if len(nodes) != 1:
            return None
        try:
            monitor = cls(database, nodes[0].name, settings)
        except Exception:  # jobs run without figures rather than not at all
            log.exception("node sampling could not start")
            return None
        monitor.start()
        return monitor

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
        self.sampler.close()

    @property
    def alive(self) -> bool:
        return self._loop.alive

    def _beat(self) -> float:
        """Samples at a fixed cadence, skipping the beats a slow pass (or a suspended machine)
        missed; returns the wait until the next beat."""
        interval = self.settings.sample_interval_seconds
        if self._next_at is None:  # the first call only describes the node
            try:
                resources.record_inventory(self.database, self.node, NodeInventory(**self.sampler.inventory()))
            except Exception:  # the figures matter more than the description
                log.exception("recording the node's inventory failed")
            self._next_at = time.monotonic() + interval
            return interval
        self._next_at += interval * max(1, int((time.monotonic() - self._next_at) // interval) + 1)
        try:
            self.sample_once()
            if time.time() - self._compacted_at >= COMPACT_INTERVAL:
                self.compact()
        except Exception:  # a bad pass must not end sampling; the next one retries
            log.exception("sampling failed")
        # Judged right after a sample, so the newest figures are in the window.
        if time.time() - self._idleness_checked_at >= idleness.check_interval(self.settings):
            self.check_idleness()
        # Half a beat of slack: a check every beat must not slip to every other one.
        if (time.time() - self._connections_checked_at
                >= connections.check_interval(self.settings) - self.settings.sample_interval_seconds / 2):
            self.check_connections()
        return self._next_at - time.monotonic()

    def sample_once(self) -> Sample[ReplicaKey]:
        with self.database.transaction() as session:
            rows = session.execute(
                select(ReplicaRow.job_id, AttemptRow.number, ReplicaRow.role, ReplicaRow.index, ReplicaRow.rank,
                       ReplicaRow.pid, ReplicaRow.pid_started_at)
                .join(AttemptRow)
                .where(AttemptRow.finished_at.is_(None), ReplicaRow.node == self.node, ReplicaRow.pid.is_not(None),
                       ReplicaRow.state.in_(("pending", "running")))
            ).all()
        roots = {(job_id, attempt, f"{role}-{index}", rank): Root(pid=pid, started_at=started_at)
                 for job_id, attempt, role, index, rank, pid, started_at in rows}
        sample = self.sampler.sample(roots)
        resources.record(self.database, self.node, [node_usage(sample)], [
            ReplicaUsage(job_id=job_id, attempt=attempt, replica=replica, rank=rank, node=self.node, at=sample.at,
                         cpu_percent=tree.cpu_percent, memory_bytes=tree.rss_bytes,
                         gpu_memory_bytes=tree.gpu_memory_bytes, processes=tree.processes)
            for (job_id, attempt, replica, rank), tree in sample.trees.items()
        ])
        return sample

    def check_idleness(self) -> None:
        self._idleness_checked_at = time.time()
        try:
            idleness.check(self.database, self.settings, self._idleness_checked_at)
        except Exception:  # the next check retries; sampling goes on meanwhile
            log.exception("checking for idle jobs failed")

    def check_connections(self) -> None:
        self._connections_checked_at = time.time()
        try:
            self.connections.check(self.database, self.settings, self._connections_checked_at)
        except Exception:  # the next check retries; sampling goes on meanwhile
            log.exception("checking the connections of distributed jobs failed")

    def compact(self) -> None:
        self._compacted_at = time.time()
        result = resources.compact(self.database, self._compacted_at,
                                    raw_retention=self.settings.raw_sample_retention_seconds,
                                    minute_retention=self.settings.minute_sample_retention_seconds)
        if result.deleted or result.minutes:
            log.debug("samples: %d minute rows written, %d expired rows deleted", result.minutes, result.deleted)


def node_usage(sample: Sample) -> NodeUsage:
    node = sample.node
    return NodeUsage(
        at=sample.at, cpu_percent=node.cpu_percent, cpu_per_core=list(node.cpu_per_core),
        load_average=list(node.load_average), memory_used_bytes=node.memory_used_bytes,
        memory_total_bytes=node.memory_total_bytes, disk_read_bytes_per_second=node.disk_read_bytes_per_second,
        disk_write_bytes_per_second=node.disk_write_bytes_per_second,
        net_rx_bytes_per_second=node.net_rx_bytes_per_second, net_tx_bytes_per_second=node.net_tx_bytes_per_second,
        gpus=[GpuUsage(index=gpu.index, utilization_percent=gpu.utilization_percent,
                       memory_used_bytes=gpu.memory_used_bytes, memory_total_bytes=gpu.memory_total_bytes,
                       temperature_celsius=gpu.temperature_celsius, power_watts=gpu.power_watts)
              for gpu in sample.gpus],
    )
