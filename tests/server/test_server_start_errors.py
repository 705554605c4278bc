"""A server that cannot use the backend its settings ask for says why in one line and exits
with 1, before it listens: no traceback from the ASGI server's startup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port


def start(home: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("MLYARD_", "KUBERNETES_", "KUBECONFIG", "DOCKER_HOST"))}
    # MLYARD_JOB_USERS=off unless given: as root, "auto" refuses where job accounts cannot run Python.
    env.update(HOME=str(home), MLYARD_HOME=str(home / "mlyard"), MLYARD_PORT=str(free_port()),
               MLYARD_JOB_USERS="off")
    env.update(environment)
    return subprocess.run([sys.executable, "-m", "mlyard.server"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def assert_refused(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1, result.stderr
    for fragment in fragments:
        assert fragment in error[0]


def test_the_kubernetes_backend_outside_a_pod_without_a_kubeconfig_is_refused(tmp_path: Path) -> None:
    result = start(tmp_path, MLYARD_BACKEND="kubernetes")
    assert_refused(result, "MLYARD_BACKEND=kubernetes but no cluster to use", "does not run in a pod",
                   "~/.kube/config")


def test_a_kubeconfig_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "cluster.yaml"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    result = start(tmp_path, MLYARD_BACKEND="kubernetes", MLYARD_K8S_KUBECONFIG=str(kubeconfig),
                   MLYARD_K8S_CONTEXT="lab")
    assert_refused(result, f"MLYARD_K8S_KUBECONFIG={kubeconfig}", "'lab'")


@pytest.mark.parametrize("variable, value, says", [
    ("MLYARD_K8S_NAMESPACE", "Not_A_Label", "MLYARD_K8S_NAMESPACE"),
    ("MLYARD_K8S_RUN_AS_USER", "root", "MLYARD_K8S_RUN_AS_USER"),
])
def test_bad_kubernetes_settings_are_named(tmp_path: Path, variable: str, value: str, says: str) -> None:
    assert_refused(start(tmp_path, MLYARD_BACKEND="kubernetes", **{variable: value}), says)


def test_required_containers_without_an_engine_are_refused(tmp_path: Path) -> None:
    socket = tmp_path / "engine.sock"
    result = start(tmp_path, MLYARD_RUNTIME="container", MLYARD_CONTAINER_SOCKET=str(socket))
    assert_refused(result, "MLYARD_RUNTIME=container", str(socket))
