"""Replica logs by attempt and replica name, read by byte offset so clients can follow them."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from mlyard.api.jobs import LogChunk
from mlyard.errors import NotFound
from mlyard.server import auth
from mlyard.server.store import logfiles
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobRow
from mlyard.spec import JobStatus


@dataclass(frozen=True)
class LogLocation:
    """Which replica's log a request names, where its file is, and whether it is done growing."""

    attempt: int
    replica: str
    directory: str | None
    """None: the job has no attempt yet."""
    ended: bool


def locate_log(database: Database, principal: auth.Principal, job_id: int, *, replica: str | None = None,
               attempt: int | None = None) -> LogLocation:
    """`replica` is a name such as worker-1 or a rank; default rank 0 of the latest attempt."""
    auth.authorize(principal, auth.Action.READ, job_id=job_id)
    with database.reading() as session:
        job = session.scalar(
            select(JobRow).where(JobRow.id == job_id)
            .options(selectinload(JobRow.attempts).selectinload(AttemptRow.replicas))
        )
        job = auth.visible_job(principal, job, job_id)
        if not job.attempts:
            return LogLocation(attempt=0, replica=replica or "", directory=None,
                               ended=JobStatus(job.status).is_terminal)
        chosen_attempt = job.attempts[-1] if attempt is None else next(
            (row for row in job.attempts if row.number == attempt), None
        )
        if chosen_attempt is None:
            raise NotFound(f"job {job_id} has no attempt {attempt}", field="attempt")
        replicas = chosen_attempt.replicas
        if replica is None:
            chosen = replicas[0]
        else:
            chosen = next(
                (row for row in replicas if row.name == replica or (replica.isdigit() and row.rank == int(replica))),
                None,
            )
            if chosen is None:
                names = ", ".join(f"{row.name} (rank {row.rank})" for row in replicas)
                raise NotFound(f"job {job_id} has no replica {replica!r}; it has {names}", field="replica")
        # A replica of an ended job writes nothing more, even one that never got to run.
        ended = chosen.state in ("exited", "lost") or JobStatus(job.status).is_terminal
        return LogLocation(attempt=chosen_attempt.number, replica=chosen.name, directory=chosen.directory,
                           ended=ended)


def read_located(job_id: int, location: LogLocation, offset: int, limit: int = logfiles.MAX_CHUNK) -> LogChunk:
    """The chunk from `offset` of a log `locate_log` found (no database: the file only)."""
    if location.directory is None:
        return LogChunk(job_id=job_id, attempt=0, replica=location.replica, offset=offset, next_offset=offset,
                        text="", complete=location.ended)
    data, next_offset = logfiles.read(location.directory, offset, limit)
    return LogChunk(
        job_id=job_id,
        attempt=location.attempt,
        replica=location.replica,
        offset=offset,
        next_offset=next_offset,
        text=data.decode("utf-8", errors="replace"),
        complete=location.ended and next_offset >= logfiles.size(location.directory),
    )


def read_log(
    database: Database,
    principal: auth.Principal,
    job_id: int,
    *,
    replica: str | None = None,
    attempt: int | None = None,
    offset: int = 0,
    limit: int = logfiles.MAX_CHUNK,
) -> LogChunk:
    """`replica` is a name such as worker-1 or a rank; default rank 0 of the latest attempt."""
    location = locate_log(database, principal, job_id, replica=replica, attempt=attempt)
    return read_located(job_id, location, offset, limit)


def located_size(location: LogLocation) -> int:
    """The log file's size now: a stat, cheap enough for a stream to ask on every poll."""
    return logfiles.size(location.directory) if location.directory is not None else 0
