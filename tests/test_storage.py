"""Snapshot packing, archive validation and extraction, and the blob store, on real files."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from mlyard.storage import (
    DEFAULT_MAX_SNAPSHOT_BYTES,
    BlobStore,
    PackedSnapshot,
    SnapshotError,
    SnapshotTooLarge,
    extract_snapshot,
    list_snapshot_files,
    pack_directory,
    validate_archive,
)


def write(path: Path, content: str | bytes = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    return path


def names(paths: list[Path]) -> list[str]:
    return [path.as_posix() for path in paths]


def tree_contents(root: Path) -> dict[str, str | bytes]:
    """Relative path -> bytes for files, "-> target" for symlinks."""
    found: dict[str, str | bytes] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[relative] = "-> " + os.readlink(path)
        elif path.is_file():
            found[relative] = path.read_bytes()
    return found


# --------------------------------------------------------------------------- listing


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write(root / "train.py", "print('train')\n")
    write(root / ".gitignore", "*.log\n!keep.log\n/outputs/\n__pycache__/\n")
    write(root / "debug.log", "noise")
    write(root / "keep.log", "kept")
    write(root / "outputs" / "model.pt", b"\0" * 100)
    write(root / "pkg" / "__init__.py", "")
    write(root / "pkg" / "__pycache__" / "m.cpython-311.pyc", b"\0")
    write(root / "pkg" / "outputs" / "fixture.txt", "anchored pattern does not apply here")
    write(root / "pkg" / ".gitignore", "secret.txt\n!debug.log\n")
    write(root / "pkg" / "secret.txt", "hidden")
    write(root / "pkg" / "debug.log", "re-included by the deeper file")
    write(root / "pkg" / "sub" / "secret.txt", "hidden as well")
    write(root / ".mlyardignore", "data/\n")
    write(root / "data" / "big.bin", b"\0" * 1000)
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / "pkg" / "vendored" / ".git", "gitdir: ../../.git/modules/vendored\n")
    write(root / "pkg" / "vendored" / "code.py", "")
    return root


def test_listing_honours_ignore_files(project: Path) -> None:
    assert names(list_snapshot_files(project)) == [
        ".gitignore",
        ".mlyardignore",
        "keep.log",
        "pkg/.gitignore",
        "pkg/__init__.py",
        "pkg/debug.log",
        "pkg/outputs/fixture.txt",
        "pkg/vendored/code.py",
        "train.py",
    ]


def test_mlyardignore_takes_precedence_over_gitignore(tmp_path: Path) -> None:
    write(tmp_path / ".gitignore", "!notes.md\n")
    write(tmp_path / ".mlyardignore", "*.md\n!README.md\n")
    write(tmp_path / "notes.md")
    write(tmp_path / "README.md")
    assert names(list_snapshot_files(tmp_path)) == [".gitignore", ".mlyardignore", "README.md"]


def test_file_inside_ignored_directory_cannot_be_reincluded(tmp_path: Path) -> None:
    # git's rule: once a directory is excluded, nothing below it is looked at.
    write(tmp_path / ".gitignore", "build/\n!build/keep.txt\n")
    write(tmp_path / "build" / "keep.txt")
    write(tmp_path / "main.py")
    assert names(list_snapshot_files(tmp_path)) == [".gitignore", "main.py"]


def test_ignored_directories_are_not_descended_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / ".gitignore", ".venv/\n")
    write(tmp_path / ".venv" / "lib" / "site.py")
    write(tmp_path / "main.py")
    scanned: list[str] = []
    real_scandir = os.scandir

    def recording_scandir(path):  # type: ignore[no-untyped-def]
        scanned.append(Path(path).name)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", recording_scandir)
    assert names(list_snapshot_files(tmp_path)) == [".gitignore", "main.py"]
    assert ".venv" not in scanned and "lib" not in scanned


def test_symlinks_are_listed_not_followed(tmp_path: Path) -> None:
    write(tmp_path / "real" / "a.txt")
    (tmp_path / "alias").symlink_to("real")
    assert names(list_snapshot_files(tmp_path)) == ["alias", "real/a.txt"]


def test_missing_directory_is_a_snapshot_error(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="does not exist"):
        list_snapshot_files(tmp_path / "nope")
    write(tmp_path / "file.txt")
    with pytest.raises(SnapshotError, match="not a directory"):
        pack_directory(tmp_path / "file.txt", tmp_path / "out.tar.gz")


# --------------------------------------------------------------------------- packing


def test_pack_contains_exactly_the_listed_files(project: Path, tmp_path: Path) -> None:
    packed = pack_directory(project, tmp_path / "out" / "snapshot.tar.gz")
    assert isinstance(packed, PackedSnapshot)
    assert packed.path == tmp_path / "out" / "snapshot.tar.gz"
    data = packed.path.read_bytes()
    assert packed.size == len(data)
    assert packed.digest == hashlib.sha256(data).hexdigest()
    listed = names(list_snapshot_files(project))
    assert packed.file_count == len(listed)
    assert packed.content_bytes == sum((project / name).stat().st_size for name in listed)
    with tarfile.open(packed.path, "r:gz") as archive:
        members = archive.getmembers()
    assert [member.name for member in members] == listed
    for member in members:
        assert (member.uid, member.gid, member.uname, member.gname) == (0, 0, "", "")
    # Nothing but the archive itself is left beside it.
    assert [path.name for path in packed.path.parent.iterdir()] == ["snapshot.tar.gz"]


def test_pack_is_deterministic(project: Path, tmp_path: Path) -> None:
    first = pack_directory(project, tmp_path / "first.tar.gz")
    # Touching files must not change the digest: only contents and names count.
    os.utime(project / "train.py", (1_700_000_000, 1_700_000_000))
    second = pack_directory(project, tmp_path / "second.tar.gz")
    assert first.digest == second.digest
    assert first.path.read_bytes() == second.path.read_bytes()
    # The gzip header carries mtime 0 and no file name.
    header = first.path.read_bytes()[:10]
    assert header[4:8] == b"\0\0\0\0"
    assert header[3] & 0x08 == 0
    write(project / "train.py", "print('changed')\n")
    assert pack_directory(project, tmp_path / "third.tar.gz").digest != first.digest


def test_pack_keeps_only_the_executable_bit(tmp_path: Path) -> None:
    source = tmp_path / "source"
    write(source / "run.sh", "#!/bin/sh\n").chmod(0o700)
    write(source / "data.txt").chmod(0o600)
    packed = pack_directory(source, tmp_path / "out.tar.gz")
    with tarfile.open(packed.path, "r:gz") as archive:
        modes = {member.name: member.mode for member in archive.getmembers()}
    assert modes == {"data.txt": 0o644, "run.sh": 0o755}


def test_progress_reports_up_to_the_total(tmp_path: Path) -> None:
    source = tmp_path / "source"
    write(source / "a.bin", b"a" * 3000)
    write(source / "b.bin", b"b" * 5000)
    calls: list[tuple[int, int]] = []
    packed = pack_directory(source, tmp_path / "out.tar.gz",
                            progress=lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, 8000)
    assert calls[-1] == (8000, 8000)
    assert all(total == 8000 for _, total in calls)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert packed.content_bytes == 8000


def test_progress_for_an_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    calls: list[tuple[int, int]] = []
    packed = pack_directory(tmp_path / "empty", tmp_path / "out.tar.gz",
                            progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (0, 0)
    assert packed.file_count == 0
    assert validate_archive(packed.path) == 0


def test_over_the_limit_raises_before_writing(tmp_path: Path) -> None:
    source = tmp_path / "source"
    write(source / "weights.bin", b"\0" * (3 * 1024 * 1024 + 300 * 1024))
    destination = tmp_path / "out" / "snapshot.tar.gz"
    with pytest.raises(SnapshotTooLarge) as caught:
        pack_directory(source, destination, max_bytes=2 * 1024 * 1024)
    message = str(caught.value)
    assert "3.3 MB" in message and "2.0 MB" in message
    assert str(source) in message and ".mlyardignore" in message
    assert "\n" not in message
    assert not destination.exists()
    assert not destination.parent.exists() or not any(destination.parent.iterdir())
    assert isinstance(caught.value, SnapshotError)
    assert DEFAULT_MAX_SNAPSHOT_BYTES == 200 * 1024 * 1024


def test_pack_refuses_symlinks_that_point_outside(tmp_path: Path) -> None:
    source = tmp_path / "source"
    write(source / "train.py")
    (source / "data").symlink_to("/tmp")
    destination = tmp_path / "out.tar.gz"
    with pytest.raises(SnapshotError, match="'data'.*mlyardignore"):
        pack_directory(source, destination)
    assert not destination.exists()
    write(source / ".mlyardignore", "data\n")
    assert pack_directory(source, destination).file_count == 2


# --------------------------------------------------------------------------- round trip


def test_round_trip(project: Path, tmp_path: Path) -> None:
    (project / "pkg" / "latest").symlink_to("../train.py")
    (project / "alias").symlink_to("pkg")
    write(project / "scripts" / "run.sh", "#!/bin/sh\n").chmod(0o755)
    packed = pack_directory(project, tmp_path / "snapshot.tar.gz")
    assert validate_archive(packed.path) == packed.file_count
    target = tmp_path / "extracted" / "code"
    extract_snapshot(packed.path, target)

    expected = {name: (project / name).read_bytes()
                for name in names(list_snapshot_files(project))
                if not (project / name).is_symlink()}
    expected["pkg/latest"] = "-> ../train.py"
    expected["alias"] = "-> pkg"
    assert tree_contents(target) == expected
    assert (target / "pkg" / "latest").read_text() == "print('train')\n"
    assert os.access(target / "scripts" / "run.sh", os.X_OK)


def test_extract_into_an_existing_empty_directory(tmp_path: Path) -> None:
    write(tmp_path / "source" / "a.txt", "a")
    packed = pack_directory(tmp_path / "source", tmp_path / "s.tar.gz")
    target = tmp_path / "target"
    target.mkdir()
    extract_snapshot(packed.path, target)
    assert (target / "a.txt").read_text() == "a"
    with pytest.raises(SnapshotError, match="not empty"):
        extract_snapshot(packed.path, target)


# --------------------------------------------------------------------------- hostile archives


def build_archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            else:
                archive.addfile(info)
    return path


def regular(name: str, data: bytes = b"payload") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def hostile_cases(outside: Path) -> dict[str, tuple[list[tuple[tarfile.TarInfo, bytes | None]], str]]:
    """Case name -> (members, the member name the error must mention)."""
    # `outside` is a sibling of the extraction target, two levels up from a member in it.
    return {
        "dotdot": ([regular("ok.txt"), regular(f"../{outside.name}/evil")], f"../{outside.name}/evil"),
        "nested dotdot": ([regular(f"a/../../{outside.name}/evil")], f"a/../../{outside.name}/evil"),
        "absolute": ([regular(f"{outside}/evil")], f"{outside}/evil"),
        "symlink out": ([special("link", tarfile.SYMTYPE, f"../{outside.name}")], "link"),
        "symlink to /etc": ([special("link", tarfile.SYMTYPE, "../../etc")], "link"),
        "absolute symlink": ([special("link", tarfile.SYMTYPE, str(outside))], "link"),
        "write through symlink": (
            [special("link", tarfile.SYMTYPE, f"../{outside.name}"), regular("link/evil")],
            "link/evil",
        ),
        "write through in-tree symlink": (
            [special("sub", tarfile.SYMTYPE, "."), regular("sub/evil")], "sub/evil",
        ),
        "chained symlinks": (
            # Each link looks harmless alone; "b" escapes because "a" is the root.
            [special("b", tarfile.SYMTYPE, f"a/../{outside.name}"), special("a", tarfile.SYMTYPE, ".")],
            "b",
        ),
        "symlink loop": (
            [special("a", tarfile.SYMTYPE, "b"), special("b", tarfile.SYMTYPE, "a")], "a",
        ),
        "hardlink out": ([special("hard", tarfile.LNKTYPE, f"../{outside.name}/evil")], "hard"),
        "absolute hardlink": ([special("hard", tarfile.LNKTYPE, "/etc/passwd")], "hard"),
        "hardlink to a missing member": ([special("hard", tarfile.LNKTYPE, "nothing")], "hard"),
        "character device": ([special("evil", tarfile.CHRTYPE)], "evil"),
        "block device": ([special("evil", tarfile.BLKTYPE)], "evil"),
        "fifo": ([special("evil", tarfile.FIFOTYPE)], "evil"),
        "file replaced by symlink": (
            [regular("evil"), special("evil", tarfile.SYMTYPE, "ok")], "evil",
        ),
        "symlink over implicit directory": (
            [regular("dir/file"), special("dir", tarfile.SYMTYPE, f"../{outside.name}")], "dir",
        ),
    }


@pytest.mark.parametrize("case", list(hostile_cases(Path("/x/outside")).keys()))
def test_hostile_archive_is_rejected(tmp_path: Path, case: str) -> None:
    outside = tmp_path / "outside"
    members, offender = hostile_cases(outside)[case]
    archive = build_archive(tmp_path / "hostile.tar.gz", members)
    with pytest.raises(SnapshotError) as caught:
        validate_archive(archive)
    assert repr(offender) in str(caught.value)
    assert "\n" not in str(caught.value)

    target = tmp_path / "target"
    with pytest.raises(SnapshotError):
        extract_snapshot(archive, target)
    assert not target.exists()
    assert not outside.exists()
    assert not (tmp_path / "evil").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hostile.tar.gz"]


def test_rejection_leaves_an_existing_empty_target_empty(tmp_path: Path) -> None:
    archive = build_archive(tmp_path / "hostile.tar.gz",
                            [regular("fine.txt"), regular("../evil")])
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(SnapshotError, match="'../evil'"):
        extract_snapshot(archive, target)
    assert list(target.iterdir()) == []
    assert not (tmp_path / "evil").exists()


@pytest.mark.parametrize("case", ["dotdot", "absolute symlink", "write through symlink", "fifo"])
def test_data_filter_is_a_second_line_of_defence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    from mlyard.storage import archives

    def accept_everything(archive: tarfile.TarFile, _limits: object) -> list[tarfile.TarInfo]:
        return archive.getmembers()

    monkeypatch.setattr(archives, "_validate_members", accept_everything)
    outside = tmp_path / "outside"
    members, _ = hostile_cases(outside)[case]
    archive = build_archive(tmp_path / "hostile.tar.gz", [regular("first.txt"), *members])
    target = tmp_path / "target"
    with pytest.raises(SnapshotError):
        extract_snapshot(archive, target)
    assert not target.exists()
    assert not outside.exists()


def test_in_tree_links_in_hand_built_archive_are_accepted(tmp_path: Path) -> None:
    archive = build_archive(tmp_path / "ok.tar.gz", [
        special("./", tarfile.DIRTYPE),
        special("dir", tarfile.DIRTYPE),
        regular("dir/file.txt", b"hello"),
        special("dir/up", tarfile.SYMTYPE, "../dir/file.txt"),
        special("hard", tarfile.LNKTYPE, "dir/file.txt"),
        special("loose", tarfile.SYMTYPE, "does/not/exist"),
    ])
    assert validate_archive(archive) == 6
    target = tmp_path / "target"
    extract_snapshot(archive, target)
    assert (target / "dir" / "up").read_bytes() == b"hello"
    assert (target / "hard").read_bytes() == b"hello"


@pytest.mark.parametrize("content", [b"", b"not an archive at all", b"\x1f\x8b\x08garbage"])
def test_not_a_gzip_tar(tmp_path: Path, content: bytes) -> None:
    path = write(tmp_path / "bad.tar.gz", content)
    with pytest.raises(SnapshotError, match="gzip"):
        validate_archive(path)
    with pytest.raises(SnapshotError):
        extract_snapshot(path, tmp_path / "target")
    assert not (tmp_path / "target").exists()


def test_plain_tar_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "plain.tar"
    with tarfile.open(path, "w") as archive:
        info, data = regular("a.txt")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    with pytest.raises(SnapshotError, match="gzip"):
        validate_archive(path)


def test_truncated_archive_is_rejected(tmp_path: Path) -> None:
    write(tmp_path / "source" / "a.bin", os.urandom(200_000))
    packed = pack_directory(tmp_path / "source", tmp_path / "good.tar.gz")
    truncated = write(tmp_path / "truncated.tar.gz", packed.path.read_bytes()[:50_000])
    with pytest.raises(SnapshotError):
        validate_archive(truncated)


def test_too_many_members(tmp_path: Path) -> None:
    from mlyard.storage import UnpackLimits

    limits = UnpackLimits(max_members=3)
    archive = build_archive(tmp_path / "many.tar.gz", [regular(f"f{index}") for index in range(4)])
    with pytest.raises(SnapshotError, match="more than 3 members"):
        validate_archive(archive, limits=limits)
    three = build_archive(tmp_path / "three.tar.gz", [regular(f"f{index}") for index in range(3)])
    assert validate_archive(three, limits=limits) == 3


# --------------------------------------------------------------------------- blob store


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def store_files(root: Path) -> list[str]:
    """Every file under the store root, relative, tmp/ included."""
    return sorted(path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file())


def test_blob_put_exists_and_layout(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = b"hello world" * 1000
    digest = digest_of(data)
    assert not store.exists(digest)
    assert store.put_stream([data[:5000], b"", data[5000:]]) == (digest, len(data))
    assert store.exists(digest)
    assert store.path_for(digest) == tmp_path / "blobs" / digest[:2] / digest
    assert store.path_for(digest).read_bytes() == data
    assert store_files(tmp_path / "blobs") == [f"{digest[:2]}/{digest}"]


def test_blob_put_is_idempotent(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    first = store.put_stream([b"same bytes"], expected_digest=digest_of(b"same bytes"))
    second = store.put_stream([b"same ", b"bytes"])
    assert first == second
    assert store_files(tmp_path / "blobs") == [f"{first[0][:2]}/{first[0]}"]


def test_blob_put_file(tmp_path: Path) -> None:
    source = write(tmp_path / "source.bin", os.urandom(3 * 1024 * 1024 + 17))
    store = BlobStore(tmp_path / "blobs")
    digest, size = store.put_file(source)
    assert (digest, size) == (digest_of(source.read_bytes()), source.stat().st_size)
    assert store.path_for(digest).read_bytes() == source.read_bytes()


@pytest.mark.parametrize("bad", ["", "abc", "A" * 64, "g" * 64, "../" + "a" * 61, "a" * 65])
def test_blob_rejects_malformed_digests(tmp_path: Path, bad: str) -> None:
    store = BlobStore(tmp_path / "blobs")
    with pytest.raises(ValueError):
        store.path_for(bad)
    with pytest.raises(ValueError):
        store.exists(bad)
    with pytest.raises(ValueError):
        store.put_stream([b"data"], expected_digest=bad)


def test_blob_digest_mismatch_leaves_nothing(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    claimed = digest_of(b"something else")
    with pytest.raises(SnapshotError, match="digest"):
        store.put_stream([b"actual bytes"], expected_digest=claimed)
    assert not store.exists(claimed)
    assert not store.exists(digest_of(b"actual bytes"))
    assert store_files(tmp_path / "blobs") == []


def test_a_blob_received_in_pieces_is_published_read_only_or_not_at_all(tmp_path: Path) -> None:
    """`receive`, as an upload read by an event loop uses it: verified against its digest,
    published read-only, and nothing kept of one that is too large or does not match."""
    store = BlobStore(tmp_path / "blobs")
    writer = store.receive(max_bytes=10)
    writer.write(b"hello ")
    writer.write(b"you")
    digest, size = writer.commit(digest_of(b"hello you"))
    assert (digest, size) == (digest_of(b"hello you"), 9)
    assert store.path_for(digest).read_bytes() == b"hello you"
    assert store.path_for(digest).stat().st_mode & 0o777 == 0o444
    too_large = store.receive(max_bytes=10)
    too_large.write(b"0123456789")
    with pytest.raises(SnapshotTooLarge):
        too_large.write(b"!")
    wrong = store.receive()
    wrong.write(b"other bytes")
    with pytest.raises(SnapshotError, match="does not match"):
        wrong.commit(digest_of(b"promised bytes"))
    assert store_files(tmp_path / "blobs") == [f"{digest[:2]}/{digest}"], "only the good one; no partial file left"


def test_blob_validation_failure_leaves_nothing(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    seen: list[bytes] = []

    def reject(path: Path) -> None:
        seen.append(path.read_bytes())
        raise SnapshotError("bad archive")

    with pytest.raises(SnapshotError, match="bad archive"):
        store.put_stream([b"payload"], validate=reject)
    assert seen == [b"payload"]
    assert store_files(tmp_path / "blobs") == []

    def crash(path: Path) -> None:
        raise RuntimeError("validator failed")

    with pytest.raises(SnapshotError, match="validator failed"):
        store.put_stream([b"payload"], validate=crash)
    assert store_files(tmp_path / "blobs") == []


def test_blob_validate_with_validate_archive(tmp_path: Path) -> None:
    write(tmp_path / "source" / "a.txt", "a")
    packed = pack_directory(tmp_path / "source", tmp_path / "s.tar.gz")
    store = BlobStore(tmp_path / "blobs")
    digest, _ = store.put_file(packed.path, expected_digest=packed.digest, validate=validate_archive)
    assert digest == packed.digest
    hostile = build_archive(tmp_path / "hostile.tar.gz", [regular("../evil")])
    with pytest.raises(SnapshotError, match="evil"):
        store.put_file(hostile, validate=validate_archive)
    assert store_files(tmp_path / "blobs") == [f"{digest[:2]}/{digest}"]


def test_blob_max_bytes_stops_reading_at_once(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    consumed: list[int] = []

    def chunks():  # type: ignore[no-untyped-def]
        for index in range(100):
            consumed.append(index)
            yield b"x" * 1000

    with pytest.raises(SnapshotError, match="limit"):
        store.put_stream(chunks(), max_bytes=2500)
    assert consumed == [0, 1, 2]
    assert store_files(tmp_path / "blobs") == []
    # Exactly at the limit is fine.
    assert store.put_stream([b"x" * 2500], max_bytes=2500)[1] == 2500


def test_blob_failing_source_leaves_nothing(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")

    def broken():  # type: ignore[no-untyped-def]
        yield b"partial"
        raise ConnectionError("client went away")

    with pytest.raises(ConnectionError):
        store.put_stream(broken())
    assert store_files(tmp_path / "blobs") == []



def member(name: str, kind: bytes, mode: int, data: bytes | None = None) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.uname, info.gname = kind, mode, 4242, 4242, "someone", "others"
    return info, data


def extracted_modes(root: Path) -> dict[str, tuple[int, int, int]]:
    return {str(path.relative_to(root)): (path.stat().st_mode & 0o7777, path.stat().st_uid, path.stat().st_gid)
            for path in sorted(root.rglob("*"))}


def test_without_extraction_filters_members_are_extracted_as_the_data_filter_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python 3.11.0-3.11.3 (Debian 12's python3) has neither `data_filter` nor `filter=`.
    archive = build_archive(tmp_path / "modes.tar.gz", [
        member("bin", tarfile.DIRTYPE, 0o777),
        member("bin/setuid-tool", tarfile.REGTYPE, 0o4777, b"#!/bin/sh\n"),
        member("bin/others-only", tarfile.REGTYPE, 0o007, b"x"),
        member("shared.txt", tarfile.REGTYPE, 0o666, b"y"),
        member("secret.txt", tarfile.REGTYPE, 0o000, b"z"),
    ])
    filtered = tmp_path / "filtered"
    extract_snapshot(archive, filtered)

    original_extractall = tarfile.TarFile.extractall

    def extractall_without_filters(self: tarfile.TarFile, path: str = ".", members: object = None, *,
                                   numeric_owner: bool = False, **unknown: object) -> None:
        if unknown:
            raise TypeError(f"extractall() got an unexpected keyword argument {next(iter(unknown))!r}")
        original_extractall(self, path, members, numeric_owner=numeric_owner, filter="fully_trusted")

    monkeypatch.delattr(tarfile, "data_filter")
    monkeypatch.setattr(tarfile.TarFile, "extractall", extractall_without_filters)
    unfiltered = tmp_path / "unfiltered"
    extract_snapshot(archive, unfiltered)

    modes = extracted_modes(unfiltered)
    assert modes == extracted_modes(filtered)
    own = (os.geteuid(), os.getegid())
    assert modes["bin/setuid-tool"] == (0o755, *own)
    assert modes["bin/others-only"] == (0o604, *own)
    assert modes["shared.txt"] == (0o644, *own)
    assert modes["secret.txt"] == (0o600, *own)
    assert (unfiltered / "bin" / "setuid-tool").read_bytes() == b"#!/bin/sh\n"


def test_every_name_the_package_exports_loads_from_its_module() -> None:
    """The package loads its names on first use; each one is what its module defines."""
    import importlib

    import mlyard.storage as storage

    for name in storage.__all__:
        module = importlib.import_module(f"mlyard.storage.{storage._MODULES[name]}")
        assert getattr(storage, name) is getattr(module, name)
    with pytest.raises(AttributeError):
        storage.not_a_name  # noqa: B018
