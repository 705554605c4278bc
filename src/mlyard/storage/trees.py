"""Deleting a tree whose folders are read-only (a dataset version shown to a job: its folders
are 0555 so that nothing through them changes it)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path


def remove_read_only_tree(tree: Path) -> None:
    """Deletes `tree`; what its files link to (the store's blobs) stays."""
    if not tree.exists():
        return
    for directory, _, _ in os.walk(tree):
        os.chmod(directory, stat.S_IRWXU)
    shutil.rmtree(tree)
