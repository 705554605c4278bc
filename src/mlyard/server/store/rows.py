"""ORM rows: the database is the only source of truth.

Times are UTC seconds since the epoch (floats), the unit the scheduler works in.
Schema changes go through an Alembic migration in `migrations/versions/`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class UserRow(Base):
    """A person or a service account. Projects and roles come on top of this row."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    password_hash: Mapped[str | None] = mapped_column(String(255), nullable=True)
    """argon2id; null for an account that signs in with tokens only (such as the first admin)."""


class ApiTokenRow(Base):
    """A bearer token, stored as its sha256 only. A token with `job_id` set is scoped to that
    job (handed to its replicas) and dies with it."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), nullable=True, index=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    kind: Mapped[str] = mapped_column(String(16), default="api", server_default="api")
    """api (made by a person, listed and revoked by them), login (made by `mlyard login` with a
    password), session (a browser login), job."""
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    parent_token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", name="fk_api_tokens_parent_token_id"), nullable=True)
    """A session started with a token: it ends when that token is revoked or expires."""
    from_password: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """Made with a login or session token (or one made so): a password change ends it too."""
    bound_address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """A web session's client address at login: its cookie is refused from any other."""


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_submitted", "status", "submitted_at"),
                      Index("ix_jobs_revision", "revision"),
                      # Listings filtered by project or queue, and their totals.
                      Index("ix_jobs_project_status", "project", "status"),
                      Index("ix_jobs_queue_status", "queue", "status"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63))
    project: Mapped[str] = mapped_column(String(63), default="default")
    queue: Mapped[str] = mapped_column(String(63), default="default")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    snapshot: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    """Changed only by `services.jobs.switch_status`, which checks the transition and records an event."""
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    attempt_count: Mapped[int] = mapped_column(Integer, default=0)
    submitted_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    cancel_requested_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    attained_service: Mapped[float] = mapped_column(Float, default=0.0)
    """Service its finished attempts consumed: GPU-seconds, or core-seconds for a job without GPUs."""
    attained_time: Mapped[float] = mapped_column(Float, default=0.0)
    """Wall seconds its finished attempts ran."""
    queued_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When it last became QUEUED again (after a preemption); None: since `submitted_at`."""
    wait_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    """Why the scheduler did not start it in the latest round; cleared when it starts."""
    preemption_count: Mapped[int] = mapped_column(Integer, default=0)
    restart_count: Mapped[int] = mapped_column(Integer, default=0)
    """Restarts after failures so far; `spec.restart_policy.max_restarts` bounds it."""
    restart_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    """While RESTARTING: when the backoff ends and the job may be scheduled again."""
    idle_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    """While RUNNING: since when its GPUs (its CPU, for a job without GPUs) stayed under the idle
    threshold, as the utilization check found it (`idleness.py`); cleared when it leaves RUNNING."""
    idle_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    """The idle warning in words, set and cleared with `idle_since`."""
    revision: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """The `JobRevisionRow` value of the transaction that last changed what the scheduler reads
    of this job (`store/revisions.py`); the controller reads only rows past the last it saw."""

    owner: Mapped[UserRow | None] = relationship()
    attempts: Mapped[list[AttemptRow]] = relationship(
        back_populates="job", order_by="AttemptRow.number", cascade="all, delete-orphan"
    )
    events: Mapped[list[JobEventRow]] = relationship(
        back_populates="job", order_by="JobEventRow.id", cascade="all, delete-orphan"
    )


class JobRevisionRow(Base):
    """One row: the newest job revision handed out. Taken (incremented) by a transaction just
    before it commits, so revisions become visible in the order they were given."""

    __tablename__ = "job_revisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0)


class JobCountRow(Base):
    """A change in how many jobs one (status, project, queue) holds: rows added by triggers on
    `jobs` (migration 0017), never updated, and summed up now and then (`store/job_counts.py`)."""

    __tablename__ = "job_counts"
    __table_args__ = (Index("ix_job_counts_status", "status", "project", "queue"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    status: Mapped[str] = mapped_column(String(16))
    project: Mapped[str] = mapped_column(String(63))
    queue: Mapped[str] = mapped_column(String(63))
    n: Mapped[int] = mapped_column(BigInteger)


class AttemptRow(Base):
    """One start of a whole job. `stop_*` columns record a stop in progress: the controller
    sends SIGTERM once, escalates to SIGKILL after `stop_deadline`, and applies `stop_outcome` to the
    job once no replica is left."""

    __tablename__ = "attempts"
    # Every controller pass reads the unfinished attempts: a partial index keeps that read the
    # size of what runs, not of the history.
    __table_args__ = (Index("ix_attempts_unfinished", "id", sqlite_where=text("finished_at IS NULL"),
                            postgresql_where=text("finished_at IS NULL")),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    master_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    launched_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    running_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    stop_requested_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    stop_deadline: Mapped[float | None] = mapped_column(Float, nullable=True)
    stop_signalled_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When SIGTERM went out: it is sent once per stop, so a checkpointing handler runs undisturbed."""
    stop_outcome: Mapped[str | None] = mapped_column(String(16), nullable=True)
    stop_reason: Mapped[str | None] = mapped_column(Text, nullable=True)

    job: Mapped[JobRow] = relationship(back_populates="attempts")
    replicas: Mapped[list[ReplicaRow]] = relationship(
        back_populates="attempt", order_by="ReplicaRow.rank", cascade="all, delete-orphan"
    )


