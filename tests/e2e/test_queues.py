"""Queues through the real server and CLI: quotas and borrowing limits, who may change them,
what they hold, and why their jobs wait."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from conftest import RunningServer, wait_for

from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.store.rows import UserRow

GIB = 1024**3


def api(server: RunningServer, token: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", timeout=30,
                        headers={"Authorization": f"Bearer {token or server.token()}"})


def user_token(server: RunningServer, name: str, *, admin: bool) -> str:
    """A token of a new user, written straight into the server's database (there is no user API yet)."""
    database = Database(server.database_url)
    try:
        with database.transaction() as session:
            user = UserRow(name=name, is_admin=admin, created_at=time.time())
            session.add(user)
            session.flush()
            return auth.issue_token(session, name=f"{name} (test)", user_id=user.id)
    finally:
        database.close()


def fields(response: httpx.Response) -> list[str]:
    return [detail["field"] for detail in response.json()["details"]]


def test_queues_are_created_changed_listed_and_deleted_through_the_api(server: RunningServer) -> None:
    with api(server) as client:
        created = client.put("/queues/team-a", json={
            "project": "vision", "quota": {"gpu": 0, "cpu": 1, "memory": "2Gi"}, "borrow_limit": {"cpu": 1},
            "weight": 2,
        })
        assert created.status_code == 200, created.text
        queue = created.json()
        assert queue["quota"] == {"gpu": 0, "cpu": 1.0, "memory": 2 * GIB}
        assert queue["borrow_limit"] == {"gpu": None, "cpu": 1.0, "memory": None}
        assert (queue["project"], queue["weight"], queue["implicit"]) == ("vision", 2.0, False)

        changed = client.put("/queues/team-a", json={"weight": 3, "quota": {"cpu": None}}).json()
        assert changed["weight"] == 3.0 and changed["project"] == "vision", "fields left out keep their value"
        assert changed["quota"] == {"gpu": 0, "cpu": None, "memory": 2 * GIB}

        listed = {queue["name"]: queue for queue in client.get("/queues").json()}
        assert listed["default"]["implicit"] and listed["default"]["quota"] == {"gpu": None, "cpu": None, "memory": None}
        assert listed["team-a"]["weight"] == 3.0
        assert client.get("/queues/team-a").json()["name"] == "team-a"
        missing = client.get("/queues/nope")
        assert missing.status_code == 404 and missing.json()["message"] == "queue 'nope' does not exist"

        job = client.post("/jobs", json={"name": "in-team-a", "command": ["sleep", "60"], "queue": "team-a"})
        assert job.status_code == 201, job.text
        busy = client.delete("/queues/team-a")
        assert busy.status_code == 409 and "unfinished job" in busy.json()["message"]
        assert str(job.json()["id"]) in busy.json()["message"]
        client.post(f"/jobs/{job.json()['id']}/cancel")
        assert wait_for(lambda: client.get(f"/jobs/{job.json()['id']}").json()["status"] == "CANCELLED", timeout=30)
        assert client.delete("/queues/team-a").status_code == 204
        assert client.get("/queues/team-a").status_code == 404

        default = client.delete("/queues/default")
        assert default.status_code == 409 and "cannot be deleted" in default.json()["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/queues/team-x", {"quota": {"gpu": -1}}, "quota.gpu"),
        ("/queues/team-x", {"quota": {"memory": "lots"}}, "quota.memory"),
        ("/queues/team-x", {"borrow_limit": {"cpu": "many"}}, "borrow_limit.cpu"),
        ("/queues/team-x", {"weight": 0}, "weight"),
        ("/queues/team-x", {"colour": "blue"}, "colour"),
        ("/queues/team-x", {"project": "Not A Name"}, "project"),
        ("/queues/Team_X", {}, "name"),
    ],
)
def test_a_bad_queue_is_answered_422_with_the_field_path(server: RunningServer, path: str, body: dict,
                                                          field: str) -> None:
    with api(server) as client:
        response = client.put(path, json=body)
        assert response.status_code == 422, response.text
        assert field in fields(response) and field in response.json()["message"]
        assert client.get("/queues/team-x").status_code == 404, "nothing was stored"


