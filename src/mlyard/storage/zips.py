"""Zip archives, checked as tar archives are, and extracting an archive a user hands in,
whatever its kind: zip, tar or gzip-compressed tar.

A zip's sizes are declared in its central directory, and declarations can lie: they are
checked against the limits before anything is written, and the bytes actually decompressed
are counted again as they are written, so a zip bomb is refused either way.
"""

from __future__ import annotations

import lzma
import os
import stat
import zipfile
import zlib
from pathlib import Path

from mlyard.storage.archives import (
    MemberChecker,
    check_free_space,
    extract_snapshot,
    member_room,
    prepare_target,
    remove_extracted,
)
from mlyard.storage.errors import SnapshotError
from mlyard.storage.unpacking import UnpackLimits

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header; the end record of an empty zip
_GZIP_MAGIC = b"\x1f\x8b"
_TAR_MAGIC_END = 262
"""A POSIX or GNU tar's first header says "ustar" just before this offset."""
_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)
_MAX_LINK_BYTES = 4096
_CHUNK = 1024 * 1024
_READ_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, zlib.error, lzma.LZMAError,
                RuntimeError, NotImplementedError, ValueError)
"""What zipfile raises for corrupt, encrypted or unsupported content; `SnapshotError`, a
ValueError, is re-raised before these are looked at."""

Member = tuple[zipfile.ZipInfo, str, str]
"""(entry, normalised name, "dir" or "file"); symlinks are kept apart."""


def extract_archive(archive: Path, target: Path, *, limits: UnpackLimits) -> None:
    """Extract a zip, tar or tar.gz `archive` into `target` (absent or an empty directory) after
    the checks of `extract_snapshot`; told apart by their first bytes, not their names. Raises
    `SnapshotError`, having written nothing, for an archive those checks refuse."""
    archive, target = Path(archive), Path(target)
    try:
        with open(archive, "rb") as probe:
            magic = probe.read(_TAR_MAGIC_END)
    except OSError as error:
        raise SnapshotError(f"cannot read {archive}: {error.strerror or error}") from error
    if magic[:4] in _ZIP_MAGIC:
        extract_zip(archive, target, limits=limits)
    elif magic[:2] == _GZIP_MAGIC or magic[_TAR_MAGIC_END - 5:] == b"ustar":
        extract_snapshot(archive, target, limits=limits, plain_tar=True)
    else:
        raise SnapshotError(f"{archive} is not a tar, tar.gz or zip archive")


def extract_zip(archive: Path, target: Path, *, limits: UnpackLimits) -> None:
    """As `extract_snapshot`, for a zip archive."""
    created = prepare_target(target)
    try:
        opened = zipfile.ZipFile(archive)
    except SnapshotError:
        raise
    except _READ_ERRORS as error:
        raise SnapshotError(f"{archive} is not a valid zip archive: {error}") from error
    with opened:
        try:
            members, links = _validate(opened, limits)
        except SnapshotError:
            raise
        except _READ_ERRORS as error:
            raise SnapshotError(f"{archive} is a corrupt zip archive: {error}") from error
        check_free_space(target, sum(member_room(info.file_size) for info, _, _ in members), limits.label)
        target.mkdir(parents=True, exist_ok=True)
        try:
            _extract(opened, target, members, limits)
            # Symlinks last, all checked already: no file was written while one existed.
            for name, link_target in links.items():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                os.symlink(link_target, target / name)
        except BaseException as error:
            remove_extracted(target, created)
            if isinstance(error, _READ_ERRORS) and not isinstance(error, SnapshotError):
                raise SnapshotError(f"cannot extract {limits.label}: {error}") from error
            raise


def _kind(info: zipfile.ZipInfo) -> str | None:
    # Only zips made on Unix say a file type; anything else holds files and directories alone.
    mode = info.external_attr >> 16 if info.create_system == 3 else 0
    if info.is_dir() or stat.S_ISDIR(mode):
        return "dir"
    if stat.S_IFMT(mode) in (0, stat.S_IFREG):
        return "file"
    return "link" if stat.S_ISLNK(mode) else None


def _validate(opened: zipfile.ZipFile, limits: UnpackLimits) -> tuple[list[Member], dict[str, str]]:
    """The directories and files to write, and the symlinks (name -> target)."""
    checker = MemberChecker(limits)
    members: list[Member] = []
    compressed = 0
    for info in opened.infolist():
        kind = _kind(info)
        name = checker.add(info.filename, kind, info.file_size)
        compressed += info.compress_size
        limits.check_stream(checker.declared, compressed)
        if "\\" in info.filename:
            raise SnapshotError(f"{limits.label} member {info.filename!r} has a backslash in its name "
                                "(zip archives separate folders with /)")
        if info.flag_bits & 0x1:
            raise SnapshotError(f"{limits.label} member {info.filename!r} is encrypted")
        if info.compress_type not in _METHODS:
            raise SnapshotError(f"{limits.label} member {info.filename!r} is compressed with a method "
                                f"this reader lacks ({info.compress_type})")
        if name is None:
            continue
        if kind == "link":
            if info.file_size > _MAX_LINK_BYTES:
                raise SnapshotError(f"{limits.label} symlink {info.filename!r} has a target over "
                                    f"{_MAX_LINK_BYTES} bytes")
            with opened.open(info) as source:
                checker.links[name] = source.read(_MAX_LINK_BYTES + 1).decode("utf-8", "surrogateescape")
        else:
            members.append((info, name, kind))
    checker.finish()
    return members, checker.links


def _extract(opened: zipfile.ZipFile, target: Path, members: list[Member], limits: UnpackLimits) -> None:
    unpacked = compressed = 0
    for info, name, kind in members:
        path = target / name
        if kind == "dir":
            path.mkdir(parents=True, exist_ok=True)
        elif kind == "file":
            path.parent.mkdir(parents=True, exist_ok=True)
            compressed += info.compress_size
            written = 0
            with opened.open(info) as source, open(path, "xb") as sink:
                while chunk := source.read(_CHUNK):
                    written += len(chunk)
                    unpacked += len(chunk)
                    if written > info.file_size:
                        raise SnapshotError(f"{limits.label} member {info.filename!r} unpacks to more than "
                                            "its declared size")
                    limits.check_stream(unpacked, compressed)
                    sink.write(chunk)
