"""Datasets through the real CLI and server, on SQLite and PostgreSQL: push a folder of
scikit-learn's digits as PNG files, push it again (nothing travels, no version made), change it
and push a second version, compare them, pull each and check the bytes, move aliases; an
interrupted push picks up where it stopped; manifests that lie are refused; a tar.gz and a zip
push the files their directory pushes, and hostile archives and bombs are refused."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import time
import uuid
import zipfile
from pathlib import Path

import httpx
import pytest
from conftest import RunningServer

from mlyard.client.hash_cache import HashCache


def digits_folder(folder: Path, count: int = 24) -> Path:
    """train/<label>/<n>.png and test/<label>/<n>.png from scikit-learn's 8×8 digits."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    for index in range(count):
        split = "test" if index % 4 == 0 else "train"
        target = folder / split / str(digits.target[index])
        target.mkdir(parents=True, exist_ok=True)
        pixels = (digits.images[index] * 255 / 16).astype("uint8")
        Image.fromarray(pixels, mode="L").save(target / f"{index}.png")
    (folder / "README.md").write_text("# digits\n")
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_push_again_pull_diff_and_aliases(server: RunningServer, tmp_path: Path) -> None:
    name = unique("digits")
    source = digits_folder(tmp_path / "digits")
    first = server.cli_json("datasets", "push", name, str(source), "-m", "first")
    assert first["created"] and first["version"]["version"] == "v1"
    version = first["version"]
    assert version["file_count"] == 25 and version["aliases"] == ["latest"]
    figures = version["statistics"]
    assert figures["images"]["formats"] == {"PNG": 24} and figures["images"]["sizes"] == {"8x8": 24}
    assert figures["folders"]["train"]["files"] == 18 and figures["folders"]["."]["files"] == 1
    labelled = figures["labels"]  # train/<digit>/ and test/<digit>/: torchvision's ImageFolder layout
    assert labelled["source"] == "image folders" and sum(labelled["counts"].values()) == 24
    assert sum(labelled["splits"]["test"].values()) == 6 and set(labelled["counts"]) <= set("0123456789")

    with server.client() as client, HashCache(tmp_path / "hashes.sqlite") as cache:
        assert client.datasets.plan_push(source, cache).missing == [], "a second push uploads nothing"
    before = time.time()
    again = server.cli("datasets", "push", name, str(source), check=True)
    assert "unchanged, still v1" in again.stdout
    with server.client() as client:  # its files are v1's: no blob asked about or sent, no version asked for
        asked = [event.route for event in client.audit(since=before, limit=1000).events if event.method != "GET"]
    assert asked == [], asked

    (source / "train" / "extra.txt").write_text("new\n")
    (source / "README.md").write_text("# digits, second edition\n")
    removed = next(path for path in sorted((source / "test").rglob("*.png")))
    removed.unlink()
    second = server.cli_json("datasets", "push", name, str(source), "-m", "second")["version"]
    assert (second["version"], second["parent"], second["file_count"]) == ("v2", "v1", 25)

    changes = server.cli_json("datasets", "diff", name, "v1", "v2")
    assert [file["path"] for file in changes["added"]] == ["train/extra.txt"]
    assert [file["path"] for file in changes["removed"]] == [removed.relative_to(source).as_posix()]
    assert [change["path"] for change in changes["changed"]] == ["README.md"]

    pulled = tmp_path / "pulled"
    server.cli("datasets", "pull", f"{name}:v1", str(pulled), check=True)
    assert files_of(pulled) == files_of(digits_folder(tmp_path / "fresh")), "v1's bytes, as first pushed"
    kept = server.cli("datasets", "pull", f"{name}:v1", str(pulled), check=True)
    assert "0 files written, 25 already there" in kept.stdout

    server.cli("datasets", "alias", name, "clean", "v1", check=True)
    refused = server.cli("datasets", "alias", name, "v9", "v1")
    assert refused.returncode != 0 and "reads as a version" in refused.stderr and "Traceback" not in refused.stderr
    aliases = {item["alias"]: item for item in server.cli_json("datasets", "alias", name)}
    assert aliases["clean"]["version"] == "v1" and aliases["latest"]["version"] == "v2"
    assert [(move["before"], move["after"]) for move in aliases["latest"]["moves"]] == [(None, "v1"), ("v1", "v2")]
    listed = {item["name"]: item for item in server.cli_json("datasets", "ls")}
    assert listed[name]["versions"] == 2 and listed[name]["aliases"] == {"clean": "v1", "latest": "v2"}


