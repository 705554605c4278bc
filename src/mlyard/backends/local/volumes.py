"""Volumes of the local backend: directories of `MLYARD_HOME/volumes/`, one per claim.

The root is 0711: a job account may pass through it to a volume it was told of, never list it.
A volume is 0777 so that every account of the project's jobs writes to it (containers too,
whatever user their image names); its claim is random, and replicas on the server's own
account see nothing of MLYARD_HOME but what they mount (`runtime/hide_home.py`).

Where the filesystem enforces quotas, the volume gets one: on CephFS the
`ceph.quota.max_bytes` attribute, which makes writes past it fail. Elsewhere the server
measures what a volume holds (`volume_usage`) and keeps new jobs from mounting one past its
quota. XFS project quotas need a project id per directory in the filesystem's own
configuration, which mlyard does not own; they are left to the administrator.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from mlyard.backends.base import AttemptLaunch
from mlyard.errors import MlyardError
from mlyard.storage.trees import remove_read_only_tree

_CLAIM = re.compile(r"^mlyard-vol-[0-9a-f]{16}$")
_CEPH_QUOTA = "ceph.quota.max_bytes"
_NOT_CEPH = (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENODATA, errno.EPERM, errno.EACCES, errno.EINVAL)


class DirectoryVolumes:
    """What `LocalBackend` does for `Backend`'s volume methods."""

    volumes_root: Path | None = None

    def _volume_path(self, claim: str) -> Path:
        if self.volumes_root is None:
            raise MlyardError("this server keeps no volumes (its backend was given no directory for them)")
        if not _CLAIM.fullmatch(claim):
            raise MlyardError(f"{claim!r} is not a volume's claim")
        return self.volumes_root / claim

    def create_volume(self, claim: str, size_bytes: int) -> str | None:
        path = self._volume_path(claim)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o711)
        path.mkdir(exist_ok=True)
        os.chmod(path, 0o777)
        try:
            os.setxattr(path, _CEPH_QUOTA, str(size_bytes).encode())
        except OSError as error:
            if error.errno not in _NOT_CEPH:
                raise
            return None
        return "CephFS's ceph.quota.max_bytes attribute: writes past the quota fail"

    def remove_volume(self, claim: str) -> None:
        path = self._volume_path(claim)
        if not path.exists():
            return
        # Renamed first, so a removal cut short leaves no half-empty volume under the claim's name.
        doomed = path.with_name(f".removing-{claim}")
        os.rename(path, doomed)
        remove_read_only_tree(doomed)

    def volume_usage(self, claim: str) -> int | None:
        path = self._volume_path(claim)
        return measure(path) if path.is_dir() else None

    def volume_directory(self, claim: str) -> str:
        return str(self._volume_path(claim))


class Unmeasurable(MlyardError):
    """A folder of the volume the server cannot list: what it holds is unknown, so the volume
    is taken as over its quota rather than under it."""


def measure(root: Path) -> int:
    """The bytes of the files under `root` (what a quota counts: each file once, however many
    links it has); symbolic links are not followed. A folder a job closed (mode 000) is opened
    again to its owner when it is the server's; one that stays closed raises Unmeasurable."""
    total = 0
    seen: set[tuple[int, int]] = set()
    pending = [str(root)]
    while pending:
        folder = pending.pop()
        try:
            entries = _listed(folder)
        except FileNotFoundError:  # removed meanwhile
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    pending.append(entry.path)
                elif stat.S_ISREG(info.st_mode):
                    if info.st_nlink > 1:
                        if (info.st_dev, info.st_ino) in seen:
                            continue
                        seen.add((info.st_dev, info.st_ino))
                    total += info.st_size
    return total


def _listed(folder: str):
    try:
        return os.scandir(folder)
    except PermissionError:
        pass
    # Only reached by a server that is not root, on a folder of its own account (one a job on that
    # account closed): its owner may open it again without reading it. Only the owner's bits are
    # added, so a folder swapped for a link meanwhile opens nothing to anyone else.
    info = os.lstat(folder)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
        os.chmod(folder, stat.S_IMODE(info.st_mode) | stat.S_IRWXU)
    try:
        return os.scandir(folder)
    except PermissionError as error:
        raise Unmeasurable(f"cannot list {folder}: a job closed it to the server") from error


def process_volume_links(launch: AttemptLaunch) -> dict[str, str]:
    """The links a process replica gets to its volumes. A process cannot mount at an absolute
    path it does not own: such a volume needs a container."""
    if absolute := [mount for mount in launch.volumes if mount.path.startswith("/")]:
        raise MlyardError(f"volume {absolute[0].name} is mounted at {absolute[0].path}, which only a container can "
                          "have: give the job an image (or an image environment), or a path relative to its working "
                          "directory such as volumes/" + absolute[0].name)
    return launch.volume_links
