"""The simulator's own record of which core, GPU and byte every job holds.

It is kept apart from the scheduler's ``FreeResources`` on purpose: the
simulator checks the scheduler's decisions, so it must not trust the scheduler's
arithmetic to do it. Every placement is checked against the request it claims to
satisfy and against what is free; anything impossible raises ``SimulationError``,
because a simulator that silently accepted an over-commit would report a
throughput no real cluster could reach.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlyard.scheduler import Node, ReplicaPlacement, ReplicaRequest


class SimulationError(RuntimeError):
    """The policy decided something a real cluster could not carry out, or stopped making progress."""


class _NodeLedger:
    __slots__ = ("capacity", "cpus", "gpus", "memory", "model", "shares")

    def __init__(self, node: Node) -> None:
        self.cpus = set(node.cpu_ids)
        self.shares: dict[int, int] = {}
        """Cores that replicas below one core share: core id -> millicores handed out of it."""
        self.gpus = set(node.gpu_ids)
        self.memory = node.memory_bytes
        self.model = node.gpu_model
        self.capacity = (len(node.cpu_ids), len(node.gpu_ids), node.memory_bytes)


class Ledger:
    """Free cores, GPUs and memory per node; ``take`` validates, ``release`` gives back."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self._nodes = {node.name: _NodeLedger(node) for node in nodes}
        if len(self._nodes) != len(nodes):
            raise SimulationError("two nodes share a name")
        self.holders: dict[tuple[str, str, int], int] = {}
        """(node, "cpu"|"gpu", id) → job id, consulted only to word an error."""

    def take(self, job_id: int, placement: ReplicaPlacement, replica: ReplicaRequest, what: str) -> None:
        """Hand ``placement``'s resources to ``job_id``, or raise naming ``what`` (the decision)."""
        if (placement.role, placement.index) != (replica.role, replica.index):
            raise SimulationError(f"{what}: placement for {placement.role}-{placement.index} where replica "
                                  f"{replica.name} was expected (placements must follow the replicas' order)")
        node = self._nodes.get(placement.node)
        if node is None:
            raise SimulationError(f"{what}: replica {replica.name} placed on unknown node {placement.node!r}")
        where = f"replica {replica.name} on {placement.node}"
        if len(placement.gpu_ids) != replica.gpu:
            raise SimulationError(f"{what}: {where} gets {len(placement.gpu_ids)} GPUs but asks for {replica.gpu}")
        if placement.cpu_millicores != replica.millicores:
            raise SimulationError(f"{what}: {where} gets {placement.cpu_millicores} millicores of a shared core but "
                                  f"asks for {replica.millicores}")
        if len(placement.cpu_ids) != (1 if replica.millicores else replica.cores):
            raise SimulationError(f"{what}: {where} gets {len(placement.cpu_ids)} cores but asks for "
                                  f"{replica.cores}")
        if placement.memory_bytes != replica.memory_bytes:
            raise SimulationError(f"{what}: {where} gets {placement.memory_bytes} bytes of memory but asks for "
                                  f"{replica.memory_bytes}")
        if replica.gpu and replica.gpu_models and node.model not in replica.gpu_models:
            raise SimulationError(f"{what}: {where} needs a GPU model in {list(replica.gpu_models)} but the node "
                                  f"has {node.model or 'an unknown model'}")
        self._check_ids(job_id, placement, "gpu", placement.gpu_ids, node.gpus, what)
        whole = () if placement.cpu_millicores else placement.cpu_ids
        self._check_ids(job_id, placement, "cpu", whole, node.cpus, what)
        if placement.cpu_millicores:
            (core,) = placement.cpu_ids
            shared = node.shares.get(core)
            if shared is None and core not in node.cpus:
                holder = self.holders.get((placement.node, "cpu", core))
                raise SimulationError(f"{what}: core {core} on {placement.node} "
                                      + ("does not exist" if holder is None else f"is held whole by job {holder}"))
            left = 1000 - (shared or 0)
            if placement.cpu_millicores > left:
                raise SimulationError(f"{what}: core {core} on {placement.node} has {left} millicores left, "
                                      f"not {placement.cpu_millicores}")
        if placement.memory_bytes > node.memory:
            raise SimulationError(f"{what}: {where} needs {placement.memory_bytes} bytes of memory but only "
                                  f"{node.memory} are free")
        node.gpus.difference_update(placement.gpu_ids)
        node.cpus.difference_update(placement.cpu_ids)
        if placement.cpu_millicores:
            node.shares[placement.cpu_ids[0]] = node.shares.get(placement.cpu_ids[0], 0) + placement.cpu_millicores
        node.memory -= placement.memory_bytes
        for kind, ids in (("gpu", placement.gpu_ids), ("cpu", whole)):
            for resource in ids:
                self.holders[placement.node, kind, resource] = job_id

    def _check_ids(self, job_id: int, placement: ReplicaPlacement, kind: str, ids: tuple[int, ...],
                   free: set[int], what: str) -> None:
        if free.issuperset(ids) and len(set(ids)) == len(ids):
            return
        seen: set[int] = set()
        for resource in ids:
            label = f"{'GPU' if kind == 'gpu' else 'core'} {resource} on {placement.node}"
            if resource in seen:
                raise SimulationError(f"{what}: {label} is handed to replica {placement.role}-{placement.index} twice")
            seen.add(resource)
            if resource not in free:
                holder = self.holders.get((placement.node, kind, resource))
                if holder is None:
                    raise SimulationError(f"{what}: {label} does not exist")
                owner = "this job" if holder == job_id else f"job {holder}"
                raise SimulationError(f"{what}: {label} is already held by {owner}")

    def release(self, placements: Sequence[ReplicaPlacement]) -> None:
        for placement in placements:
            node = self._nodes[placement.node]
            node.gpus.update(placement.gpu_ids)
            whole = placement.cpu_ids
            if placement.cpu_millicores:
                whole = ()
                core = placement.cpu_ids[0]
                node.shares[core] -= placement.cpu_millicores
                if not node.shares[core]:  # the last share back: the core is wholly free again
                    del node.shares[core]
                    node.cpus.add(core)
            node.cpus.update(whole)
            node.memory += placement.memory_bytes
            for kind, ids in (("gpu", placement.gpu_ids), ("cpu", whole)):
                for resource in ids:
                    del self.holders[placement.node, kind, resource]

    def check(self) -> None:
        """Assert the books balance on every node: nothing free twice, nothing beyond capacity."""
        for name, node in self._nodes.items():
            cores, gpus, memory = node.capacity
            held_cpus = sum(1 for key in self.holders if key[0] == name and key[1] == "cpu") + len(node.shares)
            held_gpus = sum(1 for key in self.holders if key[0] == name and key[1] == "gpu")
            if len(node.cpus) + held_cpus != cores or len(node.gpus) + held_gpus != gpus:
                raise SimulationError(f"ledger of {name} is inconsistent: free and held ids do not add up")
            if not 0 <= node.memory <= memory:
                raise SimulationError(f"ledger of {name} is inconsistent: {node.memory} bytes free of {memory}")
