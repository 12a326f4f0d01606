"""The compiled CPU loops behind the scatter family and GatherNd.

Each loop is the reference loop of ``ops/scatter_ops.py`` written out, over
offsets that are already validated (every one in ``[0, num_slices)``, or ``-1``
for a tuple that GatherNd's IGNORE policy turns into zeros)::

    for i in range(len(offsets)):             # in index order
        out[offsets[i], :] (op)= rows[i, :]   # GatherNd: out[i, :] = source[offsets[i], :]

The scatters run on one thread, in index order, so duplicates combine exactly
as TensorFlow's CPU loop combines them. (Splitting one by output range, each
thread applying the updates that land in its range, measured no faster on two
cores: every thread reads every offset, and for single elements at random
places the range test is a coin flip costing as much as the update: 1M float32
into 10M, the lower half of the range 8.4 ms, all of it 9.0 ms.) GatherNd's
rows are disjoint: big gathers are split by rows over the intra-op pool, and
rows wider than a word go to ``np.take`` (see :func:`gather`).

The loops are compiled per value dtype only (offsets are int64, arrays are
C-contiguous 2-D, inputs are passed read-only), so each costs one compile per
dtype in use. Copies (assignment, gather) move bits: they run on rows of
unsigned words (uint64 where a row's bytes allow), so all dtypes share a few
compiles, float16 included. Sums compile per numeric dtype, min/max per real
dtype; the caller keeps numpy for what numba cannot compile (see
:func:`can_combine`).
"""
from __future__ import annotations

import numpy as np

from .intra_op import run_in_chunks
from .jit import jittable, kernel
from .tiering import Tiered


# -- the loops -------------------------------------------------------------------------------
# Two details make these loops as fast as numpy's (measured, float32, one thread):
# - indices are unsigned (``U``): numba then skips its negative-index wraparound, which
#   otherwise keeps LLVM from vectorizing a row loop (10M zeros: 10 ms -> 0.7 ms);
# - ``if width == 1: break`` ends a one-element row at once, which lets LLVM compile a
#   tight loop for single elements (1M updates into 10M: max 18 ms -> 8.5 ms, add 13 ->
#   9 ms, as ``np.add.at``).
U = np.uint64


@kernel
def _assign_rows(out, offsets, rows):
    """out[offsets[i]] = rows[i] in index order: the last duplicate wins."""
    n, width = U(offsets.shape[0]), U(rows.shape[1])
    for i in range(n):
        o = U(offsets[i])
        for j in range(width):
            out[o, j] = rows[i, j]
            if width == 1:
                break


@kernel
def _add_rows(out, offsets, rows, subtract):
    """out[offsets[i]] += rows[i] (-= with ``subtract``) in index order."""
    n, width = U(offsets.shape[0]), U(rows.shape[1])
    for i in range(n):
        o = U(offsets[i])
        for j in range(width):
            if subtract:
                out[o, j] -= rows[i, j]
            else:
                out[o, j] += rows[i, j]
            if width == 1:
                break


#: the row loops as :func:`scatter` asks for them (compiled away from the call)
_ASSIGN, _ADD = Tiered(_assign_rows), Tiered(_add_rows)


@kernel
def _add_rows_checked(out, column, rows, subtract):
    """out[column[i]] += rows[i] (-= with ``subtract``) in index order, for 2-D ``out``
    and a column of row indices of any integer dtype, each checked against the row
    count before anything is written: False (nothing written) when one is out of bounds."""
    bound = out.shape[0]
    for i in range(column.shape[0]):
        if column[i] < 0 or column[i] >= bound:
            return False
    _add_rows(out, column, rows, subtract)
    return True


def checked_row_adder(op: str, dtype: np.dtype):
    """``add(out2d, column, rows2d) -> bool`` for scatters of whole rows ("add" or "sub")
    at depth 1, of a dtype numba compiles (see :func:`_add_rows_checked`); None
    otherwise. One compiled call validates and writes: what a small fed scatter costs.
    False: nothing was written (an index out of bounds, or the kernel is not compiled
    for these types yet), and the caller's full kernel does the work, in its words."""
    if op not in ("add", "sub") or not can_combine(op, dtype) or np.dtype(dtype).kind == "b":
        return None
    subtract = op == "sub"
    checked = Tiered(_add_rows_checked)  # compiled away from the call (ops/tiering.py)

    def add(out2d, column, rows2d) -> bool:
        return checked.ready(out2d, column, rows2d, subtract) \
            and _add_rows_checked(out2d, column, rows2d, subtract)
    return add


def checked_column_adder(op: str, dtype: np.dtype):
    """``add(out, indices, values) -> bool``: :func:`checked_row_adder` for 1-D
    single-element scatters."""
    add_rows = checked_row_adder(op, dtype)
    if add_rows is None:
        return None

    def add(out, indices, values) -> bool:
        return add_rows(out.reshape(-1, 1), indices.reshape(-1), values.reshape(-1, 1))
    return add


