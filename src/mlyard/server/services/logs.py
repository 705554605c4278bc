"""Replica logs by attempt and replica name, read by byte offset so clients can follow them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from mlyard.api.jobs import LogChunk
from mlyard.errors import NotFound
from mlyard.server import auth
from mlyard.server.store import logfiles
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobRow
from mlyard.spec import JobStatus


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
    auth.authorize(principal, auth.Action.READ, job_id=job_id)
    with database.transaction() as session:
        job = session.scalar(
            select(JobRow).where(JobRow.id == job_id)
            .options(selectinload(JobRow.attempts).selectinload(AttemptRow.replicas))
        )
        job = auth.visible_job(principal, job, job_id)
        if not job.attempts:
            return LogChunk(job_id=job_id, attempt=0, replica=replica or "", offset=offset, next_offset=offset,
                            text="", complete=JobStatus(job.status).is_terminal)
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
        directory = chosen.directory
        ended = chosen.state in ("exited", "lost") or JobStatus(job.status).is_terminal
        name, number = chosen.name, chosen_attempt.number
    data, next_offset = logfiles.read(directory, offset, limit)
    return LogChunk(
        job_id=job_id,
        attempt=number,
        replica=name,
        offset=offset,
        next_offset=next_offset,
        text=data.decode("utf-8", errors="replace"),
        complete=ended and next_offset >= logfiles.size(directory),
    )
