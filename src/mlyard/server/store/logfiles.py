"""Reading replica log files (written by the launcher) by byte offset, for `logs -f` and `show`."""

from __future__ import annotations

import os
from pathlib import Path

from mlyard.runtime.launch_config import OUTPUT_LOG

MAX_CHUNK = 1024 * 1024


def log_path(replica_directory: str | Path) -> Path:
    return Path(replica_directory) / OUTPUT_LOG


def read(replica_directory: str | Path, offset: int, limit: int = MAX_CHUNK) -> tuple[bytes, int]:
    """Up to `limit` bytes from `offset`, cut after the last complete line unless a single line
    is longer than the chunk, and the offset to continue from."""
    path = log_path(replica_directory)
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(min(limit, MAX_CHUNK))
    except OSError:  # not written yet, or its directory is gone: nothing to show
        return b"", offset
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n")
        if cut >= 0 and len(data) == min(limit, MAX_CHUNK):
            data = data[: cut + 1]
    return data, offset + len(data)


def size(replica_directory: str | Path) -> int:
    try:
        return os.path.getsize(log_path(replica_directory))
    except OSError:
        return 0


def tail(replica_directory: str | Path, lines: int) -> list[str]:
    path = log_path(replica_directory)
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            end = handle.tell()
            handle.seek(max(0, end - 64 * 1024))
            data = handle.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]
