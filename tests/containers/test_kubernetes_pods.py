"""docker/pytorch.Dockerfile builds, and mlyard's Kubernetes pods run in its image.

- The two pods the backend renders for a DDP job, started as containers the way a kubelet
  starts them (`stand_in_cluster.container_arguments`: the rendered command, the environment with
  the token from the rendered Secret, the pod's user and group, dropped capabilities, no
  privilege escalation, limits, the shared volume at its mount path, peers' names resolving),
  train the example that ships in the image together and leave their exit status, log and
  checkpoint on the shared volume, where the backend and the log service read them.
- The server image, with MLYARD_BACKEND=kubernetes, runs jobs submitted with its own CLI on a
  one-node stand-in cluster (`stand_in_cluster.py`: the API through the official client, pods
  as containers in the PyTorch image): a 2-replica DDP job from an uploaded snapshot reports
  its metrics with its job token and succeeds; its logs come through the pods' API; a cancelled
  job's pod is deleted and its container stopped; a job whose server is killed keeps running in
  its pod and is adopted by the next server.

No real cluster is involved: scheduling, Services, DNS and the API server itself are covered by
recorded objects in tests/kubernetes and on a real cluster by test_k8s_e2e.py. The pods share
this machine's network, so their rendezvous port is a free one.

torch comes from this machine's CPU wheel, which the build gets through the Dockerfile's
PIP_FIND_LINKS argument (as an offline cluster gets its mirror): PyPI's torch is a CUDA build of
several GB.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from conftest import free_port, wait_until
from container_support import (  # noqa: F401 - docker_fixture, server_image_fixture: fixtures
    REPOSITORY,
    build_image,
    docker_fixture,
    in_container,
    server_healthy,
    server_image_fixture,
    skip_or_fail,
)
from k8s_support import Placement, attempt, backend
from stand_in_cluster import NODE, StandInCluster, container_arguments, secret_values

from mlyard.backends.local.containers import Engine
from mlyard.backends.kubernetes.settings import KubernetesSettings
from mlyard.spec import JobSpec

pytestmark = pytest.mark.slow

DOCKERFILE = "docker/pytorch.Dockerfile"
TAG = "localhost/mlyard-pytorch:test"
TORCH_VERSION = re.search(r"^ARG TORCH_VERSION=(\S+)$", (REPOSITORY / DOCKERFILE).read_text(), re.MULTILINE).group(1)
RUN_AS = 1000
"""The uid and gid the image's user has and pods run as (MLYARD_K8S_RUN_AS_USER's default)."""


def cpu_torch_wheels() -> Path | None:
    """The directory holding a CPU wheel of the Dockerfile's torch for Python 3.11, if any."""
    for directory in [*os.environ.get("PIP_FIND_LINKS", "").split(), "/opt/wheels"]:
        path = Path(urlparse(directory).path if directory.startswith("file:") else directory)
        if path.is_dir() and any(path.glob(f"torch-{TORCH_VERSION}+cpu-cp311-*.whl")):
            return path
    return None


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *arguments: Any) -> None:
        pass


@pytest.fixture(scope="module")
def pytorch_image(docker: Engine) -> Iterator[str]:
    wheels = cpu_torch_wheels()
    if wheels is None:
        skip_or_fail(f"no CPU wheel of torch {TORCH_VERSION} for Python 3.11 here (PIP_FIND_LINKS, /opt/wheels)")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(wheels)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield build_image(docker, DOCKERFILE, TAG, PIP_FIND_LINKS=f"http://127.0.0.1:{server.server_port}/")
    finally:
        server.shutdown()
        server.server_close()


def test_the_image_has_cpu_torch_and_mlyard_and_runs_as_its_user(docker: Engine, pytorch_image: str) -> None:
    script = ("import os, torch, sklearn, tensorboard, mlyard; "
              "print(os.getuid(), os.getgid(), torch.__version__, torch.cuda.is_available())")
    output = docker.client.containers.run(pytorch_image, ["python", "-c", script], remove=True, network_mode="none")
    uid, gid, version, cuda = output.decode().split()
    assert (int(uid), int(gid)) == (RUN_AS, RUN_AS)
    assert version.startswith(TORCH_VERSION) and cuda == "False"
    # Mirrors given at build time stay out of the image.
    environment = docker.client.images.get(pytorch_image).attrs["Config"]["Env"]
    assert not [variable for variable in environment if variable.startswith("PIP_FIND_LINKS")]


