"""Submitting jobs, one or a batch: the checks a job passes before it is stored QUEUED, and the
idempotency keys that make a retry return the jobs the first request created.

A single submission and a batch take the same path: every job is checked as a single
submission is (its image here, the rest in `job_admission.py`), then all are stored in one
transaction, or none. Requests that submit at the same moment share that transaction
(`group_commit.py`); each still gets its own answer, as if it had been alone. An error about a
batch item names it: field `jobs.3.spec.queue`, message `jobs.3: …`. What the checks read (a
queue, a project, the nodes) is read once per transaction, not once per job, and the rows go in
with one bulk insert per table, so a batch of 1,000 costs little more than its inserts.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from weakref import WeakKeyDictionary

from sqlalchemy import ARRAY, Float, Integer, String, Text, bindparam, delete, func, insert, literal, null, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from mlyard.api.jobs import JobInfo
from mlyard.errors import Conflict, InvalidRequest
from mlyard.server import auth
from mlyard.server.job_secrets import SecretBox
from mlyard.server.services import job_specs
from mlyard.server.services.group_commit import GroupCommit
from mlyard.server.services.datasets import job_inputs
from mlyard.server.services.job_admission import Admission, naming
from mlyard.server.services.job_views import job_info
from mlyard.server.store import revisions
from mlyard.server.store.dataset_rows import DatasetOutputRow, DatasetReadRow
from mlyard.server.store.db import Database, Rider, riders
from mlyard.server.store.volume_rows import VolumeMountRow
from mlyard.server.store.rows import (
    AttemptRow,
    IdempotencyKeyRow,
    JobEventRow,
    JobRow,
    UserRow,
)
from mlyard.spec import JobSpec, JobStatus

# Built once: building a statement costs more than executing it.
_NEWEST_JOB = select(func.max(JobRow.__table__.c.id))
_INSERT_JOBS_RETURNING_IDS = insert(JobRow.__table__).returning(JobRow.__table__.c.id, sort_by_parameter_order=True)
_SUBMITTED = func.unnest(bindparam("job_ids", type_=ARRAY(Integer)),
                         bindparam("messages", type_=ARRAY(Text))).table_valued("job_id", "message").render_derived()
# PostgreSQL: every job's first event, and the revision taken and stamped, in one round trip.
_INSERT_EVENTS_STAMPING = revisions.stamping(insert(JobEventRow.__table__).from_select(
    ["job_id", "at", "from_status", "to_status", "message"],
    select(_SUBMITTED.c.job_id, bindparam("at", type_=Float), null(), literal(JobStatus.QUEUED.value, String),
           _SUBMITTED.c.message)))
IDEMPOTENCY_KEY_LIFETIME = 24 * 3600.0
"""A retry later than this with the same key creates a new job."""
ImageCheck = Callable[[str], str | None]
"""The backend's answer to "can you run this image?": None, or what is wrong (`Backend.check_image`)."""


@dataclass(frozen=True)
class Submission:
    job: JobInfo
    replayed: bool
    """True when an earlier request with the same idempotency key created the job."""


@dataclass(frozen=True)
class _Item:
    """One job to store: its spec as stored (secrets sealed), its idempotency key and the
    digest of its request (what a retry with the key must repeat)."""

    index: int | None
    """Its place in a batch; None for a single submission (its errors name no item)."""
    spec: JobSpec
    key: str | None
    digest: str | None


def submit(database: Database, principal: auth.Principal, spec: JobSpec, *, wake: Callable[[], None],
           check_image: ImageCheck | None = None, secrets: SecretBox | None = None) -> JobInfo:
    """Stores the job QUEUED; it is durable once this returns. `secrets` seals its `env_secrets`."""
    auth.authorize(principal, auth.Action.WRITE)
    [submission] = _submit(database, principal, [(spec, None)], batch=False, wake=wake, check_image=check_image,
                           secrets=secrets)
    return submission.job


