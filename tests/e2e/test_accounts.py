"""Users, passwords, logins and tokens through the CLI and the API of a real server."""

from __future__ import annotations

import itertools
import json
import stat
import time

import httpx
import pytest
from conftest import RunningServer

from mlyard.client import Client, ClientError

_names = itertools.count(1)


def new_user(server: RunningServer, password: str = "correct horse 1", *options: str) -> str:
    name = f"user{next(_names)}-{server.port}"
    result = server.cli("users", "add", name, "--password-stdin", "--project", "default", *options, check=True,
                        input=f"{password}\n")
    assert f"Added user {name}, member of default" in result.stdout
    return name


def log_in(server: RunningServer, user: str, password: str) -> str:
    with httpx.Client(base_url=f"{server.url}/api/v1") as http:
        answer = http.post("/login", json={"user": user, "password": password})
    assert answer.status_code == 201, answer.text
    return answer.json()["token"]


def test_a_user_logs_in_with_the_cli_and_acts_as_themselves_until_logging_out(server: RunningServer) -> None:
    user = new_user(server)
    result = server.cli("login", "--user", user, "--password-stdin", input="correct horse 1\n", check=True)
    assert f"Logged in to {server.url} as {user}" in result.stdout
    stored = server.home / "cli-config" / "credentials.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text())[server.url]["user"] == user
    assert server.cli_json("whoami")["name"] == user
    job = server.cli_json("run", "--no-code", "--name", "mine", "--", "true")
    assert job["owner"] == user
    assert server.cli("users").returncode == 1  # not an administrator
    assert "not an administrator" in server.cli("users").stderr
    token_id = json.loads(stored.read_text())[server.url]["token_id"]
    assert server.cli("logout", check=True).stdout.startswith(f"Logged out of {server.url}")
    # Back to the administrator's token of MLYARD_HOME; the login's token is revoked on the server.
    assert server.cli_json("whoami")["name"] == "admin"
    assert token_id not in [token["id"] for token in server.cli_json("tokens", "--all")]


def test_a_wrong_password_is_refused_and_repeated_failures_are_throttled(server: RunningServer) -> None:
    user = new_user(server)
    refused = server.cli("login", "--user", user, "--password-stdin", input="not the password\n")
    assert refused.returncode == 1
    assert "wrong user name or password" in refused.stderr and "Traceback" not in refused.stderr
    with httpx.Client(base_url=f"{server.url}/api/v1") as http:
        codes = [http.post("/login", json={"user": user, "password": f"guess {n}"}).status_code for n in range(2)]
        assert codes == [401] * 2  # the CLI's attempt was the first of three free ones
        throttled = http.post("/login", json={"user": user, "password": "correct horse 1"})
        assert throttled.status_code == 429  # even the right password, for a second from this address
        assert 1 <= int(throttled.headers["Retry-After"]) <= 300
        assert "too many failed logins" in throttled.json()["message"]
        unknown = http.post("/login", json={"user": "nobody-at-all", "password": "whatever1"})
        assert unknown.status_code == 401 and unknown.json()["message"] == "wrong user name or password"
        assert http.post("/login", json={"user": user}).status_code == 422


def test_tokens_are_shown_once_listed_without_secrets_and_revoked_at_once(server: RunningServer) -> None:
    user = new_user(server)
    with Client(server.url, log_in(server, user, "correct horse 1")) as session:
        issued = session.create_token("ci", expires_in=3600)
        listed = session.tokens()
        assert {token.name for token in listed} == {"mlyard login", "ci"}
        assert issued.token not in json.dumps([token.model_dump() for token in listed])
        assert 3590 < issued.info.expires_at - time.time() <= 3600
        with Client(server.url, issued.token) as ci:
            assert ci.whoami().name == user
            session.revoke_token(issued.info.id)
            with pytest.raises(ClientError) as caught:
                ci.whoami()
            assert caught.value.status == 401 and "revoked" in caught.value.message
        assert [token.name for token in session.tokens()] == ["mlyard login"]


def test_an_expired_token_stops_working(server: RunningServer) -> None:
    user = new_user(server)
    with Client(server.url, log_in(server, user, "correct horse 1")) as session:
        short = session.create_token("short", expires_in=1)
    time.sleep(1.2)
    with Client(server.url, short.token) as client, pytest.raises(ClientError) as caught:
        client.whoami()
    assert caught.value.status == 401 and "expired" in caught.value.message
    assert server.cli("tokens", "create", "x", "--expires", "2y").returncode == 2


def test_people_manage_only_their_own_tokens_and_passwords(server: RunningServer) -> None:
    alice, bob = new_user(server), new_user(server)
    with Client(server.url, log_in(server, alice, "correct horse 1")) as as_alice, \
            Client(server.url, log_in(server, bob, "correct horse 1")) as as_bob:
        token = as_alice.create_token("alice's")
        with pytest.raises(ClientError) as caught:
            as_bob.revoke_token(token.info.id)
        assert caught.value.status == 404  # not even told it exists
        with pytest.raises(ClientError) as caught:
            as_bob.set_password(alice, "taken over 123")
        assert caught.value.status == 403
        with pytest.raises(ClientError) as caught:
            as_bob.set_password(bob, "a new password", current_password="wrong one")
        assert caught.value.status == 403 and caught.value.details[0].field == "current_password"
        as_bob.set_password(bob, "a new password", current_password="correct horse 1")
        with pytest.raises(ClientError) as caught:
            as_bob.create_user("mallory")
        assert caught.value.status == 403
    log_in(server, bob, "a new password")
    with server.client() as admin:
        admin.set_password(alice, "reset by admin")  # an administrator needs no current password
        assert {user.name for user in admin.users()} >= {"admin", alice, bob}
        with pytest.raises(ClientError) as caught:
            admin.create_user(alice, password="whatever123")
        assert caught.value.status == 409
        with pytest.raises(ClientError) as caught:
            admin.create_user("Bad Name", password="whatever123")
        assert caught.value.status == 422 and caught.value.details[0].field == "name"
    log_in(server, alice, "reset by admin")
