"""Wait reasons in words: why a pending job does not start.

Worded once per round and gang shape, after every start of the round, so a reason
describes what is left free when the round is over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .unschedulable import constraint_reason, count_of, unschedulable_reason
from .quotas import request_amounts
from .snapshot import MILLICORES, PendingJob, ReplicaRequest

if TYPE_CHECKING:
    from .state import RoundState

_GIB = 1 << 30


def job_list(ids: Sequence[int]) -> str:
    if len(ids) == 1:
        return f"job {ids[0]}"
    shown = ", ".join(str(job_id) for job_id in ids[:5])
    return f"jobs {shown}" + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{max(0, round(seconds))}s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)}m"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def never_fits(state: RoundState, job: PendingJob, gang: Sequence[ReplicaRequest], demand,
               shape: int) -> str | None:
    """Why ``job``'s gang cannot run even on the empty cluster (e.g. a node left), or None.

    Cheap checks on the cluster's largest node and totals first; the full packing
    check runs only for the few jobs that pass them yet do not fit right now (and for
    every job with a placement constraint).
    """
    if state._capacity is None:
        nodes = state.snapshot.nodes
        state._capacity = (
            max((len(node.gpu_ids) for node in nodes), default=0),
            max((len(node.cpu_ids) for node in nodes), default=0),
            max((node.memory_bytes for node in nodes), default=0),
        )
    if shape in state.never:
        return state.never[shape]
    most_gpus, most_cores, most_memory = state._capacity
    capacity = state.book.capacity
    cheap_ok = (
        all(r.gpu <= most_gpus and (r.cores or (1 if r.millicores else 0)) <= most_cores
            and r.memory_bytes <= most_memory for r in gang)
        and demand.fits_in(capacity)
    )
    constrained = job.same_node or job.same_topology
    if cheap_ok and not state.policy.strict and not constrained:
        reason = None
    else:
        reason = unschedulable_reason(state.snapshot.nodes, gang, same_node=job.same_node,
                                      same_topology=job.same_topology)
    state.never[shape] = reason
    return reason


def resource_reason(state: RoundState, job: PendingJob) -> str:
    """Why ``job`` (of a shape that did not fit) waits for resources, in words."""
    if not state.config.explain:
        return ""
    gang = job.smallest_gang
    most_gpus, most_cores, most_memory = state.largest_free()
    biggest_gpu = max(replica.gpu for replica in gang)
    biggest_cores = max(replica.cores for replica in gang)
    biggest_memory = max(replica.memory_bytes for replica in gang)
    models = sorted({model for replica in gang if replica.gpu for model in replica.gpu_models})
    model_text = f" {' or '.join(models)}" if models else ""
    if models:
        # The fullest GPU bucket holding a node of an accepted model, not a walk over every node.
        most_gpus = next((count for count in reversed(state.free.gpu_counts())
                          if any(node.gpu_model in models for node in state.free.iter_free_gpus(count))), 0)
    if biggest_gpu > most_gpus:
        return f"no node with {biggest_gpu} free{model_text} {'GPU' if biggest_gpu == 1 else 'GPUs'}"
    if biggest_cores > most_cores:
        return f"no node with {count_of(biggest_cores, 'free CPU')}"
    if biggest_memory > most_memory:
        return f"no node with {biggest_memory / _GIB:.1f} GiB of free memory"
    if job.same_node or job.same_topology:
        constraint = constraint_reason(state.free.nodes, gang, job.same_node, job.same_topology)
        if constraint is not None:
            return constraint
    demand = request_amounts(gang)
    gpus, cores, memory = state.free.totals()
    whole = sum(replica.cores for replica in gang)
    if demand.gpu > gpus:
        return f"needs {count_of(int(demand.gpu), 'GPU')}, {gpus} free"
    if whole > cores:
        return f"needs {count_of(whole, 'CPU')}, {cores} free"
    if demand.memory > memory:
        return f"needs {demand.memory / _GIB:.1f} GiB of memory, {memory / _GIB:.1f} GiB free"
    if len(gang) == 1:
        (replica,) = gang
        cpu = (f"{replica.millicores / MILLICORES:g} of a free CPU core" if replica.millicores
               else count_of(replica.cores, 'free CPU'))
        return (f"no node with {count_of(replica.gpu, f'free{model_text} GPU')}, {cpu} "
                f"and {replica.memory_bytes / _GIB:.1f} GiB of free memory at once")
    if models:
        return f"not enough free{model_text} GPUs"
    return f"its {count_of(len(gang), 'replica')} do not fit on the free parts of the nodes together"