def submit_with_key(
    database: Database, principal: auth.Principal, spec: JobSpec, idempotency_key: str, *, wake: Callable[[], None],
    check_image: ImageCheck | None = None, secrets: SecretBox | None = None, sealed: bool = False,
) -> Submission:
    """`submit`, except that a retry of the same request (same caller, key and spec) returns
    the job the first one created instead of creating another. `sealed`: the spec's secrets are
    already encrypted (a stored spec submitted again)."""
    auth.authorize(principal, auth.Action.WRITE)
    [submission] = _submit(database, principal, [(spec, idempotency_key)], batch=False, wake=wake,
                           check_image=check_image, secrets=secrets, sealed=sealed)
    return submission


def submit_batch(
    database: Database, principal: auth.Principal, items: Sequence[tuple[JobSpec, str | None]], *,
    wake: Callable[[], None], check_image: ImageCheck | None = None, secrets: SecretBox | None = None,
) -> list[Submission]:
    """Stores every job of `items` (a spec and an optional idempotency key each) in one
    transaction, or none of them; the answers come in the order of `items`. An item whose key
    an earlier request of the caller used for the same spec gets that request's job
    (`replayed`); for another spec, a 409 naming the item. One key may serve one item only."""
    auth.authorize(principal, auth.Action.WRITE)
    return _submit(database, principal, items, batch=True, wake=wake, check_image=check_image, secrets=secrets)


def resubmit(database: Database, principal: auth.Principal, job_id: int, idempotency_key: str, *,
             wake: Callable[[], None], check_image: ImageCheck | None = None) -> Submission:
    """The job's spec as stored (its env values and sealed secrets kept) as a new job, for a
    caller who may see those values (`job_specs.check_resubmission`)."""
    auth.authorize(principal, auth.Action.READ, job_id=job_id)
    with database.reading() as session:
        job = auth.visible_job(principal, session.get(JobRow, job_id), job_id)
        spec = database.specs.of(job)
        job_specs.check_resubmission(principal, job, spec)
    return submit_with_key(database, principal, spec, idempotency_key, wake=wake, check_image=check_image,
                           sealed=True)


def _submit(database: Database, principal: auth.Principal, requests: Sequence[tuple[JobSpec, str | None]], *,
            batch: bool, wake: Callable[[], None], check_image: ImageCheck | None, secrets: SecretBox | None,
            sealed: bool = False) -> list[Submission]:
    caller = _caller(principal)
    items = [_prepare(index if batch else None, spec, key, secrets=secrets, sealed=sealed)
             for index, (spec, key) in enumerate(requests)]
    _refuse_repeated_keys(items)
    checked_images: dict[str, str | None] = {}
    for last_try in (False, True):
        answers: dict[int, Submission] = _replays(database, principal, caller, items)
        fresh = [position for position in range(len(items)) if position not in answers]
        if not fresh:  # a retry gets the first answers, whatever the engine holds now
            break
        _check_images([items[position] for position in fresh], check_image, checked_images)
        try:
            stored = _store(database, principal, caller, [items[position] for position in fresh])
        except IntegrityError:
            # A concurrent request with one of the keys committed first (PostgreSQL lets both get
            # this far): its jobs are now replays, and the rest are stored again.
            if last_try:
                raise
            continue
        answers.update({position: Submission(job=job, replayed=False) for position, job in zip(fresh, stored)})
        wake()
        break
    return [answers[position] for position in range(len(items))]


def _caller(principal: auth.Principal) -> str:
    if principal.job_id is not None:
        return f"job:{principal.job_id}"
    return f"user:{principal.user_id}" if principal.user_id is not None else f"principal:{principal.name}"


def _prepare(index: int | None, spec: JobSpec, key: str | None, *, secrets: SecretBox | None,
             sealed: bool) -> _Item:
    with naming(index):
        if not sealed:
            job_specs.refuse_shown_values(spec)
        digest = None
        if key is not None:
            text = job_specs.request_text(spec, None if sealed else secrets)
            digest = hashlib.sha256(text.encode()).hexdigest()
        stored = spec if sealed else job_specs.sealed_spec(spec, secrets)
    return _Item(index=index, spec=stored, key=key, digest=digest)


def _refuse_repeated_keys(items: Sequence[_Item]) -> None:
    first: dict[str, int] = {}
    for item in items:
        if item.key is None:
            continue
        if item.key in first:
            with naming(item.index, "idempotency_key"):
                raise InvalidRequest(f"idempotency key {item.key!r} is also item {first[item.key]}'s; give each "
                                     "job a key of its own")
        first[item.key] = item.index or 0


