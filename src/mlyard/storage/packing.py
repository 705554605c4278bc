"""Code snapshots: listing the files of a code directory and packing them.

A snapshot is a deterministic gzip tarball of a code directory, minus what its ignore files
leave out. Packing happens on the user's machine; `mlyard.storage.archives` validates and
extracts the result on the server and on worker machines.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pathspec import GitIgnoreSpec

from mlyard.storage.archives import check_symlinks
from mlyard.storage.errors import (
    DEFAULT_MAX_SNAPSHOT_BYTES,
    SnapshotError,
    SnapshotTooLarge,
    format_megabytes,
)

IGNORE_FILE_NAME = ".mlyardignore"

# Member mtimes are pinned so that the same file contents always give the same archive
# digest, whatever the checkout time. 2000-01-01 rather than the epoch because zip-based
# tools (wheels, zipfile) refuse timestamps before 1980.
_MEMBER_MTIME = 946_684_800


@dataclass(frozen=True)
class PackedSnapshot:
    """What `pack_directory` wrote."""

    path: Path
    """The .tar.gz written."""
    digest: str
    """sha256 hex digest of the .tar.gz bytes."""
    size: int
    """Bytes of the .tar.gz."""
    file_count: int
    """Files and symlinks packed."""
    content_bytes: int
    """Sum of the sizes of the regular files packed."""


# --------------------------------------------------------------------------- listing


@dataclass(frozen=True)
class _IgnoreRules:
    """The patterns of one ignore file; `base` is the directory they are relative to."""

    base: str  # "" for the root, otherwise "sub/dir/"
    spec: GitIgnoreSpec


def _read_rules(file: Path, base: str) -> _IgnoreRules | None:
    try:
        # surrogateescape matches how os.scandir decodes undecodable file names.
        text = file.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as error:
        raise SnapshotError(f"cannot read {file}: {error.strerror or error}") from error
    spec = GitIgnoreSpec.from_lines(text.splitlines())
    return _IgnoreRules(base, spec) if len(spec) else None


def _is_ignored(relative: str, is_directory: bool, rules: list[_IgnoreRules]) -> bool:
    """Apply git's precedence: the deepest ignore file with a matching pattern decides.

    `rules` is ordered from lowest to highest precedence.
    """
    for rule in reversed(rules):
        candidate = relative[len(rule.base):]
        if is_directory:
            # Directory-only patterns ("build/") match only paths that end in a slash.
            candidate += "/"
        result = rule.spec.check_file(candidate)
        if result.include is not None:
            return result.include
    return False


def _require_directory(directory: Path) -> None:
    if not directory.exists():
        raise SnapshotError(f"the code directory {directory} does not exist")
    if not directory.is_dir():
        raise SnapshotError(f"the code directory {directory} is not a directory")


def list_snapshot_files(directory: Path) -> list[Path]:
    """Return the relative paths (files and symlinks) a snapshot of `directory` holds, sorted.

    Honours every ``.gitignore`` in the tree with git's semantics (patterns are relative to
    the directory holding the file; a deeper file overrides a shallower one; within a file
    the last matching pattern wins, so ``!keep.log`` re-includes) and a root
    ``.mlyardignore`` in the same syntax, which takes precedence over all ``.gitignore``
    files. ``.git`` entries are always left out. Ignored directories are not descended into,
    so, as in git, a file inside an ignored directory cannot be re-included. Symlinks are
    listed as entries and never followed; sockets, FIFOs and devices are skipped.
    Raises `SnapshotError` if `directory` is missing or cannot be read.
    """
    directory = Path(directory)
    _require_directory(directory)
    mlyard_file = directory / IGNORE_FILE_NAME
    mlyard_rules = _read_rules(mlyard_file, "") if mlyard_file.is_file() else None

    found: list[Path] = []
    # Each pending directory carries the .gitignore rules inherited from its parents.
    pending: list[tuple[str, list[_IgnoreRules]]] = [("", [])]
    while pending:
        relative_directory, inherited = pending.pop()
        absolute_directory = directory / relative_directory if relative_directory else directory
        try:
            with os.scandir(absolute_directory) as iterator:
                entries = list(iterator)
        except OSError as error:
            raise SnapshotError(
                f"cannot read {absolute_directory}: {error.strerror or error}"
            ) from error

        rules = inherited
        gitignore = next((entry for entry in entries if entry.name == ".gitignore"), None)
        if gitignore is not None and gitignore.is_file(follow_symlinks=False):
            own = _read_rules(Path(gitignore.path), relative_directory)
            if own is not None:
                rules = [*inherited, own]
        effective = [*rules, mlyard_rules] if mlyard_rules is not None else rules

        for entry in entries:
            if entry.name == ".git":
                continue
            relative = relative_directory + entry.name
            if entry.is_dir(follow_symlinks=False):
                if not _is_ignored(relative, True, effective):
                    pending.append((relative + "/", rules))
            elif entry.is_file(follow_symlinks=False) or entry.is_symlink():
                if not _is_ignored(relative, False, effective):
                    found.append(Path(relative))
    found.sort()
    return found


# --------------------------------------------------------------------------- packing


class _HashingWriter:
    """A write-only file object that hashes and counts what passes through it."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.sink.write(data)

    def flush(self) -> None:
        self.sink.flush()


