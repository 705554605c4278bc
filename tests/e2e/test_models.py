"""The model registry through the real CLI, SDK and server, on SQLite and PostgreSQL: push a
folder, push it again (nothing made), pull it verified; aliases move and resolve with their
history; register a job's checkpoint files with its lineage (attempt, code, the dataset versions
it read, its metrics), from the CLI and from the SDK inside the job, where a job token is refused
anything but its own job in its own project; a pickle is stored but never loaded; removal is
refused while an alias or a fine-tuned version needs a version."""

from __future__ import annotations

import json
import pickle
import uuid
from pathlib import Path

import httpx
import numpy
import pytest
from conftest import RunningServer
from safetensors.numpy import save_file

pytestmark = pytest.mark.slow

WRITER = """
import os, numpy
from safetensors.numpy import save_file
from mlyard.sdk import report
directory = os.environ["MLYARD_CHECKPOINT_DIR"]
os.makedirs(os.path.join(directory, "final"), exist_ok=True)
save_file({"weight": numpy.zeros((4, 3), "float32"), "bias": numpy.zeros(4, "float32")},
          os.path.join(directory, "final", "model.safetensors"))
with open(os.path.join(directory, "final", "config.json"), "w") as handle:
    handle.write('{"num_labels": 4, "model_type": "tiny"}')
assert report(step=1, accuracy=0.5) and report(step=2, accuracy=0.75, loss=0.25)
print("saved")
"""
IN_JOB = """
import os, sys, httpx, numpy
from safetensors.numpy import save_file
from mlyard.sdk import models
save_file({"weight": numpy.ones((2, 2), "float32")}, os.path.join(os.environ["MLYARD_CHECKPOINT_DIR"], "w.safetensors"))
made = models.register(sys.argv[1], "w.safetensors", metrics={"accuracy": 0.9})
print("REGISTERED", made.version.version, made.version.lineage.job, made.version.format)
own, other_job, other_project = int(os.environ["MLYARD_JOB_ID"]), int(sys.argv[2]), sys.argv[3]
headers = {"Authorization": "Bearer " + os.environ["MLYARD_TOKEN"]}
with httpx.Client(base_url=os.environ["MLYARD_API"] + "/api/v1", headers=headers) as http:
    for project, job in ((other_project, own), ("default", other_job)):
        answer = http.post(f"/models/{project}/{sys.argv[1]}/versions", json={"job": job})
        print("FOREIGN", project, job, answer.status_code)
    print("PUSH", http.post(f"/models/default/{sys.argv[1]}/versions", json={"manifest": "0" * 64}).status_code)
    print("READ", http.get(f"/models/default/{sys.argv[1]}").status_code)
"""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def weights_folder(folder: Path, scale: float = 1.0) -> Path:
    folder.mkdir(parents=True)
    save_file({"layer.weight": numpy.full((8, 4), scale, "float32"), "layer.bias": numpy.zeros(8, "float32")},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"num_labels": 8, "architectures": ["Tiny"]}))
    (folder / "labels.txt").write_text("\n".join(str(label) for label in range(8)))
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


def api(server: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {server.token()}"},
                        timeout=60)


def run_job(server: RunningServer, spec: dict) -> dict:
    with server.client() as client:
        job = client.submit({"roles": [{"resources": {"cpu": 1, "memory": "1Gi"}}], **spec})
    done = server.cli("wait", str(job.id), "--timeout", "180")
    assert done.returncode == 0, server.cli("logs", str(job.id)).stdout
    with api(server) as http:
        return http.get(f"/jobs/{job.id}").json()


