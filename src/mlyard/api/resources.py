"""What the API returns of resource samples: a node's over time, a job's replicas, running jobs now.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from mlyard.api.nodes import Amount, ByteCount, NodeUsage
from mlyard.spec import JobStatus


SampleResolution = Literal["raw", "1m"]


class NodeSamples(BaseModel):
    node: str
    resolution: SampleResolution
    samples: list[NodeUsage] = Field(description="oldest first")


class ReplicaUsage(BaseModel):
    """What one replica's process tree (its launcher and everything below it) used at `at`."""

    job_id: int
    attempt: int = Field(ge=1)
    replica: str = Field(max_length=127)
    rank: int = Field(ge=0)
    node: str = Field(max_length=255)
    at: float = Field(ge=0, allow_inf_nan=False)
    cpu_percent: Amount = Field(description="of one core: 250 is two and a half cores busy")
    memory_bytes: ByteCount = Field(description="resident memory of its processes")
    gpu_memory_bytes: ByteCount = 0
    processes: int = Field(ge=0)


class JobUsagePoint(BaseModel):
    """A job's replicas together at one time: a sample, or a minute's average (`samples` > 1)."""

    at: float
    cpu_percent: float = Field(description="of one core: 250 is two and a half cores busy")
    memory_bytes: int
    gpu_memory_bytes: int
    replicas: int = Field(description="replicas measured")
    samples: int = 1


class JobResources(BaseModel):
    job_id: int
    resolution: SampleResolution
    points: list[JobUsagePoint] = Field(description="oldest first")
    replicas: list[ReplicaUsage] = Field(description="the latest sample of each replica of the latest attempt")


class RunningJobUsage(BaseModel):
    """A job holding resources (its latest attempt not finished) with its replicas' latest
    figures added up; the figures are null when none is recent."""

    job_id: int
    name: str
    user: str | None = Field(description="the job's owner; null for a job submitted with a token of no user")
    project: str
    queue: str
    status: JobStatus
    replicas: int = Field(description="replicas of the holding attempt")
    nodes: list[str] = Field(description="where they run, in rank order, each node once")
    cpus: float = Field(description="cores the replicas hold (a share of a core as its fraction)")
    gpus: int = Field(description="GPUs the replicas hold")
    launched_at: float | None = Field(description="when the holding attempt was launched")
    at: float | None = Field(default=None, description="the latest sample among its replicas")
    cpu_percent: float | None = Field(default=None, description="of one core: 250 is two and a half cores busy")
    memory_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    measured: int = Field(default=0, description="replicas with a recent sample")
