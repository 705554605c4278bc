"""The Kubernetes backend against a stand-in for the API (`k8s_fake_api.py`): what it
creates and deletes, in which order, what it observes, and how it says what went wrong."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path

import pytest
from k8s_fake_api import FakeCoreApi
from k8s_support import HERE, Placement, attempt, backend
from test_k8s_render import GIB, ddp_two_replicas

from mlyard.backends.base import ReplicaRef
from mlyard.backends.kubernetes.backend import KubernetesBackend, KubernetesError
from mlyard.backends.kubernetes.settings import KubernetesSettings
from mlyard.backends.kubernetes.status import parse_time
from mlyard.backends.kubernetes.watcher import PodCache, PodWatcher
from mlyard.spec import JobSpec

PODS = HERE / "pods"


def recorded(name: str) -> dict:
    return json.loads((PODS / f"{name}.json").read_text())


@pytest.fixture
def api():
    return FakeCoreApi()


@pytest.fixture
def settings(tmp_path):
    """The shared volume as the server sees it: launching creates the replicas' directories on it."""
    return KubernetesSettings(shared_mount_path=str(tmp_path))


@pytest.fixture
def ddp(api, settings):
    _, launch = ddp_two_replicas(home=Path(settings.shared_mount_path))
    return KubernetesBackend(settings, api, watch=False), launch


def references(launch) -> list[ReplicaRef]:
    return [ReplicaRef(replica_id=r.replica_id, node=r.node, directory=r.directory, pid=None, pid_started_at=None)
            for r in launch.replicas]


def set_status(api: FakeCoreApi, name: str, recording: str) -> dict:
    pod = api.objects[("pod", name)]
    pod["status"] = recorded(recording)["status"]
    return pod


def test_launch_creates_the_service_first_and_makes_it_the_owner(ddp, api):
    kubernetes, launch = ddp
    refs = kubernetes.launch(launch)
    assert [call for call in api.calls] == [
        ("create", "service/mlyard-j7-a1"), ("create", "secret/mlyard-j7-a1"),
        ("create", "pod/mlyard-j7-a1-worker-0"), ("create", "pod/mlyard-j7-a1-worker-1")]
    uid = api.objects[("service", "mlyard-j7-a1")]["metadata"]["uid"]
    for key in (("secret", "mlyard-j7-a1"), ("pod", "mlyard-j7-a1-worker-0"), ("pod", "mlyard-j7-a1-worker-1")):
        assert api.objects[key]["metadata"]["ownerReferences"][0]["uid"] == uid
    assert [(ref.replica_id, ref.node, ref.directory, ref.pid) for ref in refs] == [
        (r.replica_id, r.node, r.directory, None) for r in launch.replicas]
    # Made by the server: the kubelet would create a subPath's missing directory as root.
    assert all(replica.directory.is_dir() for replica in launch.replicas)
    # What was submitted is what dryrun showed, plus the owner references.
    submitted = api.objects[("pod", "mlyard-j7-a1-worker-1")]
    shown = kubernetes.dryrun(launch)[3]
    assert submitted["spec"] == shown["spec"]


def test_just_launched_pods_are_pending_before_the_watch_sees_them(ddp):
    kubernetes, launch = ddp
    kubernetes.launch(launch)
    observed = kubernetes.observe(references(launch))
    assert {o.state for o in observed.values()} == {"pending"}


def test_a_refused_pod_leaves_nothing_behind_and_says_why(ddp, api):
    kubernetes, launch = ddp
    api.refuse[("pod", "mlyard-j7-a1-worker-1")] = (
        403, 'pods "mlyard-j7-a1-worker-1" is forbidden: exceeded quota: gpu-quota, requested: limits.cpu=1')
    with pytest.raises(KubernetesError, match=r"create pod mlyard/mlyard-j7-a1-worker-1: Kubernetes answered 403: "
                                              r".*exceeded quota: gpu-quota"):
        kubernetes.launch(launch)
    assert api.objects == {}
    assert ("pod", "mlyard-j7-a1-worker-0", 0) in api.deleted


def test_objects_left_by_an_earlier_database_are_named_with_the_command_to_remove_them(ddp, api, settings):
    kubernetes, launch = ddp
    kubernetes.launch(launch)
    again = KubernetesBackend(settings, api, watch=False)
    with pytest.raises(KubernetesError, match=r"service mlyard/mlyard-j7-a1 already exists.*"
                                              r"kubectl -n mlyard delete pods,services,secrets -l mlyard/job=7"):
        again.launch(launch)


