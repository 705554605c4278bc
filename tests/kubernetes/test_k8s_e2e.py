"""The DDP example on a real cluster, through the Kubernetes backend: two pods find each other
through the attempt's headless Service, train, and exit 0. Skipped unless
MLYARD_TEST_KUBECONFIG names a kubeconfig; docs/kubernetes.md ("Testing on kind or k3s")
gives the steps.

    MLYARD_TEST_KUBECONFIG=~/.kube/config .venv/bin/pytest tests/kubernetes/test_k8s_e2e.py

Also read: MLYARD_TEST_K8S_IMAGE (default mlyard/pytorch:0.1.0, built from
docker/pytorch.Dockerfile and loaded into the cluster), MLYARD_TEST_K8S_NAMESPACE (default
mlyard-e2e, created if missing), MLYARD_TEST_K8S_STORAGE_CLASS (default: the cluster's) and
MLYARD_TEST_K8S_ACCESS_MODE (default ReadWriteOnce, enough on a one-node cluster; ReadWriteMany
where the pods may land on several nodes).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

KUBECONFIG = os.environ.get("MLYARD_TEST_KUBECONFIG")
pytestmark = pytest.mark.skipif(not KUBECONFIG, reason="MLYARD_TEST_KUBECONFIG is not set: no cluster to run on")

NAMESPACE = os.environ.get("MLYARD_TEST_K8S_NAMESPACE", "mlyard-e2e")
IMAGE = os.environ.get("MLYARD_TEST_K8S_IMAGE", "mlyard/pytorch:0.1.0")
CLAIM = "mlyard-shared"
MOUNT = Path("/var/lib/mlyard")
DEADLINE_SECONDS = 600


@pytest.fixture(scope="module")
def cluster():
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    from mlyard.backends.kubernetes import KubernetesSettings, create_backend

    api = client.CoreV1Api(config.new_client_from_config(config_file=os.path.expanduser(KUBECONFIG)))
    try:
        api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    except ApiException as error:
        if error.status != 409:
            raise
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM},
             "spec": {"accessModes": [os.environ.get("MLYARD_TEST_K8S_ACCESS_MODE", "ReadWriteOnce")],
                      "resources": {"requests": {"storage": "1Gi"}}}}
    if os.environ.get("MLYARD_TEST_K8S_STORAGE_CLASS"):
        claim["spec"]["storageClassName"] = os.environ["MLYARD_TEST_K8S_STORAGE_CLASS"]
    try:
        api.create_namespaced_persistent_volume_claim(NAMESPACE, claim)
    except ApiException as error:
        if error.status != 409:
            raise
    settings = KubernetesSettings(namespace=NAMESPACE, shared_claim=CLAIM, shared_mount_path=str(MOUNT), image=IMAGE,
                                  kubeconfig=os.path.expanduser(KUBECONFIG), start_timeout_seconds=300,
                                  finished_retention_seconds=0)
    backend = create_backend(settings)
    yield backend
    backend.close()


def test_the_ddp_example_trains_on_two_pods(cluster):
    from k8s_support import Placement, attempt

    from mlyard.backends.base import ReplicaRef
    from mlyard.spec import JobSpec

    usable = [node for node in cluster.nodes() if len(node.cpu_ids) >= 1 and node.memory_bytes >= 2 * 2**30]
    assert usable, f"no node offers 1 CPU and 2 GiB: {[(n.name, n.notes) for n in cluster.nodes()]}"
    first, second = usable[0], usable[1 % len(usable)]
    spec = JobSpec.model_validate({
        "name": "digits-ddp", "framework": "pytorch",
        "command": ["python", "/opt/mlyard/examples/digits_ddp.py", "--epochs", "2"],
        "roles": [{"name": "worker", "replicas": 2, "resources": {"cpu": 1, "memory": "1Gi"}}]})
    job_id = int(time.time()) % 1_000_000
    launch = attempt(spec, [Placement("worker", 0, first.name, 1, 2**30), Placement("worker", 1, second.name, 1, 2**30)],
                     renderer=cluster, job_id=job_id, snapshot=None)  # the example is in the image
    refs = [ReplicaRef(replica_id=r.replica_id, node=r.node, directory=r.directory, pid=None, pid_started_at=None)
            for r in launch.replicas]
    cluster.launch(launch)
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            observed = cluster.observe(refs)
            if all(observation.is_gone for observation in observed.values()) or time.monotonic() > deadline:
                break
            time.sleep(2)
        logs = [cluster.logs(ref) for ref in refs]
        states = [(observed[ref.replica_id].state, observed[ref.replica_id].exit_code, observed[ref.replica_id].reason)
                  for ref in refs]
        assert states == [("exited", 0, None), ("exited", 0, None)], f"{states}\n" + "\n---\n".join(logs)
        assert "rendezvous rank=1 world_size=2" in logs[1]
        assert "final test_accuracy=" in logs[0]
    finally:
        cluster.stop(refs, force=True)
        cluster.collect_finished(time.time() + 1)