def test_only_administrators_and_the_projects_maintainers_may_change_queues(server: RunningServer) -> None:
    token = user_token(server, "bob", admin=False)
    with api(server, token) as client:
        for method, path in (("PUT", "/queues/bobs"), ("DELETE", "/queues/default")):
            response = client.request(method, path, json={} if method == "PUT" else None)
            assert response.status_code == 403, (method, response.text)
            assert "may not change queue" in response.json()["message"]
            assert "needs the maintainer role" in response.json()["message"]
        assert client.get("/queues").status_code == 200, "anyone may look"
    with api(server) as client:
        assert client.get("/queues/bobs").status_code == 404


def test_the_cli_lists_sets_and_removes_queues(server: RunningServer) -> None:
    queue = server.cli_json("queues", "set", "team-b", "--project", "nlp", "--cpu", "1", "--memory", "1Gi",
                            "--borrow-gpu", "0", "--weight", "2")
    assert queue["quota"] == {"gpu": None, "cpu": 1.0, "memory": GIB}
    assert queue["borrow_limit"] == {"gpu": 0, "cpu": None, "memory": None}
    table = server.cli("queues", check=True).stdout
    (row,) = [line for line in table.splitlines() if line.split()[:1] == ["team-b"]]
    assert "nlp" in row and "cpu 1 · mem 1.0 GiB" in row and "gpu 0" in row
    assert re.search(r"^\s*default\s+default\s+none\s+unlimited", table, re.MULTILINE), table

    cleared = server.cli_json("queues", "set", "team-b", "--cpu", "none")
    assert cleared["quota"] == {"gpu": None, "cpu": None, "memory": GIB} and cleared["project"] == "nlp"

    for arguments, wanted in ((["set", "team-b", "--gpu", "lots"], "--gpu"),
                              (["set", "team-b", "--memory", "lots"], "--memory"),
                              (["set", "Team_B"], "queue name")):
        result = server.cli("queues", *arguments)
        assert result.returncode == 2 and wanted in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr

    for name, wanted in (("default", "cannot be deleted"), ("nope", "does not exist")):
        result = server.cli("queues", "rm", name)
        assert result.returncode == 1 and wanted in result.stderr, result.stderr
    removed = server.cli("queues", "rm", "team-b")
    assert removed.returncode == 0 and "queue team-b deleted" in removed.stderr
    assert "team-b" not in [queue["name"] for queue in server.cli_json("queues")]


def test_a_job_for_a_queue_that_does_not_exist_is_refused_naming_the_queues(server: RunningServer) -> None:
    with api(server) as client:
        response = client.post("/jobs", json={"name": "lost", "command": ["true"], "queue": "nope"})
    assert response.status_code == 422 and fields(response) == ["queue"]
    assert "queue 'nope' does not exist" in response.json()["message"] and "default" in response.json()["message"]
    result = server.cli("run", "--no-code", "--set", "queue=nope", "--", "true")
    # Other tests may have left queues of their own on this shared server: the list names them all.
    assert result.returncode == 1 and "queue 'nope' does not exist; the queues are: " in result.stderr
    assert "default" in result.stderr.split("the queues are: ")[1].rstrip().split(", ")


def test_a_queued_job_says_why_it_waits(server: RunningServer) -> None:
    blocker = server.cli_json("run", "--no-code", "--replicas", "2", "--name", "blocker", "--", "sleep", "60")
    waiting = server.cli_json("run", "--no-code", "--name", "waiter", "--", "true")
    try:
        assert wait_for(lambda: server.cli_json("show", str(waiting["id"]))["wait_reason"], timeout=20)
        detail = server.cli_json("show", str(waiting["id"]))
        assert detail["status"] == "QUEUED"
        reason = detail["wait_reason"]
        assert re.search(r"CPU|core|job \d+", reason), reason

        shown = server.cli("show", str(waiting["id"]), check=True).stdout
        assert f"Waiting: {reason}" in " ".join(shown.split()), shown
        listed = server.cli("jobs", check=True).stdout
        assert reason[:30] in " ".join(listed.split())
        (default,) = [queue for queue in server.cli_json("queues") if queue["name"] == "default"]
        assert {"id": waiting["id"], "reason": reason} in [
            {"id": job["id"], "reason": job["reason"]} for job in default["waiting_jobs"]
        ]
        assert default["usage"]["cpu"] == 2 and default["running"] >= 1
    finally:
        for job in (waiting, blocker):
            server.cli("cancel", str(job["id"]))
    assert server.cli("wait", str(blocker["id"]), "--timeout", "30").returncode == 1