def test_observe_maps_pods_as_the_api_reports_them(ddp, api):
    kubernetes, launch = ddp
    kubernetes.launch(launch)
    set_status(api, "mlyard-j7-a1-worker-0", "running")
    set_status(api, "mlyard-j7-a1-worker-1", "oomkilled")
    # A fresh backend (a restarted server) finds them through the API alone.
    restarted = KubernetesBackend(KubernetesSettings(), api, watch=False)
    observed = restarted.observe(references(launch))
    first, second = (observed[r.replica_id] for r in launch.replicas)
    assert first.state == "running"
    assert (second.state, second.exit_code) == ("exited", 137) and "OOMKilled" in second.reason


def test_a_pod_gone_without_a_trace_is_read_from_its_exit_file(tmp_path, api):
    settings = KubernetesSettings(shared_mount_path=str(tmp_path))
    kubernetes = KubernetesBackend(settings, api, watch=False)
    directory = tmp_path / "runs" / "3" / "1" / "worker-0"
    directory.mkdir(parents=True)
    ref = ReplicaRef(replica_id=5, node="node-a", directory=directory, pid=None, pid_started_at=None)
    assert kubernetes.observe([ref])[5].state == "lost"
    (directory / "exit.json").write_text(json.dumps({"exit_code": 2, "signal": None, "finished_at": 1.0e9}))
    observed = kubernetes.observe([ref])[5]
    assert (observed.state, observed.exit_code, observed.finished_at) == ("exited", 2, 1.0e9)


def test_stop_deletes_gracefully_then_at_once_and_twice_is_harmless(ddp, api):
    kubernetes, launch = ddp
    kubernetes.launch(launch)
    for name in ("mlyard-j7-a1-worker-0", "mlyard-j7-a1-worker-1"):
        kubernetes.cache.apply("MODIFIED", set_status(api, name, "running"))
    refs = references(launch)
    kubernetes.stop(refs[:1], force=False)
    assert api.deleted[-1] == ("pod", "mlyard-j7-a1-worker-0", None)  # the pod's own grace period
    kubernetes.stop(refs[1:], force=True)
    assert api.deleted[-1] == ("pod", "mlyard-j7-a1-worker-1", 0)
    # The watch has not told of the deletions yet: stopping again deletes again, and 404s are fine.
    kubernetes.stop(refs, force=True)
    assert ("pod", "mlyard-j7-a1-worker-0") not in api.objects


def test_lost_pods_are_removed_but_exited_ones_kept_for_their_logs(ddp, api):
    kubernetes, launch = ddp
    kubernetes.launch(launch)
    kubernetes.cache.apply("MODIFIED", set_status(api, "mlyard-j7-a1-worker-0", "node-lost-evicted-by-taint-manager"))
    kubernetes.cache.apply("MODIFIED", set_status(api, "mlyard-j7-a1-worker-1", "failed-exit-code"))
    observed = kubernetes.observe(references(launch))
    assert [observed[r.replica_id].state for r in launch.replicas] == ["lost", "exited"]
    kubernetes.stop(references(launch), force=True)
    assert ("pod", "mlyard-j7-a1-worker-0") not in api.objects
    assert ("pod", "mlyard-j7-a1-worker-1") in api.objects


def test_finished_attempts_are_deleted_after_the_retention(settings):
    api = FakeCoreApi(created="2026-11-30T10:00:00Z")
    _, launch = ddp_two_replicas(home=Path(settings.shared_mount_path))
    kubernetes = KubernetesBackend(settings, api, watch=False)
    kubernetes.launch(launch)
    for name in ("mlyard-j7-a1-worker-0", "mlyard-j7-a1-worker-1"):
        kubernetes.cache.apply("MODIFIED", set_status(api, name, "succeeded"))  # finished 10:12:40
    finished = parse_time("2026-11-30T10:12:40Z")
    assert kubernetes.collect_finished(finished + 60) == []
    assert kubernetes.collect_finished(finished + 601) == ["mlyard-j7-a1"]
    assert api.objects == {}  # the Secret and pods went with their Service


def test_running_attempts_are_never_collected(ddp, api):
    kubernetes, launch = ddp
    kubernetes.launch(launch)
    kubernetes.cache.apply("MODIFIED", set_status(api, "mlyard-j7-a1-worker-0", "succeeded"))
    kubernetes.cache.apply("MODIFIED", set_status(api, "mlyard-j7-a1-worker-1", "running"))
    assert kubernetes.collect_finished(time.time() + 10 * 86400) == []