def test_the_rendered_pods_of_a_ddp_job_train_together_in_the_image(
    docker: Engine, pytorch_image: str, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, RUN_AS, RUN_AS)  # as a ReadWriteMany volume is prepared for the pods' uid
    settings = KubernetesSettings(image=pytorch_image, shared_mount_path="/var/lib/mlyard")
    renderer = backend(settings)
    spec = JobSpec.model_validate({
        "name": "digits-ddp", "framework": "pytorch",
        "command": ["python", "/opt/mlyard/examples/digits_ddp.py", "--epochs", "2"],
        "roles": [{"name": "worker", "replicas": 2, "resources": {"cpu": 1, "memory": "1Gi"}}]})
    launch = attempt(spec, [Placement("worker", 0, "node-a", 1, 2**30), Placement("worker", 1, "node-b", 1, 2**30)],
                     renderer=renderer, job_id=7, snapshot=None)  # the example is in the image
    documents = renderer.dryrun(launch)
    # What `launch` and the controller make before the pods start: the directories they mount.
    for directory in (*(replica.directory for replica in launch.replicas), *launch.private_directories):
        local = shared / directory.relative_to(settings.shared_mount_path)
        local.mkdir(parents=True)
        os.chown(local, RUN_AS, RUN_AS)
    secrets = {document["metadata"]["name"]: secret_values(document)
               for document in documents if document["kind"] == "Secret"}
    master_port = str(free_port())
    containers = []
    for pod in documents:
        if pod["kind"] == "Pod":
            arguments = container_arguments(pod, secrets, shared)
            assert arguments["cap_drop"] == ["ALL"] and arguments["security_opt"] == ["no-new-privileges"]
            arguments["environment"]["MASTER_PORT"] = master_port
            containers.append(docker.client.containers.run(**arguments, detach=True))
    try:
        exits = [container.wait(timeout=240)["StatusCode"] for container in containers]
        logs = [container.logs().decode(errors="replace") for container in containers]
    finally:
        for container in containers:
            container.remove(force=True)
    assert exits == [0, 0], "\n---\n".join(logs)
    assert "rendezvous rank=1 world_size=2" in logs[1]  # what `kubectl logs` shows
    assert "final test_accuracy=" in logs[0]
    for replica in launch.replicas:
        directory = shared / replica.directory.relative_to(settings.shared_mount_path)
        assert json.loads((directory / "exit.json").read_text())["exit_code"] == 0
        assert "rendezvous rank=" in (directory / "output.log").read_text()
        assert directory.stat().st_uid == RUN_AS
    assert list((shared / "checkpoints" / "7").iterdir()), "rank 0 saved no checkpoint on the shared volume"


DDP_JOB = """\
import torch
import torch.distributed as dist
from mlyard.sdk import report

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {total.item():.0f}", flush=True)
if dist.get_rank() == 0:
    report(1, total=total.item())
dist.barrier()
dist.destroy_process_group()
"""


class ServerOnStandIn:
    """The server image with MLYARD_BACKEND=kubernetes (its default), its home on the stand-in
    cluster's shared volume, as deploy/kubernetes runs it; `cli` runs the image's own CLI."""

    def __init__(self, docker: Engine, image: str, pytorch_image: str, cluster: StandInCluster, kubeconfig: Path):
        self.docker, self.image, self.cluster = docker, image, cluster
        self.port = free_port()
        self.volumes = {str(cluster.shared): {"bind": "/var/lib/mlyard", "mode": "rw"},
                        str(kubeconfig): {"bind": "/etc/mlyard/kubeconfig", "mode": "ro"}}
        self.environment = {"MLYARD_PORT": str(self.port), "MLYARD_K8S_KUBECONFIG": "/etc/mlyard/kubeconfig",
                            "MLYARD_K8S_IMAGE": pytorch_image, "MLYARD_K8S_PORT": str(free_port()),
                            "MLYARD_JOB_API_URL": f"http://127.0.0.1:{self.port}"}
        self.container: Any = None

    def start(self) -> None:
        self.container = self.docker.client.containers.run(
            self.image, detach=True, network_mode="host", volumes=self.volumes, environment=self.environment)
        wait_until(lambda: server_healthy(self.port), 60, "the server in its image answering /api/v1/health")
        in_container(self.container, "mkdir -p /tmp/job")

    def crash(self) -> None:
        self.container.remove(force=True)  # SIGKILL: nothing of the server's shutdown runs

    def cli(self, command: str, arguments: str = "") -> Any:
        return json.loads(in_container(self.container, f"cd /tmp/job && mlyard {command} --output json {arguments}"))

    def finished(self, job: int, timeout: float = 240) -> dict[str, Any]:
        detail = wait_until(lambda: (shown := self.cli("show", str(job)))["status"] in
                            {"SUCCEEDED", "FAILED", "CANCELLED"} and shown, timeout, f"job {job} finishing")
        return detail

    def log(self) -> str:
        return self.container.logs().decode(errors="replace")[-3000:]


