"""A content-addressed file store for snapshot archives and other immutable blobs."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from mlyard.storage.errors import SnapshotError, SnapshotTooLarge, format_megabytes

_DIGEST = re.compile(r"[0-9a-f]{64}")
_READ_CHUNK = 1024 * 1024
TEMPORARY_DIRECTORY_NAME = "tmp"


def _check_digest(digest: str) -> str:
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ValueError(f"not a sha256 hex digest: {digest!r}")
    return digest


class BlobStore:
    """Content-addressed files under ``root/<aa>/<digest>`` (aa = first two hex characters).

    Writers stream into a temporary file in ``root/tmp`` and rename it into place only when
    it is complete and verified, so a crash or a rejected upload never leaves a half-written
    blob in the store. Blobs are immutable: storing a digest that already exists is a no-op.
    Safe to use from several threads and processes at once.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.temporary_directory = self.root / TEMPORARY_DIRECTORY_NAME

    def path_for(self, digest: str) -> Path:
        """Where the blob with this digest lives (whether or not it exists).

        Raises ValueError unless `digest` is 64 lowercase hex characters, so a digest taken
        from a request can never name a path outside the store.
        """
        _check_digest(digest)
        return self.root / digest[:2] / digest

    def exists(self, digest: str) -> bool:
        """Whether the blob with this digest is in the store."""
        return self.path_for(digest).is_file()

    def put_stream(
        self,
        chunks: Iterable[bytes],
        *,
        expected_digest: str | None = None,
        validate: Callable[[Path], object] | None = None,
        max_bytes: int | None = None,
    ) -> tuple[str, int]:
        """Store the concatenation of `chunks`; return ``(sha256 hex digest, size)``.

        Raises `SnapshotError` when more than `max_bytes` arrive (reading stops at the chunk
        that crosses the limit), when `expected_digest` is given and differs, or when
        `validate(temporary_path)` raises (a `SnapshotError` from it is re-raised as is; its
        return value is ignored). Raises ValueError before reading anything if
        `expected_digest` is not a valid digest. In every failure case, including an
        exception from `chunks` itself, which propagates unchanged, the temporary file is
        removed and the store is unchanged. Storing content that is already present is fine.
        """
        if expected_digest is not None:
            _check_digest(expected_digest)
        writer = self.receive(max_bytes=max_bytes)
        try:
            for chunk in chunks:
                writer.write(chunk)
        except BaseException:
            writer.discard()
            raise
        return writer.commit(expected_digest, validate=validate)

    def receive(self, *, max_bytes: int | None = None) -> BlobWriter:
        """A writer for bytes that arrive piece by piece (an upload read by an event loop):
        `write` each piece, then `commit` (which verifies and publishes) or `discard`."""
        self.temporary_directory.mkdir(parents=True, exist_ok=True)
        descriptor, temporary_name = tempfile.mkstemp(
            dir=self.temporary_directory, prefix="upload-", suffix=".partial"
        )
        return BlobWriter(self, os.fdopen(descriptor, "wb"), Path(temporary_name), max_bytes)

    def _publish(self, temporary: Path, digest: str) -> None:
        final = self.path_for(digest)
        if final.is_file():
            temporary.unlink()
            return
        final.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(temporary, 0o444)  # a blob never changes
        # Atomic on one file system; a concurrent writer of the same digest renames identical
        # bytes, so whichever lands last is equally correct.
        os.replace(temporary, final)

    def sweep_temporary(self) -> int:
        """Removes unfinished writes (``tmp/*.partial``) and returns how many. Only for when no
        writer can be running: at the start of the one server that owns this store."""
        removed = 0
        for leftover in self.temporary_directory.glob("*.partial"):
            leftover.unlink(missing_ok=True)
            removed += 1
        return removed

    def remove(self, digest: str) -> None:
        """Deletes the blob and the extractions of it that launchers keep beside it
        (`snapshot_cache.py`); removing one that is not there is fine."""
        from mlyard.storage.snapshot_cache import CACHE_INFIX

        path = self.path_for(digest)
        path.unlink(missing_ok=True)
        for extracted in path.parent.glob(f"{digest}{CACHE_INFIX}*"):
            shutil.rmtree(extracted, ignore_errors=True)

    def put_file(
        self,
        path: Path,
        *,
        expected_digest: str | None = None,
        validate: Callable[[Path], object] | None = None,
        max_bytes: int | None = None,
    ) -> tuple[str, int]:
        """Store a copy of the file at `path`; same contract as `put_stream`."""
        with open(path, "rb") as source:
            return self.put_stream(
                iter(lambda: source.read(_READ_CHUNK), b""),
                expected_digest=expected_digest,
                validate=validate,
                max_bytes=max_bytes,
            )


class BlobWriter:
    """One blob being received (`BlobStore.receive`): hashed as it is written, published under
    its digest only by `commit`, never half-written."""

    def __init__(self, store: BlobStore, sink, temporary: Path, max_bytes: int | None) -> None:
        self._store = store
        self._sink = sink
        self._temporary = temporary
        self._max_bytes = max_bytes
        self._hasher = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        """Raises SnapshotTooLarge past `max_bytes` (the writer is then discarded)."""
        self.size += len(chunk)
        if self._max_bytes is not None and self.size > self._max_bytes:
            self.discard()
            raise SnapshotTooLarge(f"upload is larger than the {format_megabytes(self._max_bytes)} limit")
        self._hasher.update(chunk)
        self._sink.write(chunk)

    def commit(self, expected_digest: str | None = None, *,
               validate: Callable[[Path], object] | None = None) -> tuple[str, int]:
        """Publishes the bytes; ``(digest, size)``. Raises SnapshotError (and keeps nothing)
        when they do not match `expected_digest` or `validate(temporary_path)` raises (its
        SnapshotError as is)."""
        try:
            self._sink.flush()
            os.fsync(self._sink.fileno())  # never publish a blob whose bytes are not on disk
            self._sink.close()
            digest = self._hasher.hexdigest()
            if expected_digest is not None and digest != _check_digest(expected_digest):
                raise SnapshotError(f"upload does not match its digest: expected {expected_digest}, "
                                    f"received {digest}")
            if validate is not None:
                try:
                    validate(self._temporary)
                except SnapshotError:
                    raise
                except Exception as error:
                    raise SnapshotError(f"upload rejected: {error}") from error
            self._store._publish(self._temporary, digest)
        except BaseException:
            self.discard()
            raise
        return digest, self.size

    def discard(self) -> None:
        self._sink.close()
        self._temporary.unlink(missing_ok=True)