def _replays(database: Database, principal: auth.Principal, caller: str,
             items: Sequence[_Item]) -> dict[int, Submission]:
    """By position in `items`: the jobs that earlier requests with the items' keys created."""
    positions = {item.key: position for position, item in enumerate(items) if item.key is not None}
    if not positions:
        return {}
    with database.reading() as session:
        earlier = list(session.scalars(select(IdempotencyKeyRow).where(
            IdempotencyKeyRow.caller == caller, IdempotencyKeyRow.key.in_(list(positions)),
            IdempotencyKeyRow.created_at >= time.time() - IDEMPOTENCY_KEY_LIFETIME)))
        for row in earlier:
            item = items[positions[row.key]]
            if row.request_sha256 != item.digest:
                with naming(item.index, "idempotency_key"):
                    raise Conflict(
                        f"{'idempotency key' if item.index is not None else 'Idempotency-Key'} {row.key!r} was used "
                        f"for a different job (job {row.job_id}); use a new key for a new submission",
                        field=None if item.index is not None else "headers.Idempotency-Key")
        jobs = _jobs(session, [row.job_id for row in earlier])
        return {positions[row.key]: Submission(job=job_info(jobs[row.job_id], principal,
                                                            spec=database.specs.of(jobs[row.job_id])), replayed=True)
                for row in earlier}


def _jobs(session: Session, job_ids: Sequence[int]) -> dict[int, JobRow]:
    if not job_ids:
        return {}
    query = (select(JobRow).where(JobRow.id.in_(job_ids))
             .options(selectinload(JobRow.attempts).selectinload(AttemptRow.replicas), selectinload(JobRow.owner)))
    return {row.id: row for row in session.scalars(query)}


def _check_images(items: Sequence[_Item], check_image: ImageCheck | None, checked: dict[str, str | None]) -> None:
    """A job whose image the backend cannot run (no engine, an image it lacks) is refused now,
    not found failing later; asked outside any transaction, since it may ask the engine, and once
    per image."""
    if check_image is None:
        return
    for item in items:
        image = item.spec.image
        if image is None:
            continue
        if image not in checked:
            checked[image] = check_image(image)
        if checked[image] is not None:
            with naming(item.index):
                raise InvalidRequest(checked[image], field="image")


@dataclass(frozen=True)
class _Request:
    """One request's jobs to store, with what its transaction carries (its audit row)."""

    principal: auth.Principal
    caller: str
    items: Sequence[_Item]
    rider: Rider | None


_groups: WeakKeyDictionary[Database, GroupCommit[_Request, list[JobInfo]]] = WeakKeyDictionary()
_groups_lock = threading.Lock()


def submission_groups(database: Database) -> GroupCommit[_Request, list[JobInfo]]:
    """Where the submissions to `database` meet to be stored together (`group_commit.py`)."""
    with _groups_lock:
        group = _groups.get(database)
        if group is None:
            group = _groups[database] = GroupCommit(partial(_store_requests, database))
        return group


def _store(database: Database, principal: auth.Principal, caller: str, items: Sequence[_Item]) -> list[JobInfo]:
    """Stores the jobs of `items`, in one transaction with those of the requests submitting at
    the same moment."""
    return submission_groups(database).run(_Request(principal=principal, caller=caller, items=items,
                                                    rider=riders.get()))


