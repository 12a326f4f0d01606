"""The CPU gathers (GatherNd, GatherV2 along axis 0, ResourceGather) on the intra-op
threads, each thread locating, checking and copying its own rows.

``gather(out2d, source2d, tuples, dims, threads, ignore)`` is ``out2d[i] =
source2d[offset(tuples[i])]`` for the row-major offsets of the index tuples
``tuples`` ``[n, depth]`` (any integer dtype) into ``dims``. The rows split into
contiguous chunks (of :data:`WORK_PER_CHUNK`), which the threads take in turn, and a
thread does all of a chunk's work in one go: its tuples become offsets and are checked,
then its rows are copied, into the fresh output's pages that the same thread touches
first (a fresh page's fault and zeroing happen on the thread that writes it, not all
on one). No pass runs over the whole output or the whole index before the copy;
nothing is filled twice.

A tuple out of bounds makes ``gather`` return False (its row is zeros, the output is
not to be used): the caller's kernel then reports it in its own words, as before. With
``ignore`` (GatherNd's IGNORE policy) a bad tuple's row is zeros, TensorFlow's CPU
result, and ``gather`` returns True.

The copies move bits: rows are seen as unsigned words (``ops/scatter_loops.py``'s
``row_words``), so every fixed-size dtype shares a few compiles (per word size and index
dtype), float16, bool and complex included, and results are bit-identical to numpy's
``take`` (NaN payloads too). A row of one word goes through the compiled loop; wider
rows through ``np.take`` on the chunk's offsets, which copies each row with one
fixed-size ``memcpy`` and beats a row loop there (the measures in
``scatter_loops.gather``'s docstring).

The threads (:func:`ops.intra_op.kernel_threads`): ``SessionConfig.intra_op_threads``,
or every core for a kernel on the calling thread of a serial run, as numpy's BLAS pool.
Below :data:`PARALLEL_WORK` (rows and bytes, :func:`splits`) one thread does it all: a
hop to the pool costs 10-150 us, more than such a gather saves.
"""
from __future__ import annotations

import numpy as np

from .intra_op import run_split
from .jit import kernel
from .scatter_loops import read_only, row_words  # read-only inputs; rows as words
from .tiering import Tiered

U = np.uint64

#: A gather's work, in bytes of copy: each row costs as much as this many bytes (the
#: index read, the check, the row's address; measured on one thread: 2.6 ns per
#: one-word row, ~0.11 ns per byte of 128-byte rows).
ROW_COST_BYTES = 24
#: Work below which a gather runs on the calling thread only. Measured on 2 cores (a
#: random gather from a [1M, 32] float32 table, fresh outputs; a hop to the pool costs
#: ~150 us on that VM): 2 threads lose up to 4 MiB of 128-byte rows (594 vs 660 us)
#: and win from 8 MiB (1129 vs 991 us); of one-word rows they lose at 256k rows
#: (671 vs 710 us) and win from 512k (1356 vs 1127 us).
PARALLEL_WORK = 1 << 23
#: Work each thread gets at least (the thread count falls to fit).
WORK_PER_THREAD = 1 << 22
#: Rows whose offsets one thread computes at a time, into a buffer it reuses (depth > 1).
BLOCK_ROWS = 8192
#: The work of one chunk: threads take chunks of this size in turn, so that a thread
#: with less of a core (the machine shared) does fewer of them. (2 cores, the [1M, 32]
#: gather: 2 chunks 37.8 ms, 4 35.0 ms, 8 34.3 ms with both cores free.)
WORK_PER_CHUNK = 1 << 23


# -- the loops ------------------------------------------------------------------------------------
@kernel
def _gather_word_rows(out, source, tuples, dims, lo, hi):
    """out[i] = source[offset(tuples[i])] for rows i in [lo, hi) (one-word rows: a
    wider row goes to np.take); zeros for a tuple out of bounds. Whether every tuple was good."""
    width, depth = U(out.shape[1]), tuples.shape[1]
    all_good = True
    for i in range(U(lo), U(hi)):
        offset, good = 0, True
        for c in range(depth):
            v = tuples[i, c]
            good &= U(v) < U(dims[c])  # as unsigned, a negative index is huge
            offset = offset * dims[c] + v
        if good:
            o = U(offset)
            for j in range(width):
                out[i, j] = source[o, j]
                if width == 1:
                    break
        else:
            all_good = False
            for j in range(width):
                out[i, j] = 0
                if width == 1:
                    break
    return all_good


@kernel
def _gather_word_column(out, source, column, bound, lo, hi):
    """:func:`_gather_word_rows` at depth 1, for the index column ``column``: a loop as
    tight as ``scatter_loops._gather_rows`` (unsigned indices, no depth loop)."""
    width, limit = U(out.shape[1]), U(bound)
    all_good = True
    for i in range(U(lo), U(hi)):
        o = U(column[i])  # as unsigned, a negative index is huge
        if o < limit:
            for j in range(width):
                out[i, j] = source[o, j]
                if width == 1:
                    break
        else:
            all_good = False
            for j in range(width):
                out[i, j] = 0
                if width == 1:
                    break
    return all_good


