"""The audit log of a real server: every request that changes something, or tries to, through
the API or the web pages, leaves one row; reading requests leave none; administrators read it
with `GET /api/v1/audit` and `mlyard audit`."""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import subprocess

import httpx
import pytest
from conftest import MLYARD, RunningServer, wait_until

from mlyard.api.audit import AuditEvent
from mlyard.client import ClientError
from mlyard.spec import JobStatus
from web_login import log_in_form, web_session

HOLD = {"quota": {"gpu": 0, "cpu": 0, "memory": 0}, "borrow_limit": {"gpu": 0, "cpu": 0, "memory": 0}}
"""A queue whose jobs wait: a submission stays cancellable."""
_names = itertools.count(1)


def newest_id(server: RunningServer) -> int:
    with server.client() as client:
        events = client.audit(limit=1).events
    return events[0].id if events else 0


def events_after(server: RunningServer, marker: int) -> list[AuditEvent]:
    """Every event recorded after `marker`, oldest first."""
    with server.client() as client:
        return sorted((event for event in client.audit(limit=1000).events if event.id > marker),
                      key=lambda event: event.id)


def summary(event: AuditEvent) -> tuple:
    return event.actor, event.method, event.route, event.target, event.status, event.address


def new_user(server: RunningServer) -> tuple[str, str]:
    """A user who is not an administrator, and a token of theirs."""
    name = f"auditee{next(_names)}-{server.port}"
    server.cli("users", "add", name, "--password-stdin", input="pass word 1\n", check=True)
    with httpx.Client(base_url=f"{server.url}/api/v1") as http:
        answer = http.post("/login", json={"user": name, "password": "pass word 1"})
    assert answer.status_code == 201, answer.text
    return name, answer.json()["token"]


def api(server: RunningServer, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers)


def test_submitting_cancelling_and_setting_a_queue_each_leave_one_row(server: RunningServer) -> None:
    queue = f"audit-hold-{server.port}"
    marker = newest_id(server)
    with server.client() as client:
        client.set_queue(queue, HOLD)
        job = client.submit({"name": "audited", "command": ["true"], "queue": queue,
                             "roles": [{"resources": {"memory": "64Mi"}}]})
        client.cancel(job.id)
        with pytest.raises(ClientError, match="already ended"):
            client.cancel(job.id)  # refused, and recorded all the same
    recorded = events_after(server, marker)
    assert [summary(event) for event in recorded] == [
        ("admin", "PUT", "/api/v1/queues/{name}", f"/api/v1/queues/{queue}", 200, "127.0.0.1"),
        ("admin", "POST", "/api/v1/jobs", "/api/v1/jobs", 201, "127.0.0.1"),
        ("admin", "POST", "/api/v1/jobs/{job_id}/cancel", f"/api/v1/jobs/{job.id}/cancel", 200, "127.0.0.1"),
        ("admin", "POST", "/api/v1/jobs/{job_id}/cancel", f"/api/v1/jobs/{job.id}/cancel", 409, "127.0.0.1"),
    ]
    assert all(abs(event.at - recorded[0].at) < 60 for event in recorded)
    assert recorded[0].details is None


def test_a_failed_login_a_refusal_and_an_unknown_path_are_recorded_too(server: RunningServer) -> None:
    user, token = new_user(server)
    marker = newest_id(server)
    with api(server) as anonymous:
        assert anonymous.post("/login", json={"user": user, "password": "not it at all"}).status_code == 401
        assert anonymous.post("/no-such-thing", params={"token": "s3cret", "x": "1"}).status_code == 404
    with api(server, token) as http:
        assert http.put("/queues/not-mine", json={}).status_code == 403
        assert http.post("/users", json={"name": "mallory", "admin": True}).status_code == 403
    recorded = events_after(server, marker)
    assert [summary(event) for event in recorded] == [
        ("anonymous", "POST", "/api/v1/login", "/api/v1/login", 401, "127.0.0.1"),
        ("anonymous", "POST", "/api/v1/no-such-thing", "/api/v1/no-such-thing", 404, "127.0.0.1"),
        (user, "PUT", "/api/v1/queues/{name}", "/api/v1/queues/not-mine", 403, "127.0.0.1"),
        (user, "POST", "/api/v1/users", "/api/v1/users", 403, "127.0.0.1"),
    ]
    # The query string is kept, but never a value that looks like a secret.
    assert recorded[1].details == {"query": "token=%2A%2A%2A&x=1"}
    assert "s3cret" not in json.dumps([event.model_dump() for event in recorded])


def test_reading_and_reporting_metrics_leave_no_row(server: RunningServer) -> None:
    with server.client() as client, httpx.Client(base_url=server.url) as browser:
        job = client.submit({"name": "measured", "command": ["sleep", "120"],
                             "roles": [{"resources": {"cpu": 1, "memory": "64Mi"}}]})
        wait_until(lambda: client.job(job.id).status == JobStatus.RUNNING, 60, "the job to run")
        web_session(browser, server.token())
        marker = newest_id(server)
        client.report(job.id, 1, {"loss": 0.5})  # measurements, many a minute: not actions
        assert client.metrics(job.id).points
        client.jobs(include_finished=True)
        client.queues()
        client.whoami()
        client.audit()
        assert browser.get("/jobs").status_code == 200
        assert browser.head("/api/v1/health").status_code in (200, 405)
        assert events_after(server, marker) == []
        client.cancel(job.id)


