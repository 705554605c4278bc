"""Queue quotas, borrowing and dominant-resource shares for one scheduling round.

A queue may always use its nominal quota; beyond it, it borrows capacity other
queues leave idle, up to its borrowing limit. Usage counts what running jobs
hold (stopping ones included: their resources are not free yet). Shares are
dominant-resource shares (DRF): the largest fraction of any one cluster
resource an entity holds, divided by its weight.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from .snapshot import (
    MILLICORES,
    Amounts,
    ClusterSnapshot,
    Queue,
    ReplicaPlacement,
    ReplicaRequest,
    RunningJob,
)

_GIB = 1 << 30
_NOTHING = Amounts()  # frozen, so one instance serves every "no usage yet"
_UNKNOWN = Amounts(-1.0, -1.0, -1.0)  # a ceiling not looked up yet


def request_amounts(replicas: Sequence[ReplicaRequest]) -> Amounts:
    """What a gang holds once placed: whole cores (a share of one as its fraction), GPUs and memory bytes."""
    gpus = memory = 0
    cores = millicores = 0
    for replica in replicas:
        gpus += replica.gpu
        cores += replica.cores
        millicores += replica.millicores
        memory += replica.memory_bytes
    return Amounts(float(gpus), cores + millicores / MILLICORES, float(memory))


def held_amounts(placements: Iterable[ReplicaPlacement]) -> Amounts:
    gpus = cores = memory = millicores = 0
    for placement in placements:
        gpus += len(placement.gpu_ids)
        if placement.cpu_millicores:
            millicores += placement.cpu_millicores
        else:
            cores += len(placement.cpu_ids)
        memory += placement.memory_bytes
    return Amounts(float(gpus), cores + millicores / MILLICORES, float(memory))


def _format(resource: str, value: float) -> str:
    if resource == "memory":
        return f"{value / _GIB:.1f}GiB"
    if math.isinf(value):
        return "unlimited"
    return f"{value:g}"


class QueueBook:
    """Usage per queue and per user, updated as the round admits and preempts jobs."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.queues: dict[str, Queue] = {queue.name: queue for queue in snapshot.queues}
        self._ceilings: dict[str, Amounts | None] = {}
        self.version = 0
        """Bumped on every change, so callers can cache answers between changes."""
        self.queue_versions: dict[str, int] = {}
        """The ``version`` at which each queue's usage last changed; absent: not this round."""
        # Per queue [gpu, cpu, memory], added to in place on every start (a new Amounts each
        # time showed up); ``used`` hands out an Amounts of it, kept until the queue changes.
        self._queue_sums: dict[str, list[float]] = {}
        self._used: dict[str, Amounts] = {}
        # Per user [gpu, cpu, memory], added to in place: only ``order`` reads it (before any
        # start), while every start would otherwise build a new Amounts for it.
        self.user_usage: dict[str, list[float]] = {}
        gpus = sum(len(node.gpu_ids) for node in snapshot.nodes)
        cores = sum(len(node.cpu_ids) for node in snapshot.nodes)
        memory = sum(node.memory_bytes for node in snapshot.nodes)
        self.capacity = Amounts(float(gpus), float(cores), float(memory))
        by_queue: dict[str, list[int]] = {}
        by_user: dict[str, list[int]] = {}
        for job in snapshot.running:
            gpus = cores = memory = 0
            for placement in job.placements:
                gpus += len(placement.gpu_ids)
                cores += placement.cpu_millicores / MILLICORES if placement.cpu_millicores else len(placement.cpu_ids)
                memory += placement.memory_bytes
            for sums in (by_queue.setdefault(job.queue, [0, 0, 0]), by_user.setdefault(job.user, [0, 0, 0])):
                sums[0] += gpus
                sums[1] += cores
                sums[2] += memory
        self._queue_sums = {name: [float(total) for total in sums] for name, sums in by_queue.items()}
        self.user_usage = {name: [float(total) for total in sums] for name, sums in by_user.items()}

    def queue(self, name: str) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = Queue(name)
        return queue

    def add(self, queue: str, user: str, amounts: Amounts) -> None:
        self.version += 1
        self.queue_versions[queue] = self.version
        sums = self._queue_sums.get(queue)
        if sums is None:
            sums = self._queue_sums[queue] = [0.0, 0.0, 0.0]
        sums[0] += amounts.gpu
        sums[1] += amounts.cpu
        sums[2] += amounts.memory
        self._used.pop(queue, None)
        sums = self.user_usage.get(user)
        if sums is None:
            sums = self.user_usage[user] = [0.0, 0.0, 0.0]
        sums[0] += amounts.gpu
        sums[1] += amounts.cpu
        sums[2] += amounts.memory

    def used(self, queue: str) -> Amounts:
        used = self._used.get(queue)
        if used is None:
            sums = self._queue_sums.get(queue)
            used = self._used[queue] = _NOTHING if sums is None else Amounts(*sums)
        return used

    def fits_ceiling(self, queue: str, demand: Amounts) -> bool:
        """True when ``queue`` may take ``demand`` more now (``over_quota`` gives None)."""
        # Asked thousands of times a round: the ceiling (None: no ceiling at all) is looked up once.
        ceiling = self._ceilings.get(queue, _UNKNOWN)
        if ceiling is _UNKNOWN:
            definition = self.queue(queue)
            ceiling = self._ceilings[queue] = None if definition.borrow_limit is None else definition.ceiling
        if ceiling is None:
            return True
        used = self._queue_sums.get(queue)
        if used is None:
            return demand.fits_in(ceiling)
        return (used[0] + demand.gpu <= ceiling.gpu + 1e-9 and used[1] + demand.cpu <= ceiling.cpu + 1e-9
                and used[2] + demand.memory <= ceiling.memory + 1e-9)

    def over_quota(self, queue: str, demand: Amounts) -> str | None:
        """Why ``queue`` may not take ``demand`` more now, or None if it may."""
        if self.fits_ceiling(queue, demand):
            return None
        definition = self.queue(queue)
        ceiling = self._ceilings[queue]  # looked up by fits_ceiling, and not None: it did not fit
        used = self.used(queue)
        after = used + demand
        for resource in ("gpu", "cpu", "memory"):
            if getattr(after, resource) > getattr(ceiling, resource) + 1e-9:
                limit = getattr(ceiling, resource)
                what = "quota" if definition.borrow_limit is None or limit == getattr(definition.nominal, resource) \
                    else "quota plus borrowing limit"
                return (
                    f"queue {queue} over {what}: {resource} {_format(resource, getattr(used, resource))}"
                    f"/{_format(resource, limit)}, needs {_format(resource, getattr(demand, resource))}"
                )
        return None

    def within_nominal(self, queue: str, demand: Amounts) -> bool:
        """True when ``queue`` would stay within its nominal quota after taking ``demand``."""
        definition = self.queue(queue)
        if definition.quota is None:
            return False
        return (self.used(queue) + demand).fits_in(definition.nominal)

    def borrowing(self, queue: str) -> bool:
        """True when ``queue`` holds more than its nominal quota of some resource."""
        definition = self.queue(queue)
        if definition.quota is None and definition.borrow_limit is None:
            return False
        return not self.used(queue).fits_in(definition.nominal)

    def share(self, amounts: Amounts, weight: float = 1.0) -> float:
        capacity = self.capacity
        fractions = [
            amount / total for amount, total in (
                (amounts.gpu, capacity.gpu), (amounts.cpu, capacity.cpu), (amounts.memory, capacity.memory)
            ) if total > 0
        ]
        return max(fractions, default=0.0) / weight

    def queue_share(self, queue: str, extra: Amounts | None = None) -> float:
        used = self.used(queue) if extra is None else self.used(queue) + extra
        return self.share(used, self.queue(queue).weight)

    def user_share(self, user: str) -> float:
        sums = self.user_usage.get(user)
        return self.share(Amounts(*sums) if sums is not None else _NOTHING)


def reclaim_victim_order(book: QueueBook, running: Iterable[RunningJob]) -> list[RunningJob]:
    """Running jobs of borrowing queues, in the order a reclaim takes them:
    lowest priority, then most recently started."""
    borrowing: dict[str, bool] = {}  # per queue, not per job: thousands of jobs share a few queues
    borrowers = []
    for job in running:
        if job.stopping:
            continue
        if job.queue not in borrowing:
            borrowing[job.queue] = book.borrowing(job.queue)
        if borrowing[job.queue]:
            borrowers.append(job)
    return sorted(borrowers, key=lambda job: (job.priority, -job.started_at, -job.job_id))
