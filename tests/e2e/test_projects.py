"""Projects, members and roles through the CLI of a real server: who sees which jobs, who may
submit, cancel and change queues, and how an administrator's new project names are created."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import MLYARD, REPOSITORY, RunningServer, wait_until

PASSWORD = "project pass 1"


def person(server: RunningServer, name: str, tmp_path, role_in: dict[str, str]) -> dict[str, str]:
    """A user with the given roles, and the environment of a CLI logged in as them."""
    server.cli("users", "add", name, "--password-stdin", input=f"{PASSWORD}\n", check=True)
    for project, role in role_in.items():
        server.cli("projects", "add-member", project, name, "--role", role, check=True)
    env = {**server.env, "MLYARD_CONFIG_DIR": str(tmp_path / name)}
    env.pop("MLYARD_HOME")  # no administrator's token file to fall back on
    env["MLYARD_URL"] = server.url
    return env


def as_user(server: RunningServer, env: dict[str, str], *arguments: str,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MLYARD, *arguments], cwd=REPOSITORY, env=env, capture_output=True, text=True,
                          timeout=120, input=input, check=False)


def log_in(server: RunningServer, env: dict[str, str], name: str) -> None:
    result = as_user(server, env, "login", "--user", name, "--password-stdin", input=f"{PASSWORD}\n")
    assert result.returncode == 0, result.stderr


def test_members_see_and_act_within_their_projects_only(server: RunningServer, tmp_path) -> None:
    suffix = server.port
    vision, nlp = f"vision-{suffix}", f"nlp-{suffix}"
    server.cli("projects", "add", vision, "--description", "image models", check=True)
    server.cli("projects", "add", nlp, check=True)
    people = {name: person(server, f"{name}-{suffix}", tmp_path, roles) for name, roles in {
        "alice": {vision: "member"}, "bob": {vision: "viewer"}, "dave": {vision: "maintainer"},
        "carol": {nlp: "member"}}.items()}
    for name, env in people.items():
        log_in(server, env, f"{name}-{suffix}")

    def run(name: str, *arguments: str):
        return as_user(server, people[name], *arguments)

    submitted = run("alice", "run", "--no-code", "--name", "alices", "--set", f"project={vision}", "--output",
                    "json", "--", "sleep", "60")
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)["id"]
    assert json.loads(run("bob", "show", str(job), "--output", "json").stdout)["owner"] == f"alice-{suffix}"
    hidden = run("carol", "show", str(job))
    assert hidden.returncode == 1 and f"job {job} does not exist" in hidden.stderr
    assert job not in [entry["id"] for entry in json.loads(run("carol", "jobs", "--output", "json").stdout)]
    refused = run("bob", "run", "--no-code", "--name", "bobs", "--set", f"project={vision}", "--", "true")
    assert refused.returncode == 1
    assert f"is only a viewer of project '{vision}'" in refused.stderr and "member role" in refused.stderr
    unknown = run("carol", "run", "--no-code", "--name", "x", "--set", "project=no-such-project", "--", "true")
    assert unknown.returncode == 1 and f"project 'no-such-project' does not exist; your projects: {nlp}" in unknown.stderr
    assert run("bob", "cancel", str(job)).returncode == 1  # a viewer
    projects = json.loads(run("alice", "projects", "--output", "json").stdout)
    assert [(entry["name"], entry["your_role"]) for entry in projects] == [(vision, "member")]

    # A maintainer manages every job of the project, its queues and its members; a member only their own.
    other = json.loads(run("dave", "run", "--no-code", "--name", "daves", "--set", f"project={vision}", "--output",
                           "json", "--", "sleep", "60").stdout)["id"]
    assert "maintainer role" in run("alice", "cancel", str(other)).stderr
    assert run("dave", "cancel", str(job)).returncode == 0
    assert run("alice", "cancel", str(other)).returncode == 1
    assert run("dave", "cancel", str(other)).returncode == 0
    queue = f"vq-{suffix}"
    assert run("dave", "queues", "set", queue, "--project", vision, "--cpu", "1").returncode == 0
    assert "maintainer role" in run("dave", "queues", "set", f"nq-{suffix}", "--project", nlp).stderr
    assert "maintainer role" in run("alice", "queues", "set", queue, "--cpu", "2").stderr
    # A job that names the queue but no project belongs to the queue's project.
    in_queue = json.loads(run("alice", "run", "--no-code", "--name", "queued", "--set", f"queue={queue}", "--output",
                              "json", "--", "true").stdout)
    assert in_queue["project"] == vision
    wrong = run("carol", "run", "--no-code", "--name", "q", "--set", f"queue={queue}", "--set", f"project={nlp}",
                "--", "true")
    assert wrong.returncode == 1 and f"queue '{queue}' belongs to project '{vision}'" in wrong.stderr
    assert run("dave", "projects", "add-member", vision, f"carol-{suffix}", "--role", "viewer").returncode == 0
    assert run("carol", "show", str(job)).returncode == 0  # now she may look
    assert "maintainer role" in run("alice", "projects", "add-member", vision, f"bob-{suffix}",
                                    "--role", "maintainer").stderr
    # Limits are the administrators' to set; the description is the maintainers'.
    assert "not an administrator" in run("dave", "projects", "set", vision, "--gpu", "8").stderr
    assert run("dave", "projects", "set", vision, "--description", "vision models").returncode == 0
    server.cli("projects", "set", vision, "--gpu", "8", "--running-jobs", "3", "--storage", "10Gi", check=True)
    shown = json.loads(run("bob", "projects", "show", vision, "--output", "json").stdout)
    assert shown["limits"] == {"gpu": 8.0, "cpu": None, "memory": None, "running_jobs": 3, "storage_bytes": 10 << 30}
    assert shown["description"] == "vision models"
    assert {member["user"]: member["role"] for member in shown["members"]} == {
        f"alice-{suffix}": "member", f"bob-{suffix}": "viewer", f"carol-{suffix}": "viewer",
        f"dave-{suffix}": "maintainer"}


def test_an_administrator_names_a_new_project_and_it_exists(server: RunningServer) -> None:
    name = f"fresh-{server.port}"
    job = server.cli_json("run", "--no-code", "--name", "first", "--set", f"project={name}", "--", "true")
    assert job["project"] == name
    assert name in [project["name"] for project in server.cli_json("projects")]
    assert server.cli("projects", "add", name).returncode == 1  # exists now


@pytest.mark.parametrize("role", ["owner", ""])
def test_a_role_that_does_not_exist_is_refused_with_a_clear_message(server: RunningServer, role: str) -> None:
    result = server.cli("projects", "add-member", "default", "admin", "--role", role)
    assert result.returncode == 2 and "choose viewer, member or maintainer" in result.stderr


def test_a_project_at_its_limit_keeps_its_next_job_waiting_with_the_reason(server: RunningServer) -> None:
    name = f"limited-{server.port}"
    server.cli("projects", "add", name, check=True)
    server.cli("projects", "set", name, "--running-jobs", "1", check=True)

    def submit(job_name: str) -> int:
        return server.cli_json("run", "--no-code", "--name", job_name, "--cpus", "1", "--set", f"project={name}",
                               "--", "sleep", "60")["id"]

    first, second = submit("first"), submit("second")
    wait_until(lambda: server.cli_json("show", str(first))["status"] == "RUNNING", 60, "the first job runs")
    reason = wait_until(lambda: server.cli_json("show", str(second))["wait_reason"], 30, "a wait reason")
    assert reason == f"project '{name}' at its limit: running jobs 1/1 (this job needs 1)"
    assert server.cli_json("show", str(second))["status"] == "QUEUED"
    # The cluster has room (2 CPUs): only the project's limit holds the job back.
    server.cli("cancel", str(first), check=True)
    wait_until(lambda: server.cli_json("show", str(second))["status"] == "RUNNING", 60, "the second job runs")
    server.cli("projects", "set", name, "--running-jobs", "none", "--cpu", "1", check=True)
    third = submit("third")
    reason = wait_until(lambda: server.cli_json("show", str(third))["wait_reason"], 30, "a wait reason")
    assert reason == f"project '{name}' at its limit: cpu 1/1 (this job needs 1)"
    for job in (second, third):
        server.cli("cancel", str(job), check=True)
