"""The job specification, as pure values.

A `JobSpec` is what a user submits (YAML or JSON). It validates everything it can without
looking at a cluster; whether the job fits on any node is the scheduler's question. The job
lifecycle (`JobStatus`, `ALLOWED_TRANSITIONS`) lives in `mlyard.job_status` and is named here too.
"""

from __future__ import annotations

import math
import re
import shlex
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

# The lifecycle, named here too: most code takes a job's spec and statuses from one place.
from mlyard.job_status import ALLOWED_TRANSITIONS, TERMINAL_STATUSES, JobStatus, can_transition  # noqa: F401

from mlyard.spec.base import (  # noqa: F401 - named here too
    MAX_ENV_SECRETS,
    MAX_SECRET_BYTES,
    MAX_STORED_SECRET,
    NAME_PATTERN,
    _ZERO_DURATION,
    _Strict,
    format_bytes,
    parse_duration,
    parse_memory,
)
from mlyard.spec.storage import (  # noqa: F401 - named here too
    ALIAS_PATTERN,
    DIGEST_PATTERN,
    MAX_DATASET_INPUTS,
    MAX_DATASET_OUTPUTS,
    MAX_VOLUMES,
    VERSION_PATTERN,
    DatasetInput,
    DatasetOutput,
    VolumeInput,
    check_dataset_inputs,
    check_dataset_outputs,
    check_volumes,
    dataset_variable,
    volume_variable,
)


MILLICORES = 1000
"""The scheduler counts CPUs in thousandths of a core."""


class Resources(_Strict):
    """What one replica needs. A request of one core or more is pinned to ceil(cpu) cores of
    its own; one below a core shares a core with other such requests (`shared_millicores`)."""

    cpu: float = Field(default=1.0, gt=0, le=4096, description="cores; below 1 (e.g. 0.25) shares a core")
    memory: int = Field(default=1024**3, description="bytes; accepts quantities such as 2Gi")
    gpu: int = Field(default=0, ge=0, le=64)
    gpu_models: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=16,
        description="GPU models the replica accepts, as the node reports them (e.g. NVIDIA H200); empty: any",
    )

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> int:
        return parse_memory(value)

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, value: float) -> float:
        if value < 1 and round(value * MILLICORES) < 1:
            raise ValueError("a CPU request below one core is counted in thousandths: at least 0.001")
        return value

    @property
    def whole_cpus(self) -> int:
        """Cores pinned to the replica alone: 0 for a request below one core, which shares one."""
        return 0 if self.cpu < 1 else math.ceil(self.cpu - 1e-9)

    @property
    def millicores(self) -> int:
        return round(self.cpu * MILLICORES)


class Role(_Strict):
    """A group of identical replicas: `worker`, `chief`, `ps`, …"""

    name: str = Field(default="worker", pattern=NAME_PATTERN)
    replicas: int = Field(default=1, ge=1, le=1024)
    resources: Resources = Field(default_factory=Resources)
    command: list[str] | None = Field(default=None, description="overrides the job's command for this role")
    env: dict[str, str] = Field(default_factory=dict)
    processes: int = Field(
        default=1, ge=1, le=256,
        description="processes per replica (one per GPU is usual): a plain command is started this many times "
        "with RANK and LOCAL_RANK of its own; torchrun reads it as PET_NPROC_PER_NODE",
    )

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> Any:
        return None if value is None else normalize_command(value)


MAX_BACKOFF_SECONDS = 600.0


class RestartPolicy(_Strict):
    """How often a failed job is started again from its last checkpoint. A replica that exits
    non-zero or vanishes fails its attempt; the whole gang stops, waits the backoff and starts
    again as a new attempt. Exceeding max_runtime and cancellation are never restarted."""

    max_restarts: int = Field(default=0, ge=0, le=1000)
    backoff_seconds: float = Field(
        default=10.0, ge=0, le=3600,
        description="wait before the first restart; doubles with each further one, up to 10 minutes "
        "(or backoff_seconds, if larger)",
    )

    def backoff(self, restarts_done: int) -> float:
        """Seconds to wait before restart number `restarts_done + 1`."""
        return min(self.backoff_seconds * 2.0 ** min(restarts_done, 32), max(self.backoff_seconds, MAX_BACKOFF_SECONDS))


