"""`extract_archive`: the tar, tar.gz and zip archives users hand in (`mlyard datasets push
--from-archive`) unpack to the same files, and a zip gets the checks a tar gets: names leading
out, symlinks leading out, special files, declared sizes over the limit and declared sizes that
lie. Nothing is left in the target when one is refused."""

from __future__ import annotations

import io
import stat
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from mlyard.storage import SnapshotError, UnpackLimits, extract_archive, extract_snapshot

CONTENT = {"a.txt": b"alpha\n", "sub/b.bin": bytes(range(256)) * 8, "sub/deeper/c.csv": b"x,y\n1,2\n"}


def tree(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file() and not path.is_symlink()}


def make_tar(path: Path, mode: str, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, mode) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def make_zip(path: Path, files: dict[str, bytes], links: dict[str, str] | None = None,
             modes: dict[str, int] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = ((modes or {}).get(name, stat.S_IFREG | 0o644)) << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return path


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "zip"])
def test_each_kind_unpacks_to_the_same_files(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"data.{kind}"
    if kind == "zip":
        make_zip(path, CONTENT, links={"sub/link": "../a.txt"})
    else:
        make_tar(path, "w:gz" if kind == "tar.gz" else "w", CONTENT)
    extract_archive(path, tmp_path / "out", limits=UnpackLimits(max_bytes=1024 * 1024))
    assert tree(tmp_path / "out") == CONTENT
    if kind == "zip":
        assert (tmp_path / "out" / "sub" / "link").read_bytes() == CONTENT["a.txt"]


def test_a_code_snapshot_is_still_only_a_gzip_tar(tmp_path: Path) -> None:
    plain = make_tar(tmp_path / "plain.tar", "w", CONTENT)
    with pytest.raises(SnapshotError, match="gzip"):
        extract_snapshot(plain, tmp_path / "out")
    zipped = make_zip(tmp_path / "data.zip", CONTENT)
    with pytest.raises(SnapshotError, match="gzip"):
        extract_snapshot(zipped, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("files, links, modes, says", [
    ({"../evil": b"x"}, {}, {}, "'../evil' would resolve outside"),
    ({"/etc/evil": b"x"}, {}, {}, "absolute path"),
    ({"a\\b": b"x"}, {}, {}, "backslash"),
    ({"ok": b"x"}, {"out": "../../outside"}, {}, "symlink 'out' -> '../../outside' points outside"),
    ({"ok": b"x"}, {"abs": "/etc"}, {}, "absolute target"),
    ({"link/inner": b"x"}, {"link": "ok"}, {}, "appears more than once"),
    ({"fifo": b""}, {}, {"fifo": stat.S_IFIFO | 0o644}, "device, FIFO"),
    ({"big": bytes(3 * 1024 * 1024)}, {}, {}, "unpacks to more than 2.0 MB, the test limit"),
])
def test_a_hostile_zip_is_refused_and_leaves_nothing(tmp_path: Path, files: dict, links: dict, modes: dict,
                                                     says: str) -> None:
    path = make_zip(tmp_path / "hostile.zip", {"first.txt": b"fine", **files}, links, modes)
    target = tmp_path / "target"
    target.mkdir()
    limits = UnpackLimits(max_bytes=2 * 1024 * 1024, label="archive hostile.zip", bytes_limit_name="the test limit")
    with pytest.raises(SnapshotError, match="archive hostile.zip") as caught:
        extract_archive(path, target, limits=limits)
    assert says in str(caught.value)
    assert list(target.iterdir()) == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hostile.zip", "target"]


def _lie_about_size(path: Path, declared: int) -> None:
    """Rewrites the uncompressed size of the zip's one member, in its local header and central
    directory, as a bomb's maker would."""
    data = bytearray(path.read_bytes())
    local = data.index(b"PK\x03\x04")
    data[local + 22:local + 26] = struct.pack("<I", declared)
    central = data.index(b"PK\x01\x02")
    data[central + 24:central + 28] = struct.pack("<I", declared)
    path.write_bytes(bytes(data))


def test_a_zip_whose_declared_size_lies_is_refused(tmp_path: Path) -> None:
    path = make_zip(tmp_path / "liar.zip", {"zeros": bytes(8 * 1024 * 1024)})
    _lie_about_size(path, 1000)
    with pytest.raises(SnapshotError):
        extract_archive(path, tmp_path / "out", limits=UnpackLimits(max_bytes=1024 * 1024))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content, says", [(b"", "not a tar, tar.gz or zip"), (b"plain text", "not a tar, tar.gz or zip"),
                                            (b"PK\x03\x04garbage", "not a valid zip"),
                                            (b"\x1f\x8b\x08garbage", "not a valid tar or gzip-compressed tar")])
def test_not_an_archive(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "junk"
    path.write_bytes(content)
    with pytest.raises(SnapshotError, match=says):
        extract_archive(path, tmp_path / "out", limits=UnpackLimits())
    assert not (tmp_path / "out").exists()


def test_too_many_members(tmp_path: Path) -> None:
    path = make_zip(tmp_path / "many.zip", {f"f{index}": b"" for index in range(11)})
    with pytest.raises(SnapshotError, match="more than 10 members"):
        extract_archive(path, tmp_path / "out", limits=UnpackLimits(max_members=10))
