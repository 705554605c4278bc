"""When the controller runs a scheduling round, and the cluster snapshot the round decides on.

A round runs only when something it reads changed since the last one: a job came, went or
changed (`queued_jobs.py`), an attempt started, stopped or finished, a backoff ended, or the
nodes, queues, project limits or the policy changed. Nothing new, no round: with 100,000 jobs
waiting for room, an idle server schedules nothing. Policies also weigh time (service attained
by running jobs, a backfill window closing), so while anything runs a round also comes
periodically: every idle tick when rounds are cheap, less often as they grow dearer, so that
these rechecks take at most 1/`RECHECK_FACTOR` of a core; not under a policy whose decisions
the clock alone never changes (`fifo`). Rounds also keep a gap at least as
long as the last one took, so a stream of submissions is scheduled in batches instead of
holding the controller in back-to-back rounds.

Everything a round reads is read in one read-only transaction, which on SQLite never waits for
a writer nor holds one up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import select

from mlyard.scheduler import ClusterSnapshot, weighs_time
from mlyard.server.control import project_limits
from mlyard.server.control.attempts import holding_attempts
from mlyard.server.control.queued_jobs import QueuedJobs
from mlyard.server.control.scaling_fits import ScalingFits
from mlyard.server.control.scheduler_input import running_job, scheduler_queues
from mlyard.server.scheduler_terms import scheduler_node
from mlyard.server.settings import ServerSettings
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, NodeRow, ProjectRow, QueueRow
from mlyard.spec import JobSpec

RECHECK_FACTOR = 50


@dataclass(frozen=True)
class Round:
    snapshot: ClusterSnapshot
    held_back: dict[int, str]
    """Reasons of the queued jobs their project's limits keep out of the round."""
    addresses: dict[str, str]
    """Each node's address, by name."""
    inputs: tuple
    """What the round was decided on, to compare the next pass's with."""


class Rounds:
    """Only the controller's thread uses it."""

    def __init__(self, database: Database, settings: ServerSettings):
        self.database = database
        self.settings = settings
        self.queued = QueuedJobs()
        self.scaling = ScalingFits()
        """Running elastic jobs' scaling curves, from the throughput they report (`scaling_fits.py`)."""
        self.next_restart_at: float | None = None
        """When the next restart backoff still running ends (the loop wakes for it)."""
        self.come_back_at: float | None = None
        """Set when a round is due but waits out the gap after the last (monotonic seconds)."""
        self.rounds = 0
        """Rounds prepared so far (the tests count them)."""
        self.every_pass = False
        """A round on every pass, changed or not: for tests that script the scheduler's
        answers pass by pass."""
        self._last_inputs: tuple | None = None
        self._last_round_at = float("-inf")
        self._last_round_seconds = 0.0

    def clear(self) -> None:
        """Reads everything again at the next pass (a new leader, a test)."""
        self.queued.clear()
        self._last_inputs = None

    def prepare(self, now: float, known: tuple[list[AttemptRow], dict[int, JobSpec]] | None = None) -> Round | None:
        """The round to run now, or None when none is due. `known`: the holding attempts and
        their specs, when the caller has just read them and nothing changed them since."""
        self.come_back_at = None
        with self.database.reading() as session:
            self.queued.refresh(session)
            if known is None:
                holding = holding_attempts(session)
                specs = self.database.specs.load(session, [attempt.job for attempt in holding])
            else:
                holding, specs = known
            fractions = self.scaling.fractions(
                session, [attempt.job_id for attempt in holding if specs[attempt.job_id].elastic is not None], now)
            nodes = session.scalars(select(NodeRow)).all()
            queue_rows = session.scalars(select(QueueRow)).all()
            projects = {row.name: row for row in session.scalars(select(ProjectRow))}
        self.database.specs.retain(specs)  # the specs of jobs no longer running are let go
        self.queued.settle()
        self.next_restart_at = self.queued.next_restart(now)
        if not len(self.queued) and not holding:
            self._last_inputs = None
            return None
        scheduler_nodes = tuple(scheduler_node(row) for row in nodes)
        running = tuple(running_job(attempt, specs[attempt.job_id], fractions.get(attempt.job_id))
                        for attempt in holding)
        queues = scheduler_queues(queue_rows)
        config = self.settings.scheduler_config()
        inputs = (scheduler_nodes, running, queues, config, project_limits.limits_of(projects),
                  self.queued.version, self.queued.restarts_due(now))
        since = time.monotonic() - self._last_round_at
        recheck = max(self.settings.idle_tick_seconds, RECHECK_FACTOR * self._last_round_seconds)
        rechecked = holding and since >= recheck and weighs_time(config.policy)
        if inputs == self._last_inputs and not rechecked and not self.every_pass:
            return None
        if since < self._last_round_seconds and not self.every_pass:
            self.come_back_at = self._last_round_at + self._last_round_seconds
            return None
        queued = self.queued.schedulable(now)
        if not queued and not holding:
            return None
        admitted, held_back = project_limits.admit(queued, holding, projects)
        self.rounds += 1
        snapshot = ClusterSnapshot(nodes=scheduler_nodes, running=running,
                                   pending=tuple(job.pending for job in admitted), queues=queues, config=config)
        return Round(snapshot=snapshot, held_back=held_back, addresses={row.name: row.address for row in nodes},
                     inputs=inputs)

    def forget_inputs(self) -> None:
        """The next pass runs a round even if nothing it reads changed (a start that failed)."""
        self._last_inputs = None

    def decided(self, round_: Round, seconds: float) -> None:
        """Notes a round carried out in `seconds` (reading, deciding and recording)."""
        self._last_inputs = round_.inputs
        self._last_round_at = time.monotonic()
        self._last_round_seconds = seconds
