"""Who a token stands for, remembered for a moment (`server/auth_cache.py`): a change this
process commits to tokens, users or memberships acts on the very next request; a change made
past this process's sessions (another server on the database) within the lifetime; an expiry
on time whatever the lifetime."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select, text, update

from mlyard.errors import Unauthorized
from mlyard.server import auth
from mlyard.server.auth_cache import Principals
from mlyard.server.store.db import Database
from mlyard.server.store.rows import ApiTokenRow, ProjectMemberRow, UserRow


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    opened = Database.open(database_url)
    yield opened
    opened.close()


def new_user(database: Database, name: str, *, expires_at: float | None = None) -> str:
    """A user and an API token of theirs; the token's Authorization header."""
    with database.transaction() as session:
        user = UserRow(name=name, is_admin=False, created_at=time.time())
        session.add(user)
        session.flush()
        token = auth.issue_token(session, name="t", user_id=user.id, expires_at=expires_at)
    return f"Bearer {token}"


def revoke(database: Database, header: str) -> None:
    with database.transaction() as session:
        row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.token_hash == auth.hash_token(header[7:])))
        row.revoked_at = time.time()


def test_changes_committed_here_act_on_the_next_request(database: Database) -> None:
    principals = Principals(lifetime=3600)
    alice, bob = new_user(database, "alice"), new_user(database, "bob")
    first = auth.authenticate(database, alice, principals=principals)
    assert auth.remembered(principals, alice) is first, "kept, and found without the database"
    assert auth.authenticate(database, alice, principals=principals) is first

    with database.transaction() as session:
        session.add(ProjectMemberRow(project="default", user_id=first.user_id, role="member", created_at=time.time()))
    assert auth.remembered(principals, alice) is None
    assert auth.authenticate(database, alice, principals=principals).role_in("default") is auth.Role.MEMBER

    auth.authenticate(database, bob, principals=principals)
    revoke(database, bob)
    with pytest.raises(Unauthorized, match="revoked"):
        auth.authenticate(database, bob, principals=principals)

    auth.authenticate(database, alice, principals=principals)
    with database.transaction() as session:  # a statement, not a row the session tracks
        session.execute(update(UserRow).where(UserRow.name == "alice").values(is_admin=True))
    assert auth.authenticate(database, alice, principals=principals).is_admin


def test_changes_past_this_process_act_within_the_lifetime(database: Database) -> None:
    principals = Principals(lifetime=0.5)
    carol = new_user(database, "carol")
    auth.authenticate(database, carol, principals=principals)
    with database.engine.begin() as connection:  # as another server would, outside this process's sessions
        connection.execute(text("UPDATE api_tokens SET revoked_at = 1 WHERE token_hash = :hash"),
                           {"hash": auth.hash_token(carol[7:])})
    assert auth.authenticate(database, carol, principals=principals).name == "carol"
    time.sleep(0.6)
    with pytest.raises(Unauthorized, match="revoked"):
        auth.authenticate(database, carol, principals=principals)


def test_an_expiry_holds_on_time_and_failures_are_not_kept(database: Database) -> None:
    principals = Principals(lifetime=3600)
    dave = new_user(database, "dave", expires_at=time.time() + 0.5)
    auth.authenticate(database, dave, principals=principals)
    time.sleep(0.6)
    assert auth.remembered(principals, dave) is None
    with pytest.raises(Unauthorized, match="expired"):
        auth.authenticate(database, dave, principals=principals)
    with pytest.raises(Unauthorized, match="invalid"):
        auth.authenticate(database, "Bearer mly_nobody", principals=principals)
    assert auth.remembered(principals, "Bearer mly_nobody") is None
    assert auth.remembered(principals, "Basic something") is None


def test_a_savepoint_neither_forgets_before_the_commit_nor_drops_the_note(database: Database) -> None:
    """The audit log's row goes in a savepoint of the change's transaction: its release must not
    forget the answers before the change commits (a request in between would keep the old one),
    and a savepoint rolled back must not drop the note of the change."""
    principals = Principals(lifetime=3600)
    erin = new_user(database, "erin")
    auth.authenticate(database, erin, principals=principals)
    with database.transaction() as session:
        row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.token_hash == auth.hash_token(erin[7:])))
        row.revoked_at = time.time()
        session.flush()
        with session.begin_nested():
            session.execute(text("SELECT 1"))
        assert auth.remembered(principals, erin) is not None, "nothing is committed yet"
        with pytest.raises(RuntimeError), session.begin_nested():
            raise RuntimeError("a row that could not go in")
    with pytest.raises(Unauthorized, match="revoked"):
        auth.authenticate(database, erin, principals=principals)
