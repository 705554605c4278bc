"""Trees of hard links into the blob store (the dataset version a job reads:
`server/control/dataset_views.py`), never half made, and deleting a tree whose folders are
read-only (0555, so that nothing through them changes the version)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlyard.storage.blobs import BlobStore

_COPY_INSTEAD = (errno.EXDEV, errno.EMLINK, errno.EPERM)
# What renaming a directory onto one that exists answers (ENOTEMPTY on Linux; POSIX allows EEXIST).
_TAKEN = (errno.EEXIST, errno.ENOTEMPTY)


class TreeError(ValueError):
    """A tree that cannot be made from what the store holds; `str()` is one clear line."""


def build(view: Path, files: Iterable[tuple[str, str]], blobs: BlobStore) -> None:
    """Makes `view` from `files` ((path, digest) pairs): each file a hard link to its blob (a copy
    where the store lies on another filesystem or the blob has all the links it may have),
    folders 0555. It is built beside its name and renamed into place, so a server that stops
    halfway leaves nothing that looks whole; where another builder renamed its tree into place
    first (the same pinned version), that one stays and this one is dropped."""
    view.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{view.name}.partial-", dir=view.parent))
    try:
        _fill(partial, files, blobs)
        for directory, _, _ in os.walk(partial, topdown=False):
            os.chmod(directory, 0o555)
        try:
            os.rename(partial, view)
            return
        except OSError as error:
            if error.errno not in _TAKEN:
                raise
        remove_read_only_tree(partial)
    except BaseException:
        remove_read_only_tree(partial)
        raise


def _fill(partial: Path, files: Iterable[tuple[str, str]], blobs: BlobStore) -> None:
    for path, digest in files:
        relative = PurePosixPath(path)
        # Every path was checked when its version was made; a tree is no place to find out otherwise.
        if relative.is_absolute() or ".." in relative.parts:
            raise TreeError(f"a dataset file's path {path!r} leads out of its version")
        target = partial.joinpath(*relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        source = blobs.path_for(digest)
        if not source.is_file():
            raise TreeError(f"the store has lost the blob of {path!r} ({digest[:12]}…)")
        _link_or_copy(source, target)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno not in _COPY_INSTEAD:
            raise
        shutil.copyfile(source, target)
        os.chmod(target, 0o444)


def remove_read_only_tree(tree: Path) -> None:
    """Deletes `tree`, whatever modes its folders have (0555, or 000 where a job left them so);
    what its files link to (the store's blobs) stays."""
    if not tree.exists():
        return
    pending = [str(tree)]
    while pending:
        folder = pending.pop()
        # Opened before it is listed (os.walk would skip a folder it cannot list, and rmtree then
        # fail), through a descriptor: a folder swapped for a link meanwhile is not followed.
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(descriptor, stat.S_IRWXU)
        finally:
            os.close(descriptor)
        with os.scandir(folder) as entries:
            pending.extend(entry.path for entry in entries if entry.is_dir(follow_symlinks=False))
    shutil.rmtree(tree)
