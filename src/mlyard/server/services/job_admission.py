"""The checks a job passes inside the transaction that stores it (`job_submission.py`): its
queue, its project and the caller's role there, its snapshot, environment, dataset versions
(pinned: `datasets/job_inputs.py`) and volumes, and whether any node could ever hold it.

What the checks read is read once per transaction, not once per job: a batch of 1,000 jobs of
one queue reads its queue, project, snapshot and the nodes once. The reads of every submission
are two Core statements built once, the queue with its project's existence, and the nodes: a
submission is a few such reads and inserts, building a statement or loading ORM objects costs
several times executing it, and on PostgreSQL every statement is a round trip.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import String, bindparam, exists, func, select
from sqlalchemy.orm import Session

from mlyard.errors import InvalidRequest, MlyardError, Unschedulable
from mlyard.scheduler import unschedulable_reason
from mlyard.server import auth
from mlyard.server.scheduler_terms import DEFAULT_QUEUE, scheduler_node, smallest_gang
from mlyard.server.services import environments, project_storage, projects, snapshots, volumes
from mlyard.server.services.datasets import job_inputs
from mlyard.server.store.rows import NodeRow, ProjectRow, QueueRow
from mlyard.spec import JobSpec

_queues, _projects = QueueRow.__table__.c, ProjectRow.__table__.c
# A shared lock: a queue deleted meanwhile (which locks the row) cannot end up holding the job.
_NAMED_QUEUE = (select(_queues.project).where(_queues.name == bindparam("queue", type_=String))
                .with_for_update(read=True).cte("named_queue"))
_QUEUE_PROJECT = select(_NAMED_QUEUE.c.project).scalar_subquery()
# The job's project is the one it names, else its queue's, else the default (`_admit`).
_JOB_PROJECT = func.coalesce(bindparam("named", type_=String), _QUEUE_PROJECT, bindparam("fallback", type_=String))
_QUEUE_AND_PROJECT = select(exists(_NAMED_QUEUE.select()).label("queue_found"), _QUEUE_PROJECT.label("queue_project"),
                            exists(select(_projects.name).where(_projects.name == _JOB_PROJECT)).label("project_found"))
_QUEUE_NAMES = select(_queues.name)
_NODES = select(NodeRow.__table__)


@contextmanager
def naming(index: int | None, section: str = "spec") -> Iterator[None]:
    """An error raised inside about batch item `index` names it: field `jobs.3.spec.queue`,
    message `jobs.3: …`; a single submission's errors are left as they are."""
    try:
        yield
    except MlyardError as error:
        if index is not None:
            where = f"jobs.{index}.{section}"
            error.field = f"{where}.{error.field}" if error.field else where
            error.message = f"jobs.{index}: {error.message}"
            error.args = (error.message,)
        raise


class Admission:
    """The checks of the jobs one transaction stores, for one caller."""

    def __init__(self, session: Session, principal: auth.Principal):
        self.session = session
        self.principal = principal
        self._queues: dict[str, str | None] = {}
        """Queue name → its project; None for the default queue where no row holds it."""
        self._passed: set[tuple[str, ...]] = set()
        self._nodes: tuple | None = None
        self._reasons: dict[tuple, str | None] = {}
        self.versions: dict = {}
        """(project, dataset, version or alias) → the version it names (`job_inputs.pin`, `.reads`)."""
        self.volumes: dict[tuple[str, str], int] = {}
        """(project, volume) → its id, for the jobs' `volume_mounts`."""

    def admit(self, spec: JobSpec, index: int | None) -> JobSpec:
        """The spec as it is stored (with the queue's project where it names none). `index`:
        its place in a batch, which its errors name."""
        with naming(index):
            return self._admit(spec)

    def _admit(self, spec: JobSpec) -> JobSpec:
        named = spec.project if "project" in spec.model_fields_set else None
        queue_project = self._queue_project(spec.queue, named, spec.project)
        if queue_project is not None and named is None:
            # A job that names a queue but no project belongs to the queue's project.
            spec = spec.model_copy(update={"project": queue_project})
        if ("project", spec.project) not in self._passed:  # the read of its queue found it missing
            projects.ensure_project(self.session, self.principal, spec.project)
            self._passed.add(("project", spec.project))
        auth.require_role(self.principal, spec.project, auth.Role.MEMBER, f"submit jobs to project {spec.project!r}")
        if spec.snapshot is not None and ("snapshot", spec.project, spec.snapshot) not in self._passed:
            snapshot = snapshots.require_usable(self.session, self.principal, spec.snapshot, spec.project)
            project_storage.charge(self.session, spec.project, spec.snapshot, snapshot.size)
            self._passed.add(("snapshot", spec.project, spec.snapshot))
        if spec.environment is not None and ("environment", spec.project, spec.environment) not in self._passed:
            environments.check_for_job(self.session, spec.environment, spec.project)
            self._passed.add(("environment", spec.project, spec.environment))
        if spec.datasets:
            spec = spec.model_copy(update={"datasets": job_inputs.pin(self.session, self.principal, spec,
                                                                      self.versions)})
        if spec.outputs:
            spec = spec.model_copy(update={"outputs": job_inputs.pin_outputs(self.session, self.principal, spec)})
        for row in volumes.pin(self.session, self.principal, spec):
            self.volumes[(row.project, row.name)] = row.id
        # The default project's queues are shared; any other queue takes its own project's jobs.
        if queue_project is not None and queue_project not in (projects.DEFAULT_PROJECT, spec.project):
            raise InvalidRequest(f"queue {spec.queue!r} belongs to project {queue_project!r}; a job of project "
                                 f"{spec.project!r} cannot use it", field="queue")
        reason = self._unschedulable_reason(spec)
        if reason is not None:
            raise Unschedulable(f"job {spec.name!r} can never run here: {reason}", field="roles")
        return spec

    def _queue_project(self, name: str, named: str | None, fallback: str) -> str | None:
        """The project of queue `name` (None where it has none, or has no row), read with
        whether the job's project exists (which `_passed` then holds)."""
        if name not in self._queues:
            row = self.session.execute(_QUEUE_AND_PROJECT, {"queue": name, "named": named, "fallback": fallback}).one()
            if name != DEFAULT_QUEUE and not row.queue_found:
                names = sorted({DEFAULT_QUEUE, *self.session.scalars(_QUEUE_NAMES)})
                raise InvalidRequest(f"queue {name!r} does not exist; the queues are: {', '.join(names)}",
                                     field="queue")
            self._queues[name] = row.queue_project
            if row.project_found:
                found = next(project for project in (named, row.queue_project, fallback) if project is not None)
                self._passed.add(("project", found))
        return self._queues[name]

    def _unschedulable_reason(self, spec: JobSpec) -> str | None:
        """Why no node could ever hold the job (`scheduler.unschedulable_reason`), asked once per
        shape of gang."""
        if self._nodes is None:
            # Core rows carry the columns `scheduler_node` reads, as the ORM's do.
            self._nodes = tuple(scheduler_node(row) for row in self.session.execute(_NODES))
        gang = smallest_gang(spec)
        key = (gang, spec.placement.same_node, spec.placement.same_topology)
        if key not in self._reasons:
            self._reasons[key] = unschedulable_reason(self._nodes, gang, same_node=spec.placement.same_node,
                                                      same_topology=spec.placement.same_topology)
        return self._reasons[key]