def test_the_web_pages_forms_are_recorded_with_the_logged_in_user(server: RunningServer) -> None:
    with server.client() as client:
        queue = f"audit-web-{server.port}"
        client.set_queue(queue, HOLD)
        job = client.submit({"name": "web-audited", "command": ["true"], "queue": queue,
                             "roles": [{"resources": {"memory": "64Mi"}}]})
    token = server.token()
    marker = newest_id(server)
    with httpx.Client(base_url=server.url) as browser:
        assert log_in_form(browser, user="admin", password="wrong password").status_code == 401
        csrf = web_session(browser, token)
        assert browser.post(f"/jobs/{job.id}/cancel", data={"csrf": "0" * 64}).status_code == 403
        assert browser.post(f"/jobs/{job.id}/cancel", data={"csrf": csrf}).status_code == 303
        assert browser.post("/logout", data={"csrf": csrf}).status_code == 303
    assert [summary(event) for event in events_after(server, marker)] == [
        ("anonymous", "POST", "/login", "/login", 401, "127.0.0.1"),
        ("anonymous", "POST", "/login", "/login", 303, "127.0.0.1"),
        ("admin", "POST", "/jobs/{job_id}/cancel", f"/jobs/{job.id}/cancel", 403, "127.0.0.1"),
        ("admin", "POST", "/jobs/{job_id}/cancel", f"/jobs/{job.id}/cancel", 303, "127.0.0.1"),
        ("admin", "POST", "/logout", "/logout", 303, "127.0.0.1"),
    ]


def test_only_administrators_read_the_log(server: RunningServer) -> None:
    user, token = new_user(server)
    with api(server, token) as http:
        refused = http.get("/audit")
    assert refused.status_code == 403 and "not an administrator" in refused.json()["message"]
    with api(server) as anonymous:
        assert anonymous.get("/audit").status_code == 401
    # The CLI takes the token from MLYARD_TOKEN before the administrator's token file.
    result = subprocess.run([MLYARD, "audit"], env={**server.env, "MLYARD_TOKEN": token}, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert f"{user} is not an administrator" in result.stderr and "Traceback" not in result.stderr


def test_the_cli_shows_the_log_as_a_table_and_as_json(server: RunningServer) -> None:
    queue = f"audit-cli-{server.port}"
    with server.client() as client:
        client.set_queue(queue, HOLD)
    listed = server.cli_json("audit", "--actor", "admin", "--since", "1d")
    assert listed["events"] and {event["actor"] for event in listed["events"]} == {"admin"}
    assert listed["events"][0]["target"] == f"/api/v1/queues/{queue}"
    assert listed["events"][0]["route"] == "/api/v1/queues/{name}"
    table = server.cli("audit", "--route", queue, check=True).stdout
    assert "ACTOR" in table and "admin" in table and "PUT" in table and "127.0.0.1" in table
    assert f"/api/v1/queues/{queue}" in table and "200" in table
    assert server.cli_json("audit", "--route", queue, "--since", "2000-01-01", "--until", "2000-01-02")["events"] == []
    assert "No audit events match." in server.cli("audit", "--actor", "nobody-at-all", check=True).stdout
    unreadable = server.cli("audit", "--since", "yesterday-ish")
    assert unreadable.returncode == 2 and "--since: cannot read 'yesterday-ish'" in unreadable.stderr


def test_pages_go_back_in_time_with_before_id(server: RunningServer) -> None:
    queue = f"audit-pages-{server.port}"
    with server.client() as client:
        for weight in (1, 2, 3):
            client.set_queue(queue, {"weight": weight})
        first = client.audit(route=queue, limit=2)
        assert [event.id for event in first.events] == sorted((event.id for event in first.events), reverse=True)
        assert len(first.events) == 2 and first.next_before_id == first.events[-1].id
        second = client.audit(route=queue, limit=2, before_id=first.next_before_id)
        assert len(second.events) == 1 and second.next_before_id is None
        assert second.events[0].id < first.events[-1].id
    table = server.cli("audit", "--route", queue, "--limit", "2", check=True).stdout
    assert f"repeat with --before-id {first.next_before_id}" in table


@pytest.mark.parametrize(("query", "field"), [
    ({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"before_id": 2**31}, "before_id"),
    ({"since": -1}, "since"), ({"since": 200, "until": 100}, "since"), ({"actor": "a\x00b"}, "actor"),
])
def test_bad_queries_are_refused_naming_the_field(server: RunningServer, query: dict, field: str) -> None:
    with api(server, server.token()) as http:
        answer = http.get("/audit", params=query)
    assert answer.status_code == 422, answer.text
    assert field in [detail["field"].split(".")[-1] for detail in answer.json()["details"]]


def test_submissions_at_once_each_leave_their_own_row_with_their_own_answer(server: RunningServer) -> None:
    # Submissions that arrive together are stored in one transaction (`group_commit.py`); each
    # request's row still says who sent it and what it was answered, a refused one too.
    queue = f"audit-hold-{server.port}"
    with server.client() as client:
        client.set_queue(queue, HOLD)
    users = [new_user(server) for _ in range(3)]
    with api(server, server.token()) as admin:
        for name, _token in users:
            admin.put(f"/projects/default/members/{name}", json={"role": "member"}).raise_for_status()
    marker = newest_id(server)

    def submit(index: int) -> int:
        _name, token = users[index % len(users)]
        job = {"name": f"at-once-{index}", "command": ["true"], "queue": queue if index != 4 else "no-such-queue"}
        with api(server, token) as http:
            return http.post("/jobs", json=job).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(submit, range(8)))
    assert statuses == [201] * 4 + [422] + [201] * 3
    rows = [event for event in events_after(server, marker) if event.route == "/api/v1/jobs"]
    expected = sorted((users[index % len(users)][0], status) for index, status in enumerate(statuses))
    assert sorted((event.actor, event.status) for event in rows) == expected
