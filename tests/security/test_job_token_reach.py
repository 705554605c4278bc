"""A running job's token against every operation of the server's OpenAPI document: only reading
its own job, reporting its metrics and registering its own checkpoint files as a model of its
own project answer; every other operation, and the allowed ones with another job's id (or
project), are refused. An operation not classified below fails the test."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from conftest import RunningServer, start_server, stop_server, wait_until

pytestmark = pytest.mark.slow

PUBLIC = {"GET /api/v1/health", "POST /api/v1/login"}
"""Answer without any token; what a job token adds to them is nothing."""
ALLOWED = {
    "GET /api/v1/jobs/{job_id}",
    "GET /api/v1/jobs/{job_id}/logs",
    "GET /api/v1/jobs/{job_id}/metrics",
    "POST /api/v1/jobs/{job_id}/metrics",
    "GET /api/v1/jobs/{job_id}/resources",
    "GET /api/v1/jobs/{job_id}/tensorboard",
}
OWN_JOB_IN_BODY = {"POST /api/v1/models/{project}/{name}/versions"}
"""Allowed only for the token's own job named in the body, in the job's own project (the job
saved nothing, so the answer is a 422 about its checkpoint directory, never a 401 or 403)."""
REFUSED = {
    "POST /api/v1/jobs", "POST /api/v1/jobs:batch", "GET /api/v1/jobs", "POST /api/v1/jobs/{job_id}/cancel",
    "GET /api/v1/nodes", "GET /api/v1/nodes/{name}/samples", "GET /api/v1/resources/jobs",
    "GET /api/v1/queues", "GET /api/v1/queues/{name}", "PUT /api/v1/queues/{name}", "DELETE /api/v1/queues/{name}",
    "PUT /api/v1/snapshots/{digest}", "GET /api/v1/snapshots/{digest}", "GET /api/v1/usage",
    "GET /api/v1/whoami", "GET /api/v1/users", "POST /api/v1/users", "PUT /api/v1/users/{name}/password",
    "GET /api/v1/tokens", "POST /api/v1/tokens", "DELETE /api/v1/tokens/{token_id}", "GET /api/v1/audit",
    "GET /api/v1/projects", "POST /api/v1/projects", "GET /api/v1/projects/{name}", "PATCH /api/v1/projects/{name}",
    "PUT /api/v1/projects/{name}/members/{user}", "DELETE /api/v1/projects/{name}/members/{user}",
    "GET /api/v1/projects/{name}/snapshots", "DELETE /api/v1/projects/{name}/snapshots/{digest}",
    "POST /api/v1/environments", "GET /api/v1/environments", "GET /api/v1/environments/{name}",
    "DELETE /api/v1/environments/{name}",
    "POST /api/v1/datasets", "GET /api/v1/datasets", "GET /api/v1/datasets/{project}/{name}",
    "POST /api/v1/datasets/{project}/{name}/versions", "GET /api/v1/datasets/{project}/{name}/versions",
    "GET /api/v1/datasets/{project}/{name}/versions/{version}",
    "GET /api/v1/datasets/{project}/{name}/versions/{version}/files",
    "GET /api/v1/datasets/{project}/{name}/versions/{version}/file",
    "GET /api/v1/datasets/{project}/{name}/diff", "GET /api/v1/datasets/{project}/{name}/aliases",
    "PUT /api/v1/datasets/{project}/{name}/aliases/{alias}", "POST /api/v1/blobs:missing",
    "PUT /api/v1/blobs/{digest}", "PUT /api/v1/blobs/pack",
    "GET /api/v1/datasets/{project}/{name}/grants", "PUT /api/v1/datasets/{project}/{name}/grants/{grantee_project}",
    "DELETE /api/v1/datasets/{project}/{name}/grants/{grantee_project}",
    "POST /api/v1/datasets/{project}/{name}/requests", "GET /api/v1/datasets/{project}/{name}/requests",
    "POST /api/v1/datasets/{project}/{name}/requests/{request_id}/grant",
    "POST /api/v1/datasets/{project}/{name}/requests/{request_id}/refuse", "GET /api/v1/datasets/requests",
    "DELETE /api/v1/datasets/{project}/{name}/versions/{version}", "DELETE /api/v1/datasets/{project}/{name}",
    "POST /api/v1/datasets:register", "POST /api/v1/datasets/{project}/{name}/claims",
    "POST /api/v1/datasets/{project}/{name}/transfers", "GET /api/v1/datasets/claims",
    "POST /api/v1/datasets/claims/{claim_id}/approve", "POST /api/v1/datasets/claims/{claim_id}/refuse",
    "POST /api/v1/datasets/{project}/{name}/versions/{version}/checks",
    "GET /api/v1/datasets/{project}/{name}/versions/{version}/checks", "GET /api/v1/datasets/checks/{check_id}/report",
    "POST /api/v1/datasets/{project}/{name}/versions/{version}/clean",
    "POST /api/v1/labeling/tasks", "GET /api/v1/labeling/tasks", "GET /api/v1/labeling/tasks/{task_id}",
    "GET /api/v1/labeling/tasks/{task_id}/items", "GET /api/v1/labeling/tasks/{task_id}/next",
    "PUT /api/v1/labeling/tasks/{task_id}/items/{item_id}/annotation",
    "POST /api/v1/labeling/tasks/{task_id}/items/{item_id}/review",
    "POST /api/v1/labeling/tasks/{task_id}/export", "GET /api/v1/labeling/tasks/{task_id}/agreement",
    "GET /api/v1/labeling/tasks/{task_id}/label-studio",
    "POST /api/v1/volumes", "GET /api/v1/volumes", "GET /api/v1/volumes/{project}/{name}",
    "DELETE /api/v1/volumes/{project}/{name}",
    "POST /api/v1/models", "GET /api/v1/models", "GET /api/v1/models/{project}/{name}",
    "DELETE /api/v1/models/{project}/{name}", "GET /api/v1/models/{project}/{name}/versions",
    "GET /api/v1/models/{project}/{name}/versions/{version}",
    "DELETE /api/v1/models/{project}/{name}/versions/{version}",
    "GET /api/v1/models/{project}/{name}/versions/{version}/files",
    "GET /api/v1/models/{project}/{name}/versions/{version}/file",
    "GET /api/v1/models/{project}/{name}/aliases", "PUT /api/v1/models/{project}/{name}/aliases/{alias}",
}
PROJECT = "reach"


@dataclass
class World:
    server: RunningServer
    job: int
    other_job: int
    token: str
    digest: str
    node: str
    operations: dict[str, dict]


def _archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        member = tarfile.TarInfo("train.py")
        member.size = 5
        archive.addfile(member, io.BytesIO(b"pass\n"))
    return buffer.getvalue()


def _job_token(server: RunningServer, job: int) -> str:
    configs = list((server.home / "runs" / str(job)).rglob("launch.json"))
    return json.loads(configs[0].read_text())["env"]["MLYARD_TOKEN"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    server = start_server(tmp_path_factory.mktemp("token-reach") / "home")
    admin = {"Authorization": f"Bearer {server.token()}"}
    with httpx.Client(base_url=f"{server.url}/api/v1", headers=admin, timeout=30) as http:
        body = _archive()
        digest = hashlib.sha256(body).hexdigest()
        assert http.put(f"/snapshots/{digest}", params={"project": PROJECT}, content=body).status_code == 201
        jobs = [http.post("/jobs", json={"name": name, "project": project, "command": ["sleep", "60"],
                                         "snapshot": digest}).json()["id"]
                for name, project in (("reach", PROJECT), ("elsewhere", "elsewhere"))]
        wait_until(lambda: http.get(f"/jobs/{jobs[0]}").json()["status"] == "RUNNING", 60, "the job to run")
        node = http.get("/nodes").json()[0]["name"]
        operations = http.get("/openapi.json").json()["paths"]
        yield World(server=server, job=jobs[0], other_job=jobs[1], token=_job_token(server, jobs[0]),
                    digest=digest, node=node, operations=operations)
        for job in jobs:
            http.post(f"/jobs/{job}/cancel")
    stop_server(server)


def _call(world: World, http: httpx.Client, method: str, path: str, job: int) -> httpx.Response:
    section = path.split("/")[3]
    names = {"projects": PROJECT, "queues": "default", "users": "admin", "nodes": world.node,
             "environments": "reach-env"}
    url = path.removeprefix("/api/v1").format(job_id=job, name=names.get(section, PROJECT), user="admin",
                                              digest=world.digest, token_id=1, project=PROJECT, version="v1", alias="stable",
                                              grantee_project="elsewhere", request_id=1, claim_id=1, check_id=1, task_id=1, item_id=1)
    bodies = {"metrics": {"step": 1, "metrics": {"loss": 0.5}}, "jobs": {"name": "x", "command": ["true"]},
              "projects": {"name": "taken-over"}, "users": {"name": "intruder", "password": "long enough pw"},
              "tokens": {"name": "escalated"}, "environments": {"name": "e", "base": "busybox"}}
    if method == "PUT" and section == "snapshots":
        return http.put(url, content=_archive())
    if method in ("POST", "PUT", "PATCH"):
        return http.request(method, url, json=bodies.get(url.split("/")[-1], bodies.get(section, {})))
    return http.request(method, url)


def test_every_operation_is_classified(world: World) -> None:
    operations = {f"{method.upper()} {path}" for path, methods in world.operations.items() for method in methods}
    classified = PUBLIC | ALLOWED | OWN_JOB_IN_BODY | REFUSED
    assert operations - classified == set(), "decide what a job token may do with these"
    assert classified - operations == set(), "these operations no longer exist"


def test_a_job_token_reaches_its_own_job_and_nothing_else(world: World) -> None:
    wrong = []
    with httpx.Client(base_url=f"{world.server.url}/api/v1", timeout=30,
                      headers={"Authorization": f"Bearer {world.token}"}) as http:
        for operation in sorted(ALLOWED | REFUSED):
            method, path = operation.split(" ")
            own = _call(world, http, method, path, world.job)
            expected = range(200, 300) if operation in ALLOWED else (401, 403, 404)
            if own.status_code not in expected:
                wrong.append(f"{operation}: {own.status_code} {own.text[:120]}")
            if "{job_id}" in path:
                other = _call(world, http, method, path, world.other_job)
                if other.status_code not in (401, 403, 404):
                    wrong.append(f"{operation} (job {world.other_job}): {other.status_code} {other.text[:120]}")
    assert wrong == []


def test_a_job_token_registers_only_its_own_job_in_its_own_project(world: World) -> None:
    with httpx.Client(base_url=f"{world.server.url}/api/v1", timeout=30,
                      headers={"Authorization": f"Bearer {world.token}"}) as http:
        own = http.post(f"/models/{PROJECT}/reached/versions", json={"job": world.job})
        assert own.status_code == 422 and own.json()["details"][0]["field"] in ("job", "path"), own.text
        for project, job, body in ((PROJECT, world.other_job, {}), ("elsewhere", world.job, {}),
                                   (PROJECT, world.job, {"manifest": "0" * 64})):
            refused = http.post(f"/models/{project}/reached/versions", json={"job": job, **body})
            assert refused.status_code == 403, refused.text
