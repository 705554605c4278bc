"""docker/pytorch.Dockerfile builds, and the pods the Kubernetes backend renders run in its image.

The two pods of a DDP job are started as containers the way a kubelet starts them: the rendered
command, the environment with the token taken from the rendered Secret, the pod's user and
group, dropped capabilities, no privilege escalation, its memory and CPU limits, the shared
volume at its mount path, and the peers' DNS names resolving. They train the example that
ships in the image together and exit 0, leaving their exit status, log and checkpoint on the
shared volume, where the backend and the log service read them.

No cluster is involved: scheduling, the Service's DNS and the watch are tested against
recorded API objects in tests/kubernetes, and on a real cluster by test_k8s_e2e.py. The pods
share this machine's network, so MASTER_PORT is a free port here instead of the rendered one.

torch comes from this machine's CPU wheel, which the build gets through the Dockerfile's
PIP_FIND_LINKS argument (as an offline cluster gets its mirror): PyPI's torch is a CUDA build of
several GB.
"""

from __future__ import annotations

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
from conftest import free_port
from container_support import REPOSITORY, build_image, docker_fixture, skip_or_fail  # noqa: F401 - the `docker` fixture
from k8s_support import Placement, attempt, backend

from mlyard.backends.containers import Engine
from mlyard.backends.kubernetes.entrypoint import peers
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
    master_port = free_port()
    containers = [_start_pod(docker, pod, documents, shared, master_port=master_port)
                  for pod in documents if pod["kind"] == "Pod"]
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


def _start_pod(docker: Engine, pod: dict[str, Any], documents: list[dict[str, Any]], shared: Path, *,
               master_port: int) -> Any:
    """Runs the pod's one container as a kubelet would, on this machine's network."""
    secrets = {document["metadata"]["name"]: document["stringData"]
               for document in documents if document["kind"] == "Secret"}
    spec = pod["spec"]
    (container,) = spec["containers"]
    environment = {}
    for variable in container["env"]:
        if "valueFrom" in variable:
            reference = variable["valueFrom"]["secretKeyRef"]
            environment[variable["name"]] = secrets[reference["name"]][reference["key"]]
        else:
            environment[variable["name"]] = variable["value"]
    environment["MASTER_PORT"] = str(master_port)
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    binds, tmpfs = {}, {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "persistentVolumeClaim" in volume:
            binds[str(shared)] = {"bind": mount["mountPath"], "mode": "rw"}
        elif volume.get("emptyDir", {}).get("medium") == "Memory":
            tmpfs[mount["mountPath"]] = f"size={volume['emptyDir']['sizeLimit']}"
        else:
            raise AssertionError(f"a volume this test does not provide: {volume}")
    pod_security, security = spec["securityContext"], container["securityContext"]
    assert security["capabilities"]["drop"] == ["ALL"] and security["allowPrivilegeEscalation"] is False
    limits = container["resources"]["limits"]
    api_host = urlparse(environment["MLYARD_API"]).hostname
    return docker.client.containers.run(
        container["image"], entrypoint=container["command"], command=container.get("args", []),
        environment=environment, user=f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}",
        cap_drop=["ALL"], security_opt=["no-new-privileges"], privileged=False,
        mem_limit=int(limits["memory"]), nano_cpus=int(float(limits["cpu"]) * 1e9),
        volumes=binds, tmpfs=tmpfs, network_mode="host",
        # The cluster's DNS: peers by their pod names; the API (nothing listens: reports are dropped).
        extra_hosts={host: "127.0.0.1" for host in [*peers(environment), api_host]},
        labels={"mlyard.test": "pytorch-image"}, detach=True)