def test_an_interrupted_push_sends_only_what_is_left(server: RunningServer, tmp_path: Path) -> None:
    name = unique("resumed")
    source = tmp_path / "data"
    source.mkdir()
    for index in range(8):
        (source / f"part-{index}.bin").write_bytes(uuid.uuid4().bytes * 64)
    with server.client() as client, HashCache(tmp_path / "hashes.sqlite") as cache:
        client.datasets.create("default", name)
        plan = client.datasets.plan_push(source, cache)
        assert len(plan.missing) == 8
        for file in plan.missing[:5]:  # then the connection drops
            client.datasets.upload(file.sha256, file.source)
        resumed = client.datasets.plan_push(source, cache)
        assert sorted(file.path for file in resumed.missing) == sorted(file.path for file in plan.missing[5:])
        created = client.datasets.push("default", name, resumed)
        assert created.created and created.version.file_count == 8


def test_push_from_archives_gives_the_files_of_the_directory(server: RunningServer, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    unpack_into = tmp_path / "tmp"
    unpack_into.mkdir()
    monkeypatch.setitem(server.env, "TMPDIR", str(unpack_into))
    source = tmp_path / "data"
    for relative, content in {"a.txt": b"alpha\n", "sub/b.bin": bytes(range(256)) * 64,
                              "sub/deeper/c.csv": b"x,y\n1,2\n", "sub/empty": b""}.items():
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_bytes(content)
    with tarfile.open(tmp_path / "data.tar.gz", "w:gz") as archive:
        archive.add(source, arcname=".")
    with zipfile.ZipFile(tmp_path / "data.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(source.rglob("*")):
            archive.write(path, path.relative_to(source).as_posix())
    from_directory, from_archives = unique("from-dir"), unique("from-archive")
    server.cli("datasets", "push", from_directory, str(source), check=True)
    made = server.cli_json("datasets", "push", from_archives, "--from-archive", str(tmp_path / "data.tar.gz"))
    assert made["created"] and made["version"]["file_count"] == 4
    again = server.cli("datasets", "push", from_archives, "--from-archive", str(tmp_path / "data.zip"), check=True)
    assert "unchanged, still v1" in again.stdout, "the zip holds the files of the tar.gz"
    with server.client() as client:
        assert [file.model_dump() for file in client.datasets.files("default", from_archives, "v1")] == \
            [file.model_dump() for file in client.datasets.files("default", from_directory, "v1")]
    both = server.cli("datasets", "push", from_archives, str(source), "--from-archive", str(tmp_path / "data.zip"))
    assert both.returncode == 2 and "not both" in both.stderr
    assert list(unpack_into.iterdir()) == [], "the unpacked files are removed"


class Zeros(io.RawIOBase):
    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        buffer[:] = bytes(len(buffer))
        return len(buffer)


def hostile_archive(path: Path, case: str) -> Path:
    bomb = 200 * 1024 * 1024
    if case == "zip bomb":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("zeros", "w") as sink:
            for _ in range(bomb // (1 << 20)):
                sink.write(bytes(1 << 20))
        return path
    with gzip.open(path, "wb", compresslevel=1) as raw, tarfile.open(fileobj=raw, mode="w") as archive:
        member = tarfile.TarInfo({"dotdot": "../x", "symlink out": "out", "gzip bomb": "zeros"}[case])
        if case == "symlink out":
            member.type, member.linkname = tarfile.SYMTYPE, "../../etc"
        member.size = bomb if case == "gzip bomb" else 0
        archive.addfile(member, Zeros() if case == "gzip bomb" else None)
    return path


@pytest.mark.parametrize("case, says", [
    ("dotdot", "member '../x' would resolve outside the target directory"),
    ("symlink out", "symlink 'out' -> '../../etc' points outside the target directory"),
    ("gzip bomb", "unpacks to more than 10.0 MB, the limit of --max-unpacked"),
    ("zip bomb", "unpacks to more than 10.0 MB, the limit of --max-unpacked"),
], ids=["dotdot", "symlink-out", "gzip-bomb", "zip-bomb"])
def test_a_hostile_archive_makes_nothing(server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         case: str, says: str) -> None:
    unpack_into = tmp_path / "tmp"
    unpack_into.mkdir()
    monkeypatch.setitem(server.env, "TMPDIR", str(unpack_into))
    archive = hostile_archive(tmp_path / ("bomb.zip" if case == "zip bomb" else "hostile.tar.gz"), case)
    name = unique("hostile")
    refused = server.cli("datasets", "push", name, "--from-archive", str(archive), "--max-unpacked", "10Mi")
    assert refused.returncode == 1 and f"archive {archive.name} " in refused.stderr and says in refused.stderr, \
        refused.stderr
    assert "Traceback" not in refused.stderr
    assert name not in {item["name"] for item in server.cli_json("datasets", "ls")}, "no dataset, no version"
    assert list(unpack_into.iterdir()) == [], "nothing unpacked is left"


def put_manifest(http: httpx.Client, files: list[dict]) -> str:
    body = json.dumps({"files": files}).encode()
    digest = hashlib.sha256(body).hexdigest()
    assert http.put(f"/blobs/{digest}", content=body).status_code == 201
    return digest


@pytest.mark.parametrize("entry, says", [
    ({"path": "../escape.txt"}, "not normalized"),
    ({"path": "/etc/passwd"}, "absolute"),
    ({"path": "a\\b.txt"}, "backslash"),
    ({"size": 999}, "blob holds 5"),
    ({"sha256": "f" * 64}, "not uploaded"),
])
def test_a_manifest_that_lies_is_refused(server: RunningServer, entry: dict, says: str) -> None:
    name = unique("lies")
    content = b"hello"
    good = {"path": "ok.txt", "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
    with httpx.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {server.token()}"}) as http:
        assert http.post("/datasets", json={"name": name}).status_code == 201
        assert http.put(f"/blobs/{good['sha256']}", content=content).status_code == 201
        manifest = put_manifest(http, [{**good, **entry}])
        answer = http.post(f"/datasets/default/{name}/versions", json={"manifest": manifest})
        assert answer.status_code == 422 and answer.json()["details"][0]["field"] == "manifest"
        assert says in answer.json()["message"]
        assert http.get(f"/datasets/default/{name}").json()["versions"] == 0, "nothing half made"
        clash = put_manifest(http, [good, {**good, "path": "ok.txt/inner.txt"}])
        answer = http.post(f"/datasets/default/{name}/versions", json={"manifest": clash})
        assert answer.status_code == 422 and "as a file and as a folder" in answer.json()["message"]


def test_an_upload_that_does_not_match_its_digest_leaves_nothing(server: RunningServer) -> None:
    with httpx.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {server.token()}"}) as http:
        claimed = hashlib.sha256(b"what was promised").hexdigest()
        answer = http.put(f"/blobs/{claimed}", content=b"something else")
        assert answer.status_code == 422 and answer.json()["details"][0]["field"] == "digest"
        assert http.post("/blobs:missing", json={"digests": [claimed]}).json() == {"missing": [claimed]}
    blobs = server.home / "blobs"
    assert not (blobs / claimed[:2] / claimed).exists()
    assert not list((blobs / "tmp").glob("*.partial")), "no half-written upload left behind"


def test_small_files_travel_in_packs(server: RunningServer, tmp_path: Path) -> None:
    name = unique("packed")
    source = tmp_path / "many"
    for index in range(300):
        (source / f"part-{index % 7}").mkdir(parents=True, exist_ok=True)
        (source / f"part-{index % 7}" / f"{index}.bin").write_bytes(uuid.uuid4().bytes * 2 * (1 + index))
    (source / "big.bin").write_bytes(uuid.uuid4().bytes * (100_000))  # 1.5 MiB: alone, as a PUT of its own
    sent: list[str] = []
    with server.client() as client, HashCache(tmp_path / "hashes.sqlite") as cache:
        client._http.event_hooks["request"].append(lambda request: sent.append(f"{request.method} {request.url.path}"))
        client.datasets.create("default", name)
        plan = client.datasets.plan_push(source, cache)
        created = client.datasets.push("default", name, plan)
    assert created.created and created.version.file_count == 301
    puts = [line for line in sent if line.startswith("PUT")]
    assert puts.count("PUT /api/v1/blobs/pack") == 1, sent
    assert len(puts) == 3, "one pack (over MLYARD_MAX_REQUEST_BYTES, which it is exempt from), the big file and " \
        "the manifest"
    pulled = tmp_path / "pulled"
    server.cli("datasets", "pull", f"{name}:v1", str(pulled), check=True)
    assert files_of(pulled) == files_of(source)


def test_a_pack_that_lies_stores_none_of_it(server: RunningServer) -> None:
    from mlyard.storage.packs import encode, encode_header, encode_record

    fine, claimed = b"fine " + uuid.uuid4().bytes, hashlib.sha256(b"what was promised").hexdigest()
    digest = hashlib.sha256(fine).hexdigest()
    with httpx.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {server.token()}"}) as http:
        lying = encode_header(2) + encode([(digest, fine)])[12:] + encode_record(claimed, 5) + b"other"
        answer = http.put("/blobs/pack", content=lying)
        assert answer.status_code == 422 and answer.json()["details"][0]["field"] == "digest"
        assert claimed in answer.json()["message"]
        answer = http.put("/blobs/pack", content=encode([(digest, fine)])[:-2])
        assert answer.status_code == 422 and "cut short" in answer.json()["message"]
        assert http.post("/blobs:missing", json={"digests": [digest]}).json() == {"missing": [digest]}
        stored = http.put("/blobs/pack", content=encode([(digest, fine)]))
        assert stored.status_code == 200 and stored.json() == {"blobs": [{"digest": digest, "size": len(fine)}]}
        assert http.post("/blobs:missing", json={"digests": [digest]}).json() == {"missing": []}
    assert not list((server.home / "blobs" / "tmp").glob("*.partial"))
