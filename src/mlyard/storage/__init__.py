"""Storage of code snapshots: packing and unpacking them, and a content-addressed blob store.

Imports nothing else from mlyard, so the client, the server and worker agents can all use it.
"""

from mlyard.storage.blobs import BlobStore
from mlyard.storage.archives import extract_snapshot, validate_archive
from mlyard.storage.errors import (
    DEFAULT_MAX_SNAPSHOT_BYTES,
    SnapshotError,
    SnapshotTooLarge,
    format_megabytes,
)
from mlyard.storage.packing import PackedSnapshot, list_snapshot_files, pack_directory
from mlyard.storage.unpacking import DEFAULT_MAX_RATIO, MAX_ARCHIVE_MEMBERS, UnpackLimits

__all__ = [
    "DEFAULT_MAX_RATIO",
    "DEFAULT_MAX_SNAPSHOT_BYTES",
    "MAX_ARCHIVE_MEMBERS",
    "BlobStore",
    "PackedSnapshot",
    "SnapshotError",
    "SnapshotTooLarge",
    "UnpackLimits",
    "extract_snapshot",
    "format_megabytes",
    "list_snapshot_files",
    "pack_directory",
    "validate_archive",
]
