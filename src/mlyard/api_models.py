"""What the REST API returns: shared by the server, the typed client, the CLI and the SDK.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from mlyard.spec import JobSpec, JobStatus


class FieldError(BaseModel):
    field: str = Field(description="dotted path of the offending field, e.g. roles.0.replicas")
    message: str


def field_errors(errors: Iterable[Mapping[str, Any]]) -> list[FieldError]:
    """Pydantic's errors as dotted field paths (request sections such as `body` left out)."""
    result = []
    for error in errors:
        parts = [str(part) for part in error.get("loc", ())]
        if len(parts) > 1 and parts[0] in ("body", "query", "path", "header"):
            parts = parts[1:]
        result.append(FieldError(field=".".join(parts) or "(root)", message=str(error.get("msg", "invalid"))))
    return result


def summarize(details: Iterable[FieldError], limit: int = 5) -> str:
    shown = list(details)
    text = "; ".join(f"{detail.field}: {detail.message}" for detail in shown[:limit])
    return text + (f"; and {len(shown) - limit} more" if len(shown) > limit else "")


class ErrorBody(BaseModel):
    error: str = Field(description="a stable code: not_found, unauthorized, invalid_spec, …")
    message: str
    details: list[FieldError] = Field(default_factory=list)


class ReplicaInfo(BaseModel):
    name: str
    role: str
    index: int
    rank: int
    node: str
    state: str
    pid: int | None
    exit_code: int | None
    cpu_ids: list[int]
    gpu_ids: list[int]
    memory_bytes: int
    started_at: float | None
    finished_at: float | None


class AttemptInfo(BaseModel):
    number: int
    created_at: float
    launched_at: float | None
    running_at: float | None
    finished_at: float | None
    stop_reason: str | None
    master_port: int | None
    replicas: list[ReplicaInfo]


class EventInfo(BaseModel):
    at: float
    from_status: JobStatus | None
    to_status: JobStatus
    message: str | None


class JobInfo(BaseModel):
    id: int
    name: str
    project: str
    queue: str
    priority: int
    status: JobStatus
    message: str | None
    exit_code: int | None
    replica_count: int
    attempt_count: int
    snapshot: str | None
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    spec: JobSpec


class JobDetail(JobInfo):
    attempts: list[AttemptInfo]
    events: list[EventInfo]
    log_tail: dict[str, list[str]] = Field(
        default_factory=dict, description="last lines of each replica's log in the latest attempt"
    )


class GpuInfo(BaseModel):
    index: int
    model: str
    memory_bytes: int


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


class SnapshotInfo(BaseModel):
    digest: str
    size: int


class LogChunk(BaseModel):
    job_id: int
    attempt: int
    replica: str
    offset: int
    next_offset: int
    text: str
    complete: bool = Field(description="the replica has exited and everything it wrote was returned")


class Health(BaseModel):
    status: str
    version: str