def test_push_pull_aliases_compare_and_removal(server: RunningServer, tmp_path: Path) -> None:
    name = unique("tiny")
    source = weights_folder(tmp_path / "v1")
    first = server.cli_json("models", "push", name, str(source), "--metric", "accuracy=0.8", "-m", "first",
                            "--task", "image-classification")
    version = first["version"]
    assert first["created"]
    assert (version["version"], version["format"], version["file_count"]) == ("v1", "safetensors", 3)
    figures = version["statistics"]
    assert figures["parameters"] == 8 * 4 + 8 and figures["safetensors"]["model.safetensors"]["tensors"] == 2
    assert figures["configs"]["config.json"] == {"num_labels": 8, "architectures": ["Tiny"]}
    assert version["metrics"] == {"accuracy": 0.8} and version["aliases"] == ["latest"]
    assert server.cli_json("models", "push", name, str(source))["created"] is False, "the same files make no version"

    second_folder = weights_folder(tmp_path / "v2", scale=2.0)
    second = server.cli_json("models", "push", name, str(second_folder), "--metric", "accuracy=0.9",
                             "--parent", f"{name}:v1")["version"]
    assert (second["version"], second["lineage"]["parent"]) == ("v2", f"default/{name}:v1")

    server.cli("models", "alias", name, "production", "v1", check=True)
    server.cli("models", "alias", name, "production", "v2", check=True)
    moves = server.cli_json("models", "alias", name)
    production = next(item for item in moves if item["alias"] == "production")
    assert production["version"] == "v2"
    assert [(move["before"], move["after"], move["moved_by"]) for move in production["moves"]] == [
        (None, "v1", "admin"), ("v1", "v2", "admin")]
    assert server.cli_json("models", "show", f"{name}@production")["version"] == "v2"
    assert server.cli_json("models", "show", f"{name}:v1")["children"] == [f"default/{name}:v2"]
    with server.client() as client:
        audited = [event for event in client.audit(limit=200).events
                   if event.method == "PUT" and event.target.endswith(f"/models/default/{name}/aliases/production")]
    assert len(audited) == 2 and all(event.status == 200 for event in audited)

    pulled = tmp_path / "pulled"
    server.cli("models", "pull", f"{name}@production", str(pulled), check=True)
    assert files_of(pulled) == files_of(second_folder)

    compared = server.cli_json("models", "compare", f"{name}:v1", f"{name}:v2")
    assert compared["metrics"] == {"accuracy": [0.8, 0.9]}
    assert compared["lineage"] == {"parent": [None, f"default/{name}:v1"]}

    refused = server.cli("models", "rm", f"{name}:v2")
    assert refused.returncode == 1 and "alias production names" in refused.stderr and "Traceback" not in refused.stderr
    server.cli("models", "alias", name, "production", "v1", check=True)
    refused = server.cli("models", "rm", f"{name}:v1")
    assert "alias production names" in refused.stderr
    server.cli("models", "alias", name, "production", "v2", check=True)
    refused = server.cli("models", "rm", f"{name}:v1")
    assert f"is the parent of default/{name}:v2" in refused.stderr, refused.stderr
    assert "still has 2 versions" in server.cli("models", "rm", name).stderr
    with api(server) as http:
        answer = http.post(f"/models/default/{name}/versions", json={"manifest": "0" * 64, "job": 1})
        assert answer.status_code == 422 and answer.json()["details"][0]["field"] == "job"
        answer = http.post(f"/models/default/{name}/versions", json={"job": 1, "metrics": {"a": "NaN"}})
        assert answer.status_code == 422 and answer.json()["details"][0]["field"] == "metrics.a"


