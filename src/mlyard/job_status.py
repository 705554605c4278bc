"""The job lifecycle: a job's statuses and the moves between them. Only
`mlyard.server.lifecycle.switch_status` applies a move; everything else asks `can_transition`.
Apart from the spec's models (`mlyard.spec` names these too), so that `mlyard jobs` uses them
without building pydantic's."""

from __future__ import annotations

import enum


class JobStatus(str, enum.Enum):
    """A job's status. Only `server.lifecycle.switch_status` writes it, along
    `ALLOWED_TRANSITIONS`; each value says what it means and what sets it.

    - QUEUED: waiting for the scheduler. Set at submission (the request handler), and by the
      controller after a preemption (PREEMPTED → QUEUED, at once).
    - SCHEDULED: the scheduler placed it; its attempt, replica rows and token are written and
      the backend is about to launch it. Set by the controller's start.
    - STARTING: the backend accepted the launch; not every replica runs yet. Set by the
      controller once the launch is recorded.
    - RUNNING: every replica runs (or already ended). Set by the controller's observe step.
    - RESTARTING: an attempt failed with restarts left; no replica is left and the job waits
      out its backoff (`restart_at`) before it is SCHEDULED again. Set by the controller.
    - PREEMPTED: the scheduler took its resources back (a preemption or a resize); it passes
      at once to QUEUED and resumes from its checkpoint. Set by the controller.
    - SUCCEEDED: the attempt met the job's success policy: every replica exited 0 (`all`), or the
      chief or worker 0 did and the other replicas were then stopped. Set by the controller
      (also from STARTING, when the chief finishes before a slow peer runs). Terminal.
    - FAILED: a replica failed with no restarts left, `max_runtime` passed, the environment it
      names went away, or it could not be started. Set by the controller. Terminal.
    - CANCELLED: a user cancelled it (a queued, preempted or restarting job at once, by the
      request handler; an active one by the controller once no replica is left), or an idle
      interactive job was stopped. Terminal.

    A terminal job has no process left: FAILED and CANCELLED are set only once every replica is
    gone.
    """

    QUEUED = "QUEUED"
    SCHEDULED = "SCHEDULED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    PREEMPTED = "PREEMPTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES

    @property
    def is_active(self) -> bool:
        """True while processes of the job may exist. A RESTARTING job has none: its failed
        attempt is gone and it waits out the backoff before it is scheduled again."""
        return self in (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)


TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})

_S = JobStatus
ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    _S.QUEUED: frozenset({_S.SCHEDULED, _S.CANCELLED, _S.FAILED}),
    _S.SCHEDULED: frozenset({_S.STARTING, _S.FAILED, _S.CANCELLED}),
    _S.STARTING: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.PREEMPTED, _S.RESTARTING}),
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.RESTARTING, _S.PREEMPTED}),
    _S.RESTARTING: frozenset({_S.SCHEDULED, _S.FAILED, _S.CANCELLED}),
    _S.PREEMPTED: frozenset({_S.QUEUED, _S.CANCELLED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}


def can_transition(current: JobStatus, target: JobStatus) -> bool:
    return target in ALLOWED_TRANSITIONS[current]
