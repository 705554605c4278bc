"""docker/server.Dockerfile builds, and its image serves: a two-replica job submitted with the
image's own CLI succeeds, and outside a cluster the Kubernetes backend it defaults to is
refused in one line. Built on a registry-free stand-in for python:3.11-slim-bookworm
(`scripts/build-python-base-image.sh`): Debian's Python 3.11.2, older than the official
image's, which the server must run on too."""

from __future__ import annotations

import base64
import json

import pytest
from conftest import free_port, wait_until
from container_support import (  # noqa: F401 - docker_fixture, server_image_fixture: fixtures
    docker_fixture,
    in_container,
    server_healthy,
    server_image_fixture,
)

from mlyard.backends.local.containers import Engine

pytestmark = pytest.mark.slow

JOB = "import os\nprint('replica', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True)\n"


def test_the_server_image_runs_a_distributed_job_with_its_own_cli(docker: Engine, server_image: str) -> None:
    port = free_port()
    # The local backend keeps MLYARD_HOME from jobs with namespaces of their own and a /proc
    # of their own, which the engine's masked /proc refuses unless the container unmasks it.
    container = docker.client.containers.run(server_image, detach=True, network_mode="host",
                                             security_opt=["systempaths=unconfined"],
                                             environment={"MLYARD_PORT": str(port), "MLYARD_BACKEND": "local"})
    try:
        wait_until(lambda: server_healthy(port), 60, "the server in its image answering /api/v1/health")
        assert in_container(container, "id -u").strip() == "1000"
        encoded = base64.b64encode(JOB.encode()).decode()
        in_container(container, f"mkdir -p /tmp/job && echo {encoded} | base64 -d > /tmp/job/hello.py")
        submitted = json.loads(in_container(
            container, "cd /tmp/job && mlyard run --output json --replicas 2 --name hello -- python hello.py"))
        detail = wait_until(
            lambda: (shown := json.loads(in_container(container, f"mlyard show {submitted['id']} --output json")))
            ["status"] in {"SUCCEEDED", "FAILED"} and shown, 60, "the job finishing")
        assert detail["status"] == "SUCCEEDED", detail["message"]
        assert in_container(container, f"mlyard logs {submitted['id']} --replica 1").strip() == "replica 1 of 2"
    finally:
        container.remove(force=True)


def test_the_server_image_outside_a_cluster_says_so(docker: Engine, server_image: str) -> None:
    container = docker.client.containers.run(server_image, detach=True, network_mode="host",
                                             environment={"MLYARD_PORT": str(free_port())})
    try:
        outcome = container.wait(timeout=60)
        output = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    assert outcome["StatusCode"] == 1, output
    assert "error: MLYARD_BACKEND=kubernetes but no cluster to use" in output
    assert "Traceback" not in output

