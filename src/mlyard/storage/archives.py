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


def _normalise_member_name(name: str, what: str, label: str) -> str:
    if not name or "\x00" in name:
        raise SnapshotError(f"{label} {what} {name!r} has an invalid name")
    if name.startswith("/"):
        raise SnapshotError(f"{label} {what} {name!r} has an absolute path")
    normalised = posixpath.normpath(name)
    if ".." in normalised.split("/"):
        raise SnapshotError(f"{label} {what} {name!r} would resolve outside the target directory")
    return normalised


def _check_depth(name: str, label: str) -> list[str]:
    parts = name.split("/")
    if len(parts) > MAX_MEMBER_DEPTH:
        shown = name if len(name) <= 60 else name[:60] + "…"
        raise SnapshotError(f"{label} member {shown!r} is nested {len(parts)} directories deep; "
                            f"the limit is {MAX_MEMBER_DEPTH}")
    return parts


class MemberChecker:
    """The checks every member of an archive gets, whatever its format (tar here, zip in `zips`),
    fed one member at a time (no recursion, whatever the nesting): the member count and declared
    sizes against the limits, names, nesting, repeats, members written through a symlink or inside
    a file, and, in `finish`, symlinks that lead out."""

    def __init__(self, limits: UnpackLimits) -> None:
        self.limits = limits
        self.count = 0
        self.declared = 0
        # Normalised name -> "dir", "file" or "link"; implicit parents count as "dir".
        self.kinds: dict[str, str] = {}
        self.links: dict[str, str] = {}

    def add(self, name: str, kind: str | None, size: int) -> str | None:
        """Check one member (`kind`: "dir", "file", "link", or None for a device, FIFO or other
        special file); return its normalised name, or None for the root directory itself."""
        label = self.limits.label
        self.count += 1
        if self.count > self.limits.max_members:
            raise SnapshotError(f"{label} has more than {self.limits.max_members} members")
        self.declared += max(size, 0)
        self.limits.check_declared(self.declared)
        if kind is None:
            raise SnapshotError(f"{label} member {name!r} is a device, FIFO or other special file")
        normalised = _normalise_member_name(name, "member", label)
        if normalised == ".":
            if kind != "dir":
                raise SnapshotError(f"{label} member {name!r} has an invalid name")
            return None
        parts = _check_depth(normalised, label)
        for depth in range(1, len(parts)):
            parent_kind = self.kinds.setdefault("/".join(parts[:depth]), "dir")
            if parent_kind == "link":
                raise SnapshotError(f"{label} member {name!r} is written through a symlink")
            if parent_kind != "dir":
                raise SnapshotError(f"{label} member {name!r} is inside a file")
        previous = self.kinds.get(normalised)
        if previous is not None and not (previous == "dir" and kind == "dir"):
            # Extraction would replace or write through the earlier entry; nothing we pack repeats one.
            raise SnapshotError(f"{label} member {name!r} appears more than once")
        self.kinds[normalised] = kind
        return normalised

    def finish(self) -> None:
        # Checked once all are known: a later symlink can redirect an earlier one.
        check_symlinks(self.links,
                       lambda name, target, reason: f"{self.limits.label} symlink {name!r} -> {target!r} {reason}")


def _validate_members(archive: tarfile.TarFile, limits: UnpackLimits) -> list[tarfile.TarInfo]:
    """Check every member of an open tar archive; returns them in archive order."""
    members: list[tarfile.TarInfo] = []
    checker = MemberChecker(limits)
    while True:
        member = archive.next()
        if member is None:
            break
        members.append(member)
        kind = ("dir" if member.isdir() else "file" if member.isreg() or member.islnk()
                else "link" if member.issym() else None)
        name = checker.add(member.name, kind, member.size)
        if name is None:
            continue
        if member.islnk():
            target = _normalise_member_name(member.linkname, f"hardlink {member.name!r} ->", limits.label)
            if checker.kinds.get(target) != "file" or target == name:
                raise SnapshotError(f"{limits.label} hardlink {member.name!r} -> {member.linkname!r} "
                                    "does not point to an earlier file in the archive")
        elif member.issym():
            checker.links[name] = member.linkname
    checker.finish()
    return members


