"""`mlyard submit` with several files (one batch request, all or nothing, one code snapshot) and
`mlyard jobs` (the first page and how many there are; `--all` page after page), against the real
server through the real CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

from conftest import RunningServer

HOLD = {"quota": {"gpu": 0, "cpu": 0, "memory": 0}, "borrow_limit": {"gpu": 0, "cpu": 0, "memory": 0}}
"""A queue whose jobs wait: nothing runs, so the listings stay as submitted."""


def held_queue(server: RunningServer) -> str:
    name = f"cli-{uuid.uuid4().hex[:10]}"
    with server.client() as client:
        client.set_queue(name, HOLD)
    return name


def job_file(folder: Path, name: str, queue: str, **fields: object) -> Path:
    path = folder / f"{name}.yaml"
    spec = {"name": name, "command": ["true"], "queue": queue, "roles": [{"resources": {"memory": "64Mi"}}], **fields}
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def queued_in(server: RunningServer, queue: str) -> list[dict]:
    return server.cli_json("jobs", "--all", "--queue", queue)


def test_several_files_go_as_one_batch_with_one_code_snapshot(server: RunningServer, tmp_path: Path) -> None:
    queue = held_queue(server)
    (tmp_path / "train.py").write_text("print('hello')\n")
    files = [job_file(tmp_path, name, queue) for name in ("first", "second", "third")]
    before = datetime.now(UTC).isoformat()
    result = server.cli("submit", *(file.name for file in files), "--set", "priority=3", cwd=tmp_path, check=True)
    ids = [int(line) for line in result.stdout.split()]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert "from first.yaml" in result.stderr and "from third.yaml" in result.stderr
    jobs = {job["id"]: job for job in queued_in(server, queue)}
    assert [jobs[job_id]["name"] for job_id in ids] == ["first", "second", "third"]
    assert {jobs[job_id]["priority"] for job_id in ids} == {3}  # --set applies to every file
    snapshots = {jobs[job_id]["snapshot"] for job_id in ids}
    assert len(snapshots) == 1 and None not in snapshots

    # One request: the audit log has the batch and no single submission.
    audit = server.cli_json("audit", "--route", "/api/v1/jobs", "--since", before)
    assert [event["route"] for event in audit["events"]] == ["/api/v1/jobs:batch"]

    as_json = server.cli_json("submit", files[0].name, files[1].name, "--no-code", cwd=tmp_path)
    assert [job["name"] for job in as_json] == ["first", "second"] and as_json[0]["snapshot"] is None


def test_a_bad_file_submits_nothing_and_names_the_file(server: RunningServer, tmp_path: Path) -> None:
    queue = held_queue(server)
    good = job_file(tmp_path, "good", queue)
    bad = job_file(tmp_path, "bad", queue, roles=[{"replicas": 0}])
    result = server.cli("submit", str(good), str(bad), "--no-code")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {bad}: ") and "roles.0.replicas" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

    # Refused by the server rather than here: the error names the file, and no job of the batch is stored.
    missing = job_file(tmp_path, "lost", "no-such-queue-here")
    refused = server.cli("submit", str(good), str(missing), "--no-code")
    assert refused.returncode == 1 and str(missing) in refused.stderr and "Traceback" not in refused.stderr
    assert queued_in(server, queue) == []

    follow = server.cli("submit", str(good), str(good), "--no-code", "--follow")
    assert follow.returncode == 2 and "--follow" in follow.stderr


def test_jobs_shows_the_first_page_and_the_total_and_all_lists_every_job_once(server: RunningServer) -> None:
    queue = held_queue(server)
    with server.client() as client:
        client.submit_batch([({"name": f"listed-{index}", "command": ["true"], "queue": queue,
                               "roles": [{"resources": {"memory": "64Mi"}}]}, None) for index in range(57)])

    first = server.cli("jobs", "--queue", queue, check=True)
    rows = [line for line in first.stdout.splitlines() if "listed-" in line]
    assert len(rows) == 50 and first.stdout.startswith("ID ")
    assert "showing the newest 50 of 57 unfinished jobs; --all lists every job" in first.stderr
    numbers = [int(re.search(r"listed-(\d+)", row).group(1)) for row in rows]
    assert numbers == list(range(56, 6, -1))  # newest first

    small = server.cli("jobs", "--queue", queue, "--limit", "5", "--output", "json", check=True)
    assert len(json.loads(small.stdout)) == 5 and "of 57" in small.stderr

    # Pages of 8: the lines of every page under one header, each job once, no note about more.
    every = server.cli("jobs", "--all", "--queue", queue, "--limit", "8", check=True)
    assert every.stdout.count("ID ") == 1 and every.stderr == ""
    listed = [int(re.search(r"listed-(\d+)", line).group(1)) for line in every.stdout.splitlines()[1:]]
    assert listed == list(range(56, -1, -1))
    streamed = server.cli_json("jobs", "--all", "--queue", queue, "--limit", "8")
    assert [job["name"] for job in streamed] == [f"listed-{index}" for index in range(56, -1, -1)]


def test_jobs_imports_neither_rich_nor_the_models(server: RunningServer) -> None:
    probe = ("import sys\nfrom mlyard.cli import main\ntry:\n    main()\nfinally:\n"
             "    sys.stderr.write('loaded: ' + ' '.join(n for n, m in sys.modules.items() if m) + '\\n')\n")
    result = subprocess.run([sys.executable, "-c", probe, "jobs"], env=server.env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    [loaded] = re.findall(r"^loaded: (.*)$", result.stderr, re.MULTILINE)
    modules = set(loaded.split())
    assert "mlyard.cli.listing" in modules and "httpx" in modules
    # It prints the server's JSON: neither the API's models nor the spec's are built.
    unwanted = sorted(module for module in modules
                      if module.split(".")[0] in ("rich", "click", "pygments", "yaml")
                      or module in ("mlyard.storage", "mlyard.spec", "mlyard.api.jobs", "mlyard.api.errors"))
    assert not unwanted, f"mlyard jobs imported {unwanted}"
