"""Snapshot archives: validating and extracting them, and the symlink checks packing shares.

Validation and extraction happen on the server and on worker machines, where the archive
must be treated as hostile input.
"""

from __future__ import annotations

import copy
import os
import posixpath
import shutil
import tarfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mlyard.storage.errors import SnapshotError, format_megabytes
from mlyard.storage.unpacking import MAX_MEMBER_DEPTH, GuardedGzip, UnpackLimits

# Room a member takes on disk beyond its bytes (its inode and last partial block).
_MEMBER_OVERHEAD = 4096

# Follows the kernel's limit, so a symlink chain that would work on disk also works here.
_MAX_LINK_EXPANSIONS = 40


# --------------------------------------------------------------------------- link checks


def _link_escapes(start: list[str], target: str, links: dict[str, str]) -> str | None:
    """Resolve `target` from directory `start` the way the kernel would, using the
    symlinks the snapshot itself defines (`links`: normalised name -> link target).

    Returns None when the result stays inside the snapshot root, otherwise a short reason.
    """
    resolved = list(start)
    pending = list(reversed(target.split("/")))
    expansions = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return "points outside the target directory"
            resolved.pop()
            continue
        resolved.append(part)
        link_target = links.get("/".join(resolved))
        if link_target is None:
            continue
        expansions += 1
        if expansions > _MAX_LINK_EXPANSIONS:
            return "is part of a symlink loop"
        if link_target.startswith("/"):
            return "points outside the target directory through an absolute symlink"
        # Continue from the directory holding the symlink, as the kernel does.
        resolved.pop()
        pending.extend(reversed(link_target.split("/")))
    return None


def check_symlinks(links: dict[str, str], describe: Callable[[str, str, str], str]) -> None:
    """Raise `SnapshotError` for the first symlink (by name) that is empty, absolute or
    resolves outside the snapshot root; `describe(name, target, reason)` words the message.

    `pack_directory` uses it too, so it refuses what `validate_archive` would reject.
    """
    for name, target in sorted(links.items()):
        if not target:
            raise SnapshotError(describe(name, target, "has an empty target"))
        if target.startswith("/"):
            raise SnapshotError(describe(name, target, "has an absolute target"))
        reason = _link_escapes(name.split("/")[:-1], target, links)
        if reason is not None:
            raise SnapshotError(describe(name, target, reason))


# --------------------------------------------------------------------------- validation


def _normalise_member_name(name: str, what: str) -> str:
    if not name or "\x00" in name:
        raise SnapshotError(f"snapshot archive {what} {name!r} has an invalid name")
    if name.startswith("/"):
        raise SnapshotError(f"snapshot archive {what} {name!r} has an absolute path")
    normalised = posixpath.normpath(name)
    if ".." in normalised.split("/"):
        raise SnapshotError(
            f"snapshot archive {what} {name!r} would resolve outside the target directory"
        )
    return normalised


def _check_depth(name: str) -> list[str]:
    parts = name.split("/")
    if len(parts) > MAX_MEMBER_DEPTH:
        shown = name if len(name) <= 60 else name[:60] + "…"
        raise SnapshotError(f"snapshot archive member {shown!r} is nested {len(parts)} directories deep; "
                            f"the limit is {MAX_MEMBER_DEPTH}")
    return parts


def _validate_members(archive: tarfile.TarFile, limits: UnpackLimits) -> list[tarfile.TarInfo]:
    """Check every member of an open archive, one at a time (no recursion, whatever the
    nesting); returns them in archive order."""
    members: list[tarfile.TarInfo] = []
    declared = 0
    # Normalised name -> "dir", "file" or "link"; implicit parents count as "dir".
    kinds: dict[str, str] = {}
    links: dict[str, str] = {}
    while True:
        member = archive.next()
        if member is None:
            break
        members.append(member)
        if len(members) > limits.max_members:
            raise SnapshotError(
                f"snapshot archive has more than {limits.max_members} members"
            )
        declared += max(member.size, 0)
        limits.check_declared(declared)
        label = f"member {member.name!r}"
        if member.isdir():
            kind = "dir"
        elif member.isreg() or member.islnk():
            kind = "file"
        elif member.issym():
            kind = "link"
        else:
            raise SnapshotError(
                f"snapshot archive {label} is a device, FIFO or other special file"
            )
        name = _normalise_member_name(member.name, "member")
        if name == ".":
            if kind != "dir":
                raise SnapshotError(f"snapshot archive {label} has an invalid name")
            continue

        parts = _check_depth(name)
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            parent_kind = kinds.setdefault(parent, "dir")
            if parent_kind == "link":
                raise SnapshotError(f"snapshot archive {label} is written through a symlink")
            if parent_kind != "dir":
                raise SnapshotError(f"snapshot archive {label} is inside a file")
        previous = kinds.get(name)
        if previous is not None and not (previous == "dir" and kind == "dir"):
            # tarfile replaces or writes through existing entries; nothing we pack repeats one.
            raise SnapshotError(f"snapshot archive {label} appears more than once")
        kinds[name] = kind

        if member.islnk():
            target = _normalise_member_name(member.linkname, f"hardlink {member.name!r} ->")
            if kinds.get(target) != "file" or target == name:
                raise SnapshotError(
                    f"snapshot archive hardlink {member.name!r} -> {member.linkname!r} "
                    "does not point to an earlier file in the archive"
                )
        elif member.issym():
            links[name] = member.linkname
    # Symlinks are checked once all are known: a later symlink can redirect an earlier one.
    check_symlinks(
        links,
        lambda name, target, reason: f"snapshot archive symlink {name!r} -> {target!r} {reason}",
    )
    return members


