"""Trace-driven simulator for ``mlyard.scheduler.decide``.

``load_trace`` reads a public trace, ``simulate`` replays it through the real,
pure scheduler on a simulated cluster, ``summarize`` turns the outcome into the
metrics policies are compared by. ``Scenario``/``replay`` tie the three together
the way the CLI (``mlyard sim``) and ``bench/sched_replay.py`` use them; ``rescale``
and ``offered`` replay a trace at another load and say what load it offers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from .cluster import ClusterError, queues, synthetic_nodes, trace_nodes
from .simulator import EngineOptions, JobOutcome, Progress, SimulationResult, simulate
from .ledger import SimulationError
from .load import Offered, offered, rescale
from .measures import Metrics, percentile, summarize
from .traces import (
    FORMATS,
    TraceError,
    TraceJob,
    TraceNode,
    load_openb_nodes,
    load_trace,
)

OPENB_NODE_LIST = "openb_node_list_gpu_node.csv"

__all__ = [
    "FORMATS",
    "ClusterError",
    "EngineOptions",
    "JobOutcome",
    "Metrics",
    "Offered",
    "Scenario",
    "SimulationError",
    "SimulationResult",
    "TraceError",
    "TraceJob",
    "TraceNode",
    "load_openb_nodes",
    "load_trace",
    "offered",
    "percentile",
    "replay",
    "rescale",
    "simulate",
    "summarize",
]


@dataclass(frozen=True, slots=True)
class Scenario:
    """A trace on a cluster, replayable under any policy (picklable, for worker processes)."""

    trace: Path
    fmt: str
    gpus: int | None = None
    """None: the trace's own node list (openb only)."""
    gpus_per_node: int = 8
    tenants: str | None = None
    quotas: str = "none"
    limit: int | None = None
    tick: float = 60.0
    requeue_interval: float = 300.0
    preempt_grace: float = 30.0
    restart_overhead: float = 60.0
    runtime_estimate: float = 1.0
    load: float = 1.0
    """Interarrival times are divided by it (see ``load.rescale``); durations stay."""
    preemption_budget: int | None = None
    """``SchedulerConfig.preemption_budget``: None, no budget."""
    predictions: bool = False
    """``EngineOptions.predictions``."""

    def jobs(self) -> list[TraceJob]:
        jobs = rescale(load_trace(self.trace, self.fmt, tenants=self.tenants, limit=self.limit), self.load)
        if self.gpus is not None:
            # A synthetic cluster's GPUs have no model, so model constraints could never be met.
            jobs = [replace(job, gpu_models=()) if job.gpu_models else job for job in jobs]
        return jobs

    def nodes(self, jobs: list[TraceJob]):
        if self.gpus is not None:
            return synthetic_nodes(jobs, self.gpus, self.gpus_per_node)
        if self.fmt != "openb":
            raise ClusterError(f"--gpus is required for {self.fmt} traces (they do not describe their cluster)")
        node_list = Path(self.trace).with_name(OPENB_NODE_LIST)
        if not node_list.is_file():
            raise ClusterError(f"--gpus not given and there is no {OPENB_NODE_LIST} next to {self.trace}")
        return trace_nodes(load_openb_nodes(node_list))

    def options(self, policy: str) -> EngineOptions:
        return EngineOptions(policy=policy, tick=self.tick, requeue_interval=self.requeue_interval,
                             preempt_grace=self.preempt_grace, restart_overhead=self.restart_overhead,
                             runtime_estimate=self.runtime_estimate, gpus_per_node=self.gpus_per_node,
                             preemption_budget=self.preemption_budget, predictions=self.predictions)


def replay(scenario: Scenario, policy: str, progress: Progress | None = None,
           jobs: list[TraceJob] | None = None) -> Metrics:
    """Load (unless ``jobs`` is given), build the cluster, simulate under ``policy``, summarize."""
    jobs = scenario.jobs() if jobs is None else jobs
    nodes = scenario.nodes(jobs)
    options = scenario.options(policy)
    tenant_queues = queues([job.tenant for job in jobs], nodes, scenario.quotas)
    return summarize(simulate(jobs, nodes, options, queues=tenant_queues, progress=progress))
