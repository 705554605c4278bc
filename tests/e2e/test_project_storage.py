"""A project's storage limit on the code it keeps: enforced at upload and at submission, each
snapshot counted once per project, and released by a maintainer when no unfinished job needs it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from conftest import RunningServer
from test_projects import as_user, log_in, person

from mlyard.storage import pack_directory

pytestmark = pytest.mark.slow


def code_directory(root: Path, name: str, size: int = 6000) -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "weights.bin").write_bytes(os.urandom(size))  # incompressible: the snapshot is about this big
    return directory


def blobs(server: RunningServer) -> set[str]:
    return {path.name for path in (server.home / "blobs").glob("??/*")}


def test_code_over_the_projects_storage_limit_is_refused_and_released_code_makes_room(
        server: RunningServer, tmp_path: Path) -> None:
    suffix = server.port
    project = f"store-{suffix}"
    server.cli("projects", "add", project, check=True)
    server.cli("projects", "set", project, "--storage", "10Ki", check=True)
    member_name, viewer_name = f"stm-{suffix}", f"stv-{suffix}"
    member = person(server, member_name, tmp_path, {project: "maintainer"})
    viewer = person(server, viewer_name, tmp_path, {project: "viewer"})
    log_in(server, member, member_name)
    log_in(server, viewer, viewer_name)
    first, second = code_directory(tmp_path, "first"), code_directory(tmp_path, "second")

    def run(code: Path, *command: str):
        return as_user(server, member, "run", "--context", str(code), "--set", f"project={project}",
                       "--output", "json", "--", *command)

    started = run(first, "sleep", "60")
    assert started.returncode == 0, started.stderr
    running_job = json.loads(started.stdout)["id"]
    again = run(first, "true")  # the same code is counted once
    assert again.returncode == 0, again.stderr

    stored_before = blobs(server)
    refused = run(second, "true")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"project '{project}' keeps" in refused.stderr and "10.0 KiB storage limit" in refused.stderr
    assert blobs(server) == stored_before, "the refused upload left nothing in the store"
    jobs = json.loads(as_user(server, member, "jobs", "--all", "--output", "json").stdout)
    assert [job["id"] for job in jobs if job["project"] == project] and len(
        [job for job in jobs if job["project"] == project]) == 2

    storage = json.loads(as_user(server, member, "projects", "storage", project, "--output", "json").stdout)
    (kept,) = storage["snapshots"]
    assert kept["jobs"] == 2 and storage["used_bytes"] == kept["size"] > 6000
    assert storage["limit_bytes"] == 10 * 1024
    assert "Code kept:" in as_user(server, member, "projects", "show", project).stdout

    # A viewer adds no code to the project, whatever its size.
    with httpx.Client(base_url=f"{server.url}/api/v1") as http:
        token = http.post("/login", json={"user": viewer_name, "password": "project pass 1"}).json()["token"]
        answer = http.put(f"/snapshots/{'1' * 64}", params={"project": project}, content=b"x",
                          headers={"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"})
    assert answer.status_code == 403, answer.text

    busy = as_user(server, member, "projects", "release-code", project, kept["digest"][:12])
    assert busy.returncode == 1 and "1 unfinished job" in busy.stderr
    assert as_user(server, member, "cancel", str(running_job)).returncode == 0
    as_user(server, member, "wait", str(running_job), "--timeout", "60")
    released = as_user(server, member, "projects", "release-code", project, kept["digest"][:12])
    assert released.returncode == 0, released.stderr
    assert kept["digest"] not in blobs(server), "code no project keeps is deleted"
    assert run(second, "true").returncode == 0, "released code makes room"


def test_code_uploaded_without_a_project_is_charged_when_a_job_uses_it(server: RunningServer,
                                                                       tmp_path: Path) -> None:
    project = f"late-{server.port}"
    server.cli("projects", "add", project, check=True)
    server.cli("projects", "set", project, "--storage", "4Ki", check=True)
    code = code_directory(tmp_path, "big", size=8000)
    with server.client() as admin:
        packed = pack_directory(code, tmp_path / "big.tar.gz", max_bytes=10**6)
        admin.upload_snapshot(packed.path, packed.digest)  # no project: nothing is charged yet
        with httpx.Client(base_url=f"{server.url}/api/v1",
                          headers={"Authorization": f"Bearer {server.token()}"}) as http:
            answer = http.post("/jobs", json={"name": "too-much-code", "project": project,
                                              "snapshot": packed.digest, "command": ["true"],
                                              "roles": [{"resources": {"cpu": 1}}]})
        assert answer.status_code == 403, answer.text
        body = answer.json()
        assert body["error"] == "quota_exceeded" and body["details"][0]["field"] == "snapshot"
        assert not [job for job in admin.jobs(include_finished=True) if job.project == project]
        assert admin.project(project).storage_used_bytes == 0