@kernel
def _min_max_rows(out, offsets, rows, maximum):
    """Eigen's min/max (max with ``maximum``) in index order: an update replaces the current
    value only when strictly smaller (larger), so a NaN update never wins, a NaN already
    there stays, and of equal values (0.0 and -0.0) the earlier stays."""
    n, width = U(offsets.shape[0]), U(rows.shape[1])
    for i in range(n):
        o = U(offsets[i])
        for j in range(width):  # a select, not a branch: the outcome is random
            current, u = out[o, j], rows[i, j]
            if maximum:
                out[o, j] = u if current < u else current
            else:
                out[o, j] = u if u < current else current
            if width == 1:
                break


@kernel
def _gather_rows(out, source, offsets, lo, hi):
    """out[i] = source[offsets[i]] for rows i in [lo, hi); zeros where offsets[i] < 0."""
    width = U(out.shape[1])
    for i in range(U(lo), U(hi)):
        o = offsets[i]
        for j in range(width):
            if o < 0:
                out[i, j] = 0
            else:
                out[i, j] = source[U(o), j]
            if width == 1:
                break


@kernel
def _linear_offsets(tuples, dims, offsets):
    """offsets[i] = the row-major offset of the index tuple tuples[i] into dims, or -1 when
    it is out of bounds; returns the last such i (-1 when every tuple is good)."""
    n, depth = tuples.shape
    last_bad = -1
    for i in range(n):
        offset, good = 0, True
        for c in range(depth):
            v = tuples[i, c]
            good &= U(v) < U(dims[c])  # as unsigned, a negative index is huge
            offset = offset * dims[c] + v
        offsets[i] = offset if good else -1
        if not good:
            last_bad = i
    return last_bad


@kernel
def _mark_last_writers(offsets, taken, winners):
    """winners[i] = whether update i is the one the in-order loop leaves in its slot: its
    offset is valid (>= 0) and no later update has it. ``taken`` (one flag per slot,
    all False) is the scratch of a walk from the last update back."""
    n = offsets.shape[0]
    for k in range(n):
        i = n - 1 - k
        o = offsets[i]
        winners[i] = o >= 0 and not taken[o]
        if o >= 0:
            taken[o] = True


_LAST_WRITERS = Tiered(_mark_last_writers)
_FLAGS = np.zeros(0, np.bool_)  # the type of its flag arrays, for asking whether it is ready


