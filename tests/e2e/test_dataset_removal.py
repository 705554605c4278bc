"""Removing dataset versions through the real CLI and server, on SQLite and PostgreSQL: what an
alias, a later version or an unfinished job needs stays, `latest` moves back, the files no
version keeps leave the store and those another version keeps stay, and a finished reader's
tree goes with them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import RunningServer, wait_until
from test_datasets import unique

from mlyard.storage import BlobStore

pytestmark = pytest.mark.slow


def refused(result, says: str) -> None:
    assert result.returncode != 0 and says in result.stderr and "Traceback" not in result.stderr, result.stderr


def blob(server: RunningServer, content: bytes) -> Path:
    return BlobStore(server.home / "blobs").path_for(hashlib.sha256(content).hexdigest())


def test_a_version_goes_only_when_nothing_needs_it(server: RunningServer, tmp_path: Path) -> None:
    name = unique("removable")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "kept.txt").write_text("in both versions\n")
    (folder / "first.txt").write_text(f"only in v1 of {name}\n")
    server.cli("datasets", "push", name, str(folder), check=True)
    (folder / "first.txt").unlink()
    (folder / "second.txt").write_text(f"only in v2 of {name}\n")
    server.cli("datasets", "push", name, str(folder), check=True)
    server.cli("datasets", "alias", name, "clean", "v2", check=True)

    refused(server.cli("datasets", "rm", f"{name}:v1"), "is the parent of v2")
    refused(server.cli("datasets", "rm", f"{name}:v2"), "alias clean names v2")
    refused(server.cli("datasets", "rm", name), "still has 2 versions")
    server.cli("datasets", "alias", name, "clean", "v1", check=True)
    server.cli("datasets", "rm", f"{name}:v2", check=True)

    assert [item["version"] for item in server.cli_json("datasets", "versions", name)] == ["v1"]
    assert server.cli_json("datasets", "show", name)["aliases"]["latest"] == "v1", "latest moved back"
    assert not blob(server, f"only in v2 of {name}\n".encode()).exists(), "v2's own file left the store"
    assert blob(server, b"in both versions\n").exists() and blob(server, f"only in v1 of {name}\n".encode()).exists()
    pulled = tmp_path / "pulled"
    server.cli("datasets", "pull", f"{name}:v1", str(pulled), check=True)
    assert sorted(path.name for path in pulled.iterdir()) == ["first.txt", "kept.txt"]


def test_a_version_an_unfinished_job_reads_stays_until_it_ends(server: RunningServer, tmp_path: Path) -> None:
    name = unique("read")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.txt").write_text(f"read by a job: {name}\n")
    server.cli("datasets", "push", name, str(folder), check=True)
    spec = tmp_path / "job.yaml"
    spec.write_text(json.dumps({"name": "reader", "command": ["sleep", "60"], "datasets": [{"name": name}]}))
    job = server.cli_json("submit", str(spec), "--no-code")
    wait_until(lambda: server.cli_json("show", str(job["id"]))["status"] == "RUNNING", 60, "the reader running")
    view = server.home / "dataset-views" / str(job["id"]) / name
    assert (view / "a.txt").read_text() == f"read by a job: {name}\n"

    refused(server.cli("datasets", "rm", f"{name}:v1"), f"unfinished job {job['id']} reads v1")
    server.cli("cancel", str(job["id"]), check=True)
    server.cli("wait", str(job["id"]), "--timeout", "60")
    server.cli("datasets", "rm", f"{name}:v1", check=True)
    assert not view.exists(), "the finished reader's tree went with the version"
    assert not blob(server, f"read by a job: {name}\n".encode()).exists()
    assert server.cli_json("show", str(job["id"]))["spec"]["datasets"][0]["version"] == "v1", "its record stays"
    server.cli("datasets", "rm", name, check=True)
    refused(server.cli("datasets", "show", name), "does not exist")
