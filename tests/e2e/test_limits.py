"""Limits that keep one client or one job from filling the server: the size of request bodies
(MLYARD_MAX_REQUEST_BYTES) and the size of a replica's log (MLYARD_MAX_LOG_BYTES), on a real
server started with small ones. Both databases: the request limit stands in front of every
route, and the job must still end and be recorded the same way."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import DATABASES, RunningServer, start_server, stop_server

from mlyard.errors import MlyardError
from mlyard.runtime.launch_config import OUTPUT_LOG
from mlyard.runtime.launcher import truncation_line
from mlyard.server.settings import ServerSettings

LIMIT = 64 * 1024
TRUNCATED = truncation_line(LIMIT).decode()


@pytest.fixture(scope="module", params=DATABASES)
def limited(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp(f"limits-{request.param}"), database=request.param,
                          MLYARD_MAX_REQUEST_BYTES="64Ki", MLYARD_MAX_LOG_BYTES="64Ki")
    yield server
    stop_server(server)


def api(server: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {server.token()}"},
                        timeout=30)


def job_count(server: RunningServer) -> int:
    with server.client() as client:
        return len(client.jobs(include_finished=True))


def huge_spec(name: str) -> dict:
    return {"name": name, "command": ["true"], "env": {"BIG": "x" * (200 * 1024)}}


def assert_refused(response: httpx.Response) -> str:
    assert response.status_code == 413, response.text
    body = response.json()
    assert body["error"] == "payload_too_large"
    assert "64.0 KiB" in body["message"] and "MLYARD_MAX_REQUEST_BYTES" in body["message"]
    return body["message"]


def test_a_body_over_the_limit_is_refused_before_it_creates_a_job(limited: RunningServer) -> None:
    before = job_count(limited)
    with api(limited) as client:
        message = assert_refused(client.post("/jobs", json=huge_spec("huge")))
    assert message.startswith("the request body (200.")  # the declared size, read from Content-Length
    assert job_count(limited) == before


def test_a_chunked_body_is_counted_as_it_arrives_and_refused(limited: RunningServer) -> None:
    body = httpx.Request("POST", "/", json=huge_spec("huge-chunked")).content

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 8192):
            yield body[start:start + 8192]

    before = job_count(limited)
    with api(limited) as client:
        response = client.post("/jobs", content=chunks(), headers={"Content-Type": "application/json"})
        assert response.request.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in response.request.headers
        assert_refused(response)
        # The connection is still good for the next request.
        assert client.get("/health").status_code == 200
    assert job_count(limited) == before


def test_bodies_under_the_limit_still_work_chunked_or_not(limited: RunningServer) -> None:
    spec = {"name": "small", "command": ["true"], "env": {"SMALL": "x" * 1024}}
    with api(limited) as client:
        declared = client.post("/jobs", json=spec)
        chunked = client.post("/jobs", content=iter([httpx.Request("POST", "/", json=spec).content]),
                              headers={"Content-Type": "application/json"})
    assert declared.status_code == 201, declared.text
    assert chunked.status_code == 201, chunked.text


def test_a_huge_web_form_is_refused(limited: RunningServer) -> None:
    with httpx.Client(base_url=limited.url, timeout=30) as client:
        assert_refused(client.post("/submit", data={"yaml": "x" * (200 * 1024), "mode": "yaml"}))
        # A small form is not stopped by the limit (it is turned away for having no session).
        assert client.post("/submit", data={"yaml": "x", "mode": "yaml"}).status_code != 413


def test_a_snapshot_over_the_request_limit_is_still_uploaded(limited: RunningServer, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "weights.bin").write_bytes(os.urandom(100 * 1024))  # does not compress below the limit
    job = limited.cli_json("run", "--name", "big-code", "--context", str(project), "--",
                           "python", "-c", "import os; print('size', os.path.getsize('weights.bin'))")
    archive = next((limited.home / "blobs").rglob(job["snapshot"]))
    assert archive.stat().st_size > LIMIT
    assert limited.cli("wait", str(job["id"]), "--timeout", "60").returncode == 0
    assert "size 102400" in limited.cli("logs", str(job["id"]), check=True).stdout


def test_a_replica_log_stops_at_the_limit_and_the_job_succeeds(limited: RunningServer) -> None:
    # About 1 MiB as fast as Python prints it.
    script = "import sys\nfor i in range(10000): sys.stdout.write('%099d\\n' % i)\nprint('done')"
    job = limited.cli_json("run", "--no-code", "--name", "chatty", "--", "python", "-c", script)
    assert limited.cli("wait", str(job["id"]), "--timeout", "60").returncode == 0
    detail = limited.cli_json("show", str(job["id"]))
    assert detail["status"] == "SUCCEEDED" and detail["exit_code"] == 0

    log = (limited.home / "runs" / str(job["id"]) / "1" / "worker-0" / OUTPUT_LOG).read_text()
    assert len(log) <= LIMIT + len(TRUNCATED) + 1  # a cut inside a line ends it first
    assert log.count("log truncated") == 1
    assert log.endswith(TRUNCATED)
    assert log.startswith(f"{0:099d}\n{1:099d}\n")
    assert "done" not in log

    printed = limited.cli("logs", str(job["id"]), check=True).stdout
    assert printed.rstrip("\n").splitlines()[-1] == TRUNCATED.rstrip("\n")
    assert "64.0 KiB" in TRUNCATED


@pytest.mark.parametrize("variable", ["MLYARD_MAX_REQUEST_BYTES", "MLYARD_MAX_LOG_BYTES"])
def test_sizes_come_from_the_environment_and_a_bad_one_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str
) -> None:
    monkeypatch.setenv("MLYARD_HOME", str(tmp_path))
    monkeypatch.delenv("MLYARD_MAX_REQUEST_BYTES", raising=False)
    monkeypatch.delenv("MLYARD_MAX_LOG_BYTES", raising=False)
    defaults = ServerSettings.from_environment()
    assert (defaults.max_request_bytes, defaults.max_log_bytes) == (1024**2, 1024**3)

    monkeypatch.setenv(variable, "2Mi")
    chosen = ServerSettings.from_environment()
    assert {"MLYARD_MAX_REQUEST_BYTES": chosen.max_request_bytes,
            "MLYARD_MAX_LOG_BYTES": chosen.max_log_bytes}[variable] == 2 * 1024**2

    for bad in ("lots", "-5", "0"):
        monkeypatch.setenv(variable, bad)
        with pytest.raises(MlyardError, match=f"^{variable}: "):
            ServerSettings.from_environment()
