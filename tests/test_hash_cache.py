"""The client's hash cache: a file is read again only when its size, time or inode changed, and
the files of one folder are looked up together, never those of a folder whose name extends it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mlyard.client import hash_cache
from mlyard.client.hash_cache import HashCache


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files whose bytes were hashed."""
    seen: list[str] = []
    original = hash_cache.sha256_of

    def counting(path: Path) -> str:
        seen.append(path.name)
        return original(path)

    monkeypatch.setattr(hash_cache, "sha256_of", counting)
    return seen


def digests(cache: HashCache, folder: Path) -> dict[str, str]:
    root = str(folder.resolve())
    return {path.name: cache.digest(path, path.lstat(), resolved=str(path), under=root)
            for path in sorted(Path(root).iterdir())}


def test_only_changed_files_are_read_again(tmp_path: Path, reads: list[str]) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / name).write_text(name * 10)
    with HashCache(tmp_path / "cache.sqlite") as cache:
        first = digests(cache, folder)
    assert first["a"] == hashlib.sha256(b"a" * 10).hexdigest() and sorted(reads) == ["a", "b", "c"]

    reads.clear()
    (folder / "b").write_text("B" * 10)  # the same size, a newer time
    os.utime(folder / "b", ns=(1, 1))
    with HashCache(tmp_path / "cache.sqlite") as cache:
        second = digests(cache, folder)
    assert reads == ["b"] and second["b"] == hashlib.sha256(b"B" * 10).hexdigest()
    assert second["a"] == first["a"] and second["c"] == first["c"]


def test_a_folder_whose_name_extends_anothers_is_not_loaded_with_it(tmp_path: Path, reads: list[str]) -> None:
    for name in ("data", "data2", "data-x"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text(name)
    with HashCache(tmp_path / "cache.sqlite") as cache:
        for name in ("data", "data2", "data-x"):
            digests(cache, tmp_path / name)
    reads.clear()
    with HashCache(tmp_path / "cache.sqlite") as cache:
        digests(cache, tmp_path / "data")
        assert set(cache._known) == {str((tmp_path / "data" / "f").resolve())}
    assert reads == []