def test_register_a_jobs_files_with_its_lineage_and_never_load_a_pickle(server: RunningServer, tmp_path: Path) -> None:
    dataset = unique("inputs")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("x\n")
    server.cli_json("datasets", "push", dataset, str(tmp_path / "data"))
    job = run_job(server, {"name": "trainer", "command": ["python", "-c", WRITER],
                           "datasets": [{"name": dataset}]})
    name = unique("trained")
    made = server.cli_json("models", "register", name, "--job", str(job["id"]), "--path", "final",
                           "--metric", "f1=0.5")
    version = made["version"]
    assert version["lineage"] == {"job": job["id"], "attempt": 1, "snapshot": job["snapshot"],
                                  "datasets": [{"project": "default", "dataset": dataset, "version": "v1"}],
                                  "parent": None}
    assert version["metrics"] == {"accuracy": 0.75, "loss": 0.25, "f1": 0.5}, "the last values, and those given"
    assert version["statistics"]["parameters"] == 16 and version["format"] == "safetensors"
    assert sorted(file for file in version["statistics"]["configs"]) == ["config.json"]

    # A pickle whose loading would create a file: stored and served, never loaded.
    canary = tmp_path / "canary-was-loaded"

    class Canary:
        def __reduce__(self):
            return (open, (str(canary), "w"))

    checkpoints = server.home / "checkpoints" / str(job["id"])
    (checkpoints / "model.pkl").write_bytes(pickle.dumps(Canary()))
    pickled = server.cli_json("models", "register", name, "--job", str(job["id"]), "--path", "model.pkl")
    assert (pickled["version"]["version"], pickled["version"]["format"]) == ("v2", "other")
    server.cli_json("models", "show", f"{name}:v2")
    server.cli("models", "pull", f"{name}:v2", str(tmp_path / "pickled"), check=True)
    assert (tmp_path / "pickled" / "model.pkl").read_bytes() == (checkpoints / "model.pkl").read_bytes()
    assert not canary.exists(), "the server loaded the pickle"

    (checkpoints / "escape").symlink_to(server.home)
    with api(server) as http:
        for path in ("../../admin.token", "escape", "escape/admin.token", "missing.pt"):
            answer = http.post(f"/models/default/{name}/versions", json={"job": job["id"], "path": path})
            assert answer.status_code == 422 and answer.json()["details"][0]["field"] == "path", (path, answer.text)
        assert len(http.get(f"/models/default/{name}/versions").json()) == 2, "nothing half-made"


def test_a_job_registers_its_model_through_the_sdk_and_nothing_else(server: RunningServer) -> None:
    other_project = unique("elsewhere")
    with server.client() as client:
        client.create_project(other_project)
    other = run_job(server, {"name": "other", "command": ["true"]})
    name = unique("in-job")
    job = run_job(server, {"name": "sdk", "command": ["python", "-c", IN_JOB, name, str(other["id"]),
                                                      other_project]})
    log = server.cli("logs", str(job["id"]), check=True).stdout
    assert f"REGISTERED v1 {job['id']} safetensors" in log, log
    assert f"FOREIGN {other_project} {job['id']} 403" in log and f"FOREIGN default {other['id']} 403" in log, log
    assert "PUSH 403" in log and "READ 403" in log, log
    version = server.cli_json("models", "show", f"{name}:v1")
    assert version["created_by"] == "admin" and version["metrics"] == {"accuracy": 0.9}
    assert version["lineage"]["job"] == job["id"]


def test_model_files_count_against_the_projects_storage_limit(server: RunningServer, tmp_path: Path) -> None:
    project = unique("models-quota")
    server.cli("projects", "add", project, check=True)
    server.cli("projects", "set", project, "--storage", "4Ki", check=True)
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(uuid.uuid4().bytes * 400)  # 6.4 KB
    refused = server.cli("models", "push", f"{project}/big", str(folder))
    assert refused.returncode == 1 and "storage limit" in refused.stderr and "Traceback" not in refused.stderr
    listed = server.cli_json("models", "ls", "--project", project)
    assert all(model["versions"] == 0 for model in listed), listed
    (folder / "weights.bin").write_bytes(uuid.uuid4().bytes * 100)  # 1.6 KB fits
    assert server.cli_json("models", "push", f"{project}/big", str(folder))["created"]
    used = server.cli_json("projects", "storage", project)
    assert used["used_bytes"] >= 1600 and used["models_bytes"] == 1600, used
