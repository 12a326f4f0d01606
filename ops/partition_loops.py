"""Compiled CPU loops behind DynamicPartition, DynamicStitch and ParallelDynamicStitch.

Both ops only move rows, so the loops never look at a value: a tensor is seen as
``[rows, words]`` of unsigned integers as wide as its rows allow (:func:`as_words`),
and four compiled signatures per loop (8, 16, 32 and 64-bit words) serve every
dtype but strings, float16 and complex included. Ids and indices are int32 (the
ops' own input type). What a loop only reads reaches it as a read-only view
(:func:`readonly`), so that a feed (read-only) and an intermediate (writable) do
not compile twice. Every id or index is checked before the first write.

Partition is a counting sort: every id is checked first (one vectorised pass),
one pass counts the rows of each partition, one pass places each row after the
rows of earlier partitions, keeping their order. All partitions live in one output buffer, each
output a view of its part: numba takes k separately allocated outputs only as a
typed List, and indexing one per row makes the placing pass ten times slower
(10M float32 rows into 2: 242 ms against 24 ms; building the List also compiles
for 0.6 s the first time).

A big partition splits over the intra-op pool (``ops/intra_op.py``; the loops
release the GIL) by ranges of rows, each with its own counts, so that placing
stays stable. Stitch runs on one thread: its writes go to random rows, and
splitting them by ranges of the output (each thread reading every index, writing
the rows of its range, which keeps the later of duplicates winning) measured
slower on two cores (10M float32 rows: 105 ms against 80 ms; 68 ms at best,
writing rows outside the range to a spare row).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .intra_op import MIN_PARALLEL_ELEMENTS, run_each, run_in_chunks
from .jit import kernel
from .scatter_loops import last_positions
from .tiering import Tiered

#: Ids checked per block by :func:`first_bad_id`: a block is checked with a loop the
#: compiler vectorises, and only a block holding a bad id is searched one by one.
ID_BLOCK = 1024

ONE = np.uint64(1)  # unsigned arithmetic stays unsigned (uint64 + int64 is float64)

#: Work (elements moved) from which partition splits over the intra-op pool
#: (``ops/intra_op.py``'s measure).
PARTITION_PARALLEL_MIN = MIN_PARALLEL_ELEMENTS


# -- the loops -------------------------------------------------------------------------
# Positions are unsigned (np.uint64) where a loop indexes with them: numba adds a
# negative-index wrap-around to every access through a signed position, which
# keeps LLVM from vectorising (checking 10M ids: 3.4 ms unsigned, 12 ms signed).
# A row of one word is copied without an inner loop (a 10M-row partition: 11 ms
# against 19 ms).

@kernel
def first_bad_id(ids, start, stop, k):
    """The first position j in [start, stop) with ids[j] outside [0, k), else -1."""
    for block in range(start, stop, ID_BLOCK):
        end = min(block + ID_BLOCK, stop)
        bad = False
        for p in ids[block:end]:
            bad |= np.uint32(p) >= k  # a negative id wraps to a large unsigned value
        if bad:
            for j in range(block, end):
                if np.uint32(ids[j]) >= k:
                    return j
    return -1


@kernel
def count_partitions(ids, start, stop, counts):
    """counts[p] += the number of ids equal to p in ids[start:stop] (checked by
    first_bad_id). Two partitions are counted by a sum, which vectorises: counting
    10M ids into two slots waits for the store of the previous count half the time
    (14 ms against 3 ms)."""
    if counts.size == 2:
        ones = 0
        for p in ids[start:stop]:
            ones += p
        counts[1] += ones
        counts[0] += stop - start - ones
        return
    for p in ids[start:stop]:
        counts[np.uint32(p)] += 1


@kernel
def place_partitions(rows, ids, start, stop, cursor, out):
    """For j in [start, stop), in order: out[cursor[p]] = rows[j] and cursor[p] += 1,
    where p = ids[j] (checked by first_bad_id)."""
    words = np.uint64(rows.shape[1])
    for j in range(np.uint64(start), np.uint64(stop)):
        p = np.uint32(ids[j])
        c = np.uint64(cursor[p])
        cursor[p] = c + ONE
        if words == 1:
            out[c, 0] = rows[j, 0]
        else:
            for w in range(words):
                out[c, w] = rows[j, w]


@kernel
def place_two_partitions(rows, ids, start, stop, cursor, out):
    """place_partitions for ids 0 and 1 only, with both cursors in registers: twice as
    fast (10M rows: 10 ms against 19 ms), as a row no longer waits for the store of
    the cursor its predecessor moved."""
    words = np.uint64(rows.shape[1])
    c0 = np.uint64(cursor[0])
    c1 = np.uint64(cursor[1])
    for j in range(np.uint64(start), np.uint64(stop)):
        p = np.uint64(ids[j])
        c = c1 if p else c0
        if words == 1:
            out[c, 0] = rows[j, 0]
        else:
            for w in range(words):
                out[c, w] = rows[j, w]
        c1 += p
        c0 += ONE - p


@kernel
def index_bounds(indices):
    """(smallest, largest) of a non-empty int32 array."""
    low = indices[0]
    high = indices[0]
    for i in indices:
        low = min(low, i)
        high = max(high, i)
    return low, high


@kernel
def stitch_rows(merged, indices, rows):
    """merged[indices[j]] = rows[j] for j in order (indices checked to lie in
    [0, len(merged)) beforehand): the later of duplicate indices wins."""
    words = np.uint64(rows.shape[1])
    for j in range(np.uint64(indices.size)):
        i = np.uint64(indices[j])
        if words == 1:
            merged[i, 0] = rows[j, 0]
        else:
            for w in range(words):
                merged[i, w] = rows[j, w]


# -- calling them --------------------------------------------------------------------------
# Until a loop is compiled for its arguments' types (tiered compilation, ops/tiering.py:
# away from the call), numpy does its work: a graph run once never waits for numba,
# not even to load a cached loop (its first load costs ~0.4 s of numba's start). Each
# loop is asked through one Tiered, which remembers the types found ready (numba.typeof
# of every argument on every call cost an MoE step 0.7 ms).
_FIRST_BAD, _BOUNDS, _COUNT, _STITCH = (Tiered(f) for f in (
    first_bad_id, index_bounds, count_partitions, stitch_rows))
_PLACE = {2: Tiered(place_two_partitions), None: Tiered(place_partitions)}


def find_bad_id(ids: np.ndarray, k: int) -> int:
    """The first position of the flat int32 ``ids`` outside [0, k), else -1."""
    if _FIRST_BAD.ready(ids, 0, ids.size, k):
        return int(first_bad_id(ids, 0, ids.size, k))
    bad = np.flatnonzero(ids.view(np.uint32) >= k)
    return int(bad[0]) if bad.size else -1


def bounds_of(indices: np.ndarray) -> tuple[int, int]:
    """(smallest, largest) of a non-empty flat int32 array."""
    if _BOUNDS.ready(indices):
        low, high = index_bounds(indices)
        return int(low), int(high)
    return int(indices.min()), int(indices.max())


def readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array``: numba compiles a separate signature for a
    writable and a read-only array, and feeds arrive read-only."""
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def word_width(row_bytes: int, arrays: Sequence[np.ndarray]) -> int:
    """The widest word (8, 4, 2 or 1 bytes) that divides a row and the start of every
    one of ``arrays``: all of them must be seen with the same width."""
    width = 8
    while width > 1 and (row_bytes % width or any(a.ctypes.data % width for a in arrays)):
        width //= 2
    return width


