"""Many small blobs in one request body: the framing of a pack, and its reading into the store.

A pack is ``MLYPACK1`` (8 bytes), the number of members (4 bytes, big-endian), then each member:
its sha256 (32 raw bytes), its size (8 bytes, big-endian) and that many bytes; nothing after the
last. `PackReceiver` reads one as it arrives, in pieces of any size: each member is hashed and
checked against its digest, then written to a temporary file (a small one gathered in memory
first, a big one streamed through `BlobStore.receive`), and all are published with one sync
(`BlobStore.publish_batch`) once the body is whole. A pack is stored whole or not at all: a
member that does not match its digest, a size over the limits, a body cut short or with bytes
after its last member refuses it, and what was written of it is discarded.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

from mlyard.storage.blobs import BlobStore, BlobWriter
from mlyard.storage.errors import SnapshotError, SnapshotTooLarge, format_megabytes

MAGIC = b"MLYPACK1"
HEADER = struct.Struct(">8sI")
RECORD = struct.Struct(">32sQ")
MEDIA_TYPE = "application/vnd.mlyard.blob-pack"
IN_MEMORY = 1 << 20
"""Members up to this size are gathered in memory, checked, then written in one go; bigger ones
stream through `BlobStore.receive`."""


class PackError(SnapshotError):
    """A pack that is malformed or cut short, or a member that does not match its digest
    (`digest` then names it)."""

    def __init__(self, message: str, digest: str | None = None) -> None:
        super().__init__(message)
        self.digest = digest


def pack_size(sizes: Iterable[int]) -> int:
    """The length of a pack of members of these sizes."""
    sizes = list(sizes)
    return HEADER.size + RECORD.size * len(sizes) + sum(sizes)


def encode_header(count: int) -> bytes:
    return HEADER.pack(MAGIC, count)


def encode_record(digest: str, size: int) -> bytes:
    return RECORD.pack(bytes.fromhex(digest), size)


def encode(members: Iterable[tuple[str, bytes]]) -> bytes:
    """A whole pack of (digest, bytes) members, for tests and small packs."""
    members = list(members)
    return encode_header(len(members)) + b"".join(encode_record(digest, len(content)) + content
                                                  for digest, content in members)


class PackReceiver:
    """Reads one pack into `store` (see the module's documentation): `feed` it the body's
    pieces, then `finish`; `discard` whatever happens (a no-op once finished)."""

    def __init__(self, store: BlobStore, *, max_member: int, max_total: int, max_members: int) -> None:
        self._store = store
        self._max_member, self._max_total, self._max_members = max_member, max_total, max_members
        self._pending = bytearray()
        """Bytes of a header or record not yet whole."""
        self._count: int | None = None
        self._received = 0
        self._member: bytearray | BlobWriter | None = None
        """The member being read: its bytes when small, else a writer into the store."""
        self._digest = ""
        self._left = 0
        self._done: list[tuple[str | Path, str, int]] = []
        """(temporary file, digest, size) of the members read and checked."""
        self._finished = False

    def feed(self, data: bytes) -> None:
        """Raises PackError (SnapshotTooLarge past a limit); call `discard` then."""
        self._received += len(data)
        if self._received > self._max_total:
            raise SnapshotTooLarge(f"the pack is larger than the {format_megabytes(self._max_total)} limit")
        view = memoryview(data)
        while view:
            if self._member is not None:
                piece = view[:self._left]
                if isinstance(self._member, bytearray):
                    self._member += piece
                else:
                    self._member.write(piece)
                self._left -= len(piece)
                view = view[len(piece):]
                if self._left == 0:
                    self._seal()
            elif self._count is not None and len(self._done) == self._count:
                raise PackError(f"the pack has bytes after its {self._count} members")
            else:
                view = self._read_head(view)

    def _read_head(self, view: memoryview) -> memoryview:
        size = (HEADER if self._count is None else RECORD).size
        wanted = size - len(self._pending)
        self._pending += view[:wanted]
        if len(self._pending) < size:
            return view[wanted:]
        if self._count is None:
            magic, count = HEADER.unpack(self._pending)
            if magic != MAGIC:
                raise PackError("the body is not a blob pack (it does not start with MLYPACK1)")
            if count > self._max_members:
                raise SnapshotTooLarge(f"the pack has {count:,} members, over the limit of {self._max_members:,}")
            self._count = count
        else:
            raw, size = RECORD.unpack(self._pending)
            self._digest = raw.hex()
            if size > self._max_member:
                raise SnapshotTooLarge(f"member {self._digest} declares {size:,} bytes, over the "
                                       f"{format_megabytes(self._max_member)} limit of one member")
            self._member = bytearray() if size <= IN_MEMORY else self._store.receive(max_bytes=size)
            self._left = size
            if size == 0:
                self._seal()
        self._pending.clear()
        return view[wanted:]

    def _seal(self) -> None:
        member, self._member = self._member, None
        mismatch = PackError(f"member {self._digest} does not match its digest (is its declared size right?)",
                             self._digest)
        if isinstance(member, BlobWriter):
            try:
                member.commit(self._digest, publish=False)
            except SnapshotError as error:
                raise mismatch from error
            self._done.append((member.temporary, self._digest, member.size))
            return
        if hashlib.sha256(member).hexdigest() != self._digest:
            raise mismatch
        self._done.append((self._store.write_temporary(member), self._digest, len(member)))

    def finish(self) -> list[tuple[str, int]]:
        """Publishes the members once the body is whole; their (digest, size), in order."""
        if self._count is None:
            raise PackError("the body ends before the pack's header")
        if len(self._done) < self._count:
            where = f"inside member {self._digest}" if self._member is not None or self._pending else \
                f"after {len(self._done)} of its {self._count} members"
            raise PackError(f"the pack is cut short: the body ends {where}", self._digest or None)
        self._store.publish_batch([(temporary, digest) for temporary, digest, _ in self._done])
        self._finished = True
        return [(digest, size) for _, digest, size in self._done]

    def discard(self) -> None:
        """Drops every member not yet published and the one being read."""
        if isinstance(self._member, BlobWriter):
            self._member.discard()
        self._member = None
        if not self._finished:
            for temporary, _, _ in self._done:
                Path(temporary).unlink(missing_ok=True)


def read_members(store: BlobStore, chunks: Iterable[bytes], **limits: int) -> list[tuple[str, int]]:
    """Reads a whole pack from `chunks` into `store` (a convenience over `PackReceiver`)."""
    receiver = PackReceiver(store, **limits)
    try:
        for chunk in chunks:
            receiver.feed(chunk)
        return receiver.finish()
    finally:
        receiver.discard()


def iter_file_pack(files: Iterable[tuple[str, Path, int]], read_size: int = 1 << 20) -> Iterator[bytes]:
    """The pack of these (digest, path, size) files, piece by piece. Raises PackError when a file
    does not hold the size given (it changed since it was hashed)."""
    files = list(files)
    yield encode_header(len(files))
    for digest, path, size in files:
        yield encode_record(digest, size)
        left = size
        with open(path, "rb") as source:
            while left:
                piece = source.read(min(read_size, left))
                if not piece:
                    break
                left -= len(piece)
                yield piece
            if left or source.read(1):
                raise PackError(f"{path} changed while it was pushed: it no longer holds {size:,} bytes", digest)