@kernel
def _chunk_offsets(tuples, dims, lo, hi, offsets):
    """offsets[i - lo] = the row-major offset of tuples[i] for i in [lo, hi), or -1 when
    it is out of bounds. Whether every tuple was good."""
    depth = tuples.shape[1]
    all_good = True
    for i in range(lo, hi):
        offset, good = 0, True
        for c in range(depth):
            v = tuples[i, c]
            good &= U(v) < U(dims[c])
            offset = offset * dims[c] + v
        offsets[i - lo] = offset if good else -1
        all_good &= good
    return all_good


@kernel
def _column_good(column, lo, hi, bound):
    """Whether every column[i], i in [lo, hi), is in [0, bound)."""
    for i in range(lo, hi):
        if U(column[i]) >= U(bound):
            return False
    return True


# -- calling them ---------------------------------------------------------------------------------
#: the loops as the gather asks for them (compiled away from the call, ops/tiering.py)
_WORD_ROWS, _WORD_COLUMN, _CHUNK_OFFSETS, _COLUMN_GOOD = (Tiered(f) for f in (
    _gather_word_rows, _gather_word_column, _chunk_offsets, _column_good))


def splits(rows: int, nbytes: int) -> bool:
    """Whether a gather of ``rows`` rows, ``nbytes`` of output, is worth more than one
    thread (a kernel may decide it once, from static shapes)."""
    return rows * ROW_COST_BYTES + nbytes >= PARALLEL_WORK


def parts_for(rows: int, nbytes: int, threads: int) -> int:
    """How many of ``threads`` a gather of ``rows`` rows, ``nbytes`` of output, uses."""
    if threads < 2 or not splits(rows, nbytes):
        return 1
    return max(1, min(threads, (rows * ROW_COST_BYTES + nbytes) // WORK_PER_THREAD))


def gather(out2d: np.ndarray, source2d: np.ndarray, tuples: np.ndarray, dims,
           threads: int, ignore: bool = False) -> bool:
    """``out2d[i] = source2d[offset(tuples[i])]`` (see the module docstring): False when a
    tuple is out of bounds (without ``ignore``), or, under tiered compilation
    (ops/tiering.py), while the loop is not compiled for these types yet (it compiles in
    the background); the output is then not to be used, and the caller's own path
    gathers (or reports the bad index).

    ``out2d`` is C-contiguous ``[n, width]`` of a fixed-size dtype, ``source2d``
    ``[prod(dims), width]`` of the same dtype, ``tuples`` ``[n, len(dims)]`` integers.
    """
    n = out2d.shape[0]
    if n == 0:
        return True
    if out2d.shape[1] == 0:  # nothing to copy: the caller's path checks the indices
        return False
    tuples = read_only(np.ascontiguousarray(tuples))
    dims = read_only(np.asarray(dims, np.int64))
    source2d = np.ascontiguousarray(source2d)
    parts = parts_for(n, out2d.nbytes, threads)
    chunks = max(parts, (n * ROW_COST_BYTES + out2d.nbytes) // WORK_PER_CHUNK)
    out_words = row_words(out2d)
    if out_words.shape[1] == 1:
        source_words = read_only(row_words(source2d))
        if tuples.shape[1] == 1:
            column, bound = tuples.reshape(-1), int(dims[0])
            if not _WORD_COLUMN.ready(out_words, source_words, column, bound, 0, n):
                return False
            results = run_split(lambda lo, hi: _gather_word_column(
                out_words, source_words, column, bound, lo, hi), n, parts, chunks)
        else:
            if not _WORD_ROWS.ready(out_words, source_words, tuples, dims, 0, n):
                return False
            results = run_split(lambda lo, hi: _gather_word_rows(
                out_words, source_words, tuples, dims, lo, hi), n, parts, chunks)
        return all(results) or ignore  # (every row is written either way)
    if tuples.shape[1] == 1 and not ignore:
        column, bound = tuples.reshape(-1), int(dims[0])
        if not _COLUMN_GOOD.ready(column, 0, n, bound):
            return False

        def take_column(lo: int, hi: int) -> bool:
            if not _column_good(column, lo, hi, bound):
                return False
            # every index is checked: "clip" changes none and skips numpy's own check
            np.take(source2d, column[lo:hi], axis=0, out=out2d[lo:hi], mode="clip")
            return True
        return all(run_split(take_column, n, parts, chunks))

    if not _CHUNK_OFFSETS.ready(tuples, dims, 0, n, np.empty(1, np.int64)):
        return False

    def take_tuples(lo: int, hi: int) -> bool:
        # the offsets of a block of rows at a time, in a small buffer the thread reuses
        # (a chunk-sized one would be fresh pages: on a VM, faults cost like the copy)
        offsets = np.empty(min(BLOCK_ROWS, hi - lo), np.int64)
        for a in range(lo, hi, BLOCK_ROWS):
            b = min(hi, a + BLOCK_ROWS)
            block = offsets[:b - a]
            good = _chunk_offsets(tuples, dims, a, b, block)
            if not good and not ignore:
                return False
            np.take(source2d, block, axis=0, out=out2d[a:b], mode="clip")
            if not good:  # IGNORE: "clip" read row 0 for a bad tuple; TensorFlow: zeros
                out2d[a:b][block < 0] = 0
        return True
    return all(run_split(take_tuples, n, parts, chunks))
