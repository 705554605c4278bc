"""An engine that stops answering: its replicas are left unobserved (the controller keeps what
it knew) while process replicas are observed as ever, and stopping does not fail; a socket
file its engine left behind does not hide another engine's."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from mlyard.backends.base import ReplicaRef
from mlyard.backends.local.containers import container_replicas
from mlyard.backends.local.containers.engine import default_socket
from mlyard.backends.local.processes import LocalBackend
from mlyard.runtime.launch_config import EXIT_FILE

NO_ENGINE = "unix:///nonexistent/engine.sock"


def reference(replica_id: int, directory: Path) -> ReplicaRef:
    directory.mkdir(parents=True)
    return ReplicaRef(replica_id=replica_id, node="here", directory=directory, pid=None, pid_started_at=None)


def test_container_replicas_go_unobserved_while_the_engine_is_away(tmp_path: Path) -> None:
    backend = LocalBackend(cpus=1, containers=container_replicas("auto", NO_ENGINE))
    in_container = reference(1, tmp_path / "runs" / "1" / "1" / "worker-0")
    (in_container.directory / "container.json").write_text(json.dumps({"name": "mlyard-1-1-worker-0-x"}))
    process = reference(2, tmp_path / "runs" / "2" / "1" / "worker-0")
    (process.directory / EXIT_FILE).write_text(json.dumps({"exit_code": 4, "finished_at": 1.0}))

    observed = backend.observe([in_container, process])
    assert set(observed) == {2}
    assert (observed[2].state, observed[2].exit_code) == ("exited", 4)
    backend.stop([in_container, process], force=True)  # logged, not raised: the next pass retries


def test_a_finished_container_replica_is_read_from_its_directory_without_the_engine(tmp_path: Path) -> None:
    backend = LocalBackend(cpus=1, containers=container_replicas("auto", NO_ENGINE))
    ref = reference(1, tmp_path / "runs" / "1" / "1" / "worker-0")
    (ref.directory / "container.json").write_text(json.dumps({"name": "mlyard-1-1-worker-0-x"}))
    (ref.directory / EXIT_FILE).write_text(json.dumps({"exit_code": 137, "finished_at": 2.0,
                                                        "reason": "killed for running out of memory"}))
    # The outcome is on disk: the engine need not answer (removing what is left waits for it).
    observation = backend.observe([ref])[1]
    assert (observation.state, observation.exit_code, observation.reason) == (
        "exited", 137, "killed for running out of memory")


def test_the_default_engine_is_the_first_socket_something_listens_on(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    dead, live, missing = str(tmp_path / "podman.sock"), str(tmp_path / "docker.sock"), str(tmp_path / "none.sock")
    with socket.socket(socket.AF_UNIX) as left_behind:  # bound, never listening: what a killed engine leaves
        left_behind.bind(dead)
    with socket.socket(socket.AF_UNIX) as engine:
        engine.bind(live)
        engine.listen()
        assert default_socket((missing, dead, live)) == f"unix://{live}"
    # Nothing listens: the first socket that is there, so the error names it.
    assert default_socket((missing, dead)) == f"unix://{dead}"
    assert default_socket((missing,)) == f"unix://{missing}"
    monkeypatch.setenv("DOCKER_HOST", "tcp://engine:2375")
    assert default_socket((dead, live)) == "tcp://engine:2375"
