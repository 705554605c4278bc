"""A project's storage limit on the code it keeps: enforced at upload and at submission, each
snapshot counted once per project, and released by a maintainer when no unfinished job needs it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import httpx
import pytest
from conftest import RunningServer, wait_until
from test_projects import as_user, log_in, person

from mlyard.storage import BlobStore, pack_directory

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
    assert "Storage kept (code and datasets):" in as_user(server, member, "projects", "show", project).stdout

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


def random_files(folder: Path, sizes: dict[str, int]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, size in sizes.items():
        (folder / name).write_bytes(os.urandom(size))
    return folder


def test_datasets_count_against_the_projects_storage_limit_each_blob_once(server: RunningServer,
                                                                         tmp_path: Path) -> None:
    project, other = f"dstore-{server.port}", f"dstore-to-{server.port}"
    for name, limit in ((project, "30Ki"), (other, "4Ki")):
        server.cli("projects", "add", name, check=True)
        server.cli("projects", "set", name, "--storage", limit, check=True)
    code = tmp_path / "code"
    code.mkdir()
    (code / "main.py").write_text("print('hello')\n")
    packed = pack_directory(code, tmp_path / "code.tar.gz", max_bytes=10**6)
    folder = random_files(tmp_path / "data", {"a.bin": 5000, "b.bin": 5000, "c.bin": 5000})
    (folder / "code.tar.gz").write_bytes(packed.path.read_bytes())  # the very bytes of a code snapshot

    def push(*extra: str):
        return server.cli("datasets", "push", "images", str(folder), "--project", project, *extra)

    assert push().returncode == 0, "a version that fits is made"
    first = server.cli_json("projects", "storage", project)
    assert first["used_bytes"] == first["datasets_bytes"] == 15000 + packed.size
    random_files(folder, {"d.bin": 4000})
    assert push().returncode == 0, "v2's 19 KiB in all would pass the limit; its 4 KB of new blobs do not"
    second = server.cli_json("projects", "storage", project)
    assert second["used_bytes"] == first["used_bytes"] + 4000, "v2 counts only the bytes v1 does not hold"
    assert second["datasets"] == [{"name": "images", "versions": 2, "bytes": second["used_bytes"]}]

    random_files(folder, {"e.bin": 25000})
    refused = push()
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"project '{project}' keeps" in refused.stderr and "30.0 KiB storage limit" in refused.stderr
    assert [item["version"] for item in server.cli_json("datasets", "versions", f"{project}/images")] == ["v1", "v2"]
    assert server.cli_json("projects", "storage", project)["used_bytes"] == second["used_bytes"]

    # The snapshot is a dataset file of the project already: charging it counts nothing more.
    with server.client() as admin, httpx.Client(base_url=f"{server.url}/api/v1",
                                                headers={"Authorization": f"Bearer {server.token()}"}) as http:
        admin.upload_snapshot(packed.path, packed.digest)
        answer = http.post("/jobs", json={"name": "kept-code", "project": project, "snapshot": packed.digest,
                                          "command": ["true"], "roles": [{"resources": {"cpu": 1}}]})
        assert answer.status_code in (200, 201), answer.text
        storage = server.cli_json("projects", "storage", project)
        assert [snapshot["digest"] for snapshot in storage["snapshots"]] == [packed.digest]
        assert storage["snapshots_bytes"] == packed.size and storage["used_bytes"] == second["used_bytes"]
        assert storage["volumes_bytes"] == 0
        assert admin.project(project).storage_used_bytes == second["used_bytes"]
        table = server.cli("projects", "storage", project, check=True).stdout
        assert "Code snapshots" in table and "Datasets" in table and "images" in table and "counted once" in table

        # Moving the dataset to a project it would not fit in is refused.
        transfer = http.post(f"/datasets/{project}/images/transfers", json={"to_project": other})
        assert transfer.status_code == 201, transfer.text
        approval = http.post(f"/datasets/claims/{transfer.json()['id']}/approve")
        assert approval.status_code == 403 and approval.json()["error"] == "quota_exceeded", approval.text
        assert f"project '{other}' keeps" in approval.json()["message"]


OUTPUT_WRITER = "import os\nopen(os.path.join(os.environ['MLYARD_OUTPUT_DIR'], 'big.bin'), 'wb').write(os.urandom(40000))\n"


def test_a_job_output_past_the_limit_fails_with_an_event(server: RunningServer, tmp_path: Path) -> None:
    project = f"ostore-{server.port}"
    server.cli("projects", "add", project, check=True)
    server.cli("projects", "set", project, "--storage", "16Ki", check=True)
    code = tmp_path / "code"
    code.mkdir()
    (code / "write.py").write_text(OUTPUT_WRITER)
    spec = tmp_path / "job.yaml"
    spec.write_text(json.dumps({"name": "big-output", "project": project, "command": ["python", "write.py"],
                                "outputs": [{"dataset": "too-big", "project": project}]}))
    job_id = server.cli_json("submit", str(spec), "--context", str(code))["id"]
    assert server.cli("wait", str(job_id), "--timeout", "120").returncode == 0, server.cli("logs", str(job_id)).stdout

    def refusal() -> str | None:
        events = [event["message"] or "" for event in server.cli_json("show", str(job_id))["events"]]
        return next((message for message in events if "no version written" in message), None)

    said = wait_until(refusal, 60, "the refused output's event")
    assert f"project '{project}' keeps" in said and "16.0 KiB storage limit" in said, said
    assert server.cli("datasets", "versions", f"{project}/too-big").returncode != 0, "no dataset was made"
    written = server.home / "outputs" / str(job_id) / "big.bin"
    stored = BlobStore(server.home / "blobs").path_for(hashlib.sha256(written.read_bytes()).hexdigest())
    assert not stored.exists(), "the refused output's bytes left the store"
