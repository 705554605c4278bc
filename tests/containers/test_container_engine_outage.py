"""An engine that stops answering: its replicas are left unobserved (the controller keeps what
it knew) while process replicas are observed as ever, and stopping does not fail."""

from __future__ import annotations

import json
from pathlib import Path

from mlyard.backends.base import ReplicaRef
from mlyard.backends.containers import container_replicas
from mlyard.backends.local import LocalBackend
from mlyard.launcher import EXIT_FILE

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
