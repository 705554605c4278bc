"""Projects' limits, applied before each scheduling round: a queued job whose start would take
its project past a limit (GPUs, CPUs, memory held by its running jobs, or their number) is
left out of the round and waits with the limit as its reason.

A project's queued jobs are taken in submission order and each counts against the limit as if
it started, so a later job never passes an earlier one that waits for room, and the jobs let
through can all start together without exceeding the limit. Elastic jobs count at their
smallest size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mlyard.server.control.queued_jobs import QueuedJob
from mlyard.server.store.rows import AttemptRow, ProjectRow
from mlyard.spec import format_bytes


@dataclass
class _Held:
    gpu: float = 0.0
    cpu: float = 0.0
    memory: int = 0
    jobs: int = 0


def _limits(row: ProjectRow) -> dict[str, float | int | None]:
    return {"gpu": row.quota_gpu, "cpu": row.quota_cpu, "memory": row.quota_memory, "jobs": row.max_running_jobs}


def _shown(resource: str, value: float) -> str:
    return format_bytes(int(value)) if resource == "memory" else f"{value:g}"


def limits_of(projects: Mapping[str, ProjectRow]) -> dict[str, dict[str, float | int | None]]:
    """The limits of each project that has any."""
    return {name: _limits(row) for name, row in projects.items()
            if any(value is not None for value in _limits(row).values())}


def admit(queued: Iterable[QueuedJob], holding: Iterable[AttemptRow], projects: Mapping[str, ProjectRow],
          ) -> tuple[list[QueuedJob], dict[int, str]]:
    """The queued jobs (in the given order) that may take part in the round, and the reason of
    each one held back."""
    limited = limits_of(projects)
    if not limited:
        return list(queued), {}
    held: dict[str, _Held] = {name: _Held() for name in limited}
    for attempt in holding:
        usage = held.get(attempt.job.project)
        if usage is None:
            continue
        usage.jobs += 1
        for replica in attempt.replicas:
            usage.gpu += len(replica.gpu_ids)
            usage.cpu += replica.cpu
            usage.memory += replica.memory_bytes
    admitted: list[QueuedJob] = []
    reasons: dict[int, str] = {}
    for job in queued:
        limits, usage = limited.get(job.project), held.get(job.project)
        if limits is None or usage is None:
            admitted.append(job)
            continue
        # Whole cores, or a share of one: what a replica holds, and what running jobs are counted in.
        wanted = {"gpu": job.gang.gpu, "cpu": job.gang.cpu, "memory": job.gang.memory, "jobs": 1}
        over = [resource for resource, limit in limits.items()
                if limit is not None and getattr(usage, resource) + wanted[resource] > limit + 1e-9]
        if over:
            resource = over[0]
            label = "running jobs" if resource == "jobs" else resource
            reasons[job.job_id] = (f"project {job.project!r} at its limit: {label} "
                               f"{_shown(resource, getattr(usage, resource))}/{_shown(resource, limits[resource])}"
                               f" (this job needs {_shown(resource, wanted[resource])})")
            continue
        admitted.append(job)
        for resource, amount in wanted.items():
            setattr(usage, resource, getattr(usage, resource) + amount)
    return admitted, reasons
