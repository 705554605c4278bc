"""The controller's verdicts on an attempt, alone: no database, no backend, no clock."""

from __future__ import annotations

from dataclasses import dataclass

from mlyard.server.control.judge import Action, FailurePolicy, SuccessPolicy, judge, succeeded_before_failure
from mlyard.spec import JobSpec, JobStatus, RestartPolicy


@dataclass
class Replica:
    name: str
    rank: int
    state: str
    exit_code: int | None = None
    reason: str | None = None

    @property
    def role(self) -> str:
        return self.name.rpartition("-")[0]

    @property
    def index(self) -> int:
        return int(self.name.rpartition("-")[2])


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


def ps_job(**fields) -> dict:
    return {"framework": "tensorflow", "roles": [{"name": "chief"}, {"name": "worker", "replicas": 2}, {"name": "ps"}],
            **fields}


PS_RUNNING = [Replica("chief-0", 0, "running"), Replica("worker-0", 1, "running"), Replica("worker-1", 2, "running"),
              Replica("ps-0", 3, "running")]


def test_success_policies_wait_for_their_own_replicas_only() -> None:
    chief_done = [Replica("chief-0", 0, "exited", 0), *PS_RUNNING[1:]]
    assert SuccessPolicy("chief").decide(chief_done)
    assert not SuccessPolicy("all").decide(chief_done)
    assert not SuccessPolicy("worker-0").decide(chief_done)
    worker_done = [PS_RUNNING[0], Replica("worker-0", 1, "exited", 0), *PS_RUNNING[2:]]
    assert SuccessPolicy("worker-0").decide(worker_done) and not SuccessPolicy("chief").decide(worker_done)
    assert not SuccessPolicy("chief").decide([Replica("chief-0", 0, "exited", 1)]), "a failed chief is no success"
    assert not SuccessPolicy("chief").decide([Replica("worker-0", 0, "exited", 0)]), "no chief: never met"
    assert SuccessPolicy("chief").decide([Replica("master-0", 0, "exited", 0), Replica("worker-0", 1, "running")])


def test_a_tensorflow_job_whose_chief_finished_stops_the_rest_and_succeeds() -> None:
    chief_done = [Replica("chief-0", 0, "exited", 0), *PS_RUNNING[1:]]
    stop = verdict(chief_done, **ps_job())
    assert (stop.action, stop.outcome) == (Action.STOP, JobStatus.SUCCEEDED)
    assert "chief-0 exited 0" in stop.reason
    assert verdict(chief_done, **ps_job(success_policy="all")).action is Action.CONTINUE


def test_peers_failing_after_the_chief_finished_do_not_count_but_a_failed_chief_does() -> None:
    after = [Replica("chief-0", 0, "exited", 0), Replica("worker-0", 1, "exited", 1), *PS_RUNNING[2:]]
    assert verdict(after, **ps_job()).outcome is JobStatus.SUCCEEDED
    failed_chief = [Replica("chief-0", 0, "exited", 2), *PS_RUNNING[1:]]
    assert verdict(failed_chief, **ps_job()).outcome is JobStatus.FAILED
    worker_failed_first = [PS_RUNNING[0], Replica("worker-0", 1, "exited", 1), *PS_RUNNING[2:]]
    assert verdict(worker_failed_first, **ps_job()).outcome is JobStatus.FAILED


def test_default_success_policies_follow_kubeflow() -> None:
    assert JobSpec.model_validate({"name": "j", "command": "x", **ps_job()}).effective_success_policy == "chief"
    tf_workers = {"name": "j", "command": "x", "framework": "tensorflow", "roles": [{"name": "worker", "replicas": 2}]}
    assert JobSpec.model_validate(tf_workers).effective_success_policy == "worker-0"
    assert JobSpec.model_validate({**tf_workers, "framework": "pytorch"}).effective_success_policy == "all"
    worker_zero = [Replica("worker-0", 0, "exited", 0), Replica("worker-1", 1, "running")]
    assert verdict(worker_zero, framework="tensorflow").outcome is JobStatus.SUCCEEDED
    assert verdict(worker_zero).action is Action.CONTINUE


def test_a_peer_failure_seen_before_the_chiefs_exit_zero_does_not_fail_the_job() -> None:
    """The worker died of the chief's end and was observed first: the stop was for a failure,
    but once every replica is gone the chief's exit 0 meets the policy."""
    ended = [Replica("chief-0", 0, "exited", 0), Replica("worker-0", 1, "exited", 1),
             Replica("worker-1", 2, "exited", 143), Replica("ps-0", 3, "exited", 143)]
    job = JobSpec.model_validate({"name": "j", "command": "x", **ps_job()})
    assert "chief-0 exited 0" in succeeded_before_failure(job, ended)
    killed_chief = [Replica("chief-0", 0, "exited", 143), *ended[1:]]
    assert succeeded_before_failure(job, killed_chief) is None, "a chief stopped by mlyard did not succeed"
    assert succeeded_before_failure(spec(), [Replica("worker-0", 0, "exited", 0), Replica("worker-1", 1, "exited", 1)]) \
        is None, "under `all` a failure is a failure"
