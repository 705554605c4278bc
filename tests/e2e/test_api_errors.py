"""Bad input gets a clear answer naming what is wrong: over HTTP and through the CLI."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import httpx
import pytest

from conftest import RunningServer

VALID = {"name": "ok", "command": ["true"]}


def api(server: RunningServer, token: str | None = "admin") -> httpx.Client:
    headers = {}
    if token == "admin":
        headers["Authorization"] = f"Bearer {server.token()}"
    elif token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({**VALID, "colour": "blue"}, "colour"),
        ({**VALID, "roles": [{"replicas": -1}]}, "roles.0.replicas"),
        ({**VALID, "command": []}, "command"),
        ({**VALID, "command": "   "}, "command"),
        ({**VALID, "roles": [{"resources": {"memory": "lots"}}]}, "roles.0.resources.memory"),
        ({"command": ["true"]}, "name"),
    ],
)
def test_a_bad_spec_is_answered_422_with_the_field_path(server: RunningServer, spec: dict, field: str) -> None:
    with api(server) as client:
        response = client.post("/jobs", json=spec)
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid_request"
    assert field in [detail["field"] for detail in body["details"]]
    assert field in body["message"]


def test_absurd_ids_and_offsets_are_422_not_500(server: RunningServer) -> None:
    with api(server) as client:
        for path in ("/jobs/99999999999999999999", "/jobs/1/logs?offset=99999999999999999999", "/jobs/0"):
            response = client.get(path)
            assert response.status_code == 422, path


def test_unknown_job_is_404(server: RunningServer) -> None:
    with api(server) as client:
        for method, path in (("GET", "/jobs/99999"), ("POST", "/jobs/99999/cancel"), ("GET", "/jobs/99999/logs")):
            response = client.request(method, path)
            assert response.status_code == 404, path
            assert response.json()["message"] == "job 99999 does not exist"


@pytest.mark.parametrize("token", [None, "mly_wrong", "not-a-token"])
def test_missing_or_wrong_token_is_401(server: RunningServer, token: str | None) -> None:
    with api(server, token=token) as client:
        for method, path in (("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/nodes"), ("GET", "/jobs/1")):
            response = client.request(method, path, json=VALID if method == "POST" else None)
            assert response.status_code == 401, (method, path)
            assert response.json()["error"] == "unauthorized"


def test_health_and_openapi_answer_without_a_token(server: RunningServer) -> None:
    with api(server, token=None) as client:
        assert client.get("/health").json()["status"] == "ok"
        schema = client.get("/openapi.json").json()
    assert "/api/v1/jobs" in schema["paths"] and "/api/v1/jobs/{job_id}/logs" in schema["paths"]


def test_the_token_file_is_private(server: RunningServer) -> None:
    assert (server.home / "admin.token").stat().st_mode & 0o777 == 0o600


def _archive(build) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        build(archive)
    return buffer.getvalue()


def _add_file(archive: tarfile.TarFile, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def _add_link(archive: tarfile.TarFile, name: str, target: str, kind=tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    archive.addfile(info)


def _add_device(archive: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    archive.addfile(info)


MALICIOUS = {
    "dot-dot": lambda a: _add_file(a, "../escaped.txt"),
    "absolute": lambda a: _add_file(a, "/tmp/mlyard-absolute-escape.txt"),
    "symlink-out": lambda a: (_add_link(a, "link", "../../.."), _add_file(a, "link/escaped.txt")),
    "hardlink-out": lambda a: _add_link(a, "hard", "/etc/passwd", tarfile.LNKTYPE),
    "device": lambda a: _add_device(a, "dev"),
}


@pytest.mark.parametrize("case", sorted(MALICIOUS))
def test_a_malicious_snapshot_is_rejected_and_nothing_is_stored(server: RunningServer, case: str) -> None:
    payload = _archive(MALICIOUS[case])
    digest = hashlib.sha256(payload).hexdigest()
    before = sorted(path for path in (server.home / "blobs").rglob("*") if path.is_file())
    with api(server) as client:
        response = client.put(f"/snapshots/{digest}", content=payload)
        assert response.status_code == 422, response.text
        assert "snapshot rejected" in response.json()["message"]
        assert client.get(f"/snapshots/{digest}").status_code == 404
    after = sorted(path for path in (server.home / "blobs").rglob("*") if path.is_file())
    assert after == before
    assert not Path("/tmp/mlyard-absolute-escape.txt").exists()
    assert not (server.home / "escaped.txt").exists()


def test_a_snapshot_whose_bytes_do_not_match_its_digest_is_rejected(server: RunningServer) -> None:
    payload = _archive(lambda a: _add_file(a, "train.py", b"print('hi')\n"))
    with api(server) as client:
        response = client.put(f"/snapshots/{'0' * 64}", content=payload)
    assert response.status_code == 422


def test_the_cli_reports_bad_specs_in_one_line(server: RunningServer, tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\ncommand: ['true']\nroles:\n  - replicas: -2\n")
    result = server.cli("submit", str(spec), "--no-code")
    assert result.returncode == 2
    assert "roles.0.replicas" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

    spec.write_text("name: bad\ncommand: ['true']\ncolour: blue\n")
    result = server.cli("submit", str(spec), "--no-code")
    assert result.returncode == 2 and "colour" in result.stderr

    result = server.cli("submit", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2 and "cannot read job file" in result.stderr

    result = server.cli("show", "424242")
    assert result.returncode == 1 and "job 424242 does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_cli_says_when_the_server_is_not_there(server: RunningServer, tmp_path: Path) -> None:
    environment = {**server.env, "MLYARD_URL": "http://127.0.0.1:9"}
    import subprocess

    from conftest import MLYARD

    result = subprocess.run([MLYARD, "jobs"], env=environment, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "cannot reach the mlyard server" in result.stderr and "Traceback" not in result.stderr