class _ProgressReader:
    """Reads a file for tarfile while reporting cumulative bytes to a progress callback."""

    def __init__(self, source: BinaryIO, report: Callable[[int], None]) -> None:
        self.source = source
        self.report = report

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self.report(len(data))
        return data


@dataclass(frozen=True)
class _PlannedMember:
    relative: Path
    size: int  # 0 for symlinks
    executable: bool
    link_target: str | None


def _plan(directory: Path) -> list[_PlannedMember]:
    planned: list[_PlannedMember] = []
    for relative in list_snapshot_files(directory):
        absolute = directory / relative
        try:
            status = absolute.lstat()
            link_target = os.readlink(absolute) if stat.S_ISLNK(status.st_mode) else None
        except OSError as error:
            raise SnapshotError(f"cannot read {absolute}: {error.strerror or error}") from error
        planned.append(
            _PlannedMember(
                relative=relative,
                size=0 if link_target is not None else status.st_size,
                executable=bool(status.st_mode & 0o111),
                link_target=link_target,
            )
        )
    return planned


def pack_directory(
    directory: Path,
    destination: Path,
    *,
    max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
    progress: Callable[[int, int], None] | None = None,
) -> PackedSnapshot:
    """Write a deterministic gzip tarball of the files `list_snapshot_files` gives.

    The archive has members in sorted order, a gzip header with mtime 0 and no file name,
    uid/gid 0, no user or group names, a fixed member mtime and modes normalised to 0o644 /
    0o755 (only the executable bit survives), so the same contents always give the same
    digest. Symlinks are stored as symlinks, never followed.

    Raises `SnapshotTooLarge` before writing anything when the files add up to more than
    `max_bytes`, and `SnapshotError` when a symlink points outside `directory` (the server
    would reject the archive) or a file changes while being packed. The archive is written
    to a temporary file beside `destination` and renamed into place only when complete, so
    a failure never leaves a partial `destination`. `progress(done_bytes, total_bytes)` is
    called as file contents are added; its last call has ``done_bytes == total_bytes``.
    """
    directory = Path(directory)
    destination = Path(destination)
    planned = _plan(directory)
    total = sum(member.size for member in planned)
    if total > max_bytes:
        raise SnapshotTooLarge(
            f"the code directory {directory} holds {format_megabytes(total)}, over the "
            f"{format_megabytes(max_bytes)} snapshot limit; list large files in "
            f"{IGNORE_FILE_NAME} (or .gitignore) or raise the limit"
        )
    _check_links(directory, planned)

    done = 0

    def advance(byte_count: int) -> None:
        nonlocal done
        done += byte_count
        if progress is not None and byte_count:
            progress(done, total)

    destination.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary_name = tempfile.mkstemp(
        dir=destination.parent, prefix=f".{destination.name}.", suffix=".partial"
    )
    temporary = Path(temporary_name)
    try:
        with os.fdopen(descriptor, "wb") as raw:
            writer = _HashingWriter(raw)
            with gzip.GzipFile(filename="", mode="wb", fileobj=writer, mtime=0,
                               compresslevel=6) as compressed:  # type: ignore[arg-type]
                with tarfile.open(fileobj=compressed, mode="w",
                                  format=tarfile.PAX_FORMAT) as archive:
                    if progress is not None:
                        progress(0, total)
                    for member in planned:
                        _add_member(archive, directory, member, advance)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(temporary, destination)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return PackedSnapshot(
        path=destination,
        digest=writer.hash.hexdigest(),
        size=writer.size,
        file_count=len(planned),
        content_bytes=total,
    )


def _check_links(directory: Path, planned: list[_PlannedMember]) -> None:
    links = {
        member.relative.as_posix(): member.link_target
        for member in planned
        if member.link_target is not None
    }
    check_symlinks(
        links,
        lambda name, target, reason: (
            f"the symlink {name!r} -> {target!r} in {directory} {reason}; list it in "
            f"{IGNORE_FILE_NAME} or replace it with the files it points to"
        ),
    )


def _add_member(
    archive: tarfile.TarFile,
    directory: Path,
    member: _PlannedMember,
    advance: Callable[[int], None],
) -> None:
    info = tarfile.TarInfo(member.relative.as_posix())
    info.mtime = _MEMBER_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if member.link_target is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = member.link_target
        info.mode = 0o777
        archive.addfile(info)
        return
    info.type = tarfile.REGTYPE
    info.mode = 0o755 if member.executable else 0o644
    info.size = member.size
    absolute = directory / member.relative
    changed = SnapshotError(
        f"{absolute} changed while the snapshot was being packed; try again"
    )
    try:
        with open(absolute, "rb") as source:
            if os.fstat(source.fileno()).st_size != member.size:
                raise changed
            archive.addfile(info, _ProgressReader(source, advance))  # type: ignore[arg-type]
            if source.read(1):
                raise changed
    except SnapshotError:
        raise
    except OSError as error:
        # tarfile reports a file that shrank mid-read as a bare OSError.
        if error.errno is None:
            raise changed from error
        raise SnapshotError(f"cannot read {absolute}: {error.strerror or error}") from error
