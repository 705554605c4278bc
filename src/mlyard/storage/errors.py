"""The snapshot errors and size limit, shared by packing, archive checks and the blob store.

Kept apart from `packing` and `archives` so that each of them, and `blobs`, can import these
without importing the other.
"""

from __future__ import annotations

DEFAULT_MAX_SNAPSHOT_BYTES = 200 * 1024 * 1024
_MEBIBYTE = 1024 * 1024


class SnapshotError(ValueError):
    """A bad snapshot archive or a bad code directory; ``str()`` is one clear line for a user."""


class SnapshotTooLarge(SnapshotError):
    """The files to snapshot add up to more than the allowed number of bytes."""


def format_megabytes(byte_count: int) -> str:
    """Render a byte count for users, e.g. ``"312.4 MB"`` (1 MB = 2**20 bytes)."""
    return f"{byte_count / _MEBIBYTE:.1f} MB"