@contextmanager
def _open_archive(path: Path, limits: UnpackLimits) -> Iterator[tarfile.TarFile]:
    try:
        with open(path, "rb") as probe:
            magic = probe.read(2)
        raw = open(path, "rb")
    except OSError as error:
        raise SnapshotError(f"cannot read snapshot archive {path}: {error.strerror or error}") from error
    with raw:
        if magic != b"\x1f\x8b":
            raise SnapshotError(f"{path} is not a gzip-compressed tar archive")
        guarded = GuardedGzip(raw, limits)
        try:
            archive = tarfile.open(fileobj=guarded, mode="r:")  # type: ignore[arg-type]
        except SnapshotError:
            raise
        except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
            raise SnapshotError(f"{path} is not a valid gzip-compressed tar archive: {error}") from error
        with archive:
            yield archive


def _validate_open(archive: tarfile.TarFile, path: Path, limits: UnpackLimits) -> list[tarfile.TarInfo]:
    try:
        return _validate_members(archive, limits)
    except SnapshotError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        raise SnapshotError(f"{path} is a corrupt snapshot archive: {error}") from error


def validate_archive(path: Path, *, limits: UnpackLimits | None = None) -> int:
    """Check a snapshot .tar.gz without extracting anything; return its member count.

    Raises `SnapshotError`, naming the offending member, when the file is not a gzip tar or
    is corrupt; a member name is absolute, has a ``..`` component after normalisation, is
    written through a symlink or repeats an earlier name; a symlink target is absolute or
    resolves outside the target directory (following the archive's own symlinks) or loops;
    a hardlink does not point to an earlier regular file of the archive; a member is a
    device, FIFO or any type other than regular file, directory, symlink and hardlink; a
    member is nested more than `MAX_MEMBER_DEPTH` directories deep; there are more members
    than `limits.max_members` (100,000 by default); or it unpacks to more than `limits` allow,
    which is noticed as soon as the limit is passed, not after decompressing everything.
    """
    path = Path(path)
    limits = limits or UnpackLimits()
    with _open_archive(path, limits) as archive:
        return len(_validate_open(archive, path, limits))


def _check_free_space(target: Path, members: list[tarfile.TarInfo]) -> None:
    needed = sum(member.size + _MEMBER_OVERHEAD if member.isreg() else _MEMBER_OVERHEAD for member in members)
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    status = os.statvfs(existing)
    free = status.f_bavail * status.f_frsize
    if needed > free:
        raise SnapshotError(f"not enough free space to extract the code snapshot: it unpacks to "
                            f"{format_megabytes(needed)} and {existing} has {format_megabytes(free)} free")


def extract_snapshot(archive: Path, target: Path, *, limits: UnpackLimits | None = None) -> None:
    """Validate `archive` with `validate_archive`, check that the file system holding `target`
    has room for what it unpacks to, then extract it into `target`.

    `target` is created if absent and must otherwise be an empty directory. Nothing is
    written when validation or the space check fails. Extraction also uses tarfile's ``data`` filter as a
    second line of defence where Python has it (3.11.4 and later); if extraction fails
    anyway, what was extracted is removed again. Raises `SnapshotError` in every failure case.
    """
    archive = Path(archive)
    target = Path(target)
    if target.exists() or target.is_symlink():
        if target.is_symlink() or not target.is_dir():
            raise SnapshotError(f"cannot extract a snapshot into {target}: not a directory")
        if any(target.iterdir()):
            raise SnapshotError(f"cannot extract a snapshot into {target}: it is not empty")
        created = False
    else:
        created = True
    # One open file for both passes, so the archive checked is the archive extracted.
    limits = limits or UnpackLimits()
    with _open_archive(archive, limits) as opened:
        members = _validate_open(opened, archive, limits)
        _check_free_space(target, members)
        target.mkdir(parents=True, exist_ok=True)
        try:
            opened.errorlevel = 2
            _extract(opened, target, members)
        except BaseException as error:
            _remove_extracted(target, created)
            if isinstance(error, (tarfile.TarError, OSError, EOFError, zlib.error)):
                raise SnapshotError(f"cannot extract snapshot archive {archive}: {error}") from error
            raise


def _extract(archive: tarfile.TarFile, target: Path, members: list[tarfile.TarInfo]) -> None:
    if hasattr(tarfile, "data_filter"):
        archive.extractall(target, members=members, filter="data")  # safe: validated members, data filter
        return
    # Python 3.11.0 to 3.11.3 (Debian 12 ships 3.11.2) has no extraction filters: the
    # validated members are given what the `data` filter would give them instead, since
    # without it a root server would hand files to the archive's owners and set-id bits.
    directories = 0o777 & ~_umask()
    archive.extractall(target, members=[_as_data(member, directories) for member in members],  # safe: validated
                       numeric_owner=True)


def _as_data(member: tarfile.TarInfo, directory_mode: int) -> tarfile.TarInfo:
    """The member as tarfile's `data` filter leaves it: owned by whoever extracts it, no
    set-id or sticky bits, no write permission for group or others, files readable and
    writable by their owner and executable only if by their owner, directories as a fresh
    mkdir makes them."""
    plain = copy.copy(member)
    plain.uid, plain.gid, plain.uname, plain.gname = os.geteuid(), os.getegid(), "", ""
    mode = member.mode & 0o755
    if not mode & 0o100:  # executable by others only: by no one
        mode &= ~0o111
    plain.mode = directory_mode if member.isdir() else mode | 0o600
    return plain


def _umask() -> int:
    """This process's umask, read without changing it (other threads create files too)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _remove_extracted(target: Path, created: bool) -> None:
    if created:
        shutil.rmtree(target, ignore_errors=True)
        return
    for child in target.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
