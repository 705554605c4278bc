"""What the API returns about nodes: capacity, allocation and what is busy right now.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

# How a node's notes begin the line that says which OS account its replicas run as.
JOBS_RUN_AS = "jobs run as: "


class GpuInfo(BaseModel):
    index: int
    model: str
    memory_bytes: int


Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]


ByteCount = Annotated[int, Field(ge=0)]


class GpuUsage(BaseModel):
    index: int = Field(ge=0)
    utilization_percent: Amount | None = Field(default=None, description="busy time of the last sample period, 0-100")
    memory_used_bytes: ByteCount | None = None
    memory_total_bytes: ByteCount | None = None
    temperature_celsius: float | None = Field(default=None, allow_inf_nan=False)
    power_watts: Amount | None = None


class NodeUsage(BaseModel):
    """A node's figures: one sample, or the average of a minute's samples (`samples` > 1)."""

    at: float = Field(ge=0, allow_inf_nan=False, description="when it was measured; a minute's start for an average")
    cpu_percent: Amount = Field(description="all cores together, 0-100")
    cpu_per_core: list[Amount] = Field(default_factory=list, max_length=4096)
    load_average: list[Amount] = Field(min_length=3, max_length=3, description="over 1, 5 and 15 minutes")
    memory_used_bytes: ByteCount = Field(description="total minus what the kernel could give to a new process")
    memory_total_bytes: ByteCount
    disk_read_bytes_per_second: Amount = 0.0
    disk_write_bytes_per_second: Amount = 0.0
    net_rx_bytes_per_second: Amount = Field(default=0.0, description="all interfaces but loopback")
    net_tx_bytes_per_second: Amount = 0.0
    gpus: list[GpuUsage] = Field(default_factory=list, max_length=1024)
    samples: int = Field(default=1, ge=1, description="raw samples it stands for")


class NodeInventory(BaseModel):
    cpu_model: str
    cpu_count: int = Field(description="logical CPUs of the machine (jobs may be offered fewer)")
    physical_cores: int | None = None
    memory_bytes: int
    gpu_count: int = 0
    gpu_model: str | None = None
    notes: list[str] = Field(default_factory=list, description="why figures are missing, e.g. NVML failing")


class NodeInfo(BaseModel):
    name: str
    backend: str
    address: str
    cpu_ids: list[int]
    memory_bytes: int
    gpus: list[GpuInfo]
    labels: dict[str, str]
    notes: list[str]
    allocated_cpus: int
    allocated_memory_bytes: int
    allocated_gpus: int
    updated_at: float
    usage: NodeUsage | None = Field(default=None, description="the node's latest sample; null before the first")
    inventory: NodeInventory | None = Field(default=None, description="the machine as its sampler found it")
