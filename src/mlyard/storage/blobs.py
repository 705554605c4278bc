"""A content-addressed file store for snapshot archives and other immutable blobs."""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import secrets
import shutil
import sys
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
        self._root = str(self.root)
        self.temporary_directory = self.root / TEMPORARY_DIRECTORY_NAME

    def path_for(self, digest: str) -> Path:
        """Where the blob with this digest lives (whether or not it exists).

        Raises ValueError unless `digest` is 64 lowercase hex characters, so a digest taken
        from a request can never name a path outside the store.
        """
        return Path(self._location(digest))

    def _location(self, digest: str) -> str:
        # A string join: a version of 100,000 files asks this several times per file.
        _check_digest(digest)
        return f"{self._root}/{digest[:2]}/{digest}"

    def exists(self, digest: str) -> bool:
        """Whether the blob with this digest is in the store."""
        return os.path.isfile(self._location(digest))

    def size_of(self, digest: str) -> int | None:
        """The blob's size; None when it is not in the store."""
        try:
            return os.stat(self._location(digest)).st_size
        except FileNotFoundError:
            return None

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

    def write_temporary(self, content: bytes) -> str:
        """A read-only file of ``tmp/`` holding `content`, not synced: for `publish_batch`, once
        the caller checked the content's digest."""
        while True:
            temporary = os.path.join(self.temporary_directory, f"pack-{secrets.token_hex(10)}.partial")
            try:
                descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
                break
            except FileExistsError:
                continue
            except FileNotFoundError:
                self.temporary_directory.mkdir(parents=True, exist_ok=True)
        try:
            os.fchmod(descriptor, 0o444)  # the umask (077 on a server) would close it to jobs' accounts
            view = memoryview(content)
            while view:
                view = view[os.write(descriptor, view):]
        except BaseException:
            os.close(descriptor)
            os.unlink(temporary)
            raise
        os.close(descriptor)
        return temporary

    def publish_batch(self, temporaries: list[tuple[str | Path, str]]) -> None:
        """Publishes complete, checked, read-only temporary files under their digests with one
        sync of their bytes before the renames and one of the folders after, instead of an fsync
        each: once this returns, every one is on disk under its digest."""
        if not temporaries:
            return
        _sync([temporary for temporary, _ in temporaries])
        root = str(self.root)  # strings: pathlib would cost more than the renames
        folders = {os.path.join(root, _check_digest(digest)[:2]) for _, digest in temporaries}
        for folder in folders:
            os.makedirs(folder, exist_ok=True)
        for temporary, digest in temporaries:
            final = os.path.join(root, digest[:2], digest)
            if os.path.exists(final):  # stored already: the same bytes
                os.unlink(temporary)
            else:
                os.replace(temporary, final)
        _sync([self.temporary_directory, *sorted(folders)])

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


def _sync(paths: list[str | Path]) -> None:
    """Puts the bytes of these files (or folders) on disk: one `syncfs` of their file system
    where Linux has it (a sync of a thousand small files costs about one fsync, though it also
    waits for whatever else that file system holds unwritten), else an fsync of each."""
    if _SYNCFS is not None:
        descriptor = os.open(paths[0], os.O_RDONLY)
        try:
            if _SYNCFS(descriptor) == 0:
                return
        finally:
            os.close(descriptor)
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


_SYNCFS = _load_syncfs()
_WRITEBACK = 32 * 1024 * 1024
"""A big blob's bytes are handed to the disk every this many (`sync_file_range`, which does not
wait): its fsync then waits for the last of them only, and the disk writes while more arrive."""


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return function


_SYNC_FILE_RANGE = _load_sync_file_range()


def _start_writeback(descriptor: int, offset: int, length: int) -> None:
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(descriptor, offset, length, 2)  # SYNC_FILE_RANGE_WRITE; a failure changes nothing


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
        self._written_back = 0

    def write(self, chunk: bytes) -> None:
        """Raises SnapshotTooLarge past `max_bytes` (the writer is then discarded)."""
        self.size += len(chunk)
        if self._max_bytes is not None and self.size > self._max_bytes:
            self.discard()
            raise SnapshotTooLarge(f"upload is larger than the {format_megabytes(self._max_bytes)} limit")
        self._hasher.update(chunk)
        self._sink.write(chunk)
        if self.size - self._written_back >= _WRITEBACK:  # the disk starts now, not at the fsync
            self._sink.flush()
            _start_writeback(self._sink.fileno(), self._written_back, self.size - self._written_back)
            self._written_back = self.size

    def commit(self, expected_digest: str | None = None, *,
               validate: Callable[[Path], object] | None = None, publish: bool = True) -> tuple[str, int]:
        """Publishes the bytes; ``(digest, size)``. Raises SnapshotError (and keeps nothing)
        when they do not match `expected_digest` or `validate(temporary_path)` raises (its
        SnapshotError as is).

        With ``publish=False`` the bytes are checked but neither synced nor published: they stay
        in `temporary` (read-only) for `BlobStore.publish_batch`, which publishes many after one
        sync for them all; `discard` drops them meanwhile."""
        try:
            self._sink.flush()
            if publish:
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
            if publish:
                self._store._publish(self._temporary, digest)
            else:
                os.chmod(self._temporary, 0o444)
        except BaseException:
            self.discard()
            raise
        return digest, self.size

    @property
    def temporary(self) -> Path:
        """Where the bytes are until published."""
        return self._temporary

    def discard(self) -> None:
        """Drops the bytes unless published (a no-op then)."""
        self._sink.close()
        self._temporary.unlink(missing_ok=True)
