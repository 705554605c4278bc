"""The whole machine: CPU, load, memory, and disk and network rates from counter deltas."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class NodeFigures:
    cpu_percent: float
    """All cores together, 0 to 100."""
    cpu_per_core: tuple[float, ...]
    load_average: tuple[float, float, float]
    memory_used_bytes: int
    """Total minus available: page cache the kernel would give back does not count as used."""
    memory_total_bytes: int
    disk_read_bytes_per_second: float
    disk_write_bytes_per_second: float
    net_rx_bytes_per_second: float
    net_tx_bytes_per_second: float


@dataclass(frozen=True)
class _Counters:
    at: float
    disk_read: int
    disk_write: int
    net_rx: int
    net_tx: int


def _counters() -> _Counters:
    disk = psutil.disk_io_counters()  # None where the kernel exposes no disk statistics
    # Loopback traffic is the machine talking to itself (the API, rendezvous on one node).
    nics = [counters for name, counters in psutil.net_io_counters(pernic=True).items() if name != "lo"]
    return _Counters(
        at=time.monotonic(),
        disk_read=disk.read_bytes if disk else 0,
        disk_write=disk.write_bytes if disk else 0,
        net_rx=sum(nic.bytes_recv for nic in nics),
        net_tx=sum(nic.bytes_sent for nic in nics),
    )


def _rate(before: int, after: int, seconds: float) -> float:
    # A counter that went back (a NIC removed, a device reset) gives no rate rather than a negative one.
    return max(0, after - before) / seconds if seconds > 0 else 0.0


class NodeReader:
    """Figures between one `read()` and the next: the first read covers the time since creation."""

    def __init__(self) -> None:
        psutil.cpu_percent(percpu=True)  # psutil measures from its previous call: this is the start
        self._last = _counters()

    def read(self) -> NodeFigures:
        per_core = tuple(psutil.cpu_percent(percpu=True))
        memory = psutil.virtual_memory()
        now = _counters()
        seconds = now.at - self._last.at
        before, self._last = self._last, now
        return NodeFigures(
            cpu_percent=sum(per_core) / len(per_core) if per_core else 0.0,
            cpu_per_core=per_core,
            load_average=os.getloadavg(),
            memory_used_bytes=memory.total - memory.available,
            memory_total_bytes=memory.total,
            disk_read_bytes_per_second=_rate(before.disk_read, now.disk_read, seconds),
            disk_write_bytes_per_second=_rate(before.disk_write, now.disk_write, seconds),
            net_rx_bytes_per_second=_rate(before.net_rx, now.net_rx, seconds),
            net_tx_bytes_per_second=_rate(before.net_tx, now.net_tx, seconds),
        )


def cpu_model() -> str:
    """The processor's marketing name; `platform.processor()` only says "x86_64" on Linux."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


@dataclass(frozen=True)
class Inventory:
    cpu_model: str
    cpu_count: int
    physical_cores: int | None
    memory_bytes: int


def inventory() -> Inventory:
    return Inventory(cpu_model=cpu_model(), cpu_count=psutil.cpu_count() or os.cpu_count() or 1,
                     physical_cores=psutil.cpu_count(logical=False), memory_bytes=psutil.virtual_memory().total)
