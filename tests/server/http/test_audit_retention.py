"""The audit log's recorder on a small app of its own, and its retention: rows older than
MLYARD_AUDIT_RETENTION go, at most once an hour per process, and a database that cannot take
a row never costs a request its answer."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, HTTPException, Request, Response
from sqlalchemy import event, select, text
from sqlalchemy.orm import Session

from mlyard.paths import Paths
from mlyard.errors import MlyardError
from mlyard.server.http.audit import AuditRecorder
from mlyard.server.auth import Principal
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AuditEventRow, ProjectRow
from mlyard.server.services import audit
from mlyard.server.settings import DEFAULT_AUDIT_RETENTION, ServerSettings

DAY = 86400.0


@pytest.fixture
def database(database_url: str):
    opened = Database.open(database_url)
    yield opened
    opened.close()


def old_event(at: float, target: str = "/api/v1/jobs") -> audit.Event:
    return audit.Event(at=at, actor="alice", method="POST", route="/api/v1/jobs", target=target, status=201,
                       address="10.0.0.7")


def targets(database: Database) -> list[str]:
    with database.reading() as session:
        return list(session.scalars(select(AuditEventRow.target).order_by(AuditEventRow.id)))


class Caller:
    """Requests straight into the app, in this process."""

    def __init__(self, app: FastAPI):
        self.app = app

    def request(self, method: str, path: str) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, client=("10.1.2.3", 4567))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
                return await client.request(method, path)

        return asyncio.run(send())

    def post(self, path: str) -> httpx.Response:
        return self.request("POST", path)


def fail_the_commit(session: Session) -> None:
    if not session.in_nested_transaction():  # a savepoint's release comes here too
        raise RuntimeError("the commit failed")


def small_app(database: Database, tmp_path: Path, *, retention: float, prune_every: float = 3600.0) -> FastAPI:
    app = FastAPI()
    app.add_middleware(AuditRecorder, prune_every=prune_every)
    app.state.database = database
    app.state.settings = ServerSettings(paths=Paths(tmp_path), audit_retention_seconds=retention)

    @app.post("/things/{thing}")
    def change(thing: str, request: Request) -> dict[str, str]:
        request.state.principal = Principal(name="alice", user_id=1)
        return {"changed": thing}

    @app.get("/things/{thing}")
    def read(thing: str) -> dict[str, str]:
        return {"read": thing}

    @app.post("/projects/{name}", status_code=201)
    def add_project(name: str, request: Request, then: str = "answer") -> Response:
        request.state.principal = Principal(name="alice", user_id=1)
        if then == "look":  # a write transaction that only reads (as a login looks its user up), then a refusal
            with database.transaction() as session:
                session.scalar(select(ProjectRow).where(ProjectRow.name == name))
            raise HTTPException(401, "wrong password")
        if then == "retry":  # a commit that fails, and a second try that commits (as a conflict retried)
            with contextlib.suppress(RuntimeError), database.transaction() as session:
                session.add(ProjectRow(name=name, created_at=time.time()))
                event.listen(session, "before_commit", fail_the_commit)
        with database.transaction() as session:
            session.add(ProjectRow(name=name, created_at=time.time()))
            if then == "refuse":
                raise HTTPException(409, "refused before the commit")
        if then == "fail":
            raise RuntimeError("failed after the commit")
        return Response(status_code=202) if then == "accept" else Response(status_code=201)

    return app


def test_prune_deletes_only_what_is_older_than_the_cut(database: Database) -> None:
    now = time.time()
    audit.record(database, old_event(now - 400 * DAY, "/ancient"))
    audit.record(database, old_event(now - 364 * DAY, "/old-but-kept"))
    audit.record(database, old_event(now, "/fresh"))
    assert audit.prune(database, now - 365 * DAY) == 1
    assert targets(database) == ["/old-but-kept", "/fresh"]
    assert audit.prune(database, now - 365 * DAY) == 0


def test_the_recorder_writes_changes_and_prunes_at_most_once_per_period(database: Database, tmp_path: Path) -> None:
    now = time.time()
    audit.record(database, old_event(now - 40 * DAY, "/expired-first"))
    client = Caller(small_app(database, tmp_path, retention=30 * DAY))
    assert client.post("/things/a?x=1").json() == {"changed": "a"}
    assert client.request("GET", "/things/b").status_code == 200  # a read: not recorded
    assert client.request("DELETE", "/nowhere").status_code == 404
    with database.reading() as session:
        rows = list(session.scalars(select(AuditEventRow).order_by(AuditEventRow.id)))
    assert [(row.actor, row.method, row.route, row.target, row.status, row.address, row.details) for row in rows] == [
        ("alice", "POST", "/things/{thing}", "/things/a", 200, "10.1.2.3", {"query": "x=1"}),
        ("anonymous", "DELETE", "/nowhere", "/nowhere", 404, "10.1.2.3", None),
    ]
    # Within the hour a new expired row stays: the first request pruned, the next ones do not.
    audit.record(database, old_event(now - 40 * DAY, "/expired-later"))
    client.post("/things/c")
    assert "/expired-later" in targets(database)


def test_prune_every_period_and_never_with_zero_retention(database: Database, tmp_path: Path) -> None:
    now = time.time()
    audit.record(database, old_event(now - 40 * DAY, "/expired"))
    Caller(small_app(database, tmp_path, retention=0.0, prune_every=0.0)).post("/things/a")
    assert "/expired" in targets(database)
    eager = Caller(small_app(database, tmp_path, retention=30 * DAY, prune_every=0.0))
    eager.post("/things/a")
    assert "/expired" not in targets(database)
    audit.record(database, old_event(now - 40 * DAY, "/expired-again"))
    eager.post("/things/b")
    assert "/expired-again" not in targets(database)


def test_paths_too_long_or_with_nul_are_recorded_cut_and_cleaned(database: Database, tmp_path: Path) -> None:
    caller = Caller(small_app(database, tmp_path, retention=30 * DAY))
    assert caller.post("/things/a%00b").status_code == 200
    assert caller.post("/" + "x" * 300).status_code == 404
    assert targets(database) == ["/things/a\ufffdb", "/" + "x" * 254]


def rows(database: Database) -> list[tuple[str, int]]:
    with database.reading() as session:
        return [(row.target, row.status) for row in session.scalars(select(AuditEventRow).order_by(AuditEventRow.id))]


def projects(database: Database) -> set[str]:
    with database.reading() as session:
        return set(session.scalars(select(ProjectRow.name)))


def test_a_change_and_its_row_commit_together_and_the_row_says_how_it_ended(database: Database, tmp_path: Path) -> None:
    caller = Caller(small_app(database, tmp_path, retention=30 * DAY))
    assert caller.post("/projects/kept").status_code == 201
    with database.reading() as session:
        row = session.scalar(select(AuditEventRow).where(AuditEventRow.target == "/projects/kept"))
        assert (row.actor, row.route, row.status) == ("alice", "/projects/{name}", 201)
    assert caller.post("/projects/refused?then=refuse").status_code == 409
    assert caller.post("/projects/accepted?then=accept").status_code == 202
    assert caller.post("/projects/retried?then=retry").status_code == 201
    with pytest.raises(RuntimeError):
        caller.post("/projects/failed?then=fail")
    assert rows(database) == [("/projects/kept", 201), ("/projects/refused", 409), ("/projects/accepted", 202),
                              ("/projects/retried", 201), ("/projects/failed", 500)], "one row each, with the status that went out"
    assert projects(database) == {"default", "kept", "accepted", "retried", "failed"}


def test_a_transaction_that_changed_nothing_takes_no_row(database: Database, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def cannot_correct(*_args) -> None:
        raise RuntimeError("corrections fail here")
    monkeypatch.setattr(audit, "correct_status", cannot_correct)  # a row written as a success would stay one
    assert Caller(small_app(database, tmp_path, retention=30 * DAY)).post("/projects/x?then=look").status_code == 401
    assert rows(database) == [("/projects/x", 401)]


def test_a_database_that_cannot_record_still_lets_the_answer_out(database: Database, tmp_path: Path) -> None:
    with database.transaction() as session:
        session.execute(text("DROP TABLE audit_events"))
    caller = Caller(small_app(database, tmp_path, retention=30 * DAY))
    answer = caller.post("/things/a")
    assert answer.status_code == 200 and answer.json() == {"changed": "a"}
    assert caller.post("/projects/changed").status_code == 201
    assert "changed" in projects(database), "the change commits without its row"


def test_the_retention_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLYARD_AUDIT_RETENTION", raising=False)
    assert ServerSettings.from_environment().audit_retention_seconds == DEFAULT_AUDIT_RETENTION == 365 * DAY
    monkeypatch.setenv("MLYARD_AUDIT_RETENTION", "30d")
    assert ServerSettings.from_environment().audit_retention_seconds == 30 * DAY
    monkeypatch.setenv("MLYARD_AUDIT_RETENTION", "0")
    assert ServerSettings.from_environment().audit_retention_seconds == 0.0
    monkeypatch.setenv("MLYARD_AUDIT_RETENTION", "a year")
    with pytest.raises(MlyardError, match="MLYARD_AUDIT_RETENTION"):
        ServerSettings.from_environment()
