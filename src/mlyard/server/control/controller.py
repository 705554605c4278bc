"""The controller: one background thread that makes the running world match the database.

Each pass: observe the replicas of every unfinished attempt through the backend → decide
what that means for their jobs (running, succeeded, failed, stop needed) → signal replicas
that must stop (SIGTERM, then SIGKILL after the grace period) → ask the scheduler what to
start, preempt and resize, and why the rest waits → carry that out. Backend calls never
happen inside a database transaction. A pass runs whenever `wake()` is called (submission,
cancellation) and otherwise on a short tick while anything is active. Verdicts are
`judge.py`'s pure functions; every status change and the end of an attempt go through
`lifecycle.py`. Specs come from `Database.specs`: the pass's queries leave the column out.

Words: an attempt is *holding* while its `finished_at` is unset: its replicas may exist and
its resources are not free. A stop is *requested* when `stop_requested_at` is set; the job
takes `stop_outcome` once no replica is left. A stop with outcome `PREEMPTED` comes from the
scheduler (a preemption, or a resize carried out as a checkpoint-restart): once no replica is
left the job goes `PREEMPTED → QUEUED` and its next attempt resumes from the job's checkpoint
directory, which outlives attempts. A failed attempt of a job with restarts left stops the
same way with outcome `RESTARTING`: the job then waits out its backoff (`restart_at`) and is
scheduled again as a new attempt. Until its SIGTERM goes out, such a stop gives way to
whatever the attempt does on its own (fail, succeed, be cancelled); after it, only a
cancellation still changes the outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from mlyard.backends.base import AttemptLaunch, Backend, ReplicaObservation, ReplicaRef
from mlyard.runtime.rendezvous import JobContext, ReplicaSlot, replica_environments
from mlyard.scheduler import ClusterSnapshot, Decisions, StartJob, decide
from mlyard.server import auth
from mlyard.server.control import dataset_views, launches
from mlyard.server.control.attempts import holding_attempts, lock_jobs, replica_reference, schedulable, start_text
from mlyard.server.control.judge import Action, judge, succeeded_before_failure
from mlyard.server.control.rounds import Rounds
from mlyard.server.store import job_counts
from mlyard.server.store.db import Database
from mlyard.server.store.rows import (
    AttemptRow,
    EnvironmentRow,
    JobEventRow,
    JobRow,
    ReplicaRow,
)
from mlyard.server.services.nodes import record_nodes
from mlyard.server.loop import Loop
from mlyard.server.lifecycle import (
    GONE,
    RESIZE_REASON,
    abandon,
    finish_stop,
    preemption_unsignalled,
    request_stop,
    succeed,
    switch_status,
)
from mlyard.server.settings import ServerSettings
from mlyard.spec import DatasetInput, JobSpec, JobStatus
from mlyard.storage import BlobStore

log = logging.getLogger("mlyard.controller")
COUNT_FOLD_SECONDS = 5.0
"""How often the job counts' rows are summed up (`store/job_counts.py`)."""


@dataclass(frozen=True)
class _Stop:
    replicas: list[ReplicaRef]
    force: bool


