"""Storage of code snapshots: packing and unpacking them, and a content-addressed blob store;
also unpacking, under the same checks, the archives users hand in for datasets (`zips`).

Imports nothing else from mlyard, so the client, the server and worker agents can all use it.
Each name loads its module on first use: a replica's launcher, which only extracts, does not
pay for what packing and the blob store import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlyard.storage.archives import extract_snapshot, validate_archive
    from mlyard.storage.blobs import BlobStore
    from mlyard.storage.errors import (
        DEFAULT_MAX_SNAPSHOT_BYTES,
        SnapshotError,
        SnapshotTooLarge,
        format_megabytes,
    )
    from mlyard.storage.packing import PackedSnapshot, list_snapshot_files, pack_directory
    from mlyard.storage.unpacking import DEFAULT_MAX_RATIO, MAX_ARCHIVE_MEMBERS, UnpackLimits
    from mlyard.storage.zips import extract_archive

_MODULES = {
    "BlobStore": "blobs",
    "extract_snapshot": "archives",
    "validate_archive": "archives",
    "DEFAULT_MAX_SNAPSHOT_BYTES": "errors",
    "SnapshotError": "errors",
    "SnapshotTooLarge": "errors",
    "format_megabytes": "errors",
    "PackedSnapshot": "packing",
    "list_snapshot_files": "packing",
    "pack_directory": "packing",
    "DEFAULT_MAX_RATIO": "unpacking",
    "MAX_ARCHIVE_MEMBERS": "unpacking",
    "UnpackLimits": "unpacking",
    "extract_archive": "zips",
}

__all__ = [
    "DEFAULT_MAX_RATIO",
    "DEFAULT_MAX_SNAPSHOT_BYTES",
    "MAX_ARCHIVE_MEMBERS",
    "BlobStore",
    "PackedSnapshot",
    "SnapshotError",
    "SnapshotTooLarge",
    "UnpackLimits",
    "extract_archive",
    "extract_snapshot",
    "format_megabytes",
    "list_snapshot_files",
    "pack_directory",
    "validate_archive",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES})