@contextmanager
def _open_archive(path: Path, limits: UnpackLimits, plain_tar: bool = False) -> Iterator[tarfile.TarFile]:
    kind = "tar or gzip-compressed tar" if plain_tar else "gzip-compressed tar"
    try:
        with open(path, "rb") as probe:
            magic = probe.read(2)
        raw = open(path, "rb")
    except OSError as error:
        raise SnapshotError(f"cannot read {limits.label} {path}: {error.strerror or error}") from error
    with raw:
        if magic != b"\x1f\x8b" and not plain_tar:
            raise SnapshotError(f"{path} is not a {kind} archive")
        # An uncompressed tar unpacks to its members' declared sizes, which `check_declared` limits.
        source = GuardedGzip(raw, limits) if magic == b"\x1f\x8b" else raw
        try:
            archive = tarfile.open(fileobj=source, mode="r:")  # type: ignore[arg-type]
        except SnapshotError:
            raise
        except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
            raise SnapshotError(f"{path} is not a valid {kind} archive: {error}") from error
        with archive:
            yield archive


def _validate_open(archive: tarfile.TarFile, path: Path, limits: UnpackLimits) -> list[tarfile.TarInfo]:
    try:
        return _validate_members(archive, limits)
    except SnapshotError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        raise SnapshotError(f"{path} is a corrupt {limits.label}: {error}") from error


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


def check_free_space(target: Path, needed: int, label: str) -> None:
    """Refuse to unpack `needed` bytes (with `member_room` for each member) onto the file
    system that holds `target` when it has less free."""
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    status = os.statvfs(existing)
    free = status.f_bavail * status.f_frsize
    if needed > free:
        raise SnapshotError(f"not enough free space to unpack the {label}: it unpacks to "
                            f"{format_megabytes(needed)} and {existing} has {format_megabytes(free)} free")


def member_room(size: int) -> int:
    """What a member takes on disk: its bytes, its inode and its last partial block."""
    return size + _MEMBER_OVERHEAD


def prepare_target(target: Path) -> bool:
    """Refuse a `target` that is not an empty directory or absent; True when it is absent (and
    so is to be removed whole if extraction fails)."""
    if target.exists() or target.is_symlink():
        if target.is_symlink() or not target.is_dir():
            raise SnapshotError(f"cannot extract an archive into {target}: not a directory")
        if any(target.iterdir()):
            raise SnapshotError(f"cannot extract an archive into {target}: it is not empty")
        return False
    return True


def extract_snapshot(archive: Path, target: Path, *, limits: UnpackLimits | None = None,
                     plain_tar: bool = False) -> None:
    """Validate `archive` with `validate_archive`, check that the file system holding `target`
    has room for what it unpacks to, then extract it into `target`; with `plain_tar`, an
    uncompressed tar archive is accepted too (code snapshots are always gzip-compressed).

    `target` is created if absent and must otherwise be an empty directory. Nothing is
    written when validation or the space check fails. Extraction also uses tarfile's ``data`` filter as a
    second line of defence where Python has it (3.11.4 and later); if extraction fails
    anyway, what was extracted is removed again. Raises `SnapshotError` in every failure case.
    """
    archive = Path(archive)
    target = Path(target)
    created = prepare_target(target)
    # One open file for both passes, so the archive checked is the archive extracted.
    limits = limits or UnpackLimits()
    with _open_archive(archive, limits, plain_tar) as opened:
        members = _validate_open(opened, archive, limits)
        check_free_space(target, sum(member_room(member.size if member.isreg() else 0) for member in members),
                         limits.label)
        target.mkdir(parents=True, exist_ok=True)
        try:
            opened.errorlevel = 2
            _extract(opened, target, members)
        except BaseException as error:
            remove_extracted(target, created)
            if isinstance(error, (tarfile.TarError, OSError, EOFError, zlib.error)):
                raise SnapshotError(f"cannot extract {limits.label} {archive}: {error}") from error
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


def remove_extracted(target: Path, created: bool) -> None:
    """Undo a failed extraction: `target` itself when it was `created` for it, else what is in it."""
    if created:
        shutil.rmtree(target, ignore_errors=True)
        return
    for child in target.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
