"""Pure verdicts on an attempt with no stop in progress: keep going, stop it (and with which
outcome), or it has succeeded. No database, no clock of its own: the controller passes the
spec, what it knows of the replicas and the time, and carries the verdict out.

`FailurePolicy.decide` is the restart rule alone: a failed attempt restarts the whole gang
while restarts are left (ranks cannot rejoin a broken collective), and fails the job after.
`SuccessPolicy.decide` says when an attempt has succeeded although replicas still run: the
chief of a TensorFlow parameter-server job finishes while its ps and workers serve forever.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mlyard.spec import CHIEF_ROLES, JobSpec, JobStatus, RestartPolicy, SuccessPolicy as SuccessPolicyName


class ReplicaFacts(Protocol):
    """What a verdict reads of a replica (a `ReplicaRow` has it)."""

    name: str
    role: str
    index: int
    rank: int
    state: str
    exit_code: int | None
    reason: str | None


class Action(enum.Enum):
    CONTINUE = "continue"
    STOP = "stop"
    SUCCEED = "succeed"


@dataclass(frozen=True)
class Verdict:
    action: Action
    outcome: JobStatus | None = None
    """With STOP: what the job becomes once no replica is left (CANCELLED, RESTARTING, FAILED)."""
    reason: str | None = None
    failed_replica_exit_code: int | None = None
    """With a replica's failure (`from_failure`): its exit code (None if lost), which becomes the job's."""
    from_failure: bool = False


CONTINUE = Verdict(Action.CONTINUE)


@dataclass(frozen=True)
class FailurePolicy:
    policy: RestartPolicy

    def decide(self, restarts_so_far: int, reason: str) -> tuple[JobStatus, str]:
        """RESTARTING with restarts left, else FAILED; the reason says which and how many."""
        limit = self.policy.max_restarts
        if restarts_so_far < limit:
            return JobStatus.RESTARTING, f"{reason}; restart {restarts_so_far + 1} of {limit}"
        return JobStatus.FAILED, f"{reason}; no restarts left ({limit} used)" if limit else reason


@dataclass(frozen=True)
class SuccessPolicy:
    """`all`: every replica exited 0. `chief`: the replicas of role `chief` (or `master`) did.
    `worker-0`: replica 0 of role `worker` did. Whatever else still runs is then stopped and its
    exit code does not count."""

    name: SuccessPolicyName

    def deciding(self, replica: ReplicaFacts) -> bool:
        """Whether the replica is one the policy waits for."""
        if self.name == "chief":
            return replica.role in CHIEF_ROLES
        if self.name == "worker-0":
            return replica.role == "worker" and replica.index == 0
        return True

    def decide(self, replicas: Sequence[ReplicaFacts]) -> bool:
        """True once every replica the policy waits for has exited 0."""
        deciding = [replica for replica in replicas if self.deciding(replica)]
        return bool(deciding) and all(r.state == "exited" and r.exit_code == 0 for r in deciding)

    def reason(self, replicas: Sequence[ReplicaFacts]) -> str:
        names = ", ".join(replica.name for replica in replicas if self.deciding(replica))
        return f"succeeded ({names} exited 0, success_policy {self.name}); stopping the other replicas"


def succeeded_before_failure(spec: JobSpec, replicas: Sequence[ReplicaFacts]) -> str | None:
    """With every replica gone after a stop for a failure: why the attempt succeeded all the
    same, or None. A peer that died because the chief (or worker 0) finished may be seen before
    the chief's own exit 0 is; the policy met on the final states still decides."""
    success = SuccessPolicy(spec.effective_success_policy)
    if success.name == "all" or not success.decide(replicas):
        return None
    names = ", ".join(replica.name for replica in replicas if success.deciding(replica))
    return f"succeeded ({names} exited 0, success_policy {success.name}); the other replicas' failures do not count"


def failed_replica(replicas: Sequence[ReplicaFacts]) -> ReplicaFacts | None:
    return next((r for r in replicas if r.state == "lost" or (r.state == "exited" and r.exit_code != 0)), None)


def failure_reason(replica: ReplicaFacts) -> str:
    if replica.state == "lost":
        if replica.reason:
            return f"replica {replica.name} (rank {replica.rank}) was lost: {replica.reason}"
        return f"replica {replica.name} (rank {replica.rank}) disappeared without an exit status"
    reason = f"replica {replica.name} (rank {replica.rank}) exited with code {replica.exit_code}"
    return f"{reason} ({replica.reason})" if replica.reason else reason


def judge(*, spec: JobSpec, replicas: Sequence[ReplicaFacts], cancel_requested: bool, restarts_so_far: int,
          launched_at: float, now: float) -> Verdict:
    """In order: a cancellation, the success policy met, a failed or lost replica, a passed
    `max_runtime`, all gone. A met policy comes before failures: replicas that fail once the
    chief has finished (their peer is gone) do not count."""
    if cancel_requested:
        return Verdict(Action.STOP, JobStatus.CANCELLED, "cancelled by request")
    success = SuccessPolicy(spec.effective_success_policy)
    if success.name != "all" and success.decide(replicas):
        if all(replica.state in ("exited", "lost") for replica in replicas):
            return Verdict(Action.SUCCEED)
        return Verdict(Action.STOP, JobStatus.SUCCEEDED, success.reason(replicas))
    failed = failed_replica(replicas)
    if failed is not None:
        outcome, reason = FailurePolicy(spec.restart_policy).decide(restarts_so_far, failure_reason(failed))
        return Verdict(Action.STOP, outcome, reason, failed_replica_exit_code=failed.exit_code, from_failure=True)
    if spec.max_runtime is not None and now - launched_at > spec.max_runtime:
        return Verdict(Action.STOP, JobStatus.FAILED, f"exceeded its max_runtime of {spec.max_runtime:g}s")
    if all(replica.state in ("exited", "lost") for replica in replicas):
        return Verdict(Action.SUCCEED)
    return CONTINUE
