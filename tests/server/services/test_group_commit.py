"""Group commit of submissions (`services/group_commit.py`): requests that submit while another
one holds the writer are stored together in one transaction, each with its own answer and
its own audit row; a request whose job is refused fails alone. Real threads, a real database
(SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from conftest import wait_for
from sqlalchemy import event, func, select

from mlyard.backends.base import NodeDescription
from mlyard.errors import InvalidRequest
from mlyard.server import auth
from mlyard.server.services import jobs
from mlyard.server.services.audit import Event, add
from mlyard.server.services.group_commit import GroupCommit
from mlyard.server.services.job_submission import submission_groups
from mlyard.server.services.nodes import record_nodes
from mlyard.server.store.db import Database, riders
from mlyard.server.store.rows import AuditEventRow, JobEventRow, JobRevisionRow, JobRow
from mlyard.spec import JobSpec

ADMIN = auth.Principal(name="admin", user_id=None, is_admin=True)
WAITERS = 5


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    opened = Database.open(database_url)
    record_nodes(opened, "local", [NodeDescription(name="n1", address="127.0.0.1", cpu_ids=(0, 1),
                                                   memory_bytes=2**30)])
    yield opened
    opened.close()


class AuditRow:
    """A request's row riding on whatever transaction stores its jobs, as the audit log's does."""

    def __init__(self, actor: str):
        self.actor = actor
        self.event_id: int | None = None

    def add(self, session) -> None:
        if self.event_id is None:
            self.event_id = add(session, Event(at=time.time(), actor=self.actor, method="POST", route="/api/v1/jobs",
                                               target="/api/v1/jobs", status=201, address=None))

    def discard(self, session) -> None:
        self.event_id = None


def submitter(database: Database, name: str, outcomes: dict[str, object], queue: str = "default") -> threading.Thread:
    def submit() -> None:
        riders.set(AuditRow(name))
        spec = JobSpec.model_validate({"name": name, "command": ["true"], "queue": queue,
                                       "roles": [{"resources": {"cpu": 1, "memory": "64Mi"}}]})
        try:
            outcomes[name] = jobs.submit(database, ADMIN, spec, wake=lambda: None)
        except Exception as error:  # noqa: BLE001 - the test looks at it
            outcomes[name] = error
    return threading.Thread(target=submit, name=name)


def submit_while_held(database: Database, queues: dict[str, str]) -> dict[str, object]:
    """Submits the first job while the test holds the lock its transaction needs, then the
    rest while the first waits for it; releases, and returns each name's job or error."""
    groups = submission_groups(database)
    outcomes: dict[str, object] = {}
    names = list(queues)
    threads = [submitter(database, name, outcomes, queue) for name, queue in queues.items()]
    with database.transaction() as session:
        # Holds the revision counter's row (PostgreSQL) and this process's writer (SQLite).
        session.execute(select(JobRevisionRow).with_for_update()).all()
        before = groups.groups
        threads[0].start()
        assert wait_for(lambda: groups.groups == before + 1), f"{names[0]} never took its turn"
        for thread in threads[1:]:
            thread.start()
        assert wait_for(lambda: groups.waiting == len(threads) - 1), "the others never queued behind it"
    for thread in threads:
        thread.join(timeout=30)
    return outcomes


def stored_names(database: Database) -> dict[str, int]:
    with database.reading() as session:
        events = dict(session.execute(select(JobEventRow.job_id, func.count()).group_by(JobEventRow.job_id)).all())
        return {name: events.get(job_id, 0) for job_id, name in session.execute(select(JobRow.id, JobRow.name))}


def audited(database: Database) -> list[str]:
    with database.reading() as session:
        return sorted(session.scalars(select(AuditEventRow.actor)))


def test_submissions_waiting_for_the_writer_are_stored_in_one_transaction(database: Database) -> None:
    groups = submission_groups(database)
    names = [f"job-{n}" for n in range(WAITERS + 1)]
    before = groups.groups
    outcomes = submit_while_held(database, dict.fromkeys(names, "default"))
    assert groups.groups == before + 2, "the first alone, then every one that waited behind it together"
    assert sorted(outcome.name for outcome in outcomes.values()) == names
    assert len({outcome.id for outcome in outcomes.values()}) == len(names)
    assert stored_names(database) == dict.fromkeys(names, 1), "each job once, with its submission event"
    assert audited(database) == names, "each request's own row went in with its job"


