"""Event-driven replay of a trace through ``mlyard.scheduler.decide``.

Arrivals, completions and the ends of preemption grace periods happen at their
exact times; decisions happen only at scheduling ticks (multiples of ``tick``),
as in the real controller loop, so a job arriving between ticks waits for the
next one. ``decide`` is called at a tick only when something changed since the
last call, or, for policies whose answer depends on the clock (ages, attained
service, starvation), when jobs wait and ``requeue_interval`` has passed: this
is what keeps a three-month trace to tens of thousands of calls. A policy is
assumed to make every decision it wants in one call.

The snapshot is rebuilt incrementally: one ``PendingJob``/``RunningJob`` per
job, replaced only when that job changes state, so a call costs a couple of
``tuple()`` copies on the engine's side.

Job life: pending → running → (completed | stopping → pending …). A preempted
job keeps its resources and keeps making progress for ``preempt_grace`` seconds
(it checkpoints), then returns to the queue with its progress; the next start
pays ``restart_overhead`` seconds of extra run time. A ``Resize`` changes the
placements and the progress rate (GPUs held / GPUs asked).
"""

from __future__ import annotations

import heapq
import math
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from mlyard import scheduler
from mlyard.scheduler import (
    ClusterSnapshot,
    Decisions,
    Node,
    PendingJob,
    Preempt,
    Queue,
    ReplicaRequest,
    Resize,
    RunningJob,
    SchedulerConfig,
    StartJob,
    unschedulable_reason,
)
from mlyard.scheduler.predictions import DurationHistory

from .cluster import fits_on_distinct_nodes, gang, node_types
from .jobstate import COMPLETE, COMPLETED, PENDING, RUNNING, STOPPED, JobState
from .ledger import Ledger, SimulationError
from .traces import TraceJob

TIME_DEPENDENT = frozenset({"las", "balanced", "srtf-oracle", "priority", "backfill"})
"""Policies whose decision for an unchanged queue can change as time passes."""