class ReplicaRow(Base):
    """One process of an attempt. `state`: pending → running → exited | lost."""

    __tablename__ = "replicas"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    role: Mapped[str] = mapped_column(String(63))
    index: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(255))
    cpu_ids: Mapped[list[int]] = mapped_column(JSON)
    gpu_ids: Mapped[list[int]] = mapped_column(JSON)
    cpu_millicores: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """0: `cpu_ids` are the replica's own cores; else its share, in thousandths, of its one core."""
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    directory: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    pid_started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    reason: Mapped[str | None] = mapped_column(String(500), nullable=True)
    """What the backend said about the state (out of memory, unschedulable, image not found)."""

    attempt: Mapped[AttemptRow] = relationship(back_populates="replicas")

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def cpu(self) -> float:
        """Cores held: its own ones, or its share of one."""
        return self.cpu_millicores / 1000 if self.cpu_millicores else len(self.cpu_ids or ())


class JobEventRow(Base):
    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    at: Mapped[float] = mapped_column(Float)
    from_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(Text, nullable=True)

    job: Mapped[JobRow] = relationship(back_populates="events")


class NodeRow(Base):
    """A machine that runs replicas, as its backend last reported it."""

    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    backend: Mapped[str] = mapped_column(String(32))
    address: Mapped[str] = mapped_column(String(255))
    cpu_ids: Mapped[list[int]] = mapped_column(JSON)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    notes: Mapped[list[str]] = mapped_column(JSON)
    """What the node cannot do, in words (e.g. memory limits not enforced and why)."""
    updated_at: Mapped[float] = mapped_column(Float)
    inventory: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """What the machine is (processor, cores, memory, GPUs) as its sampler found it (`api_models.NodeInventory`)."""


class QueueRow(Base):
    """A project's queue: the capacity it is guaranteed and how far it may borrow beyond it.

    A null `quota_*` column guarantees none of that resource; a null `borrow_*` column lets the
    queue borrow it without limit. The `default` queue exists without a row (no quota)."""

    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    project: Mapped[str] = mapped_column(String(63), default="default")
    quota_gpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    quota_cpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    quota_memory: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    borrow_gpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    borrow_cpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    borrow_memory: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class ProjectRow(Base):
    """What jobs, queues and (later) datasets and models belong to; people see and act in a
    project through their role in it. Null limits are no limit."""

    __tablename__ = "projects"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    quota_gpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    quota_cpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    quota_memory: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_running_jobs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_storage_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)