# -- calling them ------------------------------------------------------------------------------
def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view: numba types read-only arrays apart from writeable ones, so inputs
    always go in read-only and compile once per dtype."""
    view = a.view()
    view.flags.writeable = False
    return view


def last_positions(indices: np.ndarray) -> np.ndarray:
    """The position of each distinct value's last occurrence in the flat ``indices``:
    where an assignment in index order leaves the later of duplicates, numpy's fancy
    assignment of these positions alone does the same."""
    return indices.size - 1 - np.unique(indices[::-1], return_index=True)[1]


def row_words(a: np.ndarray) -> np.ndarray:
    """The C-contiguous ``[n, width]`` array ``a`` as rows of the widest unsigned words
    that tile a row (uint64 where the row's bytes allow), for loops that only move bits."""
    row_bytes = a.shape[1] * a.dtype.itemsize
    word = next(w for w in (8, 4, 2, 1) if row_bytes % w == 0)
    return a.view(f"u{word}")


def can_combine(op: str, dtype: np.dtype) -> bool:
    """Whether :func:`scatter` compiles ``op`` for ``dtype``: assignment for every dtype
    but strings and objects (it moves bits), sums for numba's numeric dtypes, min/max for
    its real ones (not float16)."""
    dtype = np.dtype(dtype)
    if op == "update":
        return dtype != object
    return jittable(dtype) and (op in ("add", "sub") or dtype.kind in "biuf")


def scatter(out2d: np.ndarray, offsets: np.ndarray, rows: np.ndarray, op: str) -> None:
    """``out2d[offsets[i]] (op)= rows[i]`` for every i, in index order.

    ``out2d`` is C-contiguous ``[num_slices, width]``, ``offsets`` int64 in
    ``[0, num_slices)``, ``rows`` ``[len(offsets), width]``; ``op`` is "update",
    "add", "sub", "min" or "max" (``can_combine(op, dtype)`` must hold).
    """
    offsets = read_only(np.ascontiguousarray(offsets, dtype=np.int64))
    rows = np.ascontiguousarray(rows)
    if op == "update":
        args = (row_words(out2d), offsets, read_only(row_words(rows)))
        if _ASSIGN.ready(*args):
            _assign_rows(*args)
        else:  # until compiled (a graph run once never waits for numba): the last one wins
            last = last_positions(offsets)
            args[0][offsets[last]] = args[2][last]
    elif op in ("add", "sub"):
        args = (out2d, offsets, read_only(rows), op == "sub")
        if _ADD.ready(*args) or out2d.dtype == np.bool_:
            _add_rows(*args)
        else:  # ufunc.at adds in index order, one element at a time: the loop's bits
            (np.subtract if op == "sub" else np.add).at(out2d, offsets, rows)
    else:
        _min_max_rows(out2d, offsets, read_only(rows), op == "max")


def linear_offsets(tuples: np.ndarray, dims) -> tuple[np.ndarray, int]:
    """Int64 row-major offsets of the index tuples ``tuples`` ``[n, depth]`` (any integer
    dtype) into ``dims``, -1 for a tuple out of bounds, and the last such position (-1
    when there is none): one pass, for any depth."""
    offsets = np.empty(tuples.shape[0], np.int64)
    last_bad = _linear_offsets(read_only(np.ascontiguousarray(tuples)),
                               read_only(np.asarray(dims, np.int64)), offsets)
    return offsets, int(last_bad)


def gather(out2d: np.ndarray, source: np.ndarray, offsets: np.ndarray,
           skipped: bool = False) -> None:
    """``out2d[i] = source[offsets[i]]`` for a C-contiguous ``out2d`` ``[len(offsets),
    width]`` and ``source`` ``[num_slices, width]`` of any fixed-size dtype; with
    ``skipped``, offsets of -1 give zero rows. Big calls are split by rows over the
    intra-op pool.

    A row of one word goes through the loop; wider rows through ``np.take``, which
    copies each row with one fixed-size ``memcpy`` and beats a row loop there (measured,
    one thread, 1M random rows of float32: 4-byte rows loop 1.3 ms, take 1.5 ms; 16-byte
    rows 15.9 vs 8.4 ms; 32-byte 18.3 vs 9.5 ms; 128-byte 34.3 vs 30.4 ms).
    """
    offsets = read_only(np.ascontiguousarray(offsets, dtype=np.int64))
    source = np.ascontiguousarray(source)
    if row_words(out2d).shape[1] > 1 and not skipped:
        def take(lo: int, hi: int) -> None:  # every offset is valid: "clip" skips a check
            np.take(source, offsets[lo:hi], axis=0, out=out2d[lo:hi], mode="clip")
        run_in_chunks(take, len(offsets), out2d.size)
        return
    out_words, source = row_words(out2d), read_only(row_words(source))
    run_in_chunks(lambda lo, hi: _gather_rows(out_words, source, offsets, lo, hi),
                  len(offsets), out2d.size)


def last_writers(offsets: np.ndarray, num_slices: int) -> np.ndarray:
    """For each of the int64 ``offsets`` (in ``[0, num_slices)``, or -1 for a skipped
    update), whether it is the last of its slot's writers in index order: the update
    whose value an in-order "update" scatter (:func:`scatter`) leaves there. A bool
    array of ``len(offsets)``."""
    offsets = read_only(np.ascontiguousarray(offsets, dtype=np.int64))
    if not _LAST_WRITERS.ready(offsets, _FLAGS, _FLAGS):  # numpy until compiled: a sort
        valid = np.flatnonzero(offsets >= 0)
        winners = np.zeros(len(offsets), np.bool_)
        winners[valid[last_positions(offsets[valid])]] = True
        return winners
    winners = np.empty(len(offsets), np.bool_)
    _mark_last_writers(offsets, np.zeros(num_slices, np.bool_), winners)
    return winners


# -- inside compiled segments (graphflow/lowering.py) ----------------------------------------------
# Lowered steps call these from generated numba code. They never raise (compiled code that
# raises leaks the arrays it holds): a bad index makes ``ok`` False, its offset 0, and the
# lowering then reads or writes nothing with them. The segment declines, its steps run one
# by one, and the step's own kernel reports the error in its words.
@kernel
def located_offsets(tuples, dims):
    """(the int64 row-major offsets of the index tuples ``tuples`` ``[n, depth]`` into
    ``dims`` (a tuple), whether every tuple is in bounds)."""
    n, depth = tuples.shape
    offsets = np.zeros(n, np.int64)
    for i in range(n):
        offset = 0
        for c in range(depth):
            v = tuples[i, c]
            if U(v) >= U(dims[c]):  # as unsigned, a negative index is huge
                return offsets, False
            offset = offset * dims[c] + v
        offsets[i] = offset
    return offsets, True


@kernel
def located_rows(column, bound):
    """(``column`` (row indices of any integer dtype) as int64 offsets, whether each is
    in ``[0, bound)``)."""
    offsets = np.zeros(column.shape[0], np.int64)
    for i in range(column.shape[0]):
        if U(column[i]) >= U(bound):
            return offsets, False
        offsets[i] = column[i]
    return offsets, True


@kernel
def gathered_rows(source, offsets):
    """``source[offsets]`` for a 2-D ``source`` and validated offsets: a new array."""
    out = np.empty((offsets.shape[0], source.shape[1]), source.dtype)
    _gather_rows(out, source, offsets, 0, offsets.shape[0])
    return out


def row_loop(op: str):
    """The compiled loop and its last argument for a scatter ``op`` of rows, as
    lowered steps call it: ``loop(out2d, offsets, rows2d, flag)``."""
    if op == "update":
        return _assign_rows_flagged, False
    if op in ("add", "sub"):
        return _add_rows, op == "sub"
    return _min_max_rows, op == "max"


@kernel
def _assign_rows_flagged(out, offsets, rows, unused):
    _assign_rows(out, offsets, rows)
