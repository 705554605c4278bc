"""What the REST API returns: shared by the server, the typed client, the CLI and the SDK.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlyard.spec import NAME_PATTERN, JobSpec, JobStatus, parse_memory


class FieldError(BaseModel):
    field: str = Field(description="dotted path of the offending field, e.g. roles.0.replicas")
    message: str


def field_errors(errors: Iterable[Mapping[str, Any]]) -> list[FieldError]:
    """Pydantic's errors as dotted field paths (request sections such as `body` left out)."""
    result = []
    for error in errors:
        parts = [str(part) for part in error.get("loc", ())]
        if len(parts) > 1 and parts[0] == "header":  # as people write them: headers.Idempotency-Key
            parts = ["headers", "-".join(word.capitalize() for word in parts[1].split("-")), *parts[2:]]
        elif len(parts) > 1 and parts[0] in ("body", "query", "path"):
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
    reason: str | None = Field(default=None, description="what the backend said about the state: out of memory, "
                               "unschedulable, image not found")


class AttemptInfo(BaseModel):
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
    cpu: int
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


METRIC_NAME = r"^[A-Za-z_][A-Za-z0-9_./-]{0,127}$"
MAX_METRICS_PER_REPORT = 256
MAX_STEP = 2**53
METRICS_PAGE_SIZE = 10_000


class MetricsReport(BaseModel):
    """The body of `POST /jobs/{id}/metrics`: the values of one training step."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0, le=MAX_STEP, description="the training step (or epoch) the values belong to")
    metrics: dict[Annotated[str, Field(pattern=METRIC_NAME)], Annotated[float, Field(allow_inf_nan=False)]] = Field(
        min_length=1, max_length=MAX_METRICS_PER_REPORT,
        description="name → finite number, e.g. {\"loss\": 0.31, \"accuracy\": 0.9}",
    )
    rank: int = Field(default=0, ge=0, le=1_000_000, description="the replica's rank that reports")


class MetricPoint(BaseModel):
    id: int
    attempt: int
    rank: int
    step: int
    name: str
    value: float
    at: float


class MetricsPage(BaseModel):
    points: list[MetricPoint]
    next_after: int = Field(description="ask again with `after` set to this for the points stored since")


class Health(BaseModel):
    status: str
    version: str
    controller: Literal["leader", "standby"] = Field(
        # The default is what a server from before leadership always was: its own controller.
        default="leader",
        description="whether this server runs the controller; of the servers sharing a database one "
        "leads, the others stand by to take over",
    )
    adopted: int | None = Field(
        default=None,
        description="replicas the leading controller found running when it started (left by an earlier server); "
        "null while it has not looked yet, and on a standby",
    )


class UsageAmount(BaseModel):
    gpu_hours: float = Field(description="GPUs held × hours")
    cpu_hours: float = Field(description="CPU cores held × hours")


class UsageDay(UsageAmount):
    day: str = Field(description="a UTC day, YYYY-MM-DD")


class UsageRow(UsageAmount):
    key: str = Field(description="the user's or the project's name")
    jobs: int = Field(description="jobs that held resources in the window")
    days: list[UsageDay] = Field(description="the row's usage per UTC day, oldest first; days without usage left out")


class UsageReport(BaseModel):
    """What jobs held between `since` and `until`: attempts from their launch to their end (now
    for a running one) × the GPUs and cores of their replicas, split at UTC midnight."""

    since: float
    until: float
    by: Literal["user", "project"]
    everyone: bool = Field(description="false: only the caller's own jobs are counted (callers who are not admins)")
    rows: list[UsageRow] = Field(description="largest GPU-hours first, then CPU-hours")
    days: list[UsageDay] = Field(description="all rows together per UTC day, oldest first")
    total: UsageAmount


class TensorBoardInfo(BaseModel):
    job_id: int
    directory: str = Field(description="the job's TensorBoard log directory (MLYARD_TENSORBOARD_DIR of its replicas)")
    exists: bool = Field(description="false until the job's first attempt is launched")


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
    cpus: int = Field(description="cores the replicas hold")
    gpus: int = Field(description="GPUs the replicas hold")
    launched_at: float | None = Field(description="when the holding attempt was launched")
    at: float | None = Field(default=None, description="the latest sample among its replicas")
    cpu_percent: float | None = Field(default=None, description="of one core: 250 is two and a half cores busy")
    memory_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    measured: int = Field(default=0, description="replicas with a recent sample")
