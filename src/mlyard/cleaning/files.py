"""Reading a version's files beneath its root, and only there.

A path is opened one component at a time relative to the folder above it, each with O_NOFOLLOW:
a link anywhere on the way (a folder swapped for one included) fails the open instead of leading
out of the root, whatever the manifest says. Walking (`walk`) lists regular files only.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from mlyard.cleaning.extras import CleaningError

Progress = Callable[[str, int, int], None]
CHUNK = 1024 * 1024
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def check_path(path: str) -> None:
    """A version's path: relative, normalized, no `..`; raises CleaningError otherwise."""
    parts = path.split("/")
    if not path or "\0" in path or path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise CleaningError(f"not a relative path of the version: {path!r}")


@contextmanager
def open_beneath(root: Path, path: str) -> Iterator[BinaryIO]:
    """The regular file `path` under `root`, opened for reading; OSError for a link, a folder,
    a device or a missing file."""
    check_path(path)
    *folders, name = path.split("/")
    # The root itself is the caller's and may be a link (a job's `data/NAME` is one).
    directory = os.open(os.path.realpath(root), _DIRECTORY)
    try:
        for folder in folders:
            inner = os.open(folder, _DIRECTORY, dir_fd=directory)
            os.close(directory)
            directory = inner
        # O_NONBLOCK: a FIFO put in the tree would otherwise hold the open until a writer comes.
        descriptor = os.open(name, _FILE | os.O_NONBLOCK, dir_fd=directory)
    finally:
        os.close(directory)
    file = os.fdopen(descriptor, "rb")
    with file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(f"not a regular file: {path!r}")
        yield file


def read_bounded(root: Path, path: str, limit: int) -> bytes | None:
    """The bytes of `path`, or None where it cannot be read or holds more than `limit`."""
    try:
        with open_beneath(root, path) as file:
            content = file.read(limit + 1)
    except OSError:
        return None
    return content if len(content) <= limit else None


def walk(root: Path, progress: Progress | None = None) -> list[tuple[str, str, int]]:
    """(path, sha256, size) of every regular file under `root`, sorted by path; links, devices
    and the like are left out, and folders reached through links are not entered."""
    found = sorted(_regular_files(root))
    files = []
    for done, path in enumerate(found, 1):
        try:
            files.append((path, *_sha256(root, path)))
        except OSError:
            continue  # removed or swapped meanwhile: not a file of the folder any more
        if progress is not None and (done % 1000 == 0 or done == len(found)):
            progress("reading", done, len(found))
    return files


def _regular_files(root: Path) -> Iterator[str]:
    if not root.is_dir():
        raise CleaningError(f"not a folder: {root}")
    for folder, _folders, names in os.walk(root, followlinks=False):
        for name in names:
            full = os.path.join(folder, name)
            try:
                regular = stat.S_ISREG(os.lstat(full).st_mode)
            except OSError:
                continue
            if regular:
                yield Path(full).relative_to(root).as_posix()


def _sha256(root: Path, path: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open_beneath(root, path) as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
