"""Server settings, read once at start from arguments and MLYARD_* environment variables."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mlyard.backends.local.containers import RUNTIMES
from mlyard.backends.local.job_accounts import DEFAULT_PREFIX as DEFAULT_JOB_USER_PREFIX
from mlyard.backends.local.job_accounts import MODES as JOB_USER_MODES
from mlyard.environments.build_policy import BuildPolicy
from mlyard.paths import DEFAULT_HOST, DEFAULT_PORT, Paths, home_directory
from mlyard.errors import MlyardError
from mlyard.runtime.launcher import DEFAULT_MAX_LOG_BYTES
from mlyard.scheduler import DEFAULT_POLICY, LIVE_POLICIES, SchedulerConfig
from mlyard.spec import parse_duration, parse_memory
from mlyard.storage import DEFAULT_MAX_RATIO, DEFAULT_MAX_SNAPSHOT_BYTES, UnpackLimits

DEFAULT_PREEMPT_MIN_RUN = 300.0
DEFAULT_SAMPLE_INTERVAL = 5.0
DEFAULT_RAW_SAMPLE_RETENTION = 24 * 3600.0
DEFAULT_MINUTE_SAMPLE_RETENTION = 30 * 24 * 3600.0
DEFAULT_IDLE_GPU_UTILIZATION = 10.0
DEFAULT_IDLE_AFTER = 30 * 60.0
DEFAULT_INTERACTIVE_IDLE_TIMEOUT = 3600.0
DEFAULT_CONNECTION_GRACE = 120.0
DEFAULT_AUDIT_RETENTION = 365 * 24 * 3600.0
DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
BACKENDS = ("local", "kubernetes")
_ZERO_DURATION = re.compile(r"^\s*0+(\.0*)?\s*[smhd]?\s*$")


def _duration_or_zero(variable: str, value: str) -> float:
    """A duration from the environment where 0 is meaningful (switch the wait off)."""
    if _ZERO_DURATION.match(value):
        return 0.0
    return _duration(variable, value)


def _duration(variable: str, value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as error:
        raise MlyardError(f"{variable}: {error}") from None


def _size(variable: str, value: str) -> int:
    try:
        return parse_memory(value.strip())
    except ValueError as error:
        raise MlyardError(f"{variable}: {error}") from None


def _percent(variable: str, value: str) -> float:
    try:
        percent = float(value.strip().removesuffix("%"))
    except ValueError:
        percent = float("nan")
    if not 0 <= percent <= 100:  # also false for nan
        raise MlyardError(f"{variable}: {value!r} is not a percentage from 0 to 100")
    return percent


def _on_or_off(environment: Mapping[str, str], variable: str, default: bool) -> bool:
    value = environment.get(variable, "").strip().lower()
    if value not in ("", "on", "off"):
        raise MlyardError(f"{variable}={value!r}: choose on or off")
    return default if not value else value == "on"


def _data_roots(value: str) -> tuple[str, ...]:
    roots = [part.strip() for part in value.split(":") if part.strip()]
    for root in roots:
        if not os.path.isabs(root):
            raise MlyardError(f"MLYARD_DATA_ROOTS: {root!r} is not an absolute directory")
    return tuple(roots)


def _count(variable: str, value: str, low: int = 1, high: int = 100_000) -> int:
    # isascii: str.isdigit() also takes digits such as '²', which int() refuses.
    if not (value.strip().isascii() and value.strip().isdigit()) or not low <= int(value) <= high:
        raise MlyardError(f"{variable}: {value!r} is not a whole number from {low} to {high}")
    return int(value)


@dataclass(frozen=True)
class ServerSettings:
    paths: Paths
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    database_url: str | None = None
    """MLYARD_DATABASE_URL; None: SQLite at `MLYARD_HOME/mlyard.db`. PostgreSQL is
    `postgresql+psycopg://user:password@host:port/database`; `postgresql://` and `postgres://`
    URLs are accepted too and get the psycopg driver (`db.normalize_url`). Servers sharing one
    database elect one of them to run the controller (`leadership.py`)."""
    node_cpus: int | None = None
    """Cores the local node offers to jobs (the first N the server may run on); None: all."""
    node_memory: int | None = None
    """Bytes of memory the local node offers to jobs; None: all physical memory."""
    stop_grace_seconds: float = 10.0
    """Between SIGTERM and SIGKILL when a job is cancelled, fails, or is preempted without a
    `preemption_grace` of its own."""
    max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES
    """The largest code snapshot an upload may be (MLYARD_MAX_SNAPSHOT)."""
    max_snapshot_unpacked_bytes: int | None = None
    """What an uploaded snapshot may unpack to (MLYARD_MAX_SNAPSHOT_UNPACKED_BYTES); None: 5× the upload cap."""
    max_snapshot_ratio: int = DEFAULT_MAX_RATIO
    """How many times its compressed size an uploaded snapshot may unpack to (MLYARD_MAX_SNAPSHOT_RATIO)."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """The largest body of any request but a snapshot or file upload (MLYARD_MAX_REQUEST_BYTES)."""
    max_blob_bytes: int = 64 << 30
    """The largest file of a dataset an upload may be (MLYARD_MAX_BLOB)."""
    data_roots: tuple[str, ...] = ()
    """MLYARD_DATA_ROOTS: the directories (absolute, colon-separated) under which an administrator
    may register data as a dataset; none: registration is refused."""
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES
    """Where a replica's `output.log` stops growing (MLYARD_MAX_LOG_BYTES); the rest is discarded."""
    max_log_streams_per_user: int = 16
    """Live log streams (the web UI's) one user may hold open on this server at once
    (MLYARD_MAX_LOG_STREAMS_PER_USER); one more is answered 429."""
    secret_key_file: str | None = None
    """MLYARD_SECRET_KEY_FILE: the key `env_secrets` are encrypted with; None: MLYARD_HOME/secret.key,
    created at the first start. Servers sharing a database must share this file."""
    scheduler_policy: str = DEFAULT_POLICY
    """How the scheduler orders and preempts (MLYARD_SCHEDULER_POLICY): one of `LIVE_POLICIES`."""
    preempt_min_run_seconds: float = DEFAULT_PREEMPT_MIN_RUN
    """A job runs at least this long before a preemption for fairness (MLYARD_PREEMPT_MIN_RUN)."""
    preemption_budget: int | None = None
    """How often one job may be preempted for the policy's ordering (MLYARD_PREEMPTION_BUDGET,
    0 to 1000000); None: no budget (`SchedulerConfig.preemption_budget`)."""
    idle_tick_seconds: float = 1.0
    busy_tick_seconds: float = 0.1
    pass_gap_seconds: float = 0.1
    """Seconds from the end of a controller pass to the start of the next, at least. A pass per
    submission would cost each submission a pass (6 ms on a small machine, contending with the
    handlers for the interpreter); with the gap, each pass serves the submissions of its gap and
    a job waits this long more at most for its first decision. An idle controller acts at once."""
    sample_interval_seconds: float = DEFAULT_SAMPLE_INTERVAL
    """How often the leader measures its node and the replicas there (MLYARD_SAMPLE_INTERVAL);
    0 switches sampling off."""
    volume_scan_seconds: float = 30.0
    """How often the leader measures what each volume holds (MLYARD_VOLUME_SCAN_INTERVAL)."""
    raw_sample_retention_seconds: float = DEFAULT_RAW_SAMPLE_RETENTION
    """How long raw samples are kept (MLYARD_SAMPLE_RETENTION)."""
    minute_sample_retention_seconds: float = DEFAULT_MINUTE_SAMPLE_RETENTION
    """How long 1-minute averages of the samples are kept (MLYARD_SAMPLE_RETENTION_1M)."""
    idle_gpu_utilization: float = DEFAULT_IDLE_GPU_UTILIZATION
    """A job's GPUs under this utilization (percent) count as idle (MLYARD_IDLE_GPU_UTILIZATION)."""
    idle_after_seconds: float = DEFAULT_IDLE_AFTER
    """A running job idle for this long gets a warning (MLYARD_IDLE_AFTER); 0 switches the warning off."""
    interactive_idle_timeout_seconds: float = DEFAULT_INTERACTIVE_IDLE_TIMEOUT
    """An interactive job without an `idle_timeout` of its own is stopped after this long idle
    (MLYARD_INTERACTIVE_IDLE_TIMEOUT); 0: never."""
    connection_grace_seconds: float = DEFAULT_CONNECTION_GRACE
    """A multi-replica PyTorch job on this machine whose replicas have not all connected to rank
    0's MASTER_PORT this long after it started running gets a warning (MLYARD_CONNECTION_GRACE,
    `workers/connections.py`); 0 switches the check off."""
    audit_retention_seconds: float = DEFAULT_AUDIT_RETENTION
    """Audit events older than this are deleted (MLYARD_AUDIT_RETENTION); 0: kept forever."""
    job_users: str = "auto"
    """Whose OS account replicas run under (MLYARD_JOB_USERS): `per-user`, `off` or `auto`
    (`backends/local/job_accounts.py`)."""
    job_user_prefix: str = DEFAULT_JOB_USER_PREFIX
    """The OS accounts of mlyard users are named this plus the user name (MLYARD_JOB_USER_PREFIX)."""
    job_isolation: str = "namespace"
    """MLYARD_JOB_ISOLATION: `namespace` (a replica on the server's own account sees MLYARD_HOME
    only as its own directories: `runtime/hide_home.py`) or `none`."""
    job_env_passthrough: tuple[str, ...] = ()
    """Variables of the server's environment every replica gets too (MLYARD_JOB_ENV_PASSTHROUGH,
    names separated by spaces); the rest of it never reaches a replica."""
    backend: str = "local"
    """What runs replicas (MLYARD_BACKEND): `local` processes on this machine, or `kubernetes`
    pods (configured by MLYARD_K8S_*, `backends/kubernetes/settings.py`)."""
    job_api_url: str | None = None
    """How replicas reach the API (MLYARD_JOB_API_URL), when not at `url`: pods reach the
    server through its Service, not through the address it listens on."""
    runtime: str = "auto"
    """How the local backend runs a job that names an `image` (MLYARD_RUNTIME): `auto` (in a
    container when the engine answers, else the job is refused at submission), `container` (the
    same, but the server does not start without an engine) or `process` (no containers: such a
    job is refused). Jobs without an image always run as processes (`backends/containers/`)."""
    container_socket: str | None = None
    """The container engine's Docker-compatible API (MLYARD_CONTAINER_SOCKET): a unix socket
    path or a URL; None: DOCKER_HOST, else /run/podman/podman.sock or /var/run/docker.sock."""
    allowed_hosts: str | None = None
    """The `Host` names this server answers to (MLYARD_ALLOWED_HOSTS, separated by commas or
    spaces; `*`: any); None: its own addresses and names (`http/allowed_hosts.py`)."""
    cookie_secure: str = "auto"
    """The web UI's cookies are Secure and `__Host-` named (MLYARD_COOKIE_SECURE): `on`, `off`,
    or `auto` (when the request came over HTTPS)."""
    session_bind_address: bool = True
    """Whether a web session works only from the client address it began at
    (MLYARD_SESSION_BIND_ADDRESS): off behind a proxy whose replicas reach the server from several
    addresses."""
    environment_builds: BuildPolicy = field(default_factory=BuildPolicy)
    """What environment builds may reach and which account runs them (MLYARD_PIP_*,
    MLYARD_ENVIRONMENT_BASES, MLYARD_BUILD_USER: `environments/build_policy.py`)."""
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise MlyardError(f"MLYARD_RUNTIME={self.runtime!r}: choose one of {', '.join(RUNTIMES)}")
        if self.backend not in BACKENDS:
            raise MlyardError(f"MLYARD_BACKEND={self.backend!r}: choose one of {', '.join(BACKENDS)}")
        if self.cookie_secure not in ("auto", "on", "off"):
            raise MlyardError(f"MLYARD_COOKIE_SECURE={self.cookie_secure!r}: choose one of auto, on, off")
        if self.job_users not in JOB_USER_MODES:
            raise MlyardError(f"MLYARD_JOB_USERS={self.job_users!r}: choose one of {', '.join(JOB_USER_MODES)}")
        if self.job_isolation not in ("namespace", "none"):
            raise MlyardError(f"MLYARD_JOB_ISOLATION={self.job_isolation!r}: choose one of namespace, none")
        for name in self.job_env_passthrough:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise MlyardError(f"MLYARD_JOB_ENV_PASSTHROUGH: {name!r} is not a variable name")
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,15}", self.job_user_prefix):
            raise MlyardError(f"MLYARD_JOB_USER_PREFIX={self.job_user_prefix!r}: up to 16 lowercase letters, "
                              "digits, '_' and '-', not starting with a digit or '-'")
        if self.scheduler_policy not in LIVE_POLICIES:
            raise MlyardError(f"MLYARD_SCHEDULER_POLICY={self.scheduler_policy!r} is not a policy the server "
                              f"can run; choose one of {', '.join(LIVE_POLICIES)}")

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(policy=self.scheduler_policy, min_run_before_preempt=self.preempt_min_run_seconds,
                               preemption_budget=self.preemption_budget)

    def snapshot_limits(self) -> UnpackLimits:
        """What an uploaded code snapshot may unpack to."""
        return UnpackLimits.for_upload(self.max_snapshot_bytes, max_bytes=self.max_snapshot_unpacked_bytes,
                                       max_ratio=self.max_snapshot_ratio)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def replica_api_url(self) -> str:
        """The API's URL as replicas are given it (MLYARD_API)."""
        return (self.job_api_url or self.url).rstrip("/")

    @property
    def secret_key_path(self) -> Path:
        return Path(self.secret_key_file) if self.secret_key_file else self.paths.home / "secret.key"

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.paths.database}"

    @classmethod
    def from_environment(cls, *, host: str | None = None, port: int | None = None) -> ServerSettings:
        environment = os.environ
        cpus = environment.get("MLYARD_NODE_CPUS")
        memory = environment.get("MLYARD_NODE_MEMORY")
        grace = environment.get("MLYARD_STOP_GRACE")
        snapshot_cap = environment.get("MLYARD_MAX_SNAPSHOT")
        unpacked_cap = environment.get("MLYARD_MAX_SNAPSHOT_UNPACKED_BYTES")
        min_run = environment.get("MLYARD_PREEMPT_MIN_RUN")
        budget = environment.get("MLYARD_PREEMPTION_BUDGET", "").strip()
        interval = environment.get("MLYARD_SAMPLE_INTERVAL")
        raw_retention = environment.get("MLYARD_SAMPLE_RETENTION")
        minute_retention = environment.get("MLYARD_SAMPLE_RETENTION_1M")
        idle_gpu = environment.get("MLYARD_IDLE_GPU_UTILIZATION")
        idle_after = environment.get("MLYARD_IDLE_AFTER")
        interactive_timeout = environment.get("MLYARD_INTERACTIVE_IDLE_TIMEOUT")
        connection_grace = environment.get("MLYARD_CONNECTION_GRACE")
        audit_retention = environment.get("MLYARD_AUDIT_RETENTION")
        return cls(
            paths=Paths(home_directory()),
            host=host or environment.get("MLYARD_HOST", DEFAULT_HOST),
            port=port or int(environment.get("MLYARD_PORT", DEFAULT_PORT)),
            database_url=environment.get("MLYARD_DATABASE_URL") or None,
            node_cpus=int(cpus) if cpus else None,
            node_memory=parse_memory(memory) if memory else None,
            stop_grace_seconds=parse_duration(grace) if grace else 10.0,
            max_snapshot_bytes=parse_memory(snapshot_cap) if snapshot_cap else DEFAULT_MAX_SNAPSHOT_BYTES,
            max_snapshot_unpacked_bytes=(_size("MLYARD_MAX_SNAPSHOT_UNPACKED_BYTES", unpacked_cap) if unpacked_cap
                                         else None),
            max_snapshot_ratio=_count("MLYARD_MAX_SNAPSHOT_RATIO",
                                      environment.get("MLYARD_MAX_SNAPSHOT_RATIO") or str(DEFAULT_MAX_RATIO)),
            max_request_bytes=_size("MLYARD_MAX_REQUEST_BYTES", environment.get("MLYARD_MAX_REQUEST_BYTES") or "1Mi"),
            max_blob_bytes=_size("MLYARD_MAX_BLOB", environment.get("MLYARD_MAX_BLOB") or "64Gi"),
            data_roots=_data_roots(environment.get("MLYARD_DATA_ROOTS", "")),
            max_log_bytes=_size("MLYARD_MAX_LOG_BYTES", environment.get("MLYARD_MAX_LOG_BYTES") or "1Gi"),
            max_log_streams_per_user=_count("MLYARD_MAX_LOG_STREAMS_PER_USER",
                                            environment.get("MLYARD_MAX_LOG_STREAMS_PER_USER") or "16"),
            secret_key_file=environment.get("MLYARD_SECRET_KEY_FILE", "").strip() or None,
            scheduler_policy=environment.get("MLYARD_SCHEDULER_POLICY", "").strip() or DEFAULT_POLICY,
            preempt_min_run_seconds=(_duration_or_zero("MLYARD_PREEMPT_MIN_RUN", min_run) if min_run
                                     else DEFAULT_PREEMPT_MIN_RUN),
            preemption_budget=(_count("MLYARD_PREEMPTION_BUDGET", budget, 0, 1_000_000) if budget else None),
            sample_interval_seconds=(_duration_or_zero("MLYARD_SAMPLE_INTERVAL", interval) if interval
                                     else DEFAULT_SAMPLE_INTERVAL),
            volume_scan_seconds=_duration("MLYARD_VOLUME_SCAN_INTERVAL",
                                          environment.get("MLYARD_VOLUME_SCAN_INTERVAL") or "30s"),
            raw_sample_retention_seconds=(_duration("MLYARD_SAMPLE_RETENTION", raw_retention) if raw_retention
                                          else DEFAULT_RAW_SAMPLE_RETENTION),
            minute_sample_retention_seconds=(_duration("MLYARD_SAMPLE_RETENTION_1M", minute_retention)
                                             if minute_retention else DEFAULT_MINUTE_SAMPLE_RETENTION),
            idle_gpu_utilization=(_percent("MLYARD_IDLE_GPU_UTILIZATION", idle_gpu) if idle_gpu
                                  else DEFAULT_IDLE_GPU_UTILIZATION),
            idle_after_seconds=(_duration_or_zero("MLYARD_IDLE_AFTER", idle_after) if idle_after
                                else DEFAULT_IDLE_AFTER),
            interactive_idle_timeout_seconds=(
                _duration_or_zero("MLYARD_INTERACTIVE_IDLE_TIMEOUT", interactive_timeout) if interactive_timeout
                else DEFAULT_INTERACTIVE_IDLE_TIMEOUT),
            connection_grace_seconds=(_duration_or_zero("MLYARD_CONNECTION_GRACE", connection_grace)
                                      if connection_grace else DEFAULT_CONNECTION_GRACE),
            audit_retention_seconds=(_duration_or_zero("MLYARD_AUDIT_RETENTION", audit_retention) if audit_retention
                                     else DEFAULT_AUDIT_RETENTION),
            job_users=environment.get("MLYARD_JOB_USERS", "").strip() or "auto",
            job_isolation=environment.get("MLYARD_JOB_ISOLATION", "").strip() or "namespace",
            job_env_passthrough=tuple(environment.get("MLYARD_JOB_ENV_PASSTHROUGH", "").split()),
            job_user_prefix=environment.get("MLYARD_JOB_USER_PREFIX", "").strip() or DEFAULT_JOB_USER_PREFIX,
            backend=environment.get("MLYARD_BACKEND", "").strip() or "local",
            job_api_url=environment.get("MLYARD_JOB_API_URL", "").strip() or None,
            runtime=environment.get("MLYARD_RUNTIME", "").strip() or "auto",
            container_socket=environment.get("MLYARD_CONTAINER_SOCKET", "").strip() or None,
            environment_builds=BuildPolicy.from_environment(environment),
            allowed_hosts=environment.get("MLYARD_ALLOWED_HOSTS", "").strip() or None,
            cookie_secure=environment.get("MLYARD_COOKIE_SECURE", "").strip().lower() or "auto",
            session_bind_address=_on_or_off(environment, "MLYARD_SESSION_BIND_ADDRESS", True),
        )