def test_a_refused_job_fails_its_own_request_only(database: Database) -> None:
    groups = submission_groups(database)
    queues = {f"good-{n}": "default" for n in range(WAITERS)}
    queues["bad"] = "no-such-queue"
    queues["last"] = "default"
    before = groups.groups
    outcomes = submit_while_held(database, queues)
    error = outcomes.pop("bad")
    assert isinstance(error, InvalidRequest) and error.field == "queue" and "no-such-queue" in error.message
    assert all(outcome.name == name for name, outcome in outcomes.items())
    # The first alone; a group that failed; each of its requests again, alone.
    assert groups.groups == before + 2 + len(queues) - 1
    good = sorted(outcomes)
    assert stored_names(database) == dict.fromkeys(good, 1), "nothing of the refused job, the rest once each"
    assert audited(database) == good, "the failed group's rows went with it; each request's went in again once"


def test_an_interrupted_turn_still_answers_every_request_it_took() -> None:
    release, groups_seen = threading.Event(), []

    def store(works):
        groups_seen.append(list(works))
        if works == ["first"]:
            release.wait(timeout=30)
            return ["stored first"]
        raise KeyboardInterrupt  # what no request's own error would be

    group: GroupCommit[str, str] = GroupCommit(store)
    answers: dict[str, object] = {}

    def run(work: str) -> None:
        try:
            answers[work] = group.run(work)
        except BaseException as error:  # noqa: BLE001 - the test looks at it
            answers[work] = error

    threads = [threading.Thread(target=run, args=(work,)) for work in ("first", "second", "third")]
    threads[0].start()
    assert wait_for(lambda: groups_seen == [["first"]])
    for thread in threads[1:]:
        thread.start()
    assert wait_for(lambda: group.waiting == 2)
    release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "a request of the interrupted turn was left waiting"
    assert answers["first"] == "stored first" and sorted(groups_seen[1]) == ["second", "third"]
    # The thread whose turn it was sees the interrupt; the other one is told its request was cut off.
    kinds = sorted(type(answers[work]).__name__ for work in ("second", "third"))
    assert kinds == ["KeyboardInterrupt", "RuntimeError"]
    assert any("interrupted" in str(answers[work]) for work in ("second", "third"))


def test_a_submission_on_postgresql_is_few_round_trips(database: Database) -> None:
    """Every statement is a round trip on PostgreSQL: a job's checks read its queue with its
    project's existence in one, the nodes in another; its events go in with the revision taken
    and stamped. Beside those: BEGIN and COMMIT, the insert of the job and its audit row."""
    if database.engine.dialect.name != "postgresql":
        pytest.skip("SQLite runs in the process: its statements cost no round trip")
    statements: list[str] = []
    event.listen(database.engine, "before_cursor_execute",
                 lambda _connection, _cursor, statement, *_rest: statements.append(" ".join(statement.split())))
    riders.set(AuditRow("alice"))
    spec = JobSpec.model_validate({"name": "one", "command": ["true"], "roles": [{"resources": {"cpu": 1}}]})
    submitted = jobs.submit(database, ADMIN, spec, wake=lambda: None)
    assert [statement.split()[0] for statement in statements] == [
        "WITH", "SELECT", "INSERT", "WITH", "INSERT"], statements
    assert "FROM queues" in statements[0] and "FROM projects" in statements[0] and "FOR SHARE" in statements[0]
    assert "job_revisions" in statements[3] and "INSERT INTO job_events" in statements[3]
    with database.reading() as session:
        revision = session.scalar(select(JobRevisionRow.value))
        assert session.scalar(select(JobRow.revision).where(JobRow.id == submitted.id)) == revision > 0
        assert session.scalar(select(JobEventRow.message).where(JobEventRow.job_id == submitted.id)) == \
            "submitted by admin"
