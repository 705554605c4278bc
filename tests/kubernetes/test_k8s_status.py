"""Pods as the API returns them (recorded in tests/kubernetes/pods/, JSON) mapped to replica
states and the reasons a job's events show."""

from __future__ import annotations

import json

import pytest
from k8s_support import HERE, validate

from mlyard.backends.kubernetes.status import observe_pod, parse_time

PODS = HERE / "pods"
CREATED = parse_time("2026-11-30T10:00:00Z")
SOON = CREATED + 30
LATE = CREATED + 3600
TIMEOUT = 600.0


def pod(name: str) -> dict:
    return json.loads((PODS / f"{name}.json").read_text())


def test_every_recorded_pod_has_the_shape_of_the_pod_api():
    recorded = sorted(PODS.glob("*.json"))
    assert len(recorded) >= 12
    for path in recorded:
        validate(json.loads(path.read_text()), f"{path.name}: ")


def test_a_pod_being_created_is_pending_without_a_reason():
    observation = observe_pod(pod("pending-container-creating"), now=SOON, start_timeout=TIMEOUT)
    assert (observation.state, observation.reason) == ("pending", None)


def test_a_pod_stuck_before_its_container_starts_is_given_up_with_where_to_look():
    observation = observe_pod(pod("pending-container-creating"), now=CREATED + TIMEOUT + 1, start_timeout=TIMEOUT)
    assert observation.state == "lost"
    assert "did not start within 600s (still ContainerCreating)" in observation.reason
    assert "kubectl -n mlyard describe pod mlyard-j7-a1-worker-0" in observation.reason


def test_running_pod_is_running_since_its_container_started():
    observation = observe_pod(pod("running"), now=SOON, start_timeout=TIMEOUT)
    assert observation.state == "running"
    assert observation.started_at == parse_time("2026-11-30T10:00:04Z")


def test_succeeded_pod_exited_with_zero_and_its_times():
    observation = observe_pod(pod("succeeded"), now=LATE)
    assert (observation.state, observation.exit_code, observation.reason) == ("exited", 0, None)
    assert observation.finished_at - observation.started_at == pytest.approx(12 * 60 + 36)


def test_failed_pod_exited_with_the_commands_exit_code():
    observation = observe_pod(pod("failed-exit-code"), now=LATE)
    assert (observation.state, observation.exit_code) == ("exited", 3)
    assert observation.reason is None  # the exit code says it all


def test_oomkilled_says_so_with_the_memory_limit():
    observation = observe_pod(pod("oomkilled"), now=LATE)
    assert (observation.state, observation.exit_code) == ("exited", 137)
    assert "OOMKilled" in observation.reason and "out of memory" in observation.reason
    assert "2147483648" in observation.reason


@pytest.mark.parametrize("name", ["image-pull-backoff", "err-image-pull"])
def test_image_pull_errors_name_the_image_and_wait_until_the_start_timeout(name):
    early = observe_pod(pod(name), now=SOON, start_timeout=TIMEOUT)
    assert early.state == "pending"
    assert "cannot pull image mlyard/pytorch:0.1.0-typo" in early.reason
    late = observe_pod(pod(name), now=CREATED + TIMEOUT + 1, start_timeout=TIMEOUT)
    assert late.state == "lost"
    assert "mlyard/pytorch:0.1.0-typo" in late.reason and "given up after 600s" in late.reason


def test_image_pull_backoff_keeps_the_kubelets_message():
    observation = observe_pod(pod("image-pull-backoff"), now=SOON, start_timeout=TIMEOUT)
    assert 'Back-off pulling image "mlyard/pytorch:0.1.0-typo"' in observation.reason


def test_an_invalid_image_name_is_lost_at_once():
    observation = observe_pod(pod("invalid-image-name"), now=SOON, start_timeout=TIMEOUT)
    assert observation.state == "lost"
    assert "InvalidImageName" in observation.reason and "must be lowercase" in observation.reason


def test_unschedulable_pod_waits_with_the_schedulers_message_then_is_given_up():
    early = observe_pod(pod("unschedulable"), now=SOON, start_timeout=TIMEOUT)
    assert early.state == "pending"
    assert early.reason.startswith("Kubernetes cannot schedule the pod: 0/3 nodes are available: 1 Insufficient cpu")
    late = observe_pod(pod("unschedulable"), now=CREATED + TIMEOUT + 1, start_timeout=TIMEOUT)
    assert late.state == "lost" and "given up" in late.reason


def test_a_pod_evicted_from_a_lost_node_is_lost_though_it_still_says_running():
    observation = observe_pod(pod("node-lost-evicted-by-taint-manager"), now=LATE)
    assert observation.state == "lost"
    assert "node-a is not ready or unreachable" in observation.reason


def test_phase_unknown_is_a_lost_node():
    observation = observe_pod(pod("node-lost-phase-unknown"), now=LATE)
    assert observation.state == "lost" and "lost contact with its node node-a" in observation.reason


def test_evicted_pod_is_lost_with_the_kubelets_message():
    observation = observe_pod(pod("evicted"), now=LATE)
    assert observation.state == "lost"
    assert observation.reason.startswith("evicted from node node-a: The node was low on resource: memory")


def test_pod_refused_by_the_kubelet_is_lost_with_why():
    observation = observe_pod(pod("rejected-by-kubelet"), now=SOON)
    assert observation.state == "lost"
    assert "OutOfnvidia.com/gpu" in observation.reason and "requested: 1, used: 8" in observation.reason


def test_a_pod_being_stopped_is_running_until_its_container_ends():
    assert observe_pod(pod("terminating"), now=LATE).state == "running"
    stopped = observe_pod(pod("deleted-after-sigterm"), deleted=True, now=LATE)
    assert (stopped.state, stopped.exit_code) == ("exited", 143)


def test_a_pod_deleted_before_its_container_ended_is_lost():
    observation = observe_pod(pod("running"), deleted=True, now=LATE)
    assert observation.state == "lost" and "deleted" in observation.reason


def test_no_pod_at_all_is_lost():
    observation = observe_pod(None, now=LATE)
    assert observation.state == "lost" and "does not exist" in observation.reason
