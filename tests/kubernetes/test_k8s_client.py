"""The backend through the real `kubernetes` client, talking HTTP to the stand-in API
(`k8s_fake_api.py`, served): the requests it sends, the watch it follows, the errors it reads."""

from __future__ import annotations

import copy
import json
import threading
from urllib.parse import parse_qs, urlparse

import pytest
from k8s_fake_api import FakeCoreApi
from k8s_support import HERE
from kubernetes import client
from test_k8s_render import ddp_two_replicas

from mlyard.backends.base import ReplicaRef
from mlyard.backends.kubernetes.backend import KubernetesBackend, KubernetesError
from mlyard.backends.kubernetes.settings import KubernetesSettings


@pytest.fixture
def server():
    api = FakeCoreApi()
    api.serve()
    yield api
    api.close()


def core_api(url: str) -> client.CoreV1Api:
    configuration = client.Configuration(host=url)
    return client.CoreV1Api(client.ApiClient(configuration))


def references(launch):
    return [ReplicaRef(replica_id=r.replica_id, node=r.node, directory=r.directory, pid=None, pid_started_at=None)
            for r in launch.replicas]


def test_launch_observe_stop_and_logs_through_the_real_client(server):
    kubernetes = KubernetesBackend(KubernetesSettings(), core_api(server.url), watch=False)
    _, launch = ddp_two_replicas()
    kubernetes.launch(launch)
    assert [request for request in server.requests if request[0] == "POST"] == [
        ("POST", "/api/v1/namespaces/mlyard/services"), ("POST", "/api/v1/namespaces/mlyard/secrets"),
        ("POST", "/api/v1/namespaces/mlyard/pods"), ("POST", "/api/v1/namespaces/mlyard/pods")]
    pod = server.objects[("pod", "mlyard-j7-a1-worker-0")]
    assert pod["spec"] == kubernetes.dryrun(launch)[2]["spec"]  # what dryrun shows is what the API got
    restarted = KubernetesBackend(KubernetesSettings(), core_api(server.url), watch=False)
    assert {o.state for o in restarted.observe(references(launch)).values()} == {"pending"}
    server.logs["mlyard-j7-a1-worker-0"] = "epoch 1\nepoch 2\n"
    assert restarted.logs(references(launch)[0]) == "epoch 1\nepoch 2\n"
    assert restarted.logs(references(launch)[0], tail_lines=1) == "epoch 2\n"
    restarted.stop(references(launch), force=True)
    deletes = [request for request in server.requests if request[0] == "DELETE"]
    assert len(deletes) == 2
    assert parse_qs(urlparse(deletes[0][1]).query)["gracePeriodSeconds"] == ["0"]
    restarted.stop(references(launch), force=True)  # gone: 404s are fine


def test_refusals_are_read_from_the_apis_status(server):
    kubernetes = KubernetesBackend(KubernetesSettings(), core_api(server.url), watch=False)
    _, launch = ddp_two_replicas()
    kubernetes.launch(launch)
    with pytest.raises(KubernetesError, match=r"service mlyard/mlyard-j7-a1 already exists"):
        kubernetes.launch(launch)


def test_an_unreachable_api_is_said_so():
    kubernetes = KubernetesBackend(KubernetesSettings(), core_api("http://127.0.0.1:9"), watch=False)
    with pytest.raises(KubernetesError, match="could not list nodes: the Kubernetes API is unreachable"):
        kubernetes.nodes()


def test_nodes_through_the_real_client(server):
    server.nodes = [json.loads((HERE / "nodes" / "gpu-node.json").read_text())]
    (node,) = KubernetesBackend(KubernetesSettings(), core_api(server.url), watch=False).nodes()
    assert node.name == "gpu-node-1" and len(node.gpus) == 8


def test_the_watch_brings_exits_and_tells_the_controller(server):
    _, launch = ddp_two_replicas()
    kubernetes = KubernetesBackend(KubernetesSettings(), core_api(server.url), watch=False)
    kubernetes.launch(launch)
    told = threading.Event()
    watching = KubernetesBackend(KubernetesSettings(), core_api(server.url), watch=False)
    watching.notify = told.set
    watching.start_watching()
    try:
        assert watching.cache.synced.wait(10)
        assert {o.state for o in watching.observe(references(launch)).values()} == {"pending"}
        told.clear()
        finished = copy.deepcopy(server.objects[("pod", "mlyard-j7-a1-worker-1")])
        finished["status"] = json.loads((HERE / "pods" / "failed-exit-code.json").read_text())["status"]
        server.publish("MODIFIED", finished)
        assert told.wait(10), "the watch did not report the change"
        observed = watching.observe(references(launch))
        second = observed[launch.replicas[1].replica_id]
        assert (second.state, second.exit_code) == ("exited", 3)
    finally:
        watching.close()
