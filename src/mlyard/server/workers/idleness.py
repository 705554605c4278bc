"""Utilization policies: running jobs that leave what they hold idle get a warning, and
interactive ones are stopped.

The leader's sampling thread calls `check` every `check_interval` (about a minute). For each
RUNNING job it measures the current attempt over a window that ends now and lies wholly after
the attempt began running (`measure`):
- a job holding GPUs by exactly those GPUs (its replicas' node and GPU indices), from the node
  samples; whatever else the node's other GPUs or processes do does not count;
- a job without GPUs by the CPU of its replicas' process trees (job samples), in percent of
  one core per replica, against `IDLE_CPU_PERCENT`.
The samples must cover the window, with no gap wider than `max_gap`; otherwise there is no
verdict and nothing changes (a server that was down, a sampler that stopped).

Two rules read the figures:
- the warning: the *mean* over the last `idle_after_seconds` under the threshold sets
  `jobs.idle_since`/`idle_reason` with an event; a mean at or over it clears them, with an
  event. The mean is what a warning about wasted GPUs is about: a job at 100% for one minute
  in thirty leaves them idle 97% of the time.
- the stop: an interactive job whose *peak* over the last `idle_timeout` stayed under the
  threshold (no sample of any of its GPUs, or of its CPU, reached it) is stopped as a
  cancellation is, and ends CANCELLED with the reason. An idle timeout counts from the last
  activity: a user who ran a cell ten minutes ago is working, whatever the mean says.
Batch jobs are only ever warned.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session, defer, selectinload

from mlyard.server.lifecycle import request_stop
from mlyard.server.store.db import Database
from mlyard.server.store.rows import (
    RAW_PERIOD,
    AttemptRow,
    JobEventRow,
    JobRow,
    JobSampleRow,
    NodeSampleRow,
)
from mlyard.server.settings import ServerSettings
from mlyard.spec import JobSpec, JobStatus

log = logging.getLogger("mlyard.idleness")

IDLE_CPU_PERCENT = 5.0
"""A job without GPUs is idle under this much of one core per replica: a shell or a notebook
server waiting for its user uses well under 1%."""
MAX_CHECK_INTERVAL = 60.0
GAP_INTERVALS = 3
"""Samples further apart than this many sample intervals leave a hole in a window (a missed
beat or two of a busy sampler does not)."""
MIN_GAP = 5.0


def max_gap(settings: ServerSettings) -> float:
    return max(GAP_INTERVALS * settings.sample_interval_seconds, MIN_GAP)


def check_interval(settings: ServerSettings) -> float:
    """About a minute; more often where the server's windows are short (a quarter of the
    shortest), never more often than samples are taken."""
    windows = [window for window in (settings.idle_after_seconds, settings.interactive_idle_timeout_seconds)
               if window > 0]
    if not windows:
        return MAX_CHECK_INTERVAL
    return min(MAX_CHECK_INTERVAL, max(settings.sample_interval_seconds, min(windows) / 4))


@dataclass(frozen=True)
class Utilization:
    """What an attempt used over a window: `GPUs` (percent utilization of each of its GPUs at
    each sample) or `CPU` (percent of one core per replica at each sample)."""

    resource: str
    mean: float
    peak: float
    threshold: float
    samples: int

    @property
    def idle(self) -> bool:
        return self.mean < self.threshold

    @property
    def quiet(self) -> bool:
        """Not one sample reached the threshold."""
        return self.peak < self.threshold

    def limit_text(self) -> str:
        unit = "% of a core per replica" if self.resource == "CPU" else "%"
        return f"under {self.threshold:g}{unit}"


def covered(times: Sequence[float], start: float, end: float, gap: float) -> bool:
    """Whether sample times (sorted, within [start, end]) leave no hole wider than `gap`."""
    if not times:
        return False
    edges = [start, *times, end]
    return all(later - earlier <= gap for earlier, later in itertools.pairwise(edges))


def measure(session: Session, attempt: AttemptRow, start: float, end: float, *, gpu_threshold: float,
            gap: float) -> Utilization | None:
    """The attempt's utilization over [start, end] from raw samples; None where they do not
    cover the window."""
    held: dict[str, set[int]] = defaultdict(set)
    for replica in attempt.replicas:
        held[replica.node].update(replica.gpu_ids)
    held = {node: gpus for node, gpus in held.items() if gpus}
    if held:
        values: list[float] = []
        for node, gpus in held.items():
            times = []
            for at, figures in session.execute(
                    select(NodeSampleRow.at, NodeSampleRow.gpus).where(
                        NodeSampleRow.node == node, NodeSampleRow.period == RAW_PERIOD,
                        NodeSampleRow.at >= start, NodeSampleRow.at <= end).order_by(NodeSampleRow.at)):
                by_index = {gpu.get("index"): gpu.get("utilization_percent") for gpu in figures}
                if any(by_index.get(index) is None for index in gpus):
                    continue  # a GPU NVML did not answer for is a hole, not an idle GPU
                times.append(at)
                values.extend(by_index[index] for index in gpus)
            if not covered(times, start, end, gap):
                return None
        return Utilization("GPUs", sum(values) / len(values), max(values), gpu_threshold, len(values))
    totals: dict[float, float] = defaultdict(float)
    for at, cpu in session.execute(select(JobSampleRow.at, JobSampleRow.cpu_percent).where(
            JobSampleRow.job_id == attempt.job_id, JobSampleRow.attempt == attempt.number,
            JobSampleRow.period == RAW_PERIOD, JobSampleRow.at >= start, JobSampleRow.at <= end)):
        totals[at] += cpu  # a sampling pass stamps all its replicas' rows alike
    times = sorted(totals)
    if not covered(times, start, end, gap):
        return None
    replicas = max(1, len(attempt.replicas))
    per_replica = [totals[at] / replicas for at in times]
    return Utilization("CPU", sum(per_replica) / len(per_replica), max(per_replica), IDLE_CPU_PERCENT, len(times))


@dataclass
class Changes:
    """Job ids, for the log and for tests."""

    idle: list[int] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    job_id: int
    attempt_id: int
    idle: tuple[float, str] | None = None
    """(idle_since, reason) to set."""
    busy: str | None = None
    """The event of a warning cleared."""
    stop: str | None = None
    """The reason to stop it for."""


def check(database: Database, settings: ServerSettings, now: float | None = None) -> Changes:
    """Judges every running job and records what changed. Samples are read without a lock;
    each change is written under the job's lock after checking the job still runs the attempt
    that was judged."""
    now = time.time() if now is None else now
    gap = max_gap(settings)
    with database.reading() as session:
        running = session.execute(
            select(JobRow, AttemptRow).join(AttemptRow, AttemptRow.job_id == JobRow.id)
            .where(JobRow.status == JobStatus.RUNNING.value, AttemptRow.finished_at.is_(None),
                   AttemptRow.running_at.is_not(None), AttemptRow.stop_requested_at.is_(None))
            .options(defer(JobRow.spec), selectinload(AttemptRow.replicas)).order_by(JobRow.id)).all()
        specs = database.specs.load(session, [job for job, _ in running])
        plans = [plan for job, attempt in running
                 if (plan := _judge(session, job, specs[job.id], attempt, settings, now, gap)) is not None]
    changes = Changes()
    if plans:
        with database.transaction() as session:
            for plan in plans:
                _apply(session, plan, settings, now, changes)
    return changes


def _judge(session: Session, job: JobRow, spec: JobSpec, attempt: AttemptRow, settings: ServerSettings, now: float,
           gap: float) -> _Plan | None:
    measured: dict[float, Utilization | None] = {}

    def over(window: float) -> Utilization | None:
        if window <= 0 or now - window < attempt.running_at:
            return None
        if window not in measured:
            measured[window] = measure(session, attempt, now - window, now,
                                       gpu_threshold=settings.idle_gpu_utilization, gap=gap)
        return measured[window]

    idle = busy = stop = None
    window = settings.idle_after_seconds
    if window <= 0:
        if job.idle_since is not None:  # switched off since the warning was given
            busy = "idle warnings are switched off"
    elif (usage := over(window)) is not None:
        if usage.idle and job.idle_since is None:
            reason = f"{usage.resource} idle: {usage.limit_text()} for {span(window)} (mean {percent(usage.mean)}%)"
            idle = (now - window, reason)
        elif not usage.idle and job.idle_since is not None:
            busy = f"{usage.resource} busy again: mean {percent(usage.mean)}% over the last {span(window)}"
    if spec.interactive and job.cancel_requested_at is None:
        timeout = settings.interactive_idle_timeout_seconds if spec.idle_timeout is None else spec.idle_timeout
        usage = over(timeout)
        if usage is not None and usage.quiet:
            stop = (f"stopped for being idle: {usage.resource} {usage.limit_text()} for {span(timeout)} "
                    f"(peak {percent(usage.peak)}%)")
    if idle is None and busy is None and stop is None:
        return None
    return _Plan(job_id=job.id, attempt_id=attempt.id, idle=idle, busy=busy, stop=stop)


def _apply(session: Session, plan: _Plan, settings: ServerSettings, now: float, changes: Changes) -> None:
    job = session.get(JobRow, plan.job_id, with_for_update=True, populate_existing=True)
    attempt = session.get(AttemptRow, plan.attempt_id, populate_existing=True)
    if (job is None or attempt is None or job.status != JobStatus.RUNNING.value or attempt.finished_at is not None
            or attempt.stop_requested_at is not None):
        return  # it moved on while the samples were read
    if plan.idle is not None and job.idle_since is None:
        job.idle_since, job.idle_reason = plan.idle
        _event(session, job, plan.idle[1], now)
        changes.idle.append(job.id)
        log.info("job %s: %s", job.id, plan.idle[1])
    elif plan.busy is not None and job.idle_since is not None:
        job.idle_since = job.idle_reason = None
        _event(session, job, plan.busy, now)
        changes.busy.append(job.id)
        log.info("job %s: %s", job.id, plan.busy)
    if plan.stop is not None and job.cancel_requested_at is None:
        request_stop(attempt, JobStatus.CANCELLED, plan.stop, now, grace=settings.stop_grace_seconds)
        job.updated_at = now
        changes.stopped.append(job.id)
        log.info("job %s attempt %s: stopping (%s)", job.id, attempt.number, plan.stop)


def _event(session: Session, job: JobRow, message: str, now: float) -> None:
    """An event without a change of status: it goes in the job's history beside its transitions."""
    job.updated_at = now
    session.add(JobEventRow(job_id=job.id, at=now, from_status=job.status, to_status=job.status, message=message))


def span(seconds: float) -> str:
    """30m, 1h30m, 15s."""
    rest, parts = round(seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            count, rest = divmod(rest, size)
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def percent(value: float) -> str:
    return f"{value:.1f}" if value < 1 else f"{value:.0f}"
