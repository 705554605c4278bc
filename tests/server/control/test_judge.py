"""The controller's verdicts on an attempt, alone: no database, no backend, no clock."""

from __future__ import annotations

from dataclasses import dataclass

from mlyard.server.control.judge import Action, FailurePolicy, judge
from mlyard.spec import JobSpec, JobStatus, RestartPolicy


@dataclass
class Replica:
    name: str
    rank: int
    state: str
    exit_code: int | None = None
    reason: str | None = None


def spec(**fields) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "command": ["true"], "roles": [{"name": "worker", "replicas": 2}],
                                   **fields})


def verdict(replicas, *, cancel=False, restarts=0, now=100.0, **fields):
    return judge(spec=spec(**fields), replicas=replicas, cancel_requested=cancel, restarts_so_far=restarts,
                 launched_at=0.0, now=now)


def test_running_replicas_keep_going_and_all_exited_zero_succeed() -> None:
    assert verdict([Replica("worker-0", 0, "running"), Replica("worker-1", 1, "exited", 0)]).action is Action.CONTINUE
    assert verdict([Replica("worker-0", 0, "exited", 0), Replica("worker-1", 1, "exited", 0)]).action is Action.SUCCEED


def test_a_failed_replica_restarts_the_gang_while_restarts_are_left_then_fails_the_job() -> None:
    replicas = [Replica("worker-0", 0, "running"), Replica("worker-1", 1, "exited", 3, "out of memory")]
    first = verdict(replicas, restarts=0, restart_policy={"max_restarts": 2})
    assert (first.action, first.outcome, first.failed_replica_exit_code) == (Action.STOP, JobStatus.RESTARTING, 3)
    assert first.reason == "replica worker-1 (rank 1) exited with code 3 (out of memory); restart 1 of 2"
    last = verdict(replicas, restarts=2, restart_policy={"max_restarts": 2})
    assert (last.outcome, last.reason) == (
        JobStatus.FAILED, "replica worker-1 (rank 1) exited with code 3 (out of memory); no restarts left (2 used)")
    assert verdict(replicas).reason == "replica worker-1 (rank 1) exited with code 3 (out of memory)"


def test_a_lost_replica_fails_with_what_the_backend_said() -> None:
    lost = verdict([Replica("worker-0", 0, "lost", reason="node drained")])
    assert (lost.outcome, lost.from_failure, lost.failed_replica_exit_code) == (JobStatus.FAILED, True, None)
    assert lost.reason == "replica worker-0 (rank 0) was lost: node drained"
    assert verdict([Replica("worker-0", 0, "lost")]).reason.endswith("disappeared without an exit status")


def test_a_cancellation_wins_over_a_failure_and_the_time_limit_counts_from_the_launch() -> None:
    cancelled = verdict([Replica("worker-0", 0, "exited", 1)], cancel=True)
    assert (cancelled.outcome, cancelled.from_failure) == (JobStatus.CANCELLED, False)
    late = verdict([Replica("worker-0", 0, "running")], now=61.0, max_runtime=60)
    assert (late.outcome, late.reason) == (JobStatus.FAILED, "exceeded its max_runtime of 60s")
    assert verdict([Replica("worker-0", 0, "running")], now=59.0, max_runtime=60).action is Action.CONTINUE


def test_the_failure_policy_alone() -> None:
    policy = FailurePolicy(RestartPolicy(max_restarts=1))
    assert policy.decide(0, "boom") == (JobStatus.RESTARTING, "boom; restart 1 of 1")
    assert policy.decide(1, "boom") == (JobStatus.FAILED, "boom; no restarts left (1 used)")
    assert FailurePolicy(RestartPolicy()).decide(0, "boom") == (JobStatus.FAILED, "boom")
