"""`mlyard submit`/`run` ship the working directory as a snapshot; each replica runs in its own copy."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import httpx
from conftest import RunningServer, start_server, stop_server

LISTING = """
import json, os, pathlib
here = pathlib.Path.cwd()
(here / f"written-by-{os.environ['RANK']}").write_text('x')
files = sorted(str(p.relative_to(here)) for p in here.rglob('*') if p.is_file())
print('LISTING ' + json.dumps({'cwd': str(here), 'files': files, 'data': (here / 'data.txt').read_text()}))
"""


def test_replicas_run_in_their_own_copy_of_the_code_without_ignored_files(
    server: RunningServer, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "list_files.py").write_text(LISTING)
    (project / "data.txt").write_text("hello from the snapshot")
    (project / "pkg" / "module.py").write_text("X = 1\n")
    (project / "big.bin").write_bytes(b"0" * 1000)
    (project / "secret.txt").write_text("do not ship")
    (project / ".gitignore").write_text("*.bin\n")
    (project / ".mlyardignore").write_text("secret.txt\n")

    job = server.cli_json("run", "--replicas", "2", "--name", "listing", "--", "python", "list_files.py", cwd=project)
    assert job["snapshot"] and len(job["snapshot"]) == 64
    assert server.cli("wait", str(job["id"]), "--timeout", "60").returncode == 0

    listings = []
    for rank in ("0", "1"):
        log = server.cli("logs", str(job["id"]), "--replica", rank, check=True).stdout
        line = next(line for line in log.splitlines() if line.startswith("LISTING "))
        listings.append(json.loads(line.removeprefix("LISTING ")))
    for rank, listing in enumerate(listings):
        assert listing["data"] == "hello from the snapshot"
        assert "pkg/module.py" in listing["files"] and "list_files.py" in listing["files"]
        assert "big.bin" not in listing["files"] and "secret.txt" not in listing["files"]
        assert [name for name in listing["files"] if name.startswith("written-by")] == [f"written-by-{rank}"]
    assert listings[0]["cwd"] != listings[1]["cwd"], "each replica has its own extracted copy"
    assert str(server.home) in listings[0]["cwd"] and not listings[0]["cwd"].startswith(str(project))
    assert not (project / "written-by-0").exists(), "the submitter's directory is untouched"


def test_a_code_directory_over_the_cap_is_refused_before_upload(server: RunningServer, tmp_path: Path) -> None:
    project = tmp_path / "huge"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    with open(project / "weights.bin", "wb") as handle:  # sparse: costs no disk
        handle.truncate(201 * 1024 * 1024)
    blobs_before = sorted((server.home / "blobs").rglob("*"))
    result = server.cli("run", "--", "python", "train.py", cwd=project)
    assert result.returncode == 1
    assert "snapshot limit" in result.stderr and ".mlyardignore" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted((server.home / "blobs").rglob("*")) == blobs_before


def test_the_code_size_limit_can_be_set_on_the_command_line(server: RunningServer, tmp_path: Path) -> None:
    project = tmp_path / "small-limit"
    project.mkdir()
    (project / "data.bin").write_bytes(b"1" * 5000)
    result = server.cli("run", "--max-code-size", "1Ki", "--", "true", cwd=project)
    assert result.returncode == 1 and "snapshot limit" in result.stderr
    result = server.cli("run", "--max-code-size", "lots", "--", "true", cwd=project)
    assert result.returncode == 2 and "--max-code-size" in result.stderr


def test_the_server_refuses_uploads_over_its_own_limit(tmp_path: Path) -> None:
    limited = start_server(tmp_path / "limited", MLYARD_MAX_SNAPSHOT="4Ki")
    try:
        payload = os.urandom(8192)
        digest = hashlib.sha256(payload).hexdigest()
        response = httpx.put(f"{limited.url}/api/v1/snapshots/{digest}", content=payload,
                             headers={"Authorization": f"Bearer {limited.token()}"})
        assert response.status_code == 413
        assert "MLYARD_MAX_SNAPSHOT" in response.json()["message"]
        assert not [path for path in (limited.home / "blobs").rglob("*") if path.is_file()]
    finally:
        stop_server(limited)
