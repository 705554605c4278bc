"""A snapshot extracted once per machine and copied into each replica's code directory
(`mlyard.storage.snapshot_cache`): the same tree as extracting it, built once, private to each copy."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from mlyard.storage import BlobStore, SnapshotError, extract_snapshot
from mlyard.storage.snapshot_cache import CACHE_INFIX, extract_cached


def add(archive: tarfile.TarFile, name: str, data: bytes = b"", **attributes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data) if member.type == tarfile.REGTYPE else 0
    member.mtime = 1_000_000_000
    for key, value in attributes.items():
        setattr(member, key, value)
    archive.addfile(member, io.BytesIO(data) if data else None)


def snapshot(path: Path, text: str = "print('train')\n") -> Path:
    """Files, an executable, an empty directory, a symlink and a hardlink."""
    with tarfile.open(path, "w:gz") as archive:
        add(archive, "train.py", text.encode(), mode=0o644)
        add(archive, "bin/run.sh", b"#!/bin/sh\necho run\n", mode=0o755)
        add(archive, "data/empty", type=tarfile.DIRTYPE, mode=0o755)
        add(archive, "latest", type=tarfile.SYMTYPE, linkname="train.py")
        add(archive, "bin/again.sh", type=tarfile.LNKTYPE, linkname="bin/run.sh", mode=0o755)
    return path


def described(root: Path) -> dict[str, tuple]:
    """What a tree holds: per entry its kind, content or link target, mode and file mtime."""
    found = {}
    for path in sorted(root.rglob("*")):
        status = path.lstat()
        relative = path.relative_to(root).as_posix()
        if stat.S_ISLNK(status.st_mode):
            found[relative] = ("link", os.readlink(path))
        elif stat.S_ISDIR(status.st_mode):
            found[relative] = ("directory", stat.S_IMODE(status.st_mode))
        else:
            found[relative] = ("file", path.read_bytes(), stat.S_IMODE(status.st_mode), status.st_mtime)
    return found


def beside(archive: Path) -> list[str]:
    return sorted(path.name for path in archive.parent.iterdir() if path.name.startswith(archive.name + "."))


def test_a_cached_extraction_is_the_tree_extracting_gives(tmp_path: Path) -> None:
    archive = snapshot(tmp_path / "code.tar.gz")
    extract_snapshot(archive, tmp_path / "extracted")
    for name in ("first", "second"):  # the first builds the cache, the second copies it
        extract_cached(archive, tmp_path / name)
        assert described(tmp_path / name) == described(tmp_path / "extracted")
        run, again = (tmp_path / name / "bin" / "run.sh").stat(), (tmp_path / name / "bin" / "again.sh").stat()
        assert run.st_ino == again.st_ino, "a hardlink of the snapshot stays one"
    assert len(beside(archive)) == 1 and beside(archive)[0].startswith(f"code.tar.gz{CACHE_INFIX}.")


def test_a_later_extraction_copies_the_cache_rather_than_reading_the_archive_again(tmp_path: Path) -> None:
    archive = snapshot(tmp_path / "code.tar.gz")
    extract_cached(archive, tmp_path / "first")
    status = archive.stat()
    with open(archive, "r+b") as rewritten:  # the same file, size and time: the same cache
        rewritten.write(b"\0" * status.st_size)
    os.utime(archive, ns=(status.st_atime_ns, status.st_mtime_ns))
    extract_cached(archive, tmp_path / "second")
    assert (tmp_path / "second" / "train.py").read_text() == "print('train')\n"


def test_what_a_replica_writes_in_its_copy_stays_its_own(tmp_path: Path) -> None:
    archive = snapshot(tmp_path / "code.tar.gz")
    extract_cached(archive, tmp_path / "first")
    with open(tmp_path / "first" / "train.py", "w") as changed:  # in place, as a job may
        changed.write("changed\n")
    (tmp_path / "first" / "bin" / "run.sh").write_text("changed\n")
    (tmp_path / "first" / "new.txt").write_text("new\n")
    extract_cached(archive, tmp_path / "second")
    assert (tmp_path / "second" / "train.py").read_text() == "print('train')\n"
    assert (tmp_path / "second" / "bin" / "again.sh").read_text() == "#!/bin/sh\necho run\n"
    assert not (tmp_path / "second" / "new.txt").exists()


def test_a_path_written_again_with_another_archive_gets_a_cache_of_its_own(tmp_path: Path) -> None:
    archive = snapshot(tmp_path / "code.tar.gz")
    extract_cached(archive, tmp_path / "first")
    snapshot(tmp_path / "other.tar.gz", text="print('other version')\n").replace(archive)
    extract_cached(archive, tmp_path / "second")
    assert (tmp_path / "second" / "train.py").read_text() == "print('other version')\n"


def test_a_refused_archive_fails_as_extracting_it_does_and_leaves_nothing(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as evil:
        add(evil, "../escaped", b"escaped\n")
    with pytest.raises(SnapshotError) as directly:
        extract_snapshot(archive, tmp_path / "directly")
    with pytest.raises(SnapshotError) as cached:
        extract_cached(archive, tmp_path / "code")
    assert str(cached.value) == str(directly.value)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["evil.tar.gz"]


def test_replicas_starting_together_build_one_cache_and_each_get_the_whole_tree(tmp_path: Path) -> None:
    archive = snapshot(tmp_path / "code.tar.gz")
    extract_snapshot(archive, tmp_path / "extracted")
    program = "import sys; from mlyard.storage.snapshot_cache import extract_cached; extract_cached(*sys.argv[1:])"
    started = [subprocess.Popen([sys.executable, "-c", program, str(archive), str(tmp_path / f"replica-{index}")])
               for index in range(4)]
    assert [process.wait(timeout=60) for process in started] == [0, 0, 0, 0]
    for index in range(4):
        assert described(tmp_path / f"replica-{index}") == described(tmp_path / "extracted")
    assert len(beside(archive)) == 1, beside(archive)


def test_removing_a_blob_removes_its_cache(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    digest, _ = store.put_file(snapshot(tmp_path / "code.tar.gz"))
    extract_cached(store.path_for(digest), tmp_path / "replica")
    assert beside(store.path_for(digest))
    store.remove(digest)
    assert list(store.path_for(digest).parent.iterdir()) == []
    assert (tmp_path / "replica" / "train.py").exists(), "copies are the replicas' own"


@pytest.fixture()
def small_disk(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def test_a_store_that_cannot_hold_a_cache_still_gives_the_tree(tmp_path: Path, small_disk: Path) -> None:
    archive = snapshot(small_disk / "code.tar.gz")
    extract_snapshot(archive, tmp_path / "extracted")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    extract_cached(archive, tmp_path / "code")
    assert described(tmp_path / "code") == described(tmp_path / "extracted")
    assert beside(archive) == []


def test_a_copy_checks_free_space_first_and_leaves_nothing(tmp_path: Path, small_disk: Path) -> None:
    source = tmp_path / "source"
    (source / "big").mkdir(parents=True)
    (source / "big" / "data").write_bytes(os.urandom(2 * 1024 * 1024))
    archive = tmp_path / "big.tar.gz"
    with tarfile.open(archive, "w:gz") as packed:
        packed.add(source / "big" / "data", arcname="data")
    extract_cached(archive, tmp_path / "cached")  # builds the cache outside the small disk
    with pytest.raises(SnapshotError, match="not enough free space"):
        extract_cached(archive, small_disk / "code")
    assert list(small_disk.iterdir()) == []