class Controller:
    """`decide` is the scheduler's; another function with its contract may stand in for it."""

    def __init__(self, *, database: Database, backend: Backend, settings: ServerSettings, blobs: BlobStore,
                 decide: Callable[[ClusterSnapshot, float], Decisions] = decide,
                 observe_cycle: Callable[[str, float], None] | None = None):
        self.database = database
        self.backend = backend
        self.settings = settings
        self.blobs = blobs
        self.decide = decide
        self.observe_cycle = observe_cycle
        """Told the policy and the seconds of every scheduling round (`telemetry.py`)."""
        self._loop = Loop("mlyard-controller", self.reconcile_once, retry_seconds=settings.idle_tick_seconds)
        self.rounds = Rounds(database, settings)
        self._last_pass = (0.0, 0.0)
        """When the last pass ended and how long it took (monotonic seconds)."""
        self.adopted: int | None = None
        """Replicas found running when this controller started; None until it has looked."""
        self._nodes_recorded_at = time.monotonic()
        self._counts_folded_at = float("-inf")

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Records the backend's nodes, settles attempts a previous server left half-launched,
        and starts the loop. Replicas a previous server started are observed like any other."""
        self.backend.notify = self.wake
        record_nodes(self.database, self.backend.name, self.backend.nodes())
        self._nodes_recorded_at = time.monotonic()
        self._settle_unlaunched_attempts()
        self._adopt()
        self._loop.start()

    def _adopt(self) -> None:
        """Observes the replicas earlier servers left running before anything else happens, so
        that `adopted` (shown by the health check) says when running jobs are under control again."""
        with self.database.transaction() as session:
            references = [replica_reference(replica) for attempt in holding_attempts(session)
                          if attempt.launched_at is not None for replica in attempt.replicas]
        observations = self.backend.observe(references) if references else {}
        self.adopted = sum(observation.state in ("pending", "running") for observation in observations.values())
        if self.adopted:
            log.info("adopted %d running replicas", self.adopted)

    def stop(self) -> None:
        self._loop.stop()

    def wake(self) -> None:
        self._loop.wake()

    @property
    def running(self) -> bool:
        """Whether its loop's thread runs."""
        return self._loop.alive

    # ----------------------------------------------------------------- one pass
    def reconcile_once(self) -> float:
        """One pass; returns how long to sleep before the next unless woken. A pass keeps a gap
        after the last as long as the last took, and `pass_gap_seconds` at least: woken by every
        submission of a stream, the controller takes a small share of a core, and each pass
        serves the submissions of its gap."""
        gap = max(self.settings.pass_gap_seconds, self._last_pass[1])
        time.sleep(max(0.0, self._last_pass[0] + gap - time.monotonic()))
        began = time.monotonic()
        try:
            return self._pass()
        finally:
            self._last_pass = (time.monotonic(), time.monotonic() - began)

    def _pass(self) -> float:
        if time.monotonic() - self._counts_folded_at >= COUNT_FOLD_SECONDS:
            job_counts.fold(self.database)  # the listings' totals stay a few rows to sum
            self._counts_folded_at = time.monotonic()
        refresh = self.backend.node_refresh_seconds
        if refresh is not None and time.monotonic() - self._nodes_recorded_at >= refresh:
            # Nodes of a cluster come, go and fill up with other workloads.
            record_nodes(self.database, self.backend.name, self.backend.nodes())
            self._nodes_recorded_at = time.monotonic()
        with self.database.reading() as session:
            holding = holding_attempts(session)
            specs = self.database.specs.load(session, [attempt.job for attempt in holding])
        launched = [attempt for attempt in holding if attempt.launched_at is not None]
        references = [replica_reference(replica) for attempt in launched for replica in attempt.replicas]
        stops, transient = [], False
        observations = self.backend.observe(references) if references else {}
        # Nothing launched, or jobs running on as they were: nothing to write, and no write lock
        # taken that a submission would wait for.
        settled = self._settled(launched, specs, observations, time.time())
        if not settled:
            stops, transient = self._apply_observations(observations, time.time())
        for stop in stops:
            self.backend.stop(stop.replicas, force=stop.force)
        # Attempts this pass did not change are what the round reads: no need to read them again.
        acted = self._schedule(time.time(), (holding, specs) if settled and not stops else None)
        # Exits of replicas this server started wake the loop at once (backend.notify); the
        # tick covers the rest: starts, stops in progress, replicas of a previous server.
        delay = self.settings.busy_tick_seconds if transient or acted else self.settings.idle_tick_seconds
        if self.rounds.next_restart_at is not None:  # a backoff that ends before the tick is not waited out longer
            delay = max(0.0, min(delay, self.rounds.next_restart_at - time.time()))
        if self.rounds.come_back_at is not None:  # a round waits out its gap
            delay = max(0.0, min(delay, self.rounds.come_back_at - time.monotonic()))
        return delay

    @staticmethod
    def _settled(attempts: list[AttemptRow], specs: dict[int, JobSpec], observations: dict[int, ReplicaObservation],
                 now: float) -> bool:
        """Whether a pass over these attempts (as read) would change nothing: each job RUNNING
        with no stop or cancellation asked and its `max_runtime` not passed, and the backend
        saying of each replica what its row says."""
        for attempt in attempts:
            job = attempt.job
            if (attempt.stop_requested_at is not None or job.cancel_requested_at is not None
                    or job.status != JobStatus.RUNNING.value):
                return False
            max_runtime = specs[job.id].max_runtime
            if max_runtime is not None and now - attempt.launched_at > max_runtime:
                return False
            for replica in attempt.replicas:
                seen = observations.get(replica.id)
                if seen is not None and (seen.state != replica.state or seen.reason != replica.reason or seen.is_gone
                                         or (replica.started_at is None and seen.started_at is not None)):
                    return False
        return True

    def _apply_observations(
        self, observations: dict[int, ReplicaObservation], now: float
    ) -> tuple[list[_Stop], bool]:
        stops: list[_Stop] = []
        transient = False
        with self.database.transaction() as session:
            attempts = holding_attempts(session)
            lock_jobs(session, {attempt.job_id for attempt in attempts})
            for attempt in attempts:
                if attempt.launched_at is None:
                    continue
                lost = self._record_replicas(session, attempt, observations, now)
                if lost:  # whatever a vanished replica left running goes too
                    stops.append(_Stop(replicas=lost, force=True))
                job = attempt.job
                replicas = attempt.replicas
                if JobStatus(job.status) is JobStatus.STARTING and all(r.state in ("running", *GONE) for r in replicas):
                    attempt.running_at = now
                    switch_status(session, job, JobStatus.RUNNING, now=now)
                all_gone = all(r.state in GONE for r in replicas)
                if attempt.stop_requested_at is None or preemption_unsignalled(attempt):
                    self._judge(session, attempt, now)
                if attempt.finished_at is None and attempt.stop_requested_at is not None:
                    if all_gone:
                        spec = self.database.specs.of(job)
                        finish_stop(session, attempt, spec, now, succeeded=succeeded_before_failure(spec, replicas))
                    else:
                        transient = True
                        force = now >= (attempt.stop_deadline or now)
                        # SIGTERM once; SIGKILL on every pass after the deadline until all are gone.
                        if force or attempt.stop_signalled_at is None:
                            attempt.stop_signalled_at = attempt.stop_signalled_at or now
                            stops.append(_Stop(replicas=[replica_reference(r) for r in replicas if r.state not in GONE],
                                               force=force))
                elif JobStatus(job.status) is JobStatus.STARTING:
                    transient = True
        return stops, transient

    @staticmethod
    def _record_replicas(
        session: Session, attempt: AttemptRow, observations: dict[int, ReplicaObservation], now: float
    ) -> list[ReplicaRef]:
        """Updates replica rows; returns the replicas first seen lost in this pass. What the
        backend says about a replica still there (unschedulable, pulling its image) becomes a
        job event when it changes; about one gone, it joins the failure's reason (`_judge`)."""
        lost = []
        for replica in attempt.replicas:
            observation = observations.get(replica.id)
            if observation is None or replica.state in GONE:
                continue
            if observation.reason != replica.reason:
                replica.reason = observation.reason
                if observation.reason and not observation.is_gone:
                    job = attempt.job
                    session.add(JobEventRow(job_id=job.id, at=now, from_status=job.status, to_status=job.status,
                                            message=f"replica {replica.name}: {observation.reason}"))
            replica.state = observation.state
            replica.started_at = replica.started_at or observation.started_at
            if observation.is_gone:
                replica.exit_code = observation.exit_code
                replica.finished_at = observation.finished_at or now
            if observation.state == "lost":
                lost.append(replica_reference(replica))
        return lost

    def _judge(self, session: Session, attempt: AttemptRow, now: float) -> None:
        """Carries out the verdict on an attempt with no stop in progress (`judge.py`)."""
        job = attempt.job
        verdict = judge(spec=self.database.specs.of(job), replicas=attempt.replicas,
                        cancel_requested=job.cancel_requested_at is not None, restarts_so_far=job.restart_count or 0,
                        launched_at=attempt.launched_at, now=now)
        if verdict.action is Action.STOP:
            if verdict.from_failure:
                job.exit_code = verdict.failed_replica_exit_code
            self._request_stop(attempt, verdict.outcome, verdict.reason, now)
        elif verdict.action is Action.SUCCEED:
            succeed(session, attempt, now)

    def _request_stop(self, attempt: AttemptRow, outcome: JobStatus, reason: str, now: float,
                      *, grace: float | None = None) -> None:
        request_stop(attempt, outcome, reason, now,
                     grace=self.settings.stop_grace_seconds if grace is None else grace)
        log.info("job %s attempt %s: stopping (%s)", attempt.job_id, attempt.number, reason)

    # ----------------------------------------------------------------- scheduling
    def _schedule(self, now: float, holding: tuple[list[AttemptRow], dict[int, JobSpec]] | None = None) -> bool:
        """One scheduling round, when one is due (`rounds.py`); True when it started or stopped
        something."""
        began = time.perf_counter()
        round_ = self.rounds.prepare(now, holding)
        if round_ is None:
            return False
        decisions = self.decide(round_.snapshot, now)
        if round_.held_back:
            decisions = replace(decisions, waiting={**decisions.waiting, **round_.held_back})
        stopped = self._record_decisions(decisions, now)
        self.rounds.decided(round_, time.perf_counter() - began)
        if self.observe_cycle is not None:  # launches are the backend's time, not the round's
            self.observe_cycle(self.settings.scheduler_policy, time.perf_counter() - began)
        try:
            for decision in decisions.starts:
                self._start(decision, round_.addresses)
        except BaseException:
            # Decided again at the next pass, not only once something else changes: a policy
            # whose rounds the clock never changes (fifo) would otherwise not retry the start.
            self.rounds.forget_inputs()
            raise
        return stopped or bool(decisions.starts)

    def _record_decisions(self, decisions: Decisions, now: float) -> bool:
        """Requests the stops the scheduler asked for and stores why queued jobs wait, in one
        statement for the reasons that changed. True when a stop was requested."""
        stopped = False
        reasons = self.rounds.queued.changed_reasons(decisions.waiting)
        if not (decisions.preemptions or decisions.resizes or reasons):
            return stopped
        with self.database.transaction() as session:
            for preemption in decisions.preemptions:
                reason = preemption.reason
                if preemption.for_job is not None and f"job {preemption.for_job}" not in reason:
                    reason = f"{reason} (for job {preemption.for_job})"
                stopped |= self._stop_for_scheduler(session, preemption.job_id, reason, now)
            for resize in decisions.resizes:
                # A resize is a checkpoint-restart: the job is queued again and the next round
                # starts it at whatever size the scheduler then chooses.
                size = len(resize.placements)
                reason = f"{RESIZE_REASON}{size} replica{'' if size == 1 else 's'}: {resize.reason}"
                stopped |= self._stop_for_scheduler(session, resize.job_id, reason, now)
            if reasons:
                jobs = JobRow.__table__
                # A job started, cancelled or deleted meanwhile keeps what it has.
                session.execute(update(jobs).where(jobs.c.id == bindparam("job"), schedulable(now))
                                .values(wait_reason=bindparam("reason")),
                                [{"job": job_id, "reason": reason} for job_id, reason in reasons])
        self.rounds.queued.stored_reasons(reasons)
        return stopped

    def _stop_for_scheduler(self, session: Session, job_id: int, reason: str, now: float) -> bool:
        """Stops a job's running attempt so the job goes back to the queue; its own
        `preemption_grace` (else the server's stop grace) is its time to checkpoint."""
        attempt = session.scalar(
            select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.finished_at.is_(None))
        )
        if attempt is None or attempt.launched_at is None or attempt.stop_requested_at is not None:
            return False
        grace = self.database.specs.of(attempt.job).preemption_grace
        self._request_stop(attempt, JobStatus.PREEMPTED, reason, now, grace=grace)
        return True

    def _start(self, decision: StartJob, addresses: dict[str, str]) -> None:
        """Records the attempt (SCHEDULED), launches it outside any transaction, and records
        the launch (STARTING); an attempt that cannot be launched or recorded is abandoned."""
        master_port, replica_ports = launches.reserve_ports(self.backend, decision)
        recorded = self._record_attempt(decision, addresses, master_port, replica_ports)
        if recorded is None:
            return
        launch, attempt_id, inputs = recorded
        try:
            for directory in launch.private_directories:
                directory.mkdir(parents=True, exist_ok=True)
            dataset_views.prepare(self.database, self.blobs, self.settings.paths, decision.job_id, inputs)
            references = self.backend.launch(launch)
        except Exception as error:
            log.exception("job %s: launch failed", decision.job_id)
            self._abandon(attempt_id, f"could not start: {error}")
            return
        try:
            with self.database.transaction() as session:
                attempt = session.get(AttemptRow, attempt_id)
                by_id = {replica.id: replica for replica in attempt.replicas}
                for reference in references:
                    by_id[reference.replica_id].pid = reference.pid
                    by_id[reference.replica_id].pid_started_at = reference.pid_started_at
                attempt.launched_at = time.time()
                switch_status(session, attempt.job, JobStatus.STARTING, now=attempt.launched_at)
        except Exception as error:  # started but not recorded: nothing may run unaccounted for
            log.exception("job %s: recording the launch failed", decision.job_id)
            self.backend.stop(references, force=True)
            self._abandon(attempt_id, f"could not record the start: {error}")
            return
        log.info("job %s attempt %s: launched %d replicas", decision.job_id, launch.attempt,
                 len(decision.placements))

    def _record_attempt(self, decision: StartJob, addresses: dict[str, str], master_port: int,
                        replica_ports: list[int]) -> tuple[AttemptLaunch, int, list[DatasetInput]] | None:
        """In one transaction: the attempt and replica rows, the attempt's token and SCHEDULED;
        returns the launch to carry out, the attempt's id and the dataset versions whose trees
        it needs (None: nothing to start)."""
        now = time.time()
        with self.database.transaction() as session:
            job = session.get(JobRow, decision.job_id, with_for_update=True)
            if job is None:
                self.rounds.queued.forget(decision.job_id)
                return None
            if JobStatus(job.status) not in (JobStatus.QUEUED, JobStatus.RESTARTING):
                return None
            spec = self.database.specs.of(job)
            built = session.get(EnvironmentRow, spec.environment) if spec.environment else None
            if spec.environment and (built is None or built.status != "ready"):
                # Removing or rebuilding an environment that unfinished jobs name is refused,
                # so this is an environment that went away by other means.
                switch_status(session, job, JobStatus.FAILED, now=now,
                              message=f"environment {spec.environment!r} is no longer ready to run it")
                return None
            secrets, unreadable = launches.open_secrets(spec, self.settings.secret_key_path)
            if unreadable is not None:  # retrying cannot help: another server's key sealed them
                switch_status(session, job, JobStatus.FAILED, now=now, message=f"cannot start: {unreadable}")
                return None
            mounted = launches.mounted_volumes(session, self.backend, job, spec)
            if isinstance(mounted, str):
                switch_status(session, job, JobStatus.FAILED, now=now, message=f"cannot start: {mounted}")
                return None
            job.attempt_count += 1
            job.wait_reason = None
            job.restart_at = None
            attempt = AttemptRow(job_id=job.id, number=job.attempt_count, created_at=now, master_port=master_port)
            session.add(attempt)
            session.flush()
            rows, slots = self._replica_rows(session, decision, job, spec, attempt, addresses, replica_ports)
            token = auth.issue_token(session, name=f"job {job.id} attempt {attempt.number}", user_id=job.owner_id,
                                     job_id=job.id)
            switch_status(session, job, JobStatus.SCHEDULED, message=start_text(decision, spec), now=now)
            directories = (self.settings.paths.checkpoint_directory(job.id),
                           self.settings.paths.tensorboard_directory(job.id),
                           *dataset_views.output_directories(self.settings.paths, job.id, spec))
            context = JobContext(job_id=job.id, attempt=attempt.number, api_url=self.settings.replica_api_url,
                                 token=token, earlier_attempts=attempt.number - 1,
                                 checkpoint_directory=str(directories[0]), master_port=master_port,
                                 tensorboard_directory=str(directories[1]))
            datasets = {**dataset_views.variables(self.settings.paths, job.id, spec), **mounted.variables}
            environments = [{**environment, **datasets, **secrets}
                            for environment in replica_environments(spec, slots, context)]
            image = launches.apply_environment(spec, built, environments)
            launch = launches.attempt_launch(
                job, attempt, spec, rows, environments, image, self.settings.paths, self.blobs, directories,
                secret_names=frozenset(secrets), datasets=dataset_views.mounts(self.settings.paths, job.id, spec.datasets),
                mounted=mounted)
            return launch, attempt.id, spec.datasets

    def _replica_rows(self, session: Session, decision: StartJob, job: JobRow, spec: JobSpec,
                      attempt: AttemptRow, addresses: dict[str, str],
                      replica_ports: list[int]) -> tuple[list[ReplicaRow], list[ReplicaSlot]]:
        """One row per placement, ranks in placement order, and each replica's rendezvous slot."""
        slots, rows = [], []
        roles = {role.name: role for role in spec.roles}
        for rank, placement in enumerate(decision.placements):
            name = f"{placement.role}-{placement.index}"
            row = ReplicaRow(
                attempt_id=attempt.id, job_id=job.id, role=placement.role, index=placement.index, rank=rank,
                node=placement.node, cpu_ids=list(placement.cpu_ids), gpu_ids=list(placement.gpu_ids),
                cpu_millicores=placement.cpu_millicores, memory_bytes=placement.memory_bytes, state="pending",
                directory=str(self.settings.paths.replica_directory(job.id, attempt.number, name)),
            )
            session.add(row)
            rows.append(row)
            slots.append(ReplicaSlot(
                role=placement.role, index=placement.index, rank=rank, node=placement.node,
                address=self.backend.replica_address(job.id, attempt.number, name, placement.node,
                                                     addresses[placement.node]),
                port=replica_ports[rank],
                cpu_count=max(1, len(placement.cpu_ids)), gpu_ids=tuple(placement.gpu_ids),
                processes=roles[placement.role].processes,
            ))
        session.flush()
        return rows, slots

    def _abandon(self, attempt_id: int, reason: str) -> None:
        """Ends an attempt that never ran: its job fails (or is cancelled, if that was asked)."""
        with self.database.transaction() as session:
            attempt = session.get(AttemptRow, attempt_id)
            session.get(JobRow, attempt.job_id, with_for_update=True, populate_existing=True)
            abandon(session, attempt, reason, time.time())

    def _settle_unlaunched_attempts(self) -> None:
        """An attempt with no recorded launch was interrupted by a server stop between
        scheduling and launching: whatever it may have started is killed, and its job fails."""
        with self.database.transaction() as session:
            unlaunched = [(attempt.id, [replica_reference(replica) for replica in attempt.replicas])
                          for attempt in holding_attempts(session) if attempt.launched_at is None]
        for attempt_id, references in unlaunched:
            self.backend.stop(references, force=True)
            self._abandon(attempt_id, "the server stopped while this job was being started")
