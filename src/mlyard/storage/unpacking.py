"""Reading a gzip-compressed archive under limits on what it unpacks to.

A few megabytes of gzip can unpack to gigabytes (a decompression bomb). `GuardedGzip` is the
file object `tarfile` reads instead of the gzip file itself: every byte it decompresses,
whether read or skipped over, passes a check, so a bomb is refused as soon as it passes a
limit rather than after all of it has been decompressed.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import BinaryIO

from mlyard.storage.errors import SnapshotError, format_megabytes

MAX_ARCHIVE_MEMBERS = 100_000
MAX_MEMBER_DEPTH = 256
"""Directories a member name may be nested in; real code stays far below, and the kernel's
4096-byte path limit would fail deeper trees at extraction anyway."""
UNPACKED_MULTIPLE = 5
"""The default cap on unpacked bytes, as a multiple of the upload cap."""
DEFAULT_MAX_RATIO = 100
"""Source code compresses 3 to 10 times, generated text (JSON, CSV, logs) up to about 30;
runs of one byte (the usual bomb) about 1000."""
RATIO_FLOOR = 4 * 1024 * 1024
"""The ratio is judged only past this many unpacked bytes: a tar's trailing padding alone makes
a tiny archive compress well over 100 times."""
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class UnpackLimits:
    """What one archive may unpack to. None: no limit of that kind."""

    max_bytes: int | None = None
    """Unpacked bytes: the tar stream, headers included, and the sum of the members' sizes."""
    max_ratio: float | None = None
    """Unpacked bytes per compressed byte, past `RATIO_FLOOR`."""
    max_members: int = MAX_ARCHIVE_MEMBERS
    label: str = "snapshot archive"
    """How messages name the archive: other archives than code snapshots are checked the same way."""
    bytes_limit_name: str = "the server's limit (MLYARD_MAX_SNAPSHOT_UNPACKED_BYTES)"
    """How messages name `max_bytes`, so a user knows which setting to change."""

    @classmethod
    def for_upload(cls, max_upload_bytes: int, *, max_bytes: int | None = None,
                   max_ratio: float | None = DEFAULT_MAX_RATIO) -> UnpackLimits:
        """The server's limits: `max_bytes` by default `UNPACKED_MULTIPLE` times the upload cap."""
        return cls(max_bytes=max_bytes or UNPACKED_MULTIPLE * max_upload_bytes, max_ratio=max_ratio)

    def check_declared(self, total: int) -> None:
        """Refuses members whose declared sizes add up past `max_bytes` (before their data is read)."""
        if self.max_bytes is not None and total > self.max_bytes:
            raise SnapshotError(self._too_many_bytes())

    def _too_many_bytes(self) -> str:
        return f"{self.label} unpacks to more than {format_megabytes(self.max_bytes or 0)}, {self.bytes_limit_name}"

    def check_stream(self, unpacked: int, compressed: int) -> None:
        if self.max_bytes is not None and unpacked > self.max_bytes:
            raise SnapshotError(self._too_many_bytes())
        if self.max_ratio is not None and unpacked > RATIO_FLOOR and unpacked > self.max_ratio * max(compressed, 1):
            raise SnapshotError(
                f"{self.label} unpacks to more than {self.max_ratio:g} times its compressed size, the server's "
                "limit (MLYARD_MAX_SNAPSHOT_RATIO); leave out highly repetitive files such as runs of zeros")


class GuardedGzip:
    """The decompressed bytes of `raw` (a gzip file), read and sought as `tarfile` does,
    checked against `limits` as they are decompressed."""

    def __init__(self, raw: BinaryIO, limits: UnpackLimits) -> None:
        self._raw = raw
        self._gzip = gzip.GzipFile(fileobj=raw, mode="rb")
        self._limits = limits
        self._furthest = 0
        self.name = getattr(raw, "name", "")

    def _checked(self) -> None:
        position = self._gzip.tell()
        if position > self._furthest:
            self._furthest = position
            self._limits.check_stream(position, self._raw.tell())

    def read(self, size: int | None = -1) -> bytes:
        parts = []
        remaining = -1 if size is None or size < 0 else size
        while remaining != 0:
            data = self._gzip.read(_CHUNK if remaining < 0 else min(remaining, _CHUNK))
            self._checked()
            if not data:
                break
            parts.append(data)
            if remaining > 0:
                remaining -= len(data)
        return b"".join(parts)

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self._gzip.tell() + offset if whence == 1 else None
        if target is None:
            raise OSError("seeking from the end of a compressed archive is not supported")
        if target <= self._gzip.tell():
            return self._gzip.seek(target)  # back over bytes already checked
        # Forward seeks (tarfile skipping a member's data) decompress too: through `read`.
        while self._gzip.tell() < target:
            if not self.read(min(target - self._gzip.tell(), _CHUNK)):
                break
        return self._gzip.tell()

    def tell(self) -> int:
        return self._gzip.tell()

    def close(self) -> None:
        self._gzip.close()