class Elastic(_Strict):
    """The range of worker replicas an elastic job accepts."""

    min_replicas: int = Field(ge=1)
    max_replicas: int = Field(ge=1)

    @model_validator(mode="after")
    def _range(self) -> Elastic:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")
        return self


Framework = Literal["pytorch", "tensorflow", "none"]
SuccessPolicy = Literal["all", "chief", "worker-0"]
CHIEF_ROLES = ("chief", "master")


class Placement(_Strict):
    """Where a job's replicas must sit relative to each other; the scheduler waits, with a
    reason, rather than place them otherwise."""

    same_node: bool = Field(default=False, description="every replica on one node (model-parallel stages)")
    same_topology: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=r"^[A-Za-z0-9_.\-/]+$",
        description="a node label (e.g. rack): every replica on nodes with the same value of it",
    )


def normalize_command(value: Any) -> list[str]:
    """A command as an argv list; a string is run by /bin/sh so pipes and `&&` work."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("the command is empty")
        return ["/bin/sh", "-c", value]
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("the command is empty")
        if not all(isinstance(part, str) for part in value):
            raise ValueError("every part of the command must be a string")
        if not value[0].strip():
            raise ValueError("the command's program is empty")
        return list(value)
    raise ValueError("the command must be a string or a list of strings")



# A Docker/OCI reference: optional registry host[:port]/, lowercase path components, then :tag
# and/or @digest.
IMAGE_PATTERN = (r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
                 r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")


class JobSpec(_Strict):
    """A job as submitted. Unknown fields are errors, so a typo never silently does nothing."""

    name: str = Field(pattern=NAME_PATTERN, description="lowercase letters, digits and dashes")
    command: list[str]
    roles: list[Role] = Field(default_factory=lambda: [Role()], min_length=1)
    framework: Framework = "none"
    env: dict[str, str] = Field(default_factory=dict)
    env_secrets: dict[str, str] = Field(
        default_factory=dict, max_length=MAX_ENV_SECRETS,
        description="environment variables whose values are secret: stored encrypted with the server's key, "
        "shown to nobody (the API shows \"(secret)\"), given only to the replicas",
    )
    max_runtime: float | None = Field(default=None, description="seconds; accepts 90s, 10m, 2h")
    preemption_grace: float | None = Field(
        default=None,
        description="seconds between SIGTERM and SIGKILL when the scheduler preempts or resizes the job, "
        "time to write a checkpoint; accepts 30s, 2m (default: the server's stop grace)",
    )
    interactive: bool = Field(
        default=False,
        description="a notebook, shell or other session rather than a batch run: stopped once it has been idle "
        "for idle_timeout",
    )
    idle_timeout: float | None = Field(
        default=None,
        description="interactive jobs only: how long it may stay idle before it is stopped; accepts 30m, 2h; "
        "0 never stops it (default: the server's MLYARD_INTERACTIVE_IDLE_TIMEOUT)",
    )
    queue: str = Field(default="default", pattern=NAME_PATTERN)
    project: str = Field(default="default", pattern=NAME_PATTERN)
    priority: int = Field(default=0, ge=-1000, le=1000)
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    success_policy: SuccessPolicy | None = Field(
        default=None,
        description="when the job has succeeded: `all` replicas exited 0, the `chief` (or `master`) replica did, "
        "or replica 0 of role `worker` did (`worker-0`); the others are then stopped. Default: `chief` for a "
        "TensorFlow job with a chief role, `worker-0` for another TensorFlow job, else `all`",
    )
    placement: Placement = Field(default_factory=Placement)
    elastic: Elastic | None = None
    snapshot: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = Field(
        default=None, description="sha256 of the uploaded code snapshot"
    )
    image: str | None = Field(
        default=None, max_length=255, pattern=IMAGE_PATTERN,
        description="container image the replicas run in (registry/name:tag or @sha256:…); unset: the "
        "backend's default (processes on the local backend)",
    )
    environment: str | None = Field(
        default=None, pattern=NAME_PATTERN,
        description="an environment built with `mlyard env build` (an image, or a virtualenv on a server "
        "without a container engine), instead of an image",
    )
    datasets: list[DatasetInput] = Field(
        default_factory=list, max_length=MAX_DATASET_INPUTS,
        description="dataset versions every replica reads, each a read-only directory under its working "
                    "directory whose absolute path is in MLYARD_DATASET_<NAME>")
    outputs: list[DatasetOutput] = Field(
        default_factory=list, max_length=MAX_DATASET_OUTPUTS,
        description="datasets the job writes: when it succeeds, what it left in MLYARD_OUTPUT_DIR becomes a new "
                    "version of each, with the job as its source")
    volumes: list[VolumeInput] = Field(
        default_factory=list, max_length=MAX_VOLUMES,
        description="project volumes every replica reads and writes, each at its path, whose path in the "
                    "replica is in MLYARD_VOLUME_<NAME>")

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> list[str]:
        return normalize_command(value)

    @field_validator("max_runtime", "preemption_grace", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> float | None:
        return None if value is None else parse_duration(value)

    @field_validator("idle_timeout", mode="before")
    @classmethod
    def _idle_timeout(cls, value: Any, info: ValidationInfo) -> float | None:
        if value is None:
            return None
        if not info.data.get("interactive", False):
            # Refused rather than ignored: a timeout that never fires would look like a bug later.
            raise ValueError("only an interactive job is stopped when idle; set interactive: true or leave it out")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
            return 0.0
        if isinstance(value, str) and _ZERO_DURATION.match(value):
            return 0.0
        return parse_duration(value)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
        return value

    @field_validator("env_secrets")
    @classmethod
    def _env_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        for key, secret in value.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if key.startswith("MLYARD_"):
                raise ValueError(f"{key!r}: the MLYARD_ variables are set by mlyard")
            # Never the value in a message: it would land in answers and logs.
            if len(secret) > MAX_STORED_SECRET:
                raise ValueError(f"{key!r}: a secret value holds at most {MAX_SECRET_BYTES} bytes")
        return value

    @model_validator(mode="after")
    def _roles(self) -> JobSpec:
        names = [role.name for role in self.roles]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"role names must be unique; repeated: {', '.join(duplicates)}")
        if self.elastic is not None and len(self.roles) != 1:
            raise ValueError("an elastic job has exactly one role")
        if self.image is not None and self.environment is not None:
            raise ValueError("name an image or an environment, not both")
        plain = set(self.env).union(*(role.env for role in self.roles))
        if both := sorted(plain & set(self.env_secrets)):
            raise ValueError(f"{', '.join(both)}: set in env and in env_secrets; keep one")
        if self.framework == "tensorflow" and (many := [role.name for role in self.roles if role.processes > 1]):
            # TF_CONFIG names one task per replica: a second process would be the same task.
            raise ValueError(f"{', '.join(many)}: a TensorFlow task is one process; leave processes at 1")
        if self.success_policy == "chief" and not any(name in CHIEF_ROLES for name in names):
            raise ValueError("success_policy chief needs a role named chief (or master)")
        if self.success_policy == "worker-0" and "worker" not in names:
            raise ValueError("success_policy worker-0 needs a role named worker")
        check_dataset_inputs(self.datasets)
        check_dataset_outputs(self.outputs)
        check_volumes(self.volumes, self.datasets)
        return self

    @property
    def effective_success_policy(self) -> SuccessPolicy:
        """The policy the job runs under: its own, or the default Kubeflow's operators use."""
        if self.success_policy is not None:
            return self.success_policy
        if self.framework == "tensorflow":
            names = {role.name for role in self.roles}
            if names & set(CHIEF_ROLES):
                return "chief"
            if "worker" in names:
                return "worker-0"
        return "all"

    @property
    def replica_count(self) -> int:
        return sum(role.replicas for role in self.roles)

    def command_for(self, role: Role) -> list[str]:
        return role.command or self.command

    def display_command(self) -> str:
        if self.command[:2] == ["/bin/sh", "-c"] and len(self.command) == 3:
            return self.command[2]
        return shlex.join(self.command)
