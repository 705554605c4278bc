"""A snapshot extracted once per machine, then copied into each replica's code directory.

`extract_cached(archive, target)` leaves in `target` what `extract_snapshot(archive, target)`
would: the same checks on the archive (made when the cache is built), the same files, modes,
modification times, symlinks and hardlinks, and a tree of the replica's own that nothing else
writes to. The cache is the tree `extract_snapshot` made of the archive, kept beside it as
`<archive>.extracted.<inode>-<size>-<mtime>` (named after the file it was built from, so a
path rewritten with another archive gets a cache of its own). Copying it costs about half of
extracting again: no decompression, no tar headers, no second validation pass.

Only a launcher that finds no cache builds one, under an exclusive lock on the archive, so
replicas starting together extract it once; the cache appears complete or not at all (built
under a temporary name, then renamed) and is never changed afterwards. Where it cannot be
built (a read-only store, a full disk, an archive that is refused), the archive is extracted
into `target` directly, which fails as `extract_snapshot` does.
`BlobStore.remove` removes a blob's caches with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import stat
from pathlib import Path

from mlyard.storage.archives import extract_snapshot
from mlyard.storage.errors import SnapshotError, format_megabytes

CACHE_INFIX = ".extracted"
"""A cache is named after its archive and this; `BlobStore.remove` finds them by it."""
_MEMBER_OVERHEAD = 4096
_COPY_CHUNK = 8 * 1024 * 1024


def cache_path(archive: Path, identity: os.stat_result) -> Path:
    return archive.with_name(f"{archive.name}{CACHE_INFIX}.{identity.st_ino}-{identity.st_size}-"
                             f"{identity.st_mtime_ns}")


def extract_cached(archive: Path, target: Path) -> None:
    """As `extract_snapshot(archive, target)`, through the archive's cache; raises `SnapshotError`
    as it does, and leaves no `target` behind when it fails."""
    archive, target = Path(archive), Path(target)
    cache = _cache_of(archive)
    if cache is None:
        extract_snapshot(archive, target)
        return
    try:
        copy_tree(cache, target)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def _cache_of(archive: Path) -> Path | None:
    """The archive's cache, built now if need be; None where none can be built (the archive is
    then extracted directly, which raises what is wrong with it)."""
    try:
        handle = open(archive, "rb")  # noqa: SIM115 - closed below; the lock lives as long as it
    except OSError:
        return None
    with handle:
        cache = cache_path(archive, os.fstat(handle.fileno()))
        if cache.is_dir():
            return cache
        fcntl.flock(handle, fcntl.LOCK_EX)  # released on close: whoever waited finds the cache
        if cache.is_dir():
            return cache
        building = cache.with_name(f"{cache.name}.building-{secrets.token_hex(4)}")
        try:
            extract_snapshot(archive, building)
            os.rename(building, cache)
        except (SnapshotError, OSError):
            # Extracted directly instead, which says what is wrong: with the archive (refused
            # again, before anything is written) or with the store (target may be elsewhere).
            shutil.rmtree(building, ignore_errors=True)
            return None
    return cache


def copy_tree(source: Path, target: Path) -> None:
    """A copy of `source` at `target` (absent or an empty directory) made of new files:
    regular files with their modes and modification times, symlinks as they are, files
    hardlinked to each other in `source` hardlinked to each other in `target`."""
    if target.exists() or target.is_symlink():
        if target.is_symlink() or not target.is_dir() or any(target.iterdir()):
            raise SnapshotError(f"cannot extract a snapshot into {target}: not an empty directory")
    else:
        target.mkdir(parents=True)
    entries = _entries(source)
    _check_free_space(target, entries)
    linked: dict[tuple[int, int], Path] = {}
    directories: list[tuple[Path, os.stat_result]] = []
    for relative, status in entries:
        destination = target / relative
        if stat.S_ISDIR(status.st_mode):
            destination.mkdir(mode=0o700)
            directories.append((destination, status))
        elif stat.S_ISLNK(status.st_mode):
            os.symlink(os.readlink(source / relative), destination)
        elif status.st_nlink > 1 and (status.st_dev, status.st_ino) in linked:
            os.link(linked[status.st_dev, status.st_ino], destination)
        else:
            _copy_file(source / relative, destination, status)
            if status.st_nlink > 1:
                linked[status.st_dev, status.st_ino] = destination
    for directory, status in reversed(directories):  # after their contents, deepest first
        os.chmod(directory, stat.S_IMODE(status.st_mode))
        os.utime(directory, ns=(status.st_atime_ns, status.st_mtime_ns))


def _entries(source: Path) -> list[tuple[Path, os.stat_result]]:
    """Every entry below `source`, parents before children, with its status (not followed)."""
    entries: list[tuple[Path, os.stat_result]] = []
    pending = [Path()]
    while pending:
        relative = pending.pop()
        with os.scandir(source / relative) as scan:
            for entry in scan:
                status = entry.stat(follow_symlinks=False)
                entries.append((relative / entry.name, status))
                if stat.S_ISDIR(status.st_mode):
                    pending.append(relative / entry.name)
    return entries


def _check_free_space(target: Path, entries: list[tuple[Path, os.stat_result]]) -> None:
    needed = sum(status.st_size + _MEMBER_OVERHEAD if stat.S_ISREG(status.st_mode) else _MEMBER_OVERHEAD
                 for _, status in entries)
    status = os.statvfs(target)
    free = status.f_bavail * status.f_frsize
    if needed > free:
        raise SnapshotError(f"not enough free space to extract the code snapshot: it unpacks to "
                            f"{format_megabytes(needed)} and {target} has {format_megabytes(free)} free")


def _copy_file(source: Path, destination: Path, status: os.stat_result) -> None:
    reading = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        writing = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            _copy_bytes(reading, writing, status.st_size)
            os.fchmod(writing, stat.S_IMODE(status.st_mode))
            os.utime(writing, ns=(status.st_atime_ns, status.st_mtime_ns))
        finally:
            os.close(writing)
    finally:
        os.close(reading)


def _copy_bytes(reading: int, writing: int, size: int) -> None:
    """In the kernel where it can (sendfile), else through a buffer."""
    copied = 0
    with contextlib.suppress(OSError):
        while copied < size and (sent := os.sendfile(writing, reading, copied, size - copied)):
            copied += sent
    if copied < size:
        os.lseek(reading, copied, os.SEEK_SET)
        os.lseek(writing, copied, os.SEEK_SET)
        while chunk := os.read(reading, _COPY_CHUNK):
            os.write(writing, chunk)
