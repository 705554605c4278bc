"""A fake at the controller's backend boundary, shared by the tests of the controller and of
leadership, which run the real `Controller` on it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlyard.backends.base import AttemptLaunch, Backend, NodeDescription, ReplicaObservation, ReplicaRef


class FakeBackend(Backend):
    """Replicas are entries in a dict whose state the test sets."""

    name = "fake"

    def __init__(self, cpus: int = 2):
        self.cpus = cpus
        self.launches: list[AttemptLaunch] = []
        self.stops: list[tuple[list[int], bool]] = []
        self.states: dict[int, ReplicaObservation] = {}
        self.fail_launch = False

    def nodes(self) -> list[NodeDescription]:
        return [NodeDescription(name="n1", address="10.0.0.1", cpu_ids=tuple(range(self.cpus)), memory_bytes=8 << 30)]

    def reserve_ports(self, node: str, count: int) -> list[int]:
        return list(range(20000, 20000 + count))

    def dryrun(self, launch: AttemptLaunch) -> list[dict[str, Any]]:
        return [{"replica": replica.name} for replica in launch.replicas]

    def launch(self, launch: AttemptLaunch) -> list[ReplicaRef]:
        if self.fail_launch:
            raise RuntimeError("no such image")
        self.launches.append(launch)
        for replica in launch.replicas:
            self.states[replica.replica_id] = ReplicaObservation(state="running", started_at=1.0)
        return [ReplicaRef(replica_id=r.replica_id, node=r.node, directory=r.directory, pid=1000 + r.replica_id,
                           pid_started_at=1.0) for r in launch.replicas]

    def observe(self, replicas: Sequence[ReplicaRef]) -> dict[int, ReplicaObservation]:
        return {ref.replica_id: self.states[ref.replica_id] for ref in replicas}

    def _stop_present(self, replicas: Sequence[ReplicaRef], *, force: bool) -> None:
        self.stops.append(([ref.replica_id for ref in replicas], force))

    def exit(self, launch: AttemptLaunch, rank: int, code: int | None) -> None:
        state = "lost" if code is None else "exited"
        self.states[launch.replicas[rank].replica_id] = ReplicaObservation(state=state, exit_code=code)
