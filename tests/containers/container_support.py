"""What the container tests need from this machine: a Docker-compatible engine socket and the
test image (`scripts/build-test-image.sh`). Without them the tests skip, saying what is
missing, unless MLYARD_REQUIRE_CONTAINERS=1 (CI), where a missing engine must not pass
unnoticed.

    MLYARD_TEST_CONTAINER_SOCKET   the engine's socket (default /run/podman/podman.sock)
    MLYARD_TEST_IMAGE              the image jobs run in (default localhost/mlyard-test-base:latest)
    MLYARD_TEST_PYTHON_IMAGE       what docker/*.Dockerfile are built on in the tests (default
                                   localhost/mlyard-python-base:latest, made by
                                   scripts/build-python-base-image.sh)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlyard.backends.local.containers import Engine

SOCKET = os.environ.get("MLYARD_TEST_CONTAINER_SOCKET", "/run/podman/podman.sock")
IMAGE = os.environ.get("MLYARD_TEST_IMAGE", "localhost/mlyard-test-base:latest")
PYTHON_BASE = os.environ.get("MLYARD_TEST_PYTHON_IMAGE", "localhost/mlyard-python-base:latest")
REQUIRE_VARIABLE = "MLYARD_REQUIRE_CONTAINERS"
REPOSITORY = Path(__file__).resolve().parents[2]
SERVER_IMAGE = "localhost/mlyard-server:test"


@cache
def missing() -> str | None:
    """Why container tests cannot run here; None when they can."""
    engine = Engine(SOCKET)
    try:
        problem = engine.problem()
        if problem is not None:
            return problem
        if not engine.has_image(IMAGE):
            return f"the image {IMAGE} is not on the engine at {SOCKET}; build it with scripts/build-test-image.sh"
        return None
    finally:
        engine.close()


def require_engine() -> None:
    """Skips the calling test when no engine or image is here; fails instead under
    MLYARD_REQUIRE_CONTAINERS=1."""
    reason = missing()
    if reason is not None:
        skip_or_fail(reason)


def skip_or_fail(reason: str) -> None:
    """Skips the calling test for this reason; fails instead under MLYARD_REQUIRE_CONTAINERS=1."""
    if os.environ.get(REQUIRE_VARIABLE) == "1":
        pytest.fail(f"{REQUIRE_VARIABLE}=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module", name="server_image")
def server_image_fixture(docker: Engine) -> str:
    """`server_image`: docker/server.Dockerfile built (a module imports this to have it)."""
    return build_image(docker, "docker/server.Dockerfile", SERVER_IMAGE)


def in_container(container: Any, command: str) -> str:
    """The output of a shell command run in the container, failing the test unless it exits 0."""
    code, output = container.exec_run(["sh", "-c", command])
    text = output.decode(errors="replace")
    assert code == 0, f"{command}: exit {code}\n{text}"
    return text


def server_healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1).is_success
    except httpx.TransportError:
        return False


def build_image(client: Engine, dockerfile: str, tag: str, **buildargs: str) -> str:
    """Builds one of docker/*.Dockerfile on the stand-in Python base, failing with the end of
    the build's log; the engine's layer cache makes an unchanged rebuild quick."""
    if not client.has_image(PYTHON_BASE):
        skip_or_fail(f"{PYTHON_BASE} is missing: build it with scripts/build-python-base-image.sh")
    log: list[str] = []
    chunks: Any = client.client.api.build(
        path=str(REPOSITORY), dockerfile=dockerfile, tag=tag, buildargs={"PYTHON_IMAGE": PYTHON_BASE, **buildargs},
        network_mode="host", rm=True, forcerm=True, decode=True)
    for chunk in chunks:
        log.append(chunk.get("stream") or chunk.get("error") or "")
        assert "error" not in chunk, f"building {dockerfile}:\n" + "".join(log)[-4000:]
    return tag


def engine() -> Engine:
    return Engine(SOCKET)


@pytest.fixture(scope="module", name="docker")
def docker_fixture() -> Iterator[Engine]:
    """`docker`: the engine, for a module's tests (a module imports this to have it)."""
    require_engine()
    client = engine()
    yield client
    client.close()


def containers_of(directory_prefix: str) -> list[dict]:
    """Every container, running or not, of replicas whose directory starts with the prefix."""
    client = Engine(SOCKET)
    try:
        listed = client.client.api.containers(all=True, filters={"label": "mlyard.directory"})
        return [summary for summary in listed
                if summary["Labels"].get("mlyard.directory", "").startswith(directory_prefix)]
    finally:
        client.close()
