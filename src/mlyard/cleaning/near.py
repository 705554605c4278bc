"""All pairs of 64-bit hashes within a Hamming distance, without comparing every pair.

Multi-index hashing (Norouzi, Punjani and Fleet, 2012): the 64 bits are cut into `m` chunks;
two hashes at most `d` bits apart differ in at most `d // m` bits of some chunk (were every chunk
`d // m + 1` bits apart, they would be more than `d` apart). So each hash is looked up, chunk by
chunk, among the hashes whose chunk equals its own with up to `d // m` bits flipped, and only
those candidates are compared. Each chunk's keys are sorted once, with a table of where each
key's run starts; a lookup (one flip) is a gather for all hashes at once and the comparisons an
xor and a popcount of arrays, so the work is numpy's, not one Python step per pair. At distance 6
that is 4 chunks of 16 bits with 0 or 1 bit flipped: 68 lookups.

A BK-tree was measured first: perceptual hashes of a real image set crowd together (the median
threshold puts about 32 ones in each), so a query at distance 6 still visited a sixth of the tree,
and in Python that was slower than comparing all pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import combinations
from math import comb

from mlyard.cleaning import extras
from mlyard.cleaning.extras import CleaningError

np = extras.numpy()  # comes with the cleaning extra (imagehash needs it); a clear error without it

BITS = 64
# Candidates expanded at once: bounds memory where many hashes share chunks (blank images).
BLOCK = 2_000_000
# Chunks up to this wide get a table of where each key's run starts (8 MiB at 20 bits).
TABLE_BITS = 20
# Past this many pairs the distance joins most images to each other: a report of that helps
# nobody, and its pairs would take gigabytes.
MAX_PAIRS = 5_000_000

Progress = Callable[[str, int, int], None]


def near_pairs(hashes: list[int], distance: int,
               progress: Progress | None = None) -> list[tuple[int, int, int]]:
    """(i, j, bits apart) for every i < j whose hashes lie within `distance` bits, i and j
    indices into `hashes` (distinct values: equal hashes are the caller's to group)."""
    values = np.asarray(hashes, dtype=np.uint64)
    if len(values) < 2 or distance < 0:
        return []
    chunks = chunk_count(distance, len(values))
    scattered = _scatter(values)
    pairs = np.empty(0, dtype=np.int64)
    for step, (low, width) in enumerate(_chunks(chunks), 1):
        chunk = _Chunk((scattered >> np.uint64(low)) & np.uint64((1 << width) - 1), width)
        found = [pairs] + [codes for flip in _flips(width, distance // chunks)
                           for codes in _probe(values, chunk, flip, distance)]
        pairs = np.unique(np.concatenate(found))  # a pair sharing several chunks is found in each
        if len(pairs) > MAX_PAIRS:
            raise CleaningError(f"over {MAX_PAIRS:,} pairs of images lie within {distance} bits of each "
                                "other: give a smaller distance")
        if progress is not None:
            progress("searching", step, chunks)
    first, second = pairs // len(values), pairs % len(values)
    apart = popcount(values[first] ^ values[second])
    return list(zip(first.tolist(), second.tolist(), apart.tolist()))


def chunk_count(distance: int, count: int) -> int:
    """The number of chunks whose lookups cost least: each probe is a pass over all hashes, and
    a chunk of b bits holds about count / 2**b of them per key (were the bits even)."""
    def cost(chunks: int) -> float:
        width = BITS // chunks
        probes = chunks * sum(comb(width, flipped) for flipped in range(distance // chunks + 1))
        return probes * (1 + count / 2 ** width)
    return min(range(1, min(distance, BITS - 1) + 2), key=cost)


def popcount(values: np.ndarray) -> np.ndarray:
    """Bits set in each uint64."""
    if hasattr(np, "bitwise_count"):  # numpy 2
        return np.bitwise_count(values).astype(np.int64)
    table = np.array([bin(byte).count("1") for byte in range(256)], dtype=np.int64)
    return table[np.ascontiguousarray(values).view(np.uint8).reshape(-1, 8)].sum(axis=1)


def _chunks(count: int) -> Iterator[tuple[int, int]]:
    """(lowest bit, width) of `count` chunks covering the 64 bits, as even as they go."""
    for index in range(count):
        low, high = BITS * index // count, BITS * (index + 1) // count
        yield low, high - low


def _flips(width: int, radius: int) -> Iterator[int]:
    for flipped in range(radius + 1):
        for bits in combinations(range(width), flipped):
            yield sum(1 << bit for bit in bits)


def _scatter(values: np.ndarray) -> np.ndarray:
    """The hashes with bit 29k mod 64 moved to bit k. A phash's bits are the signs of an 8×8
    block of DCT coefficients, row by row, and neighbours go together (a few are constant); so
    a chunk of consecutive bits takes fewer distinct values than its width allows and its keys
    hold more hashes each. Bits 29 apart are three rows and five columns apart: on digits the
    candidates fell to a third."""
    scattered = np.zeros_like(values)
    for target in range(BITS):
        bit = (values >> np.uint64(target * 29 % BITS)) & np.uint64(1)
        scattered |= bit << np.uint64(target)
    return scattered


class _Chunk:
    """One chunk of every hash, sorted, and where the run of each key lies in that order: a
    table of every key's start where the chunk is narrow (gathers, not binary searches)."""

    def __init__(self, keys: np.ndarray, width: int) -> None:
        self.keys = keys
        self.order = np.argsort(keys, kind="stable")
        self.ordered = keys[self.order]
        self.table = np.searchsorted(self.ordered, np.arange((1 << width) + 1, dtype=np.uint64)) if (
            width <= TABLE_BITS) else None

    def runs(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) of each wanted key's run."""
        if self.table is not None:
            index = wanted.astype(np.int64)
            return self.table[index], self.table[index + 1]
        return np.searchsorted(self.ordered, wanted, side="left"), np.searchsorted(self.ordered, wanted, side="right")


def _probe(values: np.ndarray, chunk: _Chunk, flip: int, distance: int) -> list[np.ndarray]:
    """Pair codes (i * n + j, i < j) of hashes within `distance` whose chunks differ by the bits
    of `flip`, each pair once: from the hash of the lesser chunk (or the first in order if equal)."""
    if flip == 0:
        rows = chunk.order
        starts = np.arange(1, len(rows) + 1)
        counts = chunk.runs(chunk.ordered)[1] - starts
    else:
        top = np.uint64(1 << (flip.bit_length() - 1))
        rows = np.nonzero((chunk.keys & top) == 0)[0]  # its chunk is the lesser of the two
        starts, ends = chunk.runs(chunk.keys[rows] ^ np.uint64(flip))
        counts = ends - starts
    return [_compare(values, chunk.order, rows[first:last], starts[first:last], counts[first:last], distance)
            for first, last in _blocks(counts)]


def _blocks(counts: np.ndarray) -> Iterator[tuple[int, int]]:
    """[first, last) runs of queries whose candidates together stay within BLOCK (a run of one
    where a single hash has more)."""
    cumulative = np.cumsum(counts)
    first = 0
    while first < len(counts):
        before = int(cumulative[first - 1]) if first else 0
        last = max(int(np.searchsorted(cumulative, before + BLOCK, side="right")), first + 1)
        yield first, last
        first = last


def _compare(values: np.ndarray, order: np.ndarray, rows: np.ndarray, starts: np.ndarray, counts: np.ndarray,
             distance: int) -> np.ndarray:
    total = int(counts.sum())
    if not total:
        return np.empty(0, dtype=np.int64)
    queries = np.repeat(rows, counts)
    # The k-th candidate of a run is at its start plus k: one repeat of (start - run's first k).
    others = order[np.arange(total) + np.repeat(starts - (np.cumsum(counts) - counts), counts)]
    keep = popcount(values[queries] ^ values[others]) <= distance
    queries, others = queries[keep].astype(np.int64), others[keep].astype(np.int64)
    return np.minimum(queries, others) * len(values) + np.maximum(queries, others)
