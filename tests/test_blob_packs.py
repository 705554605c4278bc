"""Packs of blobs (`storage/packs.py`): a pack is read in pieces of any size and stored whole, and
one that is cut short, malformed, over a limit or lying about a member stores nothing."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from mlyard.client.blob_packs import PACK_FILES, SMALL, batches
from mlyard.storage import BlobStore, SnapshotTooLarge
from mlyard.storage import packs
from mlyard.storage.packs import PackError, encode, encode_header, encode_record, iter_file_pack, read_members

LIMITS = {"max_member": 1 << 20, "max_total": 4 << 20, "max_members": 100}


@pytest.fixture(params=["in memory", "streamed"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Members gathered in memory (the small ones), or streamed through `BlobStore.receive`."""
    if request.param == "streamed":
        monkeypatch.setattr(packs, "IN_MEMORY", 0)
    return request.param


def member(content: bytes) -> tuple[str, bytes]:
    return hashlib.sha256(content).hexdigest(), content


def pieces(body: bytes, size: int) -> list[bytes]:
    return [body[start:start + size] for start in range(0, len(body), size)]


def leftovers(store: BlobStore) -> list[Path]:
    """Every file of the store: blobs and temporary files."""
    return sorted(path for path in store.root.rglob("*") if path.is_file())


@pytest.mark.parametrize("piece", [1, 7, 40, 1 << 16])
def test_a_pack_is_stored_whole_whatever_the_pieces(tmp_path: Path, piece: int, way: str) -> None:
    store = BlobStore(tmp_path / "blobs")
    members = [member(b"alpha"), member(b""), member(bytes(range(256)) * 40), member(b"alpha")]
    stored = read_members(store, pieces(encode(members), piece), **LIMITS)
    assert stored == [(digest, len(content)) for digest, content in members]
    for digest, content in members:
        assert store.path_for(digest).read_bytes() == content
        assert store.path_for(digest).stat().st_mode & 0o777 == 0o444, "a blob never changes"
    assert not list(store.temporary_directory.glob("*.partial"))


def lying_bodies() -> dict[str, tuple[bytes, type[Exception], str]]:
    good, other = member(b"the promised bytes"), member(b"other")
    whole = encode([other, good])
    zeros = hashlib.sha256(bytes(1 << 20)).hexdigest()
    return {
        "cut inside a member": (whole[:-3], PackError, f"ends inside member {good[0]}"),
        "cut inside a record": (whole[:-len(good[1]) - 5], PackError, "ends inside member"),
        "cut between members": (encode_header(3) + whole[12:], PackError, "after 2 of its 3 members"),
        "empty": (b"", PackError, "before the pack's header"),
        "bytes after the last": (whole + b"x", PackError, "bytes after its 2 members"),
        "not a pack": (b"GARBAGE!" + whole[8:], PackError, "not a blob pack"),
        "size too small": (encode_header(1) + encode_record(good[0], 5) + good[1], PackError,
                           f"member {good[0]} does not match"),
        "size too large": (encode_header(1) + encode_record(good[0], len(good[1]) + 2) + good[1] + b"zz",
                           PackError, f"member {good[0]} does not match"),
        "wrong bytes": (encode_header(1) + encode_record(good[0], 5) + b"other", PackError, "does not match"),
        "member over the limit": (encode_header(1) + encode_record(good[0], (1 << 20) + 1), SnapshotTooLarge,
                                  "over the 1.0 MB limit of one member"),
        "too many members": (struct.pack(">8sI", b"MLYPACK1", 101), SnapshotTooLarge, "over the limit of 100"),
        "pack over the limit": (encode_header(5) + b"".join(encode_record(zeros, 1 << 20) + bytes(1 << 20)
                                                            for _ in range(5)), SnapshotTooLarge, "pack is larger"),
    }


@pytest.mark.parametrize("case", list(lying_bodies()))
def test_a_bad_pack_stores_nothing(tmp_path: Path, case: str, way: str) -> None:
    body, error, says = lying_bodies()[case]
    store = BlobStore(tmp_path / "blobs")
    with pytest.raises(error, match=says.replace("(", r"\(").replace(".", r"\.")):
        read_members(store, pieces(body, 1000), **LIMITS)
    assert leftovers(store) == [], "no blob published, no temporary file left"


def test_a_member_that_lies_is_named(tmp_path: Path, way: str) -> None:
    claimed = hashlib.sha256(b"promised").hexdigest()
    body = encode_header(2) + encode([member(b"fine")])[12:] + encode_record(claimed, 5) + b"other"
    with pytest.raises(PackError) as caught:
        read_members(BlobStore(tmp_path / "blobs"), [body], **LIMITS)
    assert caught.value.digest == claimed
    assert leftovers(BlobStore(tmp_path / "blobs")) == [], "the good member before it is not kept either"


def test_a_file_that_changed_since_it_was_hashed_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"12345")
    digest = hashlib.sha256(b"12345").hexdigest()
    assert b"".join(iter_file_pack([(digest, path, 5)])) == encode([(digest, b"12345")])
    path.write_bytes(b"123456")
    with pytest.raises(PackError, match="no longer holds 5 bytes"):
        b"".join(iter_file_pack([(digest, path, 5)]))
    with pytest.raises(PackError, match="no longer holds 9 bytes"):
        b"".join(iter_file_pack([(digest, path, 9)]))


class File:
    def __init__(self, size: int, index: int) -> None:
        self.size, self.sha256, self.source = size, f"{index:064x}", Path(f"/f{index}")


def test_small_files_are_batched_and_big_ones_go_alone() -> None:
    files = [File(10, index) for index in range(PACK_FILES + 5)] + [File(SMALL, -1)] + \
        [File(SMALL - 1, index) for index in range(40)]
    sent = list(batches(files))
    assert [len(batch) for batch in sent[:2]] == [PACK_FILES, 5 + 15]  # 16 MiB a pack at most
    assert sum(len(batch) for batch in sent) == len(files)
    assert sent[-1] == [files[PACK_FILES + 5]], "the big file alone, last"
    assert all(sum(file.size for file in batch) <= 16 << 20 for batch in sent)


def test_a_big_blob_is_handed_to_the_disk_as_it_arrives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlyard.storage import blobs

    started: list[tuple[int, int]] = []
    monkeypatch.setattr(blobs, "_WRITEBACK", 100)
    monkeypatch.setattr(blobs, "_start_writeback", lambda descriptor, offset, length: started.append((offset, length)))
    content = bytes(range(256)) * 2
    digest, size = BlobStore(tmp_path / "blobs").put_stream([content[:150], content[150:300], content[300:]],
                                                           expected_digest=hashlib.sha256(content).hexdigest())
    assert (size, started) == (512, [(0, 150), (150, 150), (300, 212)])
    assert BlobStore(tmp_path / "blobs").path_for(digest).read_bytes() == content


def test_a_packed_blob_is_readable_by_all_under_the_servers_umask(tmp_path: Path, way: str) -> None:
    """The server runs with umask 077; job accounts and containers read blobs through the
    hard links of a dataset version, so a blob is 0444 whatever the umask."""
    import os

    store = BlobStore(tmp_path / "blobs")
    previous = os.umask(0o077)
    try:
        [(digest, _)] = read_members(store, [encode([member(b"shown to a job")])], **LIMITS)
    finally:
        os.umask(previous)
    assert store.path_for(digest).stat().st_mode & 0o777 == 0o444
