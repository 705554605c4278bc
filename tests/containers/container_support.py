"""What the container tests need from this machine: a Docker-compatible engine socket and the
test image (`scripts/build-test-image.sh`). Without them the tests skip, saying what is
missing, unless MLYARD_REQUIRE_CONTAINERS=1 (CI), where a missing engine must not pass
unnoticed.

    MLYARD_TEST_CONTAINER_SOCKET   the engine's socket (default /run/podman/podman.sock)
    MLYARD_TEST_IMAGE              the image jobs run in (default localhost/mlyard-test-base:latest)
"""

from __future__ import annotations

import os
from functools import cache

import pytest

from mlyard.backends.containers import Engine

SOCKET = os.environ.get("MLYARD_TEST_CONTAINER_SOCKET", "/run/podman/podman.sock")
IMAGE = os.environ.get("MLYARD_TEST_IMAGE", "localhost/mlyard-test-base:latest")
REQUIRE_VARIABLE = "MLYARD_REQUIRE_CONTAINERS"


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
    if reason is None:
        return
    if os.environ.get(REQUIRE_VARIABLE) == "1":
        pytest.fail(f"{REQUIRE_VARIABLE}=1 but {reason}")
    pytest.skip(reason)


def engine() -> Engine:
    return Engine(SOCKET)


def containers_of(directory_prefix: str) -> list[dict]:
    """Every container, running or not, of replicas whose directory starts with the prefix."""
    client = Engine(SOCKET)
    try:
        listed = client.client.api.containers(all=True, filters={"label": "mlyard.directory"})
        return [summary for summary in listed
                if summary["Labels"].get("mlyard.directory", "").startswith(directory_prefix)]
    finally:
        client.close()
