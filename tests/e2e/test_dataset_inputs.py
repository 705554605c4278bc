"""Jobs that read and write dataset versions, through the real server, CLI and launcher on
SQLite and PostgreSQL: the version named (or aliased) at submission is pinned in the stored
spec, every replica finds it as a read-only directory at its path and in MLYARD_DATASET_<NAME>,
a resubmission of the stored spec reads the same bytes after `latest` moved, and a replica that
tries to change the files fails while the store keeps its bytes; what a job leaves in
MLYARD_OUTPUT_DIR becomes the next version when it succeeds, and nothing when it fails or
leaves a link out."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import RunningServer, wait_until
from test_datasets import digits_folder, unique
from web_login import web_session

# What a training script does with an image folder: walk it by label, open each PNG. Then it
# tries what a careless one might: write into the data, add a file, remove one.
READER = r'''
import hashlib, json, os, sys
from pathlib import Path
from PIL import Image

root = Path("data/digits")
variable = os.environ[sys.argv[1]]
labels, digest = {}, hashlib.sha256()
for path in sorted(p for p in root.rglob("*") if p.is_file()):
    relative = path.relative_to(root).as_posix()
    digest.update(relative.encode() + b"\0" + path.read_bytes())
    if path.suffix == ".png":
        with Image.open(path) as image:
            image.load()
        labels[path.parent.name] = labels.get(path.parent.name, 0) + 1
attempts = {}
for what, act in (("overwrite", lambda: open(root / "README.md", "w").write("changed")),
                  ("create", lambda: open(root / "train" / "new.txt", "w").write("x")),
                  ("remove", lambda: os.unlink(root / "README.md")),
                  ("chmod", lambda: os.chmod(root / "README.md", 0o666))):
    try:
        act()
        attempts[what] = "done"
    except OSError as error:
        attempts[what] = error.__class__.__name__
print("READ " + json.dumps({"labels": labels, "digest": digest.hexdigest(), "variable": variable,
                            "same": os.path.samefile(variable, root), "attempts": attempts}), flush=True)
'''


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def submit(server: RunningServer, tmp_path: Path, code: Path, datasets: list[dict]) -> dict:
    spec = {"name": "reader", "command": ["python", "read.py", "MLYARD_DATASET_" + datasets[0]["name"].upper()
                                          .replace("-", "_")], "datasets": datasets}
    file = tmp_path / f"job-{len(list(tmp_path.glob('job-*')))}.yaml"
    file.write_text(yaml.safe_dump(spec))
    return server.cli_json("submit", str(file), "--context", str(code))


def outcome(server: RunningServer, job_id: int) -> dict:
    assert server.cli("wait", str(job_id), "--timeout", "120").returncode == 0, server.cli("logs", str(job_id)).stdout
    log = server.cli("logs", str(job_id), check=True).stdout
    return json.loads(next(line for line in log.splitlines() if line.startswith("READ "))[5:])


def test_a_job_reads_its_pinned_version_read_only(server: RunningServer, tmp_path: Path) -> None:
    name = unique("digits")
    source = digits_folder(tmp_path / "digits")
    v1 = tree_digest(source)
    server.cli_json("datasets", "push", name, str(source))
    code = tmp_path / "code"
    code.mkdir()
    (code / "read.py").write_text(READER)

    job = submit(server, tmp_path, code, [{"name": name, "path": "data/digits"}])
    stored = job["spec"]["datasets"][0]
    assert (stored["version"], stored["project"]) == ("v1", "default"), "latest resolved and pinned"
    read = outcome(server, job["id"])
    assert f"dataset default/{name}:v1 at data/digits" in server.cli("show", str(job["id"]), check=True).stdout
    assert read["digest"] == v1 and read["labels"] and sum(read["labels"].values()) == 24
    assert read["same"], "MLYARD_DATASET_<NAME> is the directory at the job's path"
    assert set(read["attempts"].values()) <= {"PermissionError", "OSError"}, read["attempts"]

    pulled = tmp_path / "pulled"
    server.cli("datasets", "pull", f"{name}:v1", str(pulled), check=True)
    assert tree_digest(pulled) == v1, "the store kept v1's bytes"

    (source / "README.md").write_text("# digits, second edition\n")
    assert server.cli_json("datasets", "push", name, str(source))["version"]["version"] == "v2"
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token()}"}) as http:
        again = http.post("/api/v1/jobs", json=job["spec"])
        assert again.status_code == 201, again.text
        tampered = http.post("/api/v1/jobs", json={**job["spec"], "datasets": [
            {**stored, "fingerprint": "0" * 64}]})
        assert tampered.status_code == 422 and "datasets.0.fingerprint" in tampered.text, tampered.text
        missing = http.post("/api/v1/jobs", json={"name": "r", "command": ["true"], "datasets": [
            {"name": name}, {"name": name + "-none", "path": "other"}]})
        assert missing.status_code == 404 and missing.json()["details"][0]["field"] == "datasets.1.name"
        moved = http.post("/api/v1/jobs", json={"name": "r", "command": ["true"], "datasets": [
            {"name": name, "version": "v3"}]})
        assert moved.status_code == 404 and "no version or alias 'v3'" in moved.text
    assert outcome(server, again.json()["id"])["digest"] == v1, "a resubmission reads the version pinned"
    lineage = server.cli_json("datasets", "show", f"{name}:v1")["read_by"]
    assert lineage == [again.json()["id"], job["id"]], "v1's readers, newest first"
    assert f"read by jobs {again.json()['id']}, {job['id']}" in server.cli("datasets", "show", f"{name}:v1").stdout
    assert outcome(server, submit(server, tmp_path, code, [{"name": name, "path": "data/digits"}])["id"])[
        "digest"] == tree_digest(source), "a new submission of latest reads v2"


# A processing job: reads the images, writes a label index and a copy of one folder.
PROCESSOR = r'''
import json, os, shutil, sys
from pathlib import Path

out = Path(os.environ["MLYARD_OUTPUT_DIR"])
labels = {}
for path in sorted(Path("data/digits").rglob("*.png")):
    labels.setdefault(path.parent.name, []).append(path.relative_to("data/digits").as_posix())
(out / "index.json").write_text(json.dumps(labels, sort_keys=True))
shutil.copytree("data/digits/test", out / "test")
if sys.argv[1] == "leak":
    os.symlink("/etc/hostname", out / "leak")
sys.exit(1 if sys.argv[1] == "fail" else 0)
'''


@pytest.mark.slow
def test_a_jobs_outputs_become_a_version_with_the_job_as_its_source(server: RunningServer, tmp_path: Path) -> None:
    name, made = unique("digits"), unique("digit-index")
    source = digits_folder(tmp_path / "digits")
    server.cli_json("datasets", "push", name, str(source))
    code = tmp_path / "code"
    code.mkdir()
    (code / "process.py").write_text(PROCESSOR)

    def run(mode: str) -> int:
        spec = tmp_path / f"{mode}.yaml"
        spec.write_text(yaml.safe_dump({"name": f"index-{mode}", "command": ["python", "process.py", mode],
                                        "datasets": [{"name": name, "path": "data/digits"}],
                                        "outputs": [{"dataset": made, "message": f"index ({mode})"}]}))
        job_id = server.cli_json("submit", str(spec), "--context", str(code))["id"]
        server.cli("wait", str(job_id), "--timeout", "120")
        return job_id

    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token()}"}) as http:
        twice = http.post("/api/v1/jobs", json={"name": "twice", "command": ["true"], "outputs": [
            {"dataset": made, "path": "a"}, {"dataset": made, "project": "default", "path": "b"}]})
    assert twice.status_code == 422 and twice.json()["details"][0]["field"] == "outputs.1.dataset", twice.text

    job_id = run("ok")

    def versions() -> list[dict]:
        listed = server.cli("datasets", "versions", made, "--output", "json")
        return json.loads(listed.stdout) if listed.returncode == 0 else []

    version = wait_until(lambda: next(iter(versions()), None), 60, "the job's output version")
    assert (version["version"], version["source_job"], version["message"]) == ("v1", job_id, "index (ok)")
    pulled = tmp_path / "pulled"
    server.cli("datasets", "pull", f"{made}:v1", str(pulled), check=True)
    assert tree_digest(pulled / "test") == tree_digest(source / "test")
    index = json.loads((pulled / "index.json").read_text())
    assert sum(len(paths) for paths in index.values()) == 24
    assert f"written by job {job_id}" in server.cli("datasets", "show", f"{made}:v1", check=True).stdout
    assert f"writes     dataset default/{made} from MLYARD_OUTPUT_DIR/" in server.cli("show", str(job_id)).stdout
    assert any(f"wrote dataset default/{made} v1" in (event["message"] or "")
               for event in server.cli_json("show", str(job_id))["events"])
    with httpx.Client(base_url=server.url) as browser:  # the job's page lists what it read and wrote
        web_session(browser, server.token())
        job_page = browser.get(f"/jobs/{job_id}").text
    assert f'href="/data/default/{name}?version=v1">default/{name}:v1</a>' in job_page, job_page
    assert f'href="/data/default/{made}">default/{made}</a>' in job_page

    again = run("ok")  # the same files: no new version
    failed, leaked = run("fail"), run("leak")
    events = {job: [event["message"] or "" for event in server.cli_json("show", str(job))["events"]]
              for job in (again, failed, leaked)}
    assert wait_until(lambda: any("no version written" in message for message in
                                  [event["message"] or "" for event in server.cli_json("show", str(leaked))["events"]]),
                      60, "the refused output's event")
    leak_events = [event["message"] or "" for event in server.cli_json("show", str(leaked))["events"]]
    assert any("leak" in message and "leads outside" in message for message in leak_events), leak_events
    assert [item["version"] for item in server.cli_json("datasets", "versions", made)] == ["v1"], events