def as_words(array: np.ndarray, rows: int, row_bytes: int, width: int) -> np.ndarray:
    """The C-contiguous ``array`` as ``[rows, row_bytes // width]`` unsigned integers of
    ``width`` bytes: the same memory, so that writes reach ``array``."""
    shape = (rows, row_bytes // width)
    if not array.size:
        return np.empty(shape, f"u{width}")
    return array.reshape(-1).view(f"u{width}").reshape(shape)


def partition(rows: np.ndarray, ids: np.ndarray, k: int,
              empty: Callable[[tuple, np.dtype], np.ndarray]) -> list[np.ndarray]:
    """Split the C-contiguous ``rows`` (first dim = ids.size) by the int32 ``ids``, all
    checked to lie in [0, k) (first_bad_id): k views of one ``empty(rows.shape,
    rows.dtype)`` buffer, in partition order."""
    n = ids.size
    work = rows.size + n
    ids = readonly(ids)
    if rows.dtype == object or not _COUNT.ready(ids, 0, n, np.zeros(k, np.int64)):
        return _sorted_partition(rows, ids, k, empty)
    chunks: dict[int, tuple[int, np.ndarray]] = {}

    def count(start: int, stop: int) -> None:
        counts = np.zeros(k, np.int64)
        count_partitions(ids, start, stop, counts)
        chunks[start] = (stop, counts)

    run_in_chunks(count, n, work, PARTITION_PARALLEL_MIN)
    ranges = sorted(chunks.items())
    table = np.stack([counts for _, (_, counts) in ranges])
    sizes = table.sum(axis=0)
    out = empty(rows.shape, rows.dtype)
    if n:
        row_bytes = rows.size // n * rows.itemsize
        width = word_width(row_bytes, (rows, out))
        source = readonly(as_words(rows, n, row_bytes, width))
        target = as_words(out, n, row_bytes, width)
        # range r places its rows of partition p after the rows of earlier partitions
        # and after the rows of p that earlier ranges hold
        cursors = (np.cumsum(sizes) - sizes) + (np.cumsum(table, axis=0) - table)
        tiered_place = _PLACE[2 if k == 2 else None]
        place = tiered_place.fn
        if tiered_place.ready(source, ids, 0, n, cursors[0], target):
            run_each([lambda a=a, b=b, c=c: place(source, ids, a, b, c, target)
                      for (a, (b, _)), c in zip(ranges, cursors)], work)
        else:
            np.take(rows, np.argsort(ids, kind="stable"), axis=0, out=out)
    return np.split(out, np.cumsum(sizes)[:-1].tolist())


def stitch(indices: Sequence[np.ndarray], data: Sequence[np.ndarray],
           merged: np.ndarray) -> np.ndarray:
    """Fill ``merged`` (any contents) with merged[indices[m][j]] = data[m][j] for (m, j)
    in order, zeros (empty strings) elsewhere. ``indices`` are flat int32 arrays checked
    to lie in [0, len(merged)); ``data[m]`` is C-contiguous with indices[m].size rows."""
    first = merged.shape[0]
    if not first:
        return merged
    row_size = merged.size // first
    if merged.dtype == object:
        merged.fill(b"")
        target = merged.reshape(first, row_size)
        for idx, d in zip(indices, data):  # in order: the later of duplicates wins
            target[idx.astype(np.intp)] = d.reshape(idx.size, row_size)
        return merged
    row_bytes = row_size * merged.itemsize
    width = word_width(row_bytes, (merged, *data))
    target = as_words(merged, first, row_bytes, width)
    target[:] = 0
    for idx, d in zip(indices, data):
        if idx.size:
            idx, rows = readonly(idx), readonly(as_words(d, idx.size, row_bytes, width))
            if _STITCH.ready(target, idx, rows):
                stitch_rows(target, idx, rows)
            else:  # the last of duplicate indices wins
                last = last_positions(idx)
                target[idx[last]] = rows[last]
    return merged


def _sorted_partition(rows: np.ndarray, ids: np.ndarray, k: int, empty) -> list[np.ndarray]:
    """:func:`partition` by one stable sort of the ids and one gather (strings, and any
    partition before its loops are compiled)."""
    out = empty(rows.shape, rows.dtype)
    np.take(rows, np.argsort(ids, kind="stable"), axis=0, out=out)
    sizes = np.bincount(ids, minlength=k) if ids.size else np.zeros(k, np.int64)
    return np.split(out, np.cumsum(sizes)[:-1].tolist())