def test_nodes_come_from_node_objects_filtered_by_the_selector(api):
    api.nodes = [json.loads((HERE / "nodes" / "gpu-node.json").read_text()),
                 json.loads((HERE / "nodes" / "cpu-node-not-ready.json").read_text())]
    kubernetes = KubernetesBackend(KubernetesSettings(), api, watch=False)
    gpu, cpu = kubernetes.nodes()
    assert gpu.name == "gpu-node-1" and cpu.name == "ip-10-0-1-20"
    selective = KubernetesBackend(KubernetesSettings(node_selector={"nvidia.com/gpu.present": "true"}), api, watch=False)
    assert [node.name for node in selective.nodes()] == ["gpu-node-1"]


def test_logs_are_read_through_the_api_and_empty_for_a_missing_pod(ddp, api):
    kubernetes, launch = ddp
    kubernetes.launch(launch)
    api.logs["mlyard-j7-a1-worker-0"] = "epoch 1\nepoch 2\nfinal test_accuracy=0.97\n"
    refs = references(launch)
    assert kubernetes.logs(refs[0], tail_lines=1) == "final test_accuracy=0.97\n"
    api.objects.clear()
    assert kubernetes.logs(refs[0]) == ""


def test_rendezvous_ports_differ_on_one_node_only_where_needed():
    kubernetes = backend()
    assert kubernetes.reserve_ports("node-a", 3) == [29500, 29501, 29502]
    assert kubernetes.reserve_ports("node-b", 1) == [29500]


def test_the_watch_lists_then_follows_and_tells_of_changes(ddp, api):
    kubernetes, launch = ddp
    kubernetes.launch(launch)
    finished = copy.deepcopy(api.objects[("pod", "mlyard-j7-a1-worker-0")])
    finished["status"] = recorded("failed-exit-code")["status"]
    finished["metadata"]["resourceVersion"] = "999999"
    told = threading.Event()
    follows: list[str] = []

    def watch_pods(version):
        follows.append(version)
        yield "MODIFIED", finished
        yield "DELETED", api.objects[("pod", "mlyard-j7-a1-worker-1")]
        threading.Event().wait(5)

    cache = PodCache()
    changes = []
    watcher = PodWatcher(cache, kubernetes._list_pods, watch_pods,
                         on_change=lambda: (changes.append(1), len(changes) >= 3 and told.set()))
    watcher.start()
    assert told.wait(5)
    watcher.stop()
    assert follows and follows[0].isdigit()
    pod, deleted = cache.get("mlyard-j7-a1-worker-0")
    assert not deleted and pod["status"]["phase"] == "Failed"
    assert cache.get("mlyard-j7-a1-worker-1")[1] is True


def test_a_stale_event_does_not_overwrite_a_newer_pod():
    cache = PodCache()
    newer = recorded("succeeded")
    older = recorded("running")
    older["metadata"]["resourceVersion"] = str(int(newer["metadata"]["resourceVersion"]) - 1)
    cache.apply("MODIFIED", newer)
    assert cache.apply("MODIFIED", older) is False
    assert cache.get(newer["metadata"]["name"])[0]["status"]["phase"] == "Succeeded"


def test_pods_gone_between_two_lists_become_tombstones():
    cache = PodCache()
    cache.replace([recorded("running")])
    cache.replace([])
    pod, deleted = cache.get(recorded("running")["metadata"]["name"])
    assert deleted and pod["status"]["phase"] == "Running"


def test_a_gpu_attempt_launches_against_the_api(api, settings):
    spec = JobSpec.model_validate({"name": "g", "command": ["python", "t.py"],
                                   "roles": [{"name": "worker", "resources": {"cpu": 4, "memory": "16Gi", "gpu": 1}}]})
    kubernetes = KubernetesBackend(settings, api, watch=False)
    home = Path(settings.shared_mount_path)
    launch = attempt(spec, [Placement("worker", 0, "gpu-node-1", 4, 16 * GIB, gpus=(0,))], renderer=kubernetes,
                     home=home)
    kubernetes.launch(launch)
    pod = api.objects[("pod", "mlyard-j42-a1-worker-0")]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["metadata"]["annotations"]["mlyard/directory"] == str(home / "runs" / "42" / "1" / "worker-0")
