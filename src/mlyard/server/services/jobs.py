"""Jobs: queries and cancellation (statuses change through `lifecycle.switch_status`);
submission lives in `job_submission`, the API's view of a job in `job_views` (both named here
too, for callers that know jobs by this module).

Everything here only reads and writes rows; starting and stopping processes is the
controller's work, which `submit` and `cancel` wake through the `wake` callback. Queries read
in `Database.reading` transactions, so they never wait for a writer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session, defer, selectinload

from mlyard.api.jobs import DEFAULT_PAGE_JOBS, EventInfo, JobDetail, JobInfo
from mlyard.errors import Conflict
from mlyard.server import auth
from mlyard.server.lifecycle import switch_status
from mlyard.server.services.job_submission import (
    IDEMPOTENCY_KEY_LIFETIME,
    Submission,
    resubmit,
    submit,
    submit_batch,
    submit_with_key,
)
from mlyard.server.services.job_views import (
    CONNECTED,
    CONNECTION_CHECKS_OFF,
    attempt_info,
    connection_warnings,
    job_info,
)
from mlyard.server.store import job_counts, logfiles
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobRow, UserRow
from mlyard.spec import JobStatus

__all__ = [
    "CONNECTED", "CONNECTION_CHECKS_OFF", "IDEMPOTENCY_KEY_LIFETIME", "JobPage", "Submission", "attempt_info",
    "cancel", "connection_warnings", "get_job", "job_info", "list_jobs", "page_jobs", "resubmit", "submit",
    "submit_batch", "submit_with_key",
]

LOG_TAIL_LINES = 20
_STATUSES = [status.value for status in JobStatus]
_UNFINISHED = [status.value for status in JobStatus if not status.is_terminal]
_WALK_BUDGET = 20_000
"""Rows a listing may expect to walk to fill its page before it asks the status index instead."""


@dataclass(frozen=True)
class JobPage:
    jobs: list[JobInfo]
    total: int
    """How many jobs match the filters, whatever the page."""
    next_after: int | None
    """The `after` of the next page (the last job's id); None when no job is left after this page."""


def list_jobs(
    database: Database, principal: auth.Principal, *, statuses: Sequence[JobStatus] = (), include_finished: bool = False,
    limit: int = DEFAULT_PAGE_JOBS, offset: int = 0, queue: str | None = None, project: str | None = None,
    owner: str | None = None, search: str | None = None, after: int | None = None,
) -> list[JobInfo]:
    """The jobs of one page of `page_jobs`."""
    return page_jobs(database, principal, statuses=statuses, include_finished=include_finished, limit=limit,
                     offset=offset, queue=queue, project=project, owner=owner, search=search, after=after).jobs


def page_jobs(
    database: Database, principal: auth.Principal, *, statuses: Sequence[JobStatus] = (), include_finished: bool = False,
    limit: int = DEFAULT_PAGE_JOBS, offset: int = 0, queue: str | None = None, project: str | None = None,
    owner: str | None = None, search: str | None = None, after: int | None = None,
) -> JobPage:
    """Newest first (by id): up to `limit` jobs with an id below `after` (when given), past the
    first `offset` of them. Unfinished jobs only, unless `include_finished` or `statuses`.
    `search` matches part of the name, ignoring case; the other filters match exactly. Paging
    by `after` (the previous page's `next_after`) shows every job once even while jobs are
    submitted meanwhile (they come before the first page); `offset` may repeat or skip some."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        owner_id = None
        if owner:
            owner_id = session.scalar(select(UserRow.id).where(UserRow.name == owner))
            if owner_id is None:
                return JobPage(jobs=[], total=0, next_after=None)
        wanted = _wanted_statuses(statuses, include_finished)
        others = _filters(principal, queue=queue, project=project, owner_id=owner_id, search=search)
        if owner_id is None and not search and principal.job_id is None:
            total = _kept_total(session, principal, wanted, queue=queue, project=project)
        else:
            status_filter = [] if wanted is None else [JobRow.status.in_(sorted(wanted))]
            total = session.scalar(select(func.count()).select_from(JobRow).where(*status_filter, *others)) or 0
        rows = _page_rows(session, wanted=wanted, others=others, total=total, limit=limit, offset=offset,
                          after=after) if total else []
        more, rows = len(rows) > limit, rows[:limit]
        warnings = connection_warnings(session, rows)
        specs = database.specs.load(session, rows)
        jobs = [job_info(row, principal, warning=warnings.get(row.id), spec=specs[row.id]) for row in rows]
    return JobPage(jobs=jobs, total=total, next_after=rows[-1].id if more and rows else None)


def _kept_total(session: Session, principal: auth.Principal, wanted: frozenset[str] | None, *, queue: str | None,
                project: str | None) -> int:
    """The listing's total from the counts kept per status, project and queue
    (`store/job_counts.py`): a few rows read, not every matching job counted."""
    projects = principal.visible_projects()
    if project:
        projects = frozenset({project}) if projects is None or project in projects else frozenset()
    if projects is not None and not projects:
        return 0
    return job_counts.total(session, statuses=wanted, projects=projects, queue=queue or None)


def _wanted_statuses(statuses: Sequence[JobStatus], include_finished: bool) -> frozenset[str] | None:
    """The statuses listed; None for all of them."""
    if statuses:
        wanted = frozenset(status.value for status in statuses)
    else:
        wanted = frozenset(_STATUSES) if include_finished else frozenset(_UNFINISHED)
    return None if wanted == frozenset(_STATUSES) else wanted


def _page_rows(session: Session, *, wanted: frozenset[str] | None, others: list[ColumnElement[bool]], total: int,
               limit: int, offset: int, after: int | None) -> list[JobRow]:
    """Up to `limit + 1` rows of the page, newest first, read one of two ways. SQLite answers
    `status IN (…)` through the status index and then sorts every match, and `status NOT IN (…)`
    by walking the table newest first until the page is full. The walk wins while matches are
    dense (the default listing with many queued jobs), the index while they are rare (a status
    few jobs have). The walk reads about (offset + limit) × newest id / total rows; the index
    route sorts about `total` ids: the walk is taken unless it reads more than both that and
    `_WALK_BUDGET`."""
    below = [] if after is None else [JobRow.id < after]
    # Specs come from `Database.specs`, parsed once per job, not decoded again for every listing.
    options = (defer(JobRow.spec), selectinload(JobRow.attempts).selectinload(AttemptRow.replicas),
               selectinload(JobRow.owner))
    newest = after if after is not None else (session.scalar(select(func.max(JobRow.id))) or 0) + 1
    if wanted is None or (offset + limit + 1) * newest <= max(_WALK_BUDGET, total) * total:
        status = [] if wanted is None else [JobRow.status.not_in(sorted(set(_STATUSES) - wanted))]
        return list(session.scalars(select(JobRow).where(*status, *others, *below).order_by(JobRow.id.desc())
                                    .limit(limit + 1).offset(offset).options(*options)))
    # Ids first: with no other filter the index alone answers, and the sort holds numbers, not rows.
    ids = list(session.scalars(select(JobRow.id).where(JobRow.status.in_(sorted(wanted)), *others, *below)
                               .order_by(JobRow.id.desc()).limit(limit + 1).offset(offset)))
    rows = {row.id: row for row in session.scalars(select(JobRow).where(JobRow.id.in_(ids)).options(*options))}
    return [rows[job_id] for job_id in ids if job_id in rows]


def _filters(principal: auth.Principal, *, queue: str | None, project: str | None, owner_id: int | None,
             search: str | None) -> list[ColumnElement[bool]]:
    """The filters other than the status."""
    filters: list[ColumnElement[bool]] = []
    if queue:
        filters.append(JobRow.queue == queue)
    if project:
        filters.append(JobRow.project == project)
    if owner_id is not None:
        filters.append(JobRow.owner_id == owner_id)
    if search:
        # Names are lowercase letters, digits and dashes, so lowering the pattern is enough; the
        # wildcards of LIKE are escaped so that they match themselves.
        escaped = search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        filters.append(JobRow.name.like(f"%{escaped}%", escape="\\"))
    if principal.job_id is not None:
        filters.append(JobRow.id == principal.job_id)
    if (visible := principal.visible_projects()) is not None:
        filters.append(JobRow.project.in_(sorted(visible)))
    return filters


def get_job(database: Database, principal: auth.Principal, job_id: int) -> JobDetail:
    auth.authorize(principal, auth.Action.READ, job_id=job_id)
    with database.reading() as session:
        job = session.scalar(
            select(JobRow)
            .where(JobRow.id == job_id)
            .options(selectinload(JobRow.attempts).selectinload(AttemptRow.replicas), selectinload(JobRow.events))
        )
        job = auth.visible_job(principal, job, job_id)
        detail = JobDetail(
            **dict(job_info(job, principal, warning=connection_warnings(session, [job]).get(job.id),
                            spec=database.specs.of(job))),
            attempts=[attempt_info(attempt) for attempt in job.attempts],
            events=[
                EventInfo(at=event.at, from_status=event.from_status, to_status=event.to_status, message=event.message)
                for event in job.events
            ],
        )
        latest = job.attempts[-1] if job.attempts else None
    if latest is not None:
        detail.log_tail = {
            replica.name: logfiles.tail(replica.directory, LOG_TAIL_LINES) for replica in latest.replicas
        }
    return detail


def cancel(database: Database, principal: auth.Principal, job_id: int, *, wake: Callable[[], None]) -> JobInfo:
    """A queued job is cancelled at once; an active one is marked, and the controller stops
    its replicas (SIGTERM, grace period, SIGKILL) before it becomes CANCELLED."""
    auth.authorize(principal, auth.Action.WRITE, job_id=job_id)
    with database.transaction() as session:
        job = auth.visible_job(principal, session.get(JobRow, job_id, with_for_update=True), job_id)
        # One's own job needs the member role; anyone's, the maintainer role.
        own = principal.user_id is not None and job.owner_id == principal.user_id
        needed = auth.Role.MEMBER if own else auth.Role.MAINTAINER
        auth.require_role(principal, job.project, needed, f"cancel job {job_id}" + ("" if own else " of another user"))
        status = JobStatus(job.status)
        if status.is_terminal:
            raise Conflict(f"job {job_id} has already ended ({status.value})")
        if status in (JobStatus.QUEUED, JobStatus.PREEMPTED, JobStatus.RESTARTING):
            switch_status(session, job, JobStatus.CANCELLED, message=f"cancelled by {principal.name}")
        elif job.cancel_requested_at is None:
            job.cancel_requested_at = time.time()
            job.updated_at = job.cancel_requested_at
        info = job_info(job, principal, warning=connection_warnings(session, [job]).get(job.id),
                        spec=database.specs.of(job))
    wake()
    return info