_EPSILON = 1e-6  # float noise in start + duration must not push an event past its tick
Progress = Callable[[float, int, int], None]
"""``progress(simulated_now, jobs_finished, jobs_accepted)``."""


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """How the simulated controller behaves; the CLI's flags map one to one."""

    policy: str
    tick: float = 60.0
    requeue_interval: float = 300.0
    preempt_grace: float = 30.0
    restart_overhead: float = 60.0
    runtime_estimate: float = 1.0
    gpus_per_node: int = 8
    preemption_budget: int | None = None
    """``SchedulerConfig.preemption_budget``: None, no budget."""
    scaling: bool = True
    """Tell the scheduler each running elastic job's serial fraction, as the server learns it from
    the throughput a job reports at each size (a simulated job's is exact: the best learning
    gives). A waiting job's is not told, as the server fits running jobs only. False: the
    scheduler takes every job as scaling linearly."""
    predictions: bool = False
    """Hand the policy the trusted run-time predictions (``scheduler.predictions``), as the server
    does. Replays predict each job's run time from the finished jobs of its tenant and size
    either way, and report how close they came; a trace records no command, and tenant and
    size are not what makes a job a rerun, so they are not used unless asked."""
    check_every_round: bool = False
    """Re-audit the whole ledger after each call (slow; for tests)."""

    def __post_init__(self) -> None:
        # An unknown policy or a negative budget fails here, before any work.
        SchedulerConfig(policy=self.policy, preemption_budget=self.preemption_budget)
        if self.tick <= 0 or self.requeue_interval < 0 or self.preempt_grace < 0 or self.restart_overhead < 0:
            raise ValueError("tick must be > 0; requeue_interval, preempt_grace and restart_overhead >= 0")
        if self.runtime_estimate <= 0:
            raise ValueError("runtime_estimate must be > 0")


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One finished job: what the metrics are computed from."""

    job_id: int
    tenant: str
    submitted_at: float
    duration: float
    gpus: int
    completed_at: float
    run_time: float
    """Wall seconds it held resources, over all attempts (grace periods and restart overhead included)."""
    preemptions: int
    predicted: float | None = None
    """The run time predicted when it arrived (trusted or not); None: no history to go on."""
    trusted: bool = False
    """Whether its key's prediction was trusted when it last waited (the policy saw it, where
    ``EngineOptions.predictions`` hands predictions to it)."""


@dataclass(slots=True)
class SimulationResult:
    policy: str
    cluster_gpus: int
    outcomes: list[JobOutcome]
    rejected: dict[int, str]
    busy_times: array
    busy_gpus: array
    """Step function: from ``busy_times[k]`` on, ``busy_gpus[k]`` GPUs are held."""
    decide_seconds: array
    wall_seconds: float


def simulate(jobs: Sequence[TraceJob], nodes: Sequence[Node], options: EngineOptions, *,
             queues: Sequence[Queue] = (), config: SchedulerConfig | None = None,
             decide: Callable[[ClusterSnapshot, float], Decisions] = scheduler.decide,
             progress: Progress | None = None) -> SimulationResult:
    """Replay ``jobs`` (sorted by submission) on ``nodes`` and return every job's outcome.

    Jobs that could never run on ``nodes`` are not replayed; they are listed in
    ``rejected`` with the reason. Raises ``SimulationError`` when a decision is
    impossible or the policy leaves jobs waiting on an idle cluster forever.
    """
    config = config or SchedulerConfig(policy=options.policy, explain=False,
                                       preemption_budget=options.preemption_budget)
    return _Engine(jobs, tuple(nodes), options, tuple(queues), config, decide, progress).run()


class _Engine:
    def __init__(self, jobs, nodes, options, queues, config, decide, progress) -> None:
        self.options, self.decide, self.progress, self.nodes = options, decide, progress, nodes
        self.policy = config.policy
        self.snapshot_base = {"nodes": nodes, "queues": queues, "config": config}
        self.ledger = Ledger(nodes)
        self.cluster_gpus = sum(len(node.gpu_ids) for node in nodes)
        self.rejected: dict[int, str] = {}
        self.arrivals = self._admit(jobs)
        self.states: dict[int, JobState] = {}
        self.pending: dict[int, PendingJob] = {}
        self.running: dict[int, RunningJob] = {}
        self.events: list[tuple[float, int, int, int]] = []  # (time, kind, job id, version)
        self.outcomes: list[JobOutcome] = []
        self.busy, self.busy_times, self.busy_gpus = 0, array("d", [0.0]), array("d", [0.0])
        self.latencies = array("d")
        self.dirty = False
        self.history = DurationHistory()
        self.waiting_by_key: dict[tuple[str, int], set[int]] = {}
        """The pending jobs of each prediction key, whose predictions a finished job of it refreshes."""

    def _admit(self, jobs: Sequence[TraceJob]) -> list[tuple[TraceJob, tuple[ReplicaRequest, ...]]]:
        shapes: dict[tuple, tuple[tuple[ReplicaRequest, ...], str | None]] = {}
        types = node_types(self.nodes)
        admitted = []
        for job in jobs:
            key = (job.gpus, job.cpu, job.memory_bytes, job.gpu_models)
            if key not in shapes:
                replicas = gang(job, self.options.gpus_per_node)
                if job.gpus > self.cluster_gpus:
                    reason = f"asks for {job.gpus} GPUs; the cluster has {self.cluster_gpus}"
                elif fits_on_distinct_nodes(replicas, types):
                    reason = None
                else:
                    reason = unschedulable_reason(self.nodes, replicas)
                shapes[key] = (replicas, reason)
            replicas, reason = shapes[key]
            if reason is None:
                admitted.append((job, replicas))
            else:
                self.rejected[job.job_id] = reason
        return admitted

    def run(self) -> SimulationResult:
        started = time.perf_counter()
        options, arrivals = self.options, self.arrivals
        tick, requeue = options.tick, options.requeue_interval
        time_dependent = self.policy in TIME_DEPENDENT
        cursor, last_call, step, loops = 0, -math.inf, 0, 0
        while True:
            now = step * tick
            while cursor < len(arrivals) and arrivals[cursor][0].submitted_at <= now + _EPSILON:
                self._arrive(*arrivals[cursor])
                cursor += 1
            while self.events and self.events[0][0] <= now + _EPSILON:
                moment, kind, job_id, version = heapq.heappop(self.events)
                state = self.states[job_id]
                if state.version == version:
                    (self._complete if kind == COMPLETE else self._stopped)(state, moment)
            decided = None
            if self.dirty or (time_dependent and self.pending and now - last_call >= requeue - _EPSILON):
                decided = self._round(now)
                last_call, self.dirty = now, False
            following = math.inf
            if cursor < len(arrivals):
                following = arrivals[cursor][0].submitted_at
            if self.events:
                following = min(following, self.events[0][0])
            if following == math.inf:
                if not self.pending:
                    break
                if decided is not None or not time_dependent:
                    raise SimulationError(
                        f"policy {self.policy} leaves {len(self.pending)} jobs pending (e.g. job "
                        f"{next(iter(self.pending))}) on an idle cluster at t={now:.0f}s with nothing left to happen")
                following = last_call + requeue
            if time_dependent and self.pending:
                following = min(following, last_call + requeue)
            step = max(step + 1, math.ceil(following / tick - _EPSILON))
            loops += 1
            if self.progress is not None and loops % 2048 == 0:
                self.progress(now, len(self.outcomes), len(arrivals))
        if self.progress is not None:
            self.progress(step * tick, len(self.outcomes), len(arrivals))
        return SimulationResult(self.policy, self.cluster_gpus, self.outcomes, self.rejected, self.busy_times,
                                self.busy_gpus, self.latencies, time.perf_counter() - started)

    def _round(self, now: float) -> Decisions:
        snapshot = ClusterSnapshot(running=tuple(self.running.values()), pending=tuple(self.pending.values()),
                                   **self.snapshot_base)
        began = time.perf_counter()
        decisions = self.decide(snapshot, now)
        self.latencies.append(time.perf_counter() - began)
        if not isinstance(decisions, Decisions):
            raise SimulationError(f"policy {self.policy}: decide returned {type(decisions).__name__}, not Decisions")
        seen: set[int] = set()
        for decision in decisions:
            if decision.job_id in seen:
                raise SimulationError(f"policy {self.policy}: {_name(decision)} is the job's second decision "
                                      "in one round")
            seen.add(decision.job_id)
        for decision in decisions.preemptions:
            self._preempt(decision, now)
        resized = [(decision, self._running_state(decision)) for decision in decisions.resizes]
        for decision, state in resized:  # shrinks free what grows in the same round may take
            self._release(state, now)
        for decision, state in resized:
            self._place(state, decision, now)
        for decision in decisions.starts:
            self._start(decision, now)
        if self.options.check_every_round:
            self.ledger.check()
        return decisions

    def _arrive(self, job: TraceJob, replicas: tuple[ReplicaRequest, ...]) -> None:
        state = JobState(job, replicas)
        key = (job.tenant, job.gpus)
        state.predicted = self.history.predict(key)
        state.trusted = self.history.trusted_prediction(key)
        self.waiting_by_key.setdefault(key, set()).add(job.job_id)
        self.states[job.job_id] = state
        self.pending[job.job_id] = self._pending_view(state)
        self.dirty = True

    def _start(self, decision: StartJob, now: float) -> None:
        state = self.states.get(decision.job_id)
        what = f"policy {self.policy}: {_name(decision)}"
        if state is None or state.phase != PENDING:
            raise SimulationError(f"{what}: job {decision.job_id} is not pending "
                                  f"({'unknown job' if state is None else state.phase})")
        state.begin_attempt(now, self.options.restart_overhead)
        del self.pending[state.job.job_id]
        self.waiting_by_key[state.job.tenant, state.job.gpus].discard(state.job.job_id)
        self._place(state, decision, now)

    def _place(self, state: JobState, decision: StartJob | Resize, now: float) -> None:
        what = f"policy {self.policy}: {_name(decision)}"
        placements, replicas = decision.placements, state.replicas
        least = len(replicas) if state.job_min_replicas is None else state.job_min_replicas
        if not least <= len(placements) <= len(replicas):
            raise SimulationError(f"{what}: {len(placements)} placements for a job of {len(replicas)} replicas "
                                  f"that needs at least {least}")
        for placement, replica in zip(placements, replicas, strict=False):
            self.ledger.take(state.job.job_id, placement, replica, what)
        state.hold(placements, now)
        self._busy(now, state.gpus_held)
        self.running[state.job.job_id] = self._running_view(state)
        self._schedule(state, COMPLETE, state.finish_time())

    def _running_state(self, decision: Preempt | Resize) -> JobState:
        state = self.states.get(decision.job_id)
        if state is None or state.phase != RUNNING or state.stopping:
            phase = "unknown job" if state is None else "stopping" if state.stopping else state.phase
            raise SimulationError(f"policy {self.policy}: {_name(decision)}: job {decision.job_id} is not "
                                  f"running ({phase})")
        return state

    def _preempt(self, decision: Preempt, now: float) -> None:
        state = self._running_state(decision)
        state.stopping = True
        state.preemptions += 1
        self.running[state.job.job_id] = replace(self.running[state.job.job_id], stopping=True)
        # The job still holds its resources and may even finish during the grace period.
        self._schedule(state, STOPPED, now + self.options.preempt_grace, keep_completion=True)

    def _complete(self, state: JobState, moment: float) -> None:
        self._release(state, moment)
        state.phase = COMPLETED
        state.version += 1  # a grace period still running ends with nothing to stop
        self.outcomes.append(JobOutcome(state.job.job_id, state.job.tenant, state.job.submitted_at,
                                        state.job.duration, state.job.gpus, moment, state.run_time,
                                        state.preemptions, state.predicted, state.trusted is not None))
        self._learn(state)

    def _stopped(self, state: JobState, moment: float) -> None:
        self._release(state, moment)
        state.end_attempt(moment)
        key = (state.job.tenant, state.job.gpus)
        state.trusted = self.history.trusted_prediction(key)
        self.pending[state.job.job_id] = self._pending_view(state)
        self.waiting_by_key[key].add(state.job.job_id)

    def _learn(self, state: JobState) -> None:
        """A finished job joins its key's history; the jobs of the key still waiting see the new
        trusted prediction at once, as the server's next pass would show them."""
        key = (state.job.tenant, state.job.gpus)
        self.history.record(key, state.job.duration, state.predicted)
        trusted = self.history.trusted_prediction(key)
        for job_id in self.waiting_by_key.get(key, ()):
            waiting = self.states[job_id]
            if waiting.trusted != trusted:
                waiting.trusted = trusted
                if self.options.predictions:
                    self.pending[job_id] = self._pending_view(waiting)
                    self.dirty = True

    def _release(self, state: JobState, moment: float) -> None:
        self.ledger.release(state.placements)
        self._busy(moment, -state.gpus_held)
        state.let_go(moment)
        del self.running[state.job.job_id]
        self.dirty = True

    def _schedule(self, state: JobState, kind: int, moment: float, *, keep_completion: bool = False) -> None:
        if not keep_completion:
            state.version += 1
        if moment < math.inf:
            heapq.heappush(self.events, (moment, kind, state.job.job_id, state.version))

    def _busy(self, moment: float, delta: int) -> None:
        self.busy += delta
        if not 0 <= self.busy <= self.cluster_gpus:  # the ledger makes this impossible; cheap to be sure
            raise SimulationError(f"{self.busy} GPUs allocated on a cluster of {self.cluster_gpus} at t={moment}")
        if self.busy_times[-1] == moment:
            self.busy_gpus[-1] = self.busy
        else:
            self.busy_times.append(moment)
            self.busy_gpus.append(self.busy)

    def _pending_view(self, state: JobState) -> PendingJob:
        job = state.job
        return PendingJob(
            job_id=job.job_id, submitted_at=job.submitted_at, replicas=state.replicas, queue=job.tenant,
            priority=job.priority, user=job.tenant, attained_service=state.attained_service,
            attained_time=state.attained_time, queued_since=state.queued_since,
            max_runtime=job.duration * self.options.runtime_estimate, expected_duration=job.duration,
            predicted_duration=self._predicted(state), min_replicas=state.job_min_replicas,
        )

    def _running_view(self, state: JobState) -> RunningJob:
        job = state.job
        grow = state.replicas[len(state.placements):] if state.job_min_replicas is not None else ()
        return RunningJob(
            job_id=job.job_id, placements=state.placements, queue=job.tenant, priority=job.priority,
            started_at=state.attempt_started, submitted_at=job.submitted_at, user=job.tenant,
            attained_service=state.attained_service, attained_time=state.attained_time,
            max_runtime=job.duration * self.options.runtime_estimate, expected_duration=job.duration,
            stopping=state.stopping, min_replicas=state.job_min_replicas, grow_replicas=grow,
            serial_fraction=self._serial_fraction(state),
            preemptions=state.preemptions,
        )


    def _serial_fraction(self, state: JobState) -> float | None:
        return state.job.serial_fraction if self.options.scaling and state.job_min_replicas is not None else None

    def _predicted(self, state: JobState) -> float | None:
        """The trusted prediction, which no job outlives its limit beyond (as on the server),
        where the policy is to see it."""
        if state.trusted is None or not self.options.predictions:
            return None
        return min(state.trusted, state.job.duration * self.options.runtime_estimate)


def _name(decision: StartJob | Preempt | Resize) -> str:
    return f"{type(decision).__name__}(job {decision.job_id})"