@pytest.fixture
def stand_in(docker: Engine, pytorch_image: str, server_image: str, tmp_path: Path) -> Iterator[ServerOnStandIn]:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, RUN_AS, RUN_AS)
    cluster = StandInCluster(docker, shared)
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    kubeconfig.chmod(0o644)
    server = ServerOnStandIn(docker, server_image, pytorch_image, cluster, kubeconfig)
    try:
        server.start()
        yield server
    finally:
        if server.container is not None:
            server.container.remove(force=True)
        cluster.close()


def test_the_server_image_runs_jobs_as_pods_on_a_stand_in_cluster(stand_in: ServerOnStandIn,
                                                                   pytorch_image: str) -> None:
    server, cluster = stand_in, stand_in.cluster
    encoded = base64.b64encode(DDP_JOB.encode()).decode()
    in_container(server.container, f"echo {encoded} | base64 -d > /tmp/job/train.py")
    job = server.cli("run", "--replicas 2 --cpus 1 --memory 1Gi --name ddp -- python train.py")["id"]
    detail = server.finished(job)
    assert detail["status"] == "SUCCEEDED", (detail, server.log())
    assert [(pod["status"]["phase"], pod["spec"]["containers"][0]["image"]) for pod in cluster.pods()] == [
        ("Succeeded", pytorch_image), ("Succeeded", pytorch_image)]
    assert NODE in json.dumps(server.cli("nodes"))  # the inventory comes from Node objects
    assert "rank 1 of 2: sum 3" in in_container(server.container, f"mlyard logs {job} --replica 1")
    assert "total" in json.dumps(server.cli("metrics", str(job)))  # reported with the job's token from its Secret

    sleeper = server.cli("run", "--no-code --name sleeper -- python -c 'import time; time.sleep(600)'")["id"]
    wait_until(lambda: server.cli("show", str(sleeper))["status"] == "RUNNING", 120, "the sleeper running")
    in_container(server.container, f"mlyard cancel {sleeper}")
    assert server.finished(sleeper)["status"] == "CANCELLED"
    wait_until(lambda: len(cluster.pods()) == 2, 60, "the cancelled job's pod deleted")
    assert not [container for container in cluster.containers() if container.status == "running"]


def test_a_job_outlives_a_crash_of_the_server_and_is_adopted_by_the_next(stand_in: ServerOnStandIn) -> None:
    server, cluster = stand_in, stand_in.cluster
    script = "import time; print('started', flush=True); time.sleep(20); print('finished', flush=True)"
    job = server.cli("run", f'--no-code --name survivor -- python -c "{script}"')["id"]
    wait_until(lambda: server.cli("show", str(job))["status"] == "RUNNING", 120, "the job running")
    (pod,) = cluster.pods()
    server.crash()
    assert [container.status for container in cluster.containers()] == ["running"], "the pod died with the server"
    server.start()
    detail = server.finished(job)
    assert detail["status"] == "SUCCEEDED", (detail, server.log())
    (after,) = cluster.pods()
    assert after["metadata"]["uid"] == pod["metadata"]["uid"], "the job ran again in a new pod instead of being adopted"
    assert "finished" in in_container(server.container, f"mlyard logs {job}")
