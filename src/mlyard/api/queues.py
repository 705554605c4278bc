"""What the API takes and returns about queues: quotas, borrowing limits, usage and waiting jobs.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlyard.spec import NAME_PATTERN, parse_memory


class QueueAmounts(BaseModel):
    """An amount of each resource; a null entry means "none" in a quota and "unlimited" in a
    borrowing limit."""

    model_config = ConfigDict(extra="forbid")

    gpu: int | None = Field(default=None, ge=0, le=1_000_000, description="GPUs")
    cpu: float | None = Field(default=None, ge=0, le=10_000_000, description="CPU cores")
    # Bounded: the column is a 64-bit integer.
    memory: int | None = Field(default=None, ge=0, le=2**62, description="bytes; accepts quantities such as 64Gi")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        if value is None:
            return None
        # Zero is a meaningful limit here ("may not borrow memory"), unlike in a job's resources.
        if not isinstance(value, bool) and (value == 0 or (isinstance(value, str) and value.strip() == "0")):
            return 0
        return parse_memory(value)


class QueueSettings(BaseModel):
    """The body of `PUT /queues/{name}`. Fields left out keep their stored value (their default
    for a new queue), inside `quota` and `borrow_limit` too; an explicit null clears one."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field(default="default", pattern=NAME_PATTERN, description="the project the queue belongs to")
    quota: QueueAmounts | None = Field(default=None, description="capacity the queue is guaranteed")
    borrow_limit: QueueAmounts | None = Field(
        default=None, description="how much beyond its quota the queue may use while others leave capacity idle"
    )
    weight: float = Field(default=1.0, gt=0, le=1000, description="scales the queue's fair share")


class QueueUsage(BaseModel):
    gpu: int
    cpu: float = Field(description="cores held; a share of a core (a request below one) as its fraction")
    memory: int


class WaitingJob(BaseModel):
    id: int
    name: str
    priority: int
    waiting_since: float
    reason: str | None


class QueueInfo(BaseModel):
    name: str
    project: str
    quota: QueueAmounts
    borrow_limit: QueueAmounts
    weight: float
    usage: QueueUsage = Field(description="what the queue's running jobs hold")
    running: int
    waiting: int
    waiting_jobs: list[WaitingJob] = Field(description="queued jobs, oldest first, with why they wait")
    implicit: bool = Field(default=False, description="not stored: the default queue, or one only jobs name")
    created_at: float | None = None
    updated_at: float | None = None
