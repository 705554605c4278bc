"""Sending the blobs a push lacks: files under `SMALL` travel many to a request (`PUT /blobs/pack`,
the framing of `storage/packs.py`), bigger ones one to a request (`PUT /blobs/{digest}`), several
requests at once. A request that fails loses only its files: the next push finds the others."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mlyard.client import Client

SMALL = 1 << 20
"""Files under this many bytes travel in packs."""
PACK_BYTES = 16 << 20
PACK_FILES = 1_000
PARALLEL = 4
Progress = Callable[[int, int], None]


class Blob(Protocol):
    source: Path
    sha256: str
    size: int


def batches(files: Iterable[Blob]) -> Iterator[list[Blob]]:
    """The small files in packs of at most `PACK_FILES` files and about `PACK_BYTES`, each big
    file alone (a list of one), the packs first."""
    big: list[Blob] = []
    pack: list[Blob] = []
    held = 0
    for file in files:
        if file.size >= SMALL:
            big.append(file)
            continue
        if pack and (len(pack) >= PACK_FILES or held + file.size > PACK_BYTES):
            yield pack
            pack, held = [], 0
        pack.append(file)
        held += file.size
    if pack:
        yield pack
    for file in big:
        yield [file]


def send_pack(client: Client, files: list[Blob]) -> None:
    """One request for all these files; retried on connection errors (a repeat stores nothing
    twice). Raises PackError (a SnapshotError: one line from the CLI) when a file no longer holds
    the size it was hashed with."""
    from mlyard.storage.packs import MEDIA_TYPE, iter_file_pack
    body = b"".join(iter_file_pack((file.sha256, file.source, file.size) for file in files))
    client._request("PUT", "/blobs/pack", content=body, retry=True, headers={"Content-Type": MEDIA_TYPE})


def send_all(client: Client, upload: Callable[[str, Path], None], files: list[Blob],
             uploaded: Progress | None = None) -> None:
    """Sends every file, `PARALLEL` requests at once; `upload(digest, path)` sends a big one."""

    def send(batch: list[Blob]) -> None:
        if len(batch) == 1 and batch[0].size >= SMALL:
            upload(batch[0].sha256, batch[0].source)
        else:
            send_pack(client, batch)
        if uploaded is not None:
            uploaded(len(batch), sum(file.size for file in batch))

    with ThreadPoolExecutor(PARALLEL) as pool:
        for _ in pool.map(send, batches(files)):
            pass
