"""Usage accounting on crafted attempts, through the real service and a real database (SQLite
and PostgreSQL): midnight splits, running attempts, window clipping, grouping, who sees what."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from mlyard.errors import Forbidden, InvalidRequest
from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobRow, ReplicaRow, UserRow
from mlyard.server.services import usage

HOUR = 3600.0
MIDNIGHT = datetime(2026, 11, 2, tzinfo=UTC).timestamp()
"""2026-11-02 00:00 UTC: the attempts below are placed around it."""
NOW = MIDNIGHT + 12 * HOUR
ADMIN = auth.Principal(name="admin", user_id=None, is_admin=True)


def add_job(session, *, owner: UserRow | None, project: str, attempts: list[tuple[float | None, float | None]],
            replicas: list[tuple[int, int]]) -> JobRow:
    """A job whose attempts ran over (launched_at, finished_at), each with replicas of (cores, GPUs)."""
    job = JobRow(name="j", project=project, queue="default", priority=0, owner_id=owner.id if owner else None,
                 spec={}, status="RUNNING", attempt_count=len(attempts), submitted_at=MIDNIGHT - 100 * HOUR,
                 updated_at=NOW)
    session.add(job)
    session.flush()
    for number, (launched, finished) in enumerate(attempts, start=1):
        attempt = AttemptRow(job_id=job.id, number=number, created_at=(launched or MIDNIGHT) - 1,
                             launched_at=launched, finished_at=finished)
        session.add(attempt)
        session.flush()
        for rank, (cores, gpus) in enumerate(replicas):
            session.add(ReplicaRow(
                attempt_id=attempt.id, job_id=job.id, role="worker", index=rank, rank=rank, node="n1",
                cpu_ids=list(range(rank * cores, (rank + 1) * cores)), gpu_ids=list(range(rank * gpus, (rank + 1) * gpus)),
                memory_bytes=1 << 30, directory=f"/runs/{job.id}/{number}/worker-{rank}", state="exited",
            ))
    return job


@pytest.fixture
def crafted(database_url: str) -> Iterator[tuple[Database, dict[str, UserRow]]]:
    database = Database.open(database_url)
    with database.transaction() as session:
        users = {name: UserRow(name=name, is_admin=False, created_at=0.0) for name in ("alice", "bob", "carol")}
        session.add_all(users.values())
        session.flush()
        # alice: 2 replicas of 2 cores + 1 GPU. Attempt 1 crosses midnight (22:00 → 01:00);
        # attempt 2 is still running since 10:00 (two hours by NOW).
        add_job(session, owner=users["alice"], project="vision", replicas=[(2, 1), (2, 1)],
                attempts=[(MIDNIGHT - 2 * HOUR, MIDNIGHT + HOUR), (MIDNIGHT + 10 * HOUR, None)])
        # bob: one core from Oct 31 18:00 to Nov 1 04:00; the default window starts Nov 1 00:00.
        add_job(session, owner=users["bob"], project="vision", replicas=[(1, 0)],
                attempts=[(MIDNIGHT - 30 * HOUR, MIDNIGHT - 20 * HOUR)])
        # carol: none of these held anything inside the window.
        add_job(session, owner=users["carol"], project="nlp", replicas=[(4, 2)],
                attempts=[(None, MIDNIGHT - HOUR), (MIDNIGHT - 50 * HOUR, MIDNIGHT - 40 * HOUR),
                          (MIDNIGHT + 30 * HOUR, None)])
        # No owner: 3 cores for half an hour in the afternoon.
        add_job(session, owner=None, project="nlp", replicas=[(3, 0)],
                attempts=[(MIDNIGHT + 3 * HOUR, MIDNIGHT + 3.5 * HOUR)])
    try:
        yield database, users
    finally:
        database.close()


def days(entries) -> dict[str, tuple[float, float]]:
    return {entry.day: (round(entry.gpu_hours, 9), round(entry.cpu_hours, 9)) for entry in entries}


def test_day_pieces_split_at_utc_midnight() -> None:
    assert usage.day_pieces(MIDNIGHT - HOUR, MIDNIGHT + 2 * HOUR) == [(MIDNIGHT - 86400, HOUR), (MIDNIGHT, 2 * HOUR)]
    assert usage.day_pieces(MIDNIGHT, MIDNIGHT + 86400) == [(MIDNIGHT, 86400.0)]
    assert usage.day_pieces(MIDNIGHT, MIDNIGHT) == []
    assert len(usage.day_pieces(MIDNIGHT - 1, MIDNIGHT + 2 * 86400 + 1)) == 4


def test_usage_per_user_splits_midnight_counts_running_attempts_and_clips_to_the_window(crafted) -> None:
    database, _ = crafted
    report = usage.report(database, ADMIN, since=MIDNIGHT - 24 * HOUR, until=MIDNIGHT + 24 * HOUR, now=NOW)
    assert report.everyone and report.by == "user"
    rows = {row.key: row for row in report.rows}
    assert [row.key for row in report.rows] == ["alice", "bob", usage.NO_OWNER], "most GPU-hours first"
    # alice: 3 h (2 before midnight, 1 after) + 2 h running, × 2 GPUs and 4 cores.
    assert (rows["alice"].gpu_hours, rows["alice"].cpu_hours) == (pytest.approx(10), pytest.approx(20))
    assert days(rows["alice"].days) == {"2026-11-01": (4, 8), "2026-11-02": (6, 12)}
    assert rows["alice"].jobs == 1
    # bob: 10 h, of which the 4 h after the window's start count.
    assert days(rows["bob"].days) == {"2026-11-01": (0, 4)}
    assert days(rows[usage.NO_OWNER].days) == {"2026-11-02": (0, 1.5)}
    assert "carol" not in rows, "never launched, ended before the window, or started after it"
    assert days(report.days) == {"2026-11-01": (4, 12), "2026-11-02": (6, 13.5)}
    assert (report.total.gpu_hours, report.total.cpu_hours) == (pytest.approx(10), pytest.approx(25.5))


def test_a_running_attempt_counts_until_now_and_a_window_edge_cuts_attempts(crafted) -> None:
    database, _ = crafted
    later = usage.report(database, ADMIN, since=MIDNIGHT, until=MIDNIGHT + 24 * HOUR, now=NOW + HOUR)
    alice = next(row for row in later.rows if row.key == "alice")
    assert (alice.gpu_hours, alice.cpu_hours) == (pytest.approx(2 + 6), pytest.approx(4 + 12))

    # 23:00 → 00:30 cuts alice's first attempt on both sides: 1 h before midnight, 0.5 h after.
    narrow = usage.report(database, ADMIN, since=MIDNIGHT - HOUR, until=MIDNIGHT + 0.5 * HOUR, now=NOW)
    assert [row.key for row in narrow.rows] == ["alice"]
    assert days(narrow.rows[0].days) == {"2026-11-01": (2, 4), "2026-11-02": (1, 2)}

    # An `until` before now also cuts a running attempt.
    cut = usage.report(database, ADMIN, since=MIDNIGHT + 10.5 * HOUR, until=MIDNIGHT + 11 * HOUR, now=NOW)
    assert days(cut.days) == {"2026-11-02": (1, 2)}

    default = usage.report(database, ADMIN, now=NOW)
    assert (default.since, default.until) == (NOW - 7 * 86400, NOW)


def test_usage_per_project_adds_up_its_users(crafted) -> None:
    database, _ = crafted
    report = usage.report(database, ADMIN, since=MIDNIGHT - 24 * HOUR, until=MIDNIGHT + 24 * HOUR, by="project",
                          now=NOW)
    rows = {row.key: row for row in report.rows}
    assert set(rows) == {"vision", "nlp"}
    assert (rows["vision"].jobs, rows["vision"].gpu_hours, rows["vision"].cpu_hours) == (2, pytest.approx(10), pytest.approx(24))
    assert (rows["nlp"].jobs, rows["nlp"].gpu_hours, rows["nlp"].cpu_hours) == (1, 0, pytest.approx(1.5))


def test_users_see_only_their_own_usage_and_job_tokens_none(crafted) -> None:
    database, users = crafted
    bob = auth.Principal(name="bob", user_id=users["bob"].id)
    report = usage.report(database, bob, since=MIDNIGHT - 24 * HOUR, until=MIDNIGHT + 24 * HOUR, by="project",
                          now=NOW)
    assert not report.everyone
    assert [(row.key, row.cpu_hours) for row in report.rows] == [("vision", pytest.approx(4))]
    assert report.total.cpu_hours == pytest.approx(4)
    with pytest.raises(Forbidden):
        usage.report(database, auth.Principal(name="job-1", user_id=users["bob"].id, job_id=1), now=NOW)
    with pytest.raises(InvalidRequest, match="window is empty"):
        usage.report(database, ADMIN, since=NOW, until=NOW - 1, now=NOW)
