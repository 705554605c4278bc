"""Code snapshots as hostile input and as keys: decompression bombs and deep nesting are refused
with the limit named, before they are decompressed in full; a digest works only for who sent
its bytes or for a project that keeps it; unfinished uploads do not outlive a restart."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import RunningServer, start_server, stop_server

from mlyard.storage import SnapshotError, UnpackLimits, extract_snapshot, validate_archive

MiB = 1024 * 1024
PASSWORD = "a long enough password"
ZEROS = gzip.compress(b"\0" * (64 * MiB), compresslevel=9)
"""One gzip member of 64 MiB of zeros (about 64 KiB); gzip members concatenate."""


def _header(name: str, size: int) -> bytes:
    member = tarfile.TarInfo(name)
    member.size = size
    return member.tobuf(format=tarfile.GNU_FORMAT)


def zeros_bomb(unpacked: int) -> bytes:
    """A tar.gz of one file of `unpacked` zero bytes (a multiple of 64 MiB)."""
    return gzip.compress(_header("zeros.bin", unpacked)) + ZEROS * (unpacked // (64 * MiB)) + gzip.compress(b"\0" * 1024)


def many_small_bombs(count: int) -> bytes:
    """A tar.gz of `count` files of 1 MiB of zeros each: small files, each within any limit."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for index in range(count):
            member = tarfile.TarInfo(f"part-{index}.bin")
            member.size = MiB
            archive.addfile(member, io.BytesIO(b"\0" * MiB))
    return buffer.getvalue()


def nested(depth: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        member = tarfile.TarInfo("d/" * depth + "train.py")
        member.size = 5
        archive.addfile(member, io.BytesIO(b"pass\n"))
    return buffer.getvalue()


def small(text: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        member = tarfile.TarInfo("train.py")
        member.size = len(text)
        archive.addfile(member, io.BytesIO(text.encode()))
    return buffer.getvalue()


# --------------------------------------------------------------------------- the archive checks


def test_a_bomb_is_refused_before_it_is_decompressed(tmp_path: Path) -> None:
    # Cut after 100 KB of its 2 MB: a validator that decompressed all of it would find it truncated.
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(zeros_bomb(2048 * MiB)[:100_000])
    with pytest.raises(SnapshotError, match="MLYARD_MAX_SNAPSHOT_UNPACKED_BYTES"):
        validate_archive(cut, limits=UnpackLimits.for_upload(200 * MiB))
    with pytest.raises(SnapshotError, match="MLYARD_MAX_SNAPSHOT_RATIO"):
        validate_archive(cut, limits=UnpackLimits(max_ratio=100))
    with pytest.raises(SnapshotError, match="corrupt|truncated|unexpected end"):
        validate_archive(cut)  # no limits: read to the cut


def test_extraction_checks_free_space_first(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    archive = tmp_path / "large.tar.gz"
    archive.write_bytes(zeros_bomb(64 * MiB))
    small_disk = tmp_path / "disk"
    small_disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small_disk)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with pytest.raises(SnapshotError, match="not enough free space.*unpacks to 64.0 MB"):
            extract_snapshot(archive, small_disk / "code")
        assert list(small_disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(small_disk)], check=True)


# --------------------------------------------------------------------------- through the server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    home = tmp_path_factory.mktemp("snapshots") / "home"
    leftover = home / "blobs" / "tmp" / "upload-killed.partial"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half an upload")
    running = start_server(home)
    yield running
    stop_server(running)


def _http(server: RunningServer, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _upload(http: httpx.Client, body: bytes, **params: str) -> httpx.Response:
    return http.put(f"/snapshots/{hashlib.sha256(body).hexdigest()}", content=body, params=params)


@pytest.mark.slow
def test_an_upload_left_by_a_killed_server_is_removed_at_start(server: RunningServer) -> None:
    assert list((server.home / "blobs" / "tmp").glob("*.partial")) == []


@pytest.mark.slow
@pytest.mark.parametrize(("body", "limit"), [
    pytest.param(lambda: zeros_bomb(2048 * MiB), "MLYARD_MAX_SNAPSHOT_UNPACKED_BYTES", id="2GiB-of-zeros"),
    pytest.param(lambda: many_small_bombs(300), "MLYARD_MAX_SNAPSHOT_RATIO", id="many-small-files"),
])
def test_decompression_bombs_are_refused_naming_the_limit(server: RunningServer, body, limit: str) -> None:
    payload = body()
    assert len(payload) < 3 * MiB
    with _http(server, server.token()) as http:
        answer = _upload(http, payload)
    assert answer.status_code == 422, answer.text
    assert limit in answer.json()["message"]
    assert list((server.home / "blobs" / "tmp").glob("*.partial")) == []


@pytest.mark.slow
def test_a_deeply_nested_archive_gets_a_clear_error(server: RunningServer) -> None:
    with _http(server, server.token()) as http:
        answer = _upload(http, nested(2000))
    assert answer.status_code == 422, answer.text
    assert "2001 directories deep; the limit is 256" in answer.json()["message"]


@pytest.mark.slow
def test_a_digest_is_no_key_to_another_projects_code(server: RunningServer) -> None:
    port = server.port
    with _http(server, server.token()) as admin:
        tokens = {}
        for user, project in ((f"alice-{port}", f"pa-{port}"), (f"bob-{port}", f"pb-{port}")):
            assert admin.post("/projects", json={"name": project}).status_code == 201
            assert admin.post("/users", json={"name": user, "password": PASSWORD}).status_code == 201
            assert admin.put(f"/projects/{project}/members/{user}", json={"role": "member"}).status_code == 200
            tokens[project] = admin.post("/login", json={"user": user, "password": PASSWORD}).json()["token"]
    code = small(f"print('the code of pa-{port}')\n")
    digest = hashlib.sha256(code).hexdigest()
    job = {"name": "borrowed", "project": f"pb-{port}", "command": ["true"], "snapshot": digest}
    with _http(server, tokens[f"pa-{port}"]) as alice, _http(server, tokens[f"pb-{port}"]) as bob:
        assert _upload(alice, code, project=f"pa-{port}").status_code == 201
        assert alice.get(f"/snapshots/{digest}").status_code == 200
        assert bob.get(f"/snapshots/{digest}").status_code == 404
        assert bob.get(f"/snapshots/{digest}", params={"project": f"pb-{port}"}).status_code == 404
        refused = bob.post("/jobs", json=job)
        assert refused.status_code == 422, refused.text
        assert refused.json()["details"][0]["field"] == "snapshot"
        assert "upload it" in refused.json()["message"]

        assert _upload(bob, code).status_code == 201  # the same bytes, sent by bob himself
        assert bob.get(f"/snapshots/{digest}").status_code == 200
        assert bob.post("/jobs", json=job).status_code == 201
