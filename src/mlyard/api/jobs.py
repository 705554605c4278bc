"""What the API takes and returns about jobs: their attempts, replicas, events, logs and TensorBoard.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mlyard.api.job_listing import DEFAULT_PAGE_JOBS, MAX_PAGE_JOBS, NOT_CONNECTED  # noqa: F401
from mlyard.spec import JobSpec, JobStatus

IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]+$"
"""An idempotency key (the Idempotency-Key header, or a batch item's `idempotency_key`):
1 to 255 printable ASCII characters without spaces."""
IDEMPOTENCY_KEY_HELP = ("makes retries safe: a repeated request with the same key (and spec) from the same caller "
                        "returns the job the first created instead of a new one; keys are kept 24 hours")
MAX_BATCH_JOBS = 1000


class _Deferred(BaseModel):
    # Built on first use, not at import: a CLI command that reads no job starts sooner.
    model_config = ConfigDict(defer_build=True)


class ReplicaInfo(_Deferred):
    name: str
    role: str
    index: int
    rank: int
    node: str
    state: str
    pid: int | None
    exit_code: int | None
    cpu_ids: list[int]
    cpu_millicores: int = Field(default=0, description="0: `cpu_ids` are the replica's own cores; else its "
                                "share, in thousandths, of its one core, shared with others (250: 0.25 of the core)")
    gpu_ids: list[int]
    memory_bytes: int
    started_at: float | None
    finished_at: float | None
    reason: str | None = Field(default=None, description="what the backend said about the state: out of memory, "
                               "unschedulable, image not found")


class AttemptInfo(_Deferred):
    number: int
    created_at: float
    launched_at: float | None
    running_at: float | None
    finished_at: float | None
    stop_reason: str | None
    stop_outcome: JobStatus | None = Field(
        default=None, description="what a requested stop made of the job; PREEMPTED: it went back to the queue"
    )
    master_port: int | None
    exit_code: int | None = Field(
        default=None, description="the first non-zero exit code of its replicas; 0 when all exited 0"
    )
    replicas: list[ReplicaInfo]


class EventInfo(_Deferred):
    at: float
    from_status: JobStatus | None
    to_status: JobStatus
    message: str | None


class JobInfo(_Deferred):
    id: int
    name: str
    project: str
    queue: str
    priority: int
    owner: str | None = Field(default=None, description="the user who submitted it")
    status: JobStatus
    message: str | None
    exit_code: int | None
    replica_count: int
    attempt_count: int
    snapshot: str | None
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    wait_reason: str | None = Field(
        default=None, description="why a QUEUED (or RESTARTING, after its backoff) job has not started yet"
    )
    attained_service: float = Field(
        default=0.0, description="GPU-seconds it consumed so far (core-seconds for a job without GPUs)"
    )
    attained_time: float = Field(default=0.0, description="seconds its attempts ran so far")
    preemption_count: int = Field(default=0, description="times the scheduler stopped it and queued it again")
    restart_count: int = Field(default=0, description="times it was restarted after a failed attempt")
    restart_at: float | None = Field(default=None, description="while RESTARTING: when its backoff ends")
    idle_since: float | None = Field(
        default=None, description="while RUNNING: since when its GPUs (its CPU, without GPUs) stayed under the "
        "server's idle threshold; null while it is busy or not judged yet"
    )
    idle_reason: str | None = Field(default=None, description="the idle warning in words, with `idle_since`")
    warning: str | None = Field(
        default=None, description="while RUNNING: what looks wrong with how it runs, in words; for now only "
        f"\"{NOT_CONNECTED}\" (naming the replicas), for a multi-replica PyTorch job with a replica that has not "
        "connected to rank 0's MASTER_PORT within the server's grace period; null when all is well"
    )
    spec: JobSpec


class JobDetail(JobInfo):
    attempts: list[AttemptInfo]
    events: list[EventInfo]
    log_tail: dict[str, list[str]] = Field(
        default_factory=dict, description="last lines of each replica's log in the latest attempt"
    )


class JobBatchItem(_Deferred):
    spec: JobSpec
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255, pattern=IDEMPOTENCY_KEY_PATTERN,
                                        description=IDEMPOTENCY_KEY_HELP)


class JobBatch(_Deferred):
    """Jobs submitted together: every one is checked as a single submission is, and all are
    stored in one transaction, or none (the error names the item: `jobs.3.spec.roles`)."""

    jobs: list[JobBatchItem] = Field(min_length=1, max_length=MAX_BATCH_JOBS)


class SubmittedJob(_Deferred):
    job: JobInfo
    replayed: bool = Field(description="an earlier request with the item's idempotency key created the job")


class JobBatchResult(_Deferred):
    items: list[SubmittedJob] = Field(description="one per submitted item, in the request's order")


class LogChunk(_Deferred):
    job_id: int
    attempt: int
    replica: str
    offset: int
    next_offset: int
    text: str
    complete: bool = Field(description="the replica has exited and everything it wrote was returned")


class TensorBoardInfo(_Deferred):
    job_id: int
    directory: str = Field(description="the job's TensorBoard log directory (MLYARD_TENSORBOARD_DIR of its replicas)")
    exists: bool = Field(description="false until the job's first attempt is launched")