def _store_requests(database: Database, requests: Sequence[_Request]) -> list[list[JobInfo]]:
    """Checks and inserts the jobs of `requests` in one transaction. The rows go in as bulk
    inserts (`_insert_jobs`): an ORM flush costs several times the inserts themselves."""
    with database.transaction([request.rider for request in requests if request.rider is not None]) as session:
        admissions = {request.caller: Admission(session, request.principal) for request in requests}
        specs = [[admissions[request.caller].admit(item.spec, item.index) for item in request.items]
                 for request in requests]
        now = time.time()
        values = [[dict(name=spec.name, project=spec.project, queue=spec.queue, priority=spec.priority,
                        owner_id=request.principal.user_id, spec=spec.model_dump(mode="json"), snapshot=spec.snapshot,
                        status=JobStatus.QUEUED.value, attempt_count=0, submitted_at=now, updated_at=now)
                   for spec in request_specs] for request, request_specs in zip(requests, specs)]
        rows = [row for request_values in values for row in request_values]
        _insert_jobs(session, rows)
        _insert_lineage(session, [(request.caller, row["id"], spec)
                                  for request, request_values, request_specs in zip(requests, values, specs)
                                  for row, spec in zip(request_values, request_specs)], admissions)
        keys = [{"caller": request.caller, "key": item.key, "request_sha256": item.digest, "job_id": row["id"],
                 "created_at": now}
                for request, request_values in zip(requests, values)
                for item, row in zip(request.items, request_values) if item.key is not None]
        if keys:
            # An expired row would make the unique (caller, key) pair refuse a legitimate reuse.
            session.execute(delete(IdempotencyKeyRow).where(
                IdempotencyKeyRow.created_at < now - IDEMPOTENCY_KEY_LIFETIME))
            session.execute(insert(IdempotencyKeyRow.__table__), keys)
        _insert_events(session, [row["id"] for row in rows], now,
                       [f"submitted by {request.principal.name}"
                        for request, request_values in zip(requests, values) for _ in request_values])
        # A user's principal carries the user's name (a job's token submits nothing: `require_role`).
        owners = {request.principal.user_id: UserRow(id=request.principal.user_id, name=request.principal.name)
                  for request in requests if request.principal.user_id is not None}
        # Rows outside the session, only for `job_info`, which reads them as the stored ones.
        return [[job_info(JobRow(**row, owner=owners.get(request.principal.user_id), attempts=[]), request.principal,
                          now=now, spec=spec) for row, spec in zip(request_values, request_specs)]
                for request, request_values, request_specs in zip(requests, values, specs)]


def _insert_lineage(session: Session, jobs: list[tuple[str, int, JobSpec]], admissions: dict[str, Admission]) -> None:
    """The versions each job reads and the datasets it will write (`datasets/job_inputs.py`), and
    the volumes it mounts."""
    reads = [read for caller, job_id, spec in jobs
             for read in job_inputs.reads(job_id, spec, admissions[caller].versions)]
    if reads:
        session.execute(insert(DatasetReadRow.__table__), reads)
    if written := [output for _, job_id, spec in jobs for output in job_inputs.outputs(job_id, spec)]:
        session.execute(insert(DatasetOutputRow.__table__), written)
    mounts = [{"job_id": job_id, "volume_id": admissions[caller].volumes[(item.project or spec.project, item.name)],
               "position": position}
              for caller, job_id, spec in jobs for position, item in enumerate(spec.volumes)]
    if mounts:
        session.execute(insert(VolumeMountRow.__table__), mounts)


def _insert_events(session: Session, job_ids: list[int], now: float, messages: list[str]) -> None:
    """Each new job's first event; and the jobs' revision. PostgreSQL takes and stamps it with
    the events, in one statement that comes after the idempotency keys' (which may wait on
    another submission's lock: `revisions.stamping`). SQLite stamps it at the commit."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_INSERT_EVENTS_STAMPING, {"job_ids": job_ids, "messages": messages, "at": now})
        return
    revisions.touch(session, job_ids)  # inserted past the ORM's flush, which would note them
    session.execute(insert(JobEventRow.__table__), [
        {"job_id": job_id, "at": now, "from_status": None, "to_status": JobStatus.QUEUED.value, "message": message}
        for job_id, message in zip(job_ids, messages, strict=True)])


def _insert_jobs(session: Session, rows: list[dict]) -> None:
    """Inserts the jobs of `rows` and sets each row's id. PostgreSQL takes them from the column's
    sequence in the insert itself (RETURNING, in the rows' order). On SQLite, the transaction
    holds the write lock (BEGIN IMMEDIATE), so the ids after the largest are free, as SQLite
    itself would choose them; an insert there that returns the ids in order would go row by row."""
    if session.get_bind().dialect.name == "postgresql":
        for row, job_id in zip(rows, session.scalars(_INSERT_JOBS_RETURNING_IDS, rows).all(), strict=True):
            row["id"] = job_id
        return
    for job_id, row in enumerate(rows, start=(session.scalar(_NEWEST_JOB) or 0) + 1):
        row["id"] = job_id
    session.execute(insert(JobRow.__table__), rows)