class ProjectMemberRow(Base):
    """A user's role in a project: viewer, member or maintainer."""

    __tablename__ = "project_members"

    project: Mapped[str] = mapped_column(ForeignKey("projects.name", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)


class AuditEventRow(Base):
    """One request that changed something (or tried to): who, what, when, from where."""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_events_at", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(160))
    method: Mapped[str] = mapped_column(String(10))
    route: Mapped[str] = mapped_column(String(255))
    """The route's template, e.g. /api/v1/jobs/{job_id}/cancel."""
    target: Mapped[str | None] = mapped_column(String(255), nullable=True)
    """The path as requested, with its ids."""
    status: Mapped[int] = mapped_column(Integer)
    address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class IdempotencyKeyRow(Base):
    """A submission made with an `Idempotency-Key` header: a retry with the same key (by the
    same caller) gets the job it created instead of a second one."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("caller", "key", name="uq_idempotency_keys_caller_key"),
                      Index("ix_idempotency_keys_created_at", "created_at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    caller: Mapped[str] = mapped_column(String(160))
    key: Mapped[str] = mapped_column(String(255))
    request_sha256: Mapped[str] = mapped_column(String(64))
    """Of the request body: the same key with another body is an error, not a replay."""
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    created_at: Mapped[float] = mapped_column(Float)


class MetricRow(Base):
    """One value a job's training code reported (`mlyard.sdk.report`) for a step."""

    __tablename__ = "job_metrics"
    __table_args__ = (Index("ix_job_metrics_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(String(128))
    value: Mapped[float] = mapped_column(Float)
    at: Mapped[float] = mapped_column(Float)


class EnvironmentRow(Base):
    """A named environment: its inputs, their hash (what is built once and shared by every
    environment of the same content) and where the build stands."""

    __tablename__ = "environments"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    """Unique on the server, whatever the project (a job names it alone)."""
    project: Mapped[str] = mapped_column(String(63), default="default", server_default="default", index=True)
    """Its members use and read it; its maintainers build and remove it."""
    base: Mapped[str] = mapped_column(String(255))
    requirements: Mapped[str | None] = mapped_column(Text, nullable=True)
    apt: Mapped[list[str]] = mapped_column(JSON)
    kind: Mapped[str | None] = mapped_column(String(16), nullable=True)
    """Decided by the builder when it takes the environment up: `image` with a container engine."""
    content_hash: Mapped[str | None] = mapped_column(String(64), index=True, nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    image: Mapped[str | None] = mapped_column(String(255), nullable=True)
    cached: Mapped[bool] = mapped_column(Boolean, default=False)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    built_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    creator: Mapped[UserRow | None] = relationship()


class ProjectSnapshotRow(Base):
    """A code snapshot a project keeps: counted once per project against its storage limit,
    whichever of its jobs use it."""

    __tablename__ = "project_snapshots"

    project: Mapped[str] = mapped_column(ForeignKey("projects.name", ondelete="CASCADE"), primary_key=True)
    digest: Mapped[str] = mapped_column(ForeignKey("snapshots.digest", ondelete="CASCADE"), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    first_used_at: Mapped[float] = mapped_column(Float)
    last_used_at: Mapped[float] = mapped_column(Float)


class SnapshotRow(Base):
    """A code snapshot in the blob store, by sha256."""

    __tablename__ = "snapshots"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float)
    uploaded_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    """The first uploader only; who may name the digest is `SnapshotUploaderRow` and `ProjectSnapshotRow`."""


class SnapshotUploaderRow(Base):
    """A user who sent a snapshot's bytes (hashing to its digest): they may name it in any project
    they submit to. Written only by `services.snapshots.store_snapshot`."""

    __tablename__ = "snapshot_uploaders"

    digest: Mapped[str] = mapped_column(ForeignKey("snapshots.digest", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    uploaded_at: Mapped[float] = mapped_column(Float)


RAW_PERIOD = 0
MINUTE_PERIOD = 60


class NodeSampleRow(Base):
    """A node's figures: one sample (`period` 0) or the average of a minute's samples (`period`
    60, `at` the minute's start). Compaction rolls finished minutes up and deletes expired rows."""

    __tablename__ = "node_samples"
    __table_args__ = (Index("ix_node_samples_node_period_at", "node", "period", "at"),
                      Index("ix_node_samples_period_at", "period", "at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(255))
    period: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer)
    """How many raw samples the row stands for: 1 for a raw sample."""
    cpu_percent: Mapped[float] = mapped_column(Float)
    cpu_per_core: Mapped[list[float]] = mapped_column(JSON)
    load_1: Mapped[float] = mapped_column(Float)
    load_5: Mapped[float] = mapped_column(Float)
    load_15: Mapped[float] = mapped_column(Float)
    memory_used: Mapped[int] = mapped_column(BigInteger)
    memory_total: Mapped[int] = mapped_column(BigInteger)
    disk_read_rate: Mapped[float] = mapped_column(Float)
    disk_write_rate: Mapped[float] = mapped_column(Float)
    net_rx_rate: Mapped[float] = mapped_column(Float)
    net_tx_rate: Mapped[float] = mapped_column(Float)
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    """`api_models.GpuUsage` of each GPU."""


class JobSampleRow(Base):
    """What a job's processes used. Raw rows (`period` 0) are per replica (its process tree);
    minute rows (`period` 60) are per job: the replicas' sum, averaged over the minute."""

    __tablename__ = "job_samples"
    __table_args__ = (Index("ix_job_samples_job_period_at", "job_id", "period", "at"),
                      Index("ix_job_samples_period_at", "period", "at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    attempt: Mapped[int] = mapped_column(Integer)
    replica: Mapped[str | None] = mapped_column(String(127), nullable=True)
    """The replica's name in a raw row; null in a minute row (all replicas)."""
    rank: Mapped[int | None] = mapped_column(Integer, nullable=True)
    node: Mapped[str] = mapped_column(String(255))
    period: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer)
    replicas: Mapped[int] = mapped_column(Integer)
    """Replicas measured: 1 in a raw row."""
    processes: Mapped[int] = mapped_column(Integer)
    cpu_percent: Mapped[float] = mapped_column(Float)
    """Of one core: 250 is two and a half cores busy."""
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    """Resident memory of the processes."""
    gpu_memory_bytes: Mapped[int] = mapped_column(BigInteger)
