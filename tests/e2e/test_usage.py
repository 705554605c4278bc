"""`mlyard usage` against a real server: real jobs, counted per user and project."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime

import httpx
import pytest
from conftest import MLYARD, RunningServer, wait_until

from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.store.rows import UserRow

pytestmark = pytest.mark.slow


def user_token(server: RunningServer, name: str, *, job_id: int | None = None) -> str:
    """A token of a new ordinary user (scoped to `job_id` if given), written straight into the
    server's database (there is no user API yet)."""
    database = Database(server.database_url)
    try:
        with database.transaction() as session:
            user = UserRow(name=name, is_admin=False, created_at=time.time())
            session.add(user)
            session.flush()
            return auth.issue_token(session, name=f"{name} (test)", user_id=user.id, job_id=job_id)
    finally:
        database.close()


def rows(report: dict) -> dict[str, dict]:
    return {row["key"]: row for row in report["rows"]}


def test_a_finished_job_shows_up_as_cpu_hours_of_its_user_and_project(server: RunningServer) -> None:
    project = f"acct-{time.monotonic_ns()}"
    job = server.cli_json("run", "--no-code", "--name", "usage", "--set", f"project={project}", "--",
                          "python", "-c", "import time; time.sleep(2)")
    assert server.cli("wait", str(job["id"]), "--timeout", "120").returncode == 0
    ran = server.client().job(job["id"]).attempts[0]
    held_hours = (ran.finished_at - ran.launched_at) / 3600

    report = server.cli_json("usage")
    assert report["everyone"] and report["by"] == "user"
    admin = rows(report)["admin"]
    assert admin["cpu_hours"] >= held_hours > 0, "the admin token submitted it: one core for about two seconds"
    today = datetime.now(UTC).date().isoformat()
    assert today in [day["day"] for day in admin["days"]]
    assert report["total"]["cpu_hours"] >= admin["cpu_hours"]

    by_project = server.cli_json("usage", "--by", "project", "--since", "1h")
    assert rows(by_project)[project]["cpu_hours"] == pytest.approx(held_hours, rel=1e-6)
    assert rows(by_project)[project]["gpu_hours"] == 0
    assert rows(by_project)[project]["jobs"] == 1
    before = server.cli_json("usage", "--by", "project", "--until", "2000-01-01")
    assert project not in rows(before)

    table = server.cli("usage", "--by", "project", "--since", "1d", "--daily", check=True).stdout
    assert project in table and "GPU-HOURS" in table and "CPU-HOURS" in table and "TOTAL" in table
    assert today in table


def test_a_running_job_counts_until_now(server: RunningServer) -> None:
    project = f"live-{time.monotonic_ns()}"
    job = server.cli_json("run", "--no-code", "--name", "live", "--set", f"project={project}", "--",
                          "python", "-c", "import time; time.sleep(120)")
    try:
        wait_until(lambda: server.client().job(job["id"]).status.value == "RUNNING", 60, "the job running")
        first = wait_until(lambda: rows(server.cli_json("usage", "--by", "project")).get(project), 30,
                           "usage of the running job")
        time.sleep(1)
        second = rows(server.cli_json("usage", "--by", "project"))[project]
        assert 0 < first["cpu_hours"] < second["cpu_hours"]
    finally:
        server.cli("cancel", str(job["id"]))


def test_users_see_their_own_usage_only(server: RunningServer) -> None:
    env = {**server.env, "MLYARD_TOKEN": user_token(server, f"user-{time.monotonic_ns()}")}
    result = subprocess.run([MLYARD, "usage", "-o", "json"], env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert not report["everyone"] and report["rows"] == [], "they submitted nothing; the admin's jobs are not theirs"
    table = subprocess.run([MLYARD, "usage"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert "No job held resources" in table.stdout and "your jobs" in table.stdout


@pytest.mark.parametrize(("arguments", "message"), [
    (("--since", "yesterday"), "--since: cannot read 'yesterday'"),
    (("--until", "7x"), "--until: cannot read '7x'"),
    (("--since", "1d", "--until", "2d"), "must be before --until"),
])
def test_bad_times_are_one_line_errors(server: RunningServer, arguments: tuple[str, ...], message: str) -> None:
    result = server.cli("usage", *arguments)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_the_usage_api_checks_its_caller_and_its_parameters(server: RunningServer) -> None:
    job = server.cli_json("run", "--no-code", "--name", "token-holder", "--", "true")
    assert server.cli("wait", str(job["id"]), "--timeout", "60").returncode == 0
    job_token = user_token(server, f"job-user-{time.monotonic_ns()}", job_id=job["id"])
    with httpx.Client(base_url=f"{server.url}/api/v1", timeout=30) as client:
        assert client.get("/usage").status_code == 401
        answer = client.get("/usage", headers={"Authorization": f"Bearer {job_token}"})
        assert answer.status_code == 403, answer.text
        admin = {"Authorization": f"Bearer {server.token()}"}
        for params, field in (({"by": "team"}, "by"), ({"since": -1}, "since"), ({"since": 10, "until": 5}, "since")):
            answer = client.get("/usage", params=params, headers=admin)
            assert answer.status_code == 422, (params, answer.text)
            assert field in [detail["field"] for detail in answer.json()["details"]], answer.text
        assert client.get("/usage", params={"since": 0}, headers=admin).json()["since"] == 0
