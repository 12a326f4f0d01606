"""Segment reductions, the GNN primitive: UnsortedSegmentSum/Max/Min/Prod, the composites
``unsorted_segment_mean`` and ``unsorted_segment_sqrt_n`` (built as TensorFlow's Python
builds them), and SegmentSum/Mean/Max/Min/Prod (sorted ids), with TF 2.21's semantics.

Each row ``data[i, ...]`` (one per element of ``segment_ids``) is combined into
``output[segment_ids[i], ...]``. Reference loop of the unsorted ops (TensorFlow's CPU
functor; ``(op)`` is +, *, Eigen's max or Eigen's min)::

    output = full([num_segments] + data.shape[segment_ids.ndim:], identity)
    for i in ndindex(segment_ids.shape):              # in index order
        j = segment_ids[i]
        if j < 0: continue                            # dropped
        if j >= num_segments: raise InvalidArgumentError
        output[j] = output[j] (op) data[i]

The identities are TF's: 0 for sum, 1 for prod, ``numeric_limits<T>::lowest()`` for max
(-3.4028235e38 for float32, not -inf) and ``max()`` for min. Eigen's max of a row ``d``
and the value ``o`` there is ``o if d < o else d`` (min: ``o if o < d else d``): a NaN
row wins, and a NaN already there loses to the next row; the tests hold this rule.

The sorted ops reduce each run of equal ids (TF's CPU ``SegmentReductionOp``): the
output has ``segment_ids[-1] + 1`` rows, a segment of one row is that row copied, a
longer one is folded in order from the reducer's start (0, 1, -inf / +inf; a mean is
the sum divided by the count, truncating for integers), and a gap (an id that no row
names) is 0 (1 for prod). Ids that decrease are TF's CPU error "segment ids are not
increasing"; a negative one its "Segment id -1 out of range ...".

CPU kernels: every id is checked first (one vectorized pass), then one compiled loop
over the rows in index order (numba, below), so float sums are bit-exact with a plain
sequential loop. float16 sums and products run numpy's sequential ``ufunc.at`` (numba
has no float16 arithmetic; numpy's float16 ops round each step, as Eigen's half does);
float16 max/min run the compiled loop in float32, which is exact.

GPU kernels (cupy, through ``ctx.xp``): sum, max and min are one scatter of the rows by
``gpu_index.scatter`` (atomics, or in index order under ``deterministic=True``; its NaN
rule is the scatters' one: a NaN row never wins); prod is a stable sort of the ids and
one thread per (segment, element) folding its rows in order. As on TensorFlow's GPU,
ids out of range are skipped, not reported, and sorted ids are not checked for order.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from graphflow.builder import as_operand
from graphflow.dtypes import INDEX_TYPES, NUMBER_TYPES, REAL_NUMBER_TYPES, float16, \
    float32, float64, int32
from graphflow.errors import InvalidArgumentError
from graphflow.graph import Output
from graphflow.inference import constant_value
from graphflow.lowering import Lowering, dtype_literal, shape_literal
from graphflow.registry import TypeAttr, register_op, same_as_tf
from graphflow.scope import Scope
from graphflow.shapes import TensorShape, debug_string

from . import gpu_index
from .jit import jittable, kernel
from .tiering import Tiered

SUM, PROD, MAX, MIN = "sum", "prod", "max", "min"


# -- the compiled loops (CPU) ----------------------------------------------------------------
# ``out`` is [num_segments, width], ``rows`` [n, width], ``ids`` int64 [n], every id
# already checked: < num_segments; a negative one is skipped.
@kernel
def _fold_sum(out, ids, rows):
    """out[ids[i]] += rows[i], in index order."""
    n, width = rows.shape
    for i in range(n):
        j = ids[i]
        if j < 0:
            continue
        for c in range(width):
            out[j, c] += rows[i, c]


@kernel
def _fold_prod(out, ids, rows):
    """out[ids[i]] *= rows[i], in index order."""
    n, width = rows.shape
    for i in range(n):
        j = ids[i]
        if j < 0:
            continue
        for c in range(width):
            out[j, c] *= rows[i, c]


@kernel
def _fold_max(out, ids, rows):
    """out[ids[i]] = Eigen's max(rows[i], out[ids[i]]): the row unless it is smaller."""
    n, width = rows.shape
    for i in range(n):
        j = ids[i]
        if j < 0:
            continue
        for c in range(width):
            d = rows[i, c]
            if not d < out[j, c]:
                out[j, c] = d


@kernel
def _fold_min(out, ids, rows):
    """out[ids[i]] = Eigen's min(rows[i], out[ids[i]]): the row unless it is larger."""
    n, width = rows.shape
    for i in range(n):
        j = ids[i]
        if j < 0:
            continue
        for c in range(width):
            d = rows[i, c]
            if not out[j, c] < d:
                out[j, c] = d


_FOLDS = {SUM: _fold_sum, PROD: _fold_prod, MAX: _fold_max, MIN: _fold_min}
_FOLD_LOOPS = {op: Tiered(fold) for op, fold in _FOLDS.items()}  # compiled away from the call
_UFUNCS = {SUM: np.add, PROD: np.multiply, MAX: np.maximum, MIN: np.minimum}
_OPCODES = {SUM: 0, PROD: 1, MAX: 2, MIN: 3}


@kernel
def checked_fold(out, ids, rows, opcode):
    """:data:`_FOLDS`' fold ``opcode`` (:data:`_OPCODES`) after checking every id against
    the segment count: False, with nothing written, when one is >= it (negatives drop).
    One compiled call checks and folds: what a small segment sum costs (lean kernels,
    compiled segments)."""
    bound = out.shape[0]
    for i in range(ids.shape[0]):
        if ids[i] >= bound:
            return False
    if opcode == 0:
        _fold_sum(out, ids, rows)
    elif opcode == 1:
        _fold_prod(out, ids, rows)
    elif opcode == 2:
        _fold_max(out, ids, rows)
    else:
        _fold_min(out, ids, rows)
    return True


def fold_rows(out: np.ndarray, ids: np.ndarray, rows: np.ndarray, op: str) -> None:
    """Combine ``rows`` [n, width] into ``out`` [segments, width] at the checked int64
    ``ids`` in index order (negative ids skipped): the reference loop, compiled."""
    if rows.size == 0:
        return
    if jittable(out.dtype) and (not _ufunc_folds_alike(op, out.dtype)
                                or _FOLD_LOOPS[op].ready_or_cached(out, ids, rows)):
        _FOLDS[op](out, ids, rows)
    elif op in (MAX, MIN) and out.dtype == np.float16:  # exact in float32: no arithmetic
        wide = out.astype(np.float32)
        _FOLDS[op](wide, ids, rows.astype(np.float32))
        out[...] = wide
    else:  # numpy's sequential ufunc.at, rounding each step: float16, or until compiled
        keep = ids >= 0
        _UFUNCS[op].at(out, ids[keep], rows[keep])


def _ufunc_folds_alike(op: str, dtype: np.dtype) -> bool:
    """Whether numpy's ``ufunc.at`` folds as the loop does, bit for bit: sums and products
    in index order; max and min of integers (of floats, Eigen's NaN and signed-zero
    rules are not numpy's)."""
    return op in (SUM, PROD) or dtype.kind in "iub"


# -- identities ------------------------------------------------------------------------------
def unsorted_identity(op: str, dtype: np.dtype):
    """TF's initial value of an unsorted segment: 0, 1, lowest() or highest()."""
    if op in (SUM, PROD):
        return dtype.type(0 if op == SUM else 1)
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return info.min if op == MAX else info.max


def sorted_start(op: str, dtype: np.dtype):
    """Where Eigen's reducers start a sorted segment's fold: 0, 1, -inf / +inf (the
    integer limits for integers)."""
    if op in (SUM, PROD) or dtype.kind != "f":
        return unsorted_identity(op, dtype)
    return dtype.type(-np.inf if op == MAX else np.inf)


# -- shared run-time checks --------------------------------------------------------------------
def _position(shape: tuple, flat: int) -> str:
    """TensorFlow's SliceDebugString: ``""``, ``[4]`` or ``[1,0]`` for a flat position."""
    if not shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


def _num_segments(num_segments) -> int:
    """The scalar ``num_segments`` on the host (one transfer on a GPU), checked as TF's."""
    if num_segments.ndim != 0:
        raise InvalidArgumentError(f"num_segments should be a scalar, not shape "
                                   f"{debug_string(num_segments.shape)}")
    n = int(num_segments)
    if n < 0:
        raise InvalidArgumentError(f"Input num_segments == {n} must not be negative.")
    return n


def _check_prefix(data, segment_ids) -> None:
    if data.shape[:segment_ids.ndim] != segment_ids.shape:
        raise InvalidArgumentError(
            f"data.shape = {debug_string(data.shape)} does not start with segment_ids.shape "
            f"= {debug_string(segment_ids.shape)}")


def _rows(ctx, data, leading: int, out_rows: int):
    """``data`` as [n, width] rows (n = the elements of the ids), the output's inner
    shape, and its element count checked against the memory limit."""
    inner = data.shape[leading:]
    width = math.prod(inner)
    ctx.check_allocation(out_rows * width, data.dtype)
    n = math.prod(data.shape[:leading])
    return ctx.xp.ascontiguousarray(data).reshape(n, width), inner


def _check_ids_below(ids: np.ndarray, shape: tuple, n: int) -> None:
    """TF's error for the first id >= n (negative ids are dropped, not errors)."""
    bad = ids >= n
    if ids.size and bool(bad.any()):
        i = int(bad.argmax())
        raise InvalidArgumentError(f"segment_ids{_position(shape, i)} = {int(ids[i])} is out "
                                   f"of range [0, {n})")


# -- UnsortedSegmentSum / Max / Min / Prod -------------------------------------------------------
def _unsorted_op(name: str, op: str, types, doc: str):
    """Declare one unsorted segment reduction with its shape function and kernels."""
    definition = register_op(
        name, inputs=["data: T", "segment_ids: Tindices", "num_segments: Tnumsegments"],
        outputs=["output: T"],
        attrs={"T": TypeAttr(types), "Tindices": TypeAttr(INDEX_TYPES),
               "Tnumsegments": TypeAttr(INDEX_TYPES, int32)},
        doc=doc + " Empty segments hold " + {
            SUM: "0", PROD: "1", MAX: "the dtype's lowest value (numeric_limits::lowest)",
            MIN: "the dtype's highest value"}[op] + "; negative ids are dropped; an id >= "
        "num_segments is an error on the CPU (skipped on a GPU, as TF's). segment_ids.shape "
        "must be a prefix of data.shape; output.shape = [num_segments] + "
        "data.shape[rank(segment_ids):].")
    definition.shape_fn(_unsorted_shape)

    @definition.kernel("cpu")
    def _cpu(ctx, data, segment_ids, num_segments, _op=op):
        return unsorted_segment_cpu(ctx, data, segment_ids, num_segments, _op)

    @definition.kernel("gpu")
    def _gpu(ctx, data, segment_ids, num_segments, _op=op):
        return _unsorted_segment_gpu(ctx, data, segment_ids, num_segments, _op)

    definition.prepare("cpu")(functools.partial(_prepare_unsorted, op=op, full=_cpu))
    definition.lower("cpu")(functools.partial(_lower_unsorted, op=op))
    return definition


def _static_unsorted(spec):
    """``(rows, width, num_segments, out_shape)`` of an unsorted segment op whose shapes
    and segment count the plan knows and whose dtype numba folds, else None."""
    data, ids, num = spec.shape(0), spec.shape(1), spec.value(2)
    dtype = spec.dtype(0)
    if data is None or ids is None or num is None or np.ndim(num) != 0 or int(num) < 0 \
            or not jittable(dtype) or tuple(data[:len(ids)]) != tuple(ids):
        return None
    inner = tuple(data[len(ids):])
    n = int(num)
    return math.prod(ids), math.prod(inner), n, (n,) + inner


def _prepare_unsorted(spec, op: str, full):
    """Static shapes and segment count: one compiled call checks the ids and folds into
    a buffer filled with the identity; a bad id runs the full kernel (its error)."""
    static = _static_unsorted(spec)
    if static is None:
        return None
    rows, width, n, out_shape = static
    dtype = spec.dtype(0)
    new, identity, opcode = spec.allocator((n, width), dtype), unsorted_identity(op, dtype), \
        _OPCODES[op]

    fold = Tiered(checked_fold)  # compiled away from the call (ops/tiering.py)

    def lean(ctx, data, segment_ids, num_segments):
        out = new()
        out.fill(identity)
        args = (out, np.ascontiguousarray(segment_ids).reshape(-1),
                np.ascontiguousarray(data).reshape(rows, width), opcode)
        if fold.ready(*args) and checked_fold(*args):
            return out.reshape(out_shape)
        return full(ctx, data, segment_ids, num_segments)  # not compiled yet, or a bad id
    return lean


def _lower_unsorted(spec, op: str) -> Lowering | None:
    """The same inside a compiled segment; a bad id sets ``{ok}`` False."""
    static = _static_unsorted(spec)
    dtype = spec.dtype(0)
    if static is None or not spec.small_output(static[3], dtype):
        return None
    rows, width, n, out_shape = static
    identity = np.asarray(unsorted_identity(op, dtype)).item()
    if isinstance(identity, int) and identity > np.iinfo(np.int64).max:
        return None  # uint64's highest: no literal numba types as uint64
    return Lowering("\n".join([
        f"{{t}}out = np.full(({n}, {width}), {identity!r}, {dtype_literal(dtype)})",
        f"if not {{fold}}({{t}}out, np.ascontiguousarray({{i1}}).reshape(-1), "
        f"np.ascontiguousarray({{i0}}).reshape(({rows}, {width})), {_OPCODES[op]}):",
        "    {ok} = False",
        f"{{o0}} = {{t}}out.reshape({shape_literal(out_shape)})"]),
        {"fold": checked_fold})


def _unsorted_shape(ctx) -> TensorShape:
    """[num_segments] + data.shape[rank(segment_ids):]; segment_ids.shape must be a prefix
    of data.shape and num_segments a scalar (>= 0 when constant). Unknown rank of
    segment_ids: unknown."""
    data, ids, num = ctx.shape("data"), ctx.shape("segment_ids"), ctx.shape("num_segments")
    if num.rank not in (None, 0):
        raise ctx.error(f"Shape must be rank 0 but is rank {num.rank} for num_segments")
    if ids.rank is None:
        return TensorShape(None)
    check_prefix_shape(ctx, data, ids)
    value = ctx.value("num_segments")
    first = None
    if value is not None:
        first = int(value)
        if first < 0:
            raise ctx.error(f"Dimension size, given by scalar input 2, must be non-negative "
                            f"but is {first}")
    if data.rank is None:
        return TensorShape(None)
    return TensorShape([first] + data.as_list()[ids.rank:])


def check_prefix_shape(ctx, data: TensorShape, ids: TensorShape) -> None:
    """TensorFlow's MergePrefix of data.shape with segment_ids.shape, at build time."""
    if data.rank is None or ids.rank is None:
        return
    if data.rank < ids.rank:
        raise ctx.error(f"Shape must be at least rank {ids.rank} but is rank {data.rank}: "
                        f"data.shape = {data} must start with segment_ids.shape = {ids}")
    for a, b in zip(data.as_list(), ids.as_list()):
        if a is not None and b is not None and a != b:
            raise ctx.error(f"Dimensions must be equal, but are {a} and {b}: data.shape = "
                            f"{data} must start with segment_ids.shape = {ids}")


def unsorted_segment_cpu(ctx, data, segment_ids, num_segments, op: str) -> np.ndarray:
    """TF's CPU checks (num_segments, the prefix, every id), then the compiled fold."""
    n = _num_segments(num_segments)
    _check_prefix(data, segment_ids)
    ids = np.ascontiguousarray(segment_ids, dtype=np.int64).reshape(-1)
    _check_ids_below(ids, segment_ids.shape, n)
    rows, inner = _rows(ctx, data, segment_ids.ndim, n)
    out = ctx.empty((n, rows.shape[1]), data.dtype)
    out.fill(unsorted_identity(op, data.dtype))
    fold_rows(out, ids, rows, op)
    return out.reshape((n,) + inner)


def _unsorted_segment_gpu(ctx, data, segment_ids, num_segments, op: str):
    """The shape checks on the host, then one scatter (prod: a segmented fold); ids out
    of [0, num_segments) are skipped, as on TensorFlow's GPU."""
    n = _num_segments(num_segments)
    _check_prefix(data, segment_ids)
    rows, inner = _rows(ctx, data, segment_ids.ndim, n)
    out = ctx.empty((n, rows.shape[1]), data.dtype)
    out.fill(unsorted_identity(op, data.dtype))
    segment_reduce_on_device(ctx, out, segment_ids.reshape(-1), rows, op)
    return out.reshape((n,) + inner)


def segment_reduce_on_device(ctx, out, ids, rows, op: str) -> None:
    """Combine ``rows`` into ``out`` (C-contiguous [segments, width]) at ``ids`` on a
    device, skipping ids outside [0, segments)."""
    xp = ctx.xp
    if rows.size == 0 or out.size == 0:
        return
    ids = ids.astype(np.int64)
    offsets = xp.where((ids >= 0) & (ids < len(out)), ids, np.int64(-1))
    if gpu_index.on_host(xp):  # the simulated GPU of the tests: the CPU loop
        fold_rows(out, offsets, rows, op)
    elif op == PROD:
        _segmented_prod(xp, out, offsets, rows)
    else:
        gpu_index.scatter(xp, out, offsets, rows, {SUM: "add", MAX: "max", MIN: "min"}[op],
                          ctx.deterministic)


def _segmented_prod(xp, out, offsets, rows) -> None:
    """A stable sort of the offsets and one thread per (run of equal offsets, element)
    that multiplies its rows in index order into ``out`` (runs of -1 are skipped)."""
    order = gpu_index.stable_argsort(xp, offsets)
    ordered = offsets[order]
    boundary = xp.empty(len(ordered), bool)
    boundary[0] = True
    xp.not_equal(ordered[1:], ordered[:-1], out=boundary[1:])
    starts = xp.concatenate([xp.flatnonzero(boundary), xp.asarray(np.array([len(ordered)]))])
    width = rows.shape[1]
    _prod_kernel(xp)(order, ordered, starts, xp.ascontiguousarray(rows).reshape(-1), width,
                     out.reshape(-1), size=(len(starts) - 1) * width)


@functools.cache
def _prod_kernel(xp):
    return xp.ElementwiseKernel(
        "raw int64 order, raw int64 ordered, raw int64 starts, raw T values, int64 width",
        "raw T out",
        """
        const long long run = width == 1 ? (long long)i : (long long)i / width;
        const long long element = width == 1 ? 0LL : (long long)i % width;
        const long long begin = starts[run], end = starts[run + 1];
        const long long segment = ordered[begin];
        if (segment >= 0) {
          const long long target = segment * width + element;
          T acc = out[target];
          for (long long k = begin; k < end; ++k) acc = acc * values[order[k] * width + element];
          out[target] = acc;
        }
        """,
        "graphflow_segment_prod")


UnsortedSegmentSum = _unsorted_op(
    "UnsortedSegmentSum", SUM, NUMBER_TYPES,
    "output[j] = sum of data[i] over the i with segment_ids[i] == j, added in index order "
    "(integers wrap).")
UnsortedSegmentProd = _unsorted_op(
    "UnsortedSegmentProd", PROD, NUMBER_TYPES,
    "output[j] = product of data[i] over the i with segment_ids[i] == j, in index order.")
UnsortedSegmentMax = _unsorted_op(
    "UnsortedSegmentMax", MAX, REAL_NUMBER_TYPES,
    "output[j] = max of data[i] over the i with segment_ids[i] == j, by Eigen's rule "
    "(o if d < o else d, in index order: a NaN row wins, the next row replaces a NaN).")
UnsortedSegmentMin = _unsorted_op(
    "UnsortedSegmentMin", MIN, REAL_NUMBER_TYPES,
    "output[j] = min of data[i] over the i with segment_ids[i] == j, by Eigen's rule "
    "(o if o < d else d, in index order).")


# -- SegmentSum / Mean / Max / Min / Prod (sorted ids) ----------------------------------------------
def _sorted_op(name: str, op: str, types, doc: str):
    definition = register_op(
        name, inputs=["data: T", "segment_ids: Tindices"], outputs=["output: T"],
        attrs={"T": TypeAttr(types), "Tindices": TypeAttr(INDEX_TYPES)},
        doc=doc + " segment_ids is a vector of data.shape[0] sorted ids; the output has "
        "segment_ids[-1] + 1 rows, and a row no id names is " + ("1" if op == PROD else "0") +
        ". Ids that decrease are an error on the CPU (TF's \"segment ids are not "
        "increasing\"), not checked on a GPU.")
    definition.shape_fn(_sorted_shape)

    @definition.kernel("cpu")
    def _cpu(ctx, data, segment_ids, _op=op):
        return _sorted_segment_cpu(ctx, data, segment_ids, _op)

    @definition.kernel("gpu")
    def _gpu(ctx, data, segment_ids, _op=op):
        return _sorted_segment_gpu(ctx, data, segment_ids, _op)

    definition.prepare("cpu")(functools.partial(_prepare_sorted, op=op, full=_cpu))
    return definition


@kernel
def _sorted_fold(out, ids, rows, opcode, start, gap, mean, integer):
    """The sorted kernel in one pass, for ids already known to be sorted and in
    [0, len(out)): each run of equal ids folded in order from ``start`` (a run of one
    row is that row), a mean divided by the count (integers truncate toward zero), and
    the rows no id names set to ``gap``."""
    m, width = rows.shape
    done = 0  # the output rows written so far
    i = 0
    while i < m:
        seg = ids[i]
        j = i + 1
        while j < m and ids[j] == seg:
            j += 1
        for g in range(done, seg):
            for c in range(width):
                out[g, c] = gap
        for c in range(width):
            if j - i == 1:
                out[seg, c] = rows[i, c]
                continue
            out[seg, c] = start
            for k in range(i, j):
                d = rows[k, c]
                if opcode == 0:
                    out[seg, c] += d
                elif opcode == 1:
                    out[seg, c] *= d
                elif opcode == 2:
                    if not d < out[seg, c]:
                        out[seg, c] = d
                elif not out[seg, c] < d:
                    out[seg, c] = d
            if mean and integer:  # C++'s division truncates toward zero
                q = out[seg, c] // (j - i)
                if q < 0 and q * (j - i) != out[seg, c]:
                    q += 1
                out[seg, c] = q
            elif mean:
                out[seg, c] = out[seg, c] / (j - i)
        done = seg + 1
        i = j
    for g in range(done, out.shape[0]):
        for c in range(width):
            out[g, c] = gap


@kernel
def _sorted_in_range(ids, rows):
    """Whether ``ids`` never decrease and lie in [0, rows)."""
    for i in range(ids.shape[0]):
        if ids[i] < 0 or ids[i] >= rows or (i and ids[i] < ids[i - 1]):
            return False
    return True


def _prepare_sorted(spec, op: str, full):
    """Static shapes and a dtype numba folds: the ids checked and the segments folded in
    two compiled calls (a bad id runs the full kernel: its error)."""
    data, ids = spec.shape(0), spec.shape(1)
    dtype = spec.dtype(0)
    if data is None or ids is None or len(ids) != 1 or not data or data[0] != ids[0] \
            or not jittable(dtype) or ids[0] == 0:
        return None
    inner = tuple(data[1:])
    width, m = math.prod(inner), data[0]
    reduce_op = SUM if op == "mean" else op
    start, gap = sorted_start(reduce_op, dtype), dtype.type(1 if op == PROD else 0)
    opcode, mean, integer = _OPCODES[reduce_op], op == "mean", dtype.kind in "iu"

    def lean(ctx, values, segment_ids):
        n = int(segment_ids[-1]) + 1
        if not _sorted_in_range(segment_ids, n) or not ctx.fits(n * width, dtype):
            return full(ctx, values, segment_ids)
        out = ctx.empty((n, width), dtype)
        _sorted_fold(out, segment_ids, np.ascontiguousarray(values).reshape(m, width), opcode,
                     start, gap, mean, integer)
        return out.reshape((n,) + inner)
    return lean


def _sorted_shape(ctx) -> TensorShape:
    """[None] + data.shape[1:] (the number of segments is known at run time only, as in
    TensorFlow); data has rank >= 1, segment_ids is a vector of data.shape[0] ids."""
    data, ids = ctx.shape("data"), ctx.shape("segment_ids")
    if data.rank is not None and data.rank < 1:
        raise ctx.error(f"Shape must be at least rank 1 but is rank {data.rank} for data")
    if ids.rank not in (None, 1):
        raise ctx.error(f"Shape must be rank 1 but is rank {ids.rank} for segment_ids")
    if data.rank is None:
        return TensorShape(None)
    if ids.rank == 1 and None not in (ids[0], data[0]) and ids[0] != data[0]:
        raise ctx.error(f"Dimensions must be equal, but are {ids[0]} and {data[0]}: "
                        f"segment_ids.shape = {ids} must equal data.shape[:1] of {data}")
    return TensorShape([None] + data.as_list()[1:])


def _check_sorted_shapes(data, segment_ids) -> None:
    if data.ndim < 1:
        raise InvalidArgumentError(f"input must be at least rank 1, got shape "
                                   f"{debug_string(data.shape)}")
    if segment_ids.ndim != 1:
        raise InvalidArgumentError("segment_ids should be a vector.")
    if segment_ids.shape[0] != data.shape[0]:
        raise InvalidArgumentError("segment_ids should be the same size as dimension 0 of "
                                   "input.")


def sorted_segments(ids: np.ndarray) -> int:
    """The number of output rows of sorted int64 ``ids`` (last + 1), after TF's CPU checks
    in its order: a negative last id, then, segment by segment, a decrease ("not
    increasing") or a negative id (out of range)."""
    if ids.size == 0:
        return 0
    rows = int(ids[-1]) + 1
    if rows <= 0:
        raise InvalidArgumentError("segment ids must be >= 0")
    # TF's loop, run by segment (each run of equal ids): first the order against the
    # next segment's id, then the bounds, [0, rows); the first segment failing either
    # names the error
    starts = np.concatenate([[0], np.flatnonzero(ids[1:] != ids[:-1]) + 1])
    segment = ids[starts]
    decreases = np.zeros(len(segment), bool)
    decreases[:-1] = segment[:-1] > segment[1:]
    bad = decreases | (segment < 0) | (segment >= rows)
    if bool(bad.any()):
        first = int(np.argmax(bad))
        if decreases[first]:
            raise InvalidArgumentError("segment ids are not increasing")
        raise InvalidArgumentError(
            f"Segment id {int(segment[first])} out of range [0, {rows}), possibly because "
            f"'segment_ids' input is not sorted.")
    return rows


def _sorted_segment_cpu(ctx, data, segment_ids, op: str) -> np.ndarray:
    _check_sorted_shapes(data, segment_ids)
    ids = np.ascontiguousarray(segment_ids, dtype=np.int64)
    n = sorted_segments(ids)
    rows, inner = _rows(ctx, data, 1, n)
    reduce_op = SUM if op == "mean" else op
    out = ctx.empty((n, rows.shape[1]), data.dtype)
    out.fill(sorted_start(reduce_op, data.dtype))
    fold_rows(out, ids, rows, reduce_op)
    counts = np.bincount(ids, minlength=n) if ids.size else np.zeros(n, np.int64)
    _finish_sorted(out, counts, ids, rows, op)
    return out.reshape((n,) + inner)


def _sorted_segment_gpu(ctx, data, segment_ids, op: str):
    """One transfer of the last id sizes the output (as TensorFlow's GPU kernel); the
    rows are then reduced as the unsorted ops do, and finished as on the CPU."""
    xp = ctx.xp
    _check_sorted_shapes(data, segment_ids)
    n = int(segment_ids[-1]) + 1 if segment_ids.shape[0] else 0
    if segment_ids.shape[0] and n <= 0:
        raise InvalidArgumentError("segment ids must be >= 0")
    rows, inner = _rows(ctx, data, 1, n)
    reduce_op = SUM if op == "mean" else op
    out = ctx.empty((n, rows.shape[1]), data.dtype)
    out.fill(sorted_start(reduce_op, data.dtype))
    ids = segment_ids.astype(np.int64)
    segment_reduce_on_device(ctx, out, ids, rows, reduce_op)
    valid = (ids >= 0) & (ids < n)
    counts = xp.bincount(xp.where(valid, ids, n), minlength=n + 1)[:n] if ids.size else \
        xp.zeros(n, np.int64)  # cupy's bincount rejects an empty input
    _finish_sorted(out, counts, xp.where(valid, ids, -1), rows, op)
    return out.reshape((n,) + inner)


def _finish_sorted(out, counts, ids, rows, op: str) -> None:
    """What TF's sorted kernel does besides folding: a segment of one row is that row
    copied, a mean divides by the count, and a gap is 0 (1 for prod)."""
    single = (ids >= 0) & (counts[ids.clip(0)] == 1)  # ids: -1 where a GPU skips one
    out[ids[single]] = rows[single]
    if op == "mean":
        many = counts >= 2
        if out.dtype.kind in "iu":  # C++'s division truncates toward zero
            q = out[many] // counts[many, None].astype(out.dtype)
            r = out[many] - q * counts[many, None].astype(out.dtype)
            out[many] = q + ((q < 0) & (r != 0))
        else:
            out[many] = out[many] / counts[many, None].astype(out.dtype)
    out[counts == 0] = 1 if op == PROD else 0


SegmentSum = _sorted_op("SegmentSum", SUM, NUMBER_TYPES,
                        "output[j] = sum of the rows data[i] with segment_ids[i] == j, in order.")
SegmentMean = _sorted_op("SegmentMean", "mean", NUMBER_TYPES,
                         "output[j] = mean of the rows data[i] with segment_ids[i] == j (their "
                         "sum divided by their count; integers truncate).")
SegmentProd = _sorted_op("SegmentProd", PROD, NUMBER_TYPES,
                         "output[j] = product of the rows data[i] with segment_ids[i] == j.")
SegmentMax = _sorted_op("SegmentMax", MAX, REAL_NUMBER_TYPES,
                        "output[j] = max of the rows data[i] with segment_ids[i] == j (Eigen's "
                        "rule, as UnsortedSegmentMax).")
SegmentMin = _sorted_op("SegmentMin", MIN, REAL_NUMBER_TYPES,
                        "output[j] = min of the rows data[i] with segment_ids[i] == j (Eigen's "
                        "rule, as UnsortedSegmentMin).")


# -- the composites: unsorted_segment_mean, unsorted_segment_sqrt_n -----------------------------------
def _segment_counts(s: Scope, data: Output, segment_ids: Output, num_segments: Output) -> Output:
    """TF's ``_unsorted_segment_N``: the rows per segment (at least 1), in data's dtype,
    shaped [num_segments, 1, ...] to broadcast against the sums."""
    ones = s.fill(s.shape(segment_ids), s.constant(1, dtype=data.dtype))
    n = s.unsorted_segment_sum(ones, segment_ids, num_segments)
    if data.shape.rank is not None and segment_ids.shape.rank is not None:
        broadcastable = np.array([-1] + [1] * (data.shape.rank - segment_ids.shape.rank),
                                 np.int32)
    else:
        extra = s.sub(s.rank(data), s.rank(segment_ids))
        broadcastable = s.concat([np.array([-1], np.int32),
                                  s.fill(s.expand_dims(extra, 0), np.int32(1))], 0)
    n = s.reshape(n, broadcastable)
    return s.maximum(n, s.constant(1, dtype=data.dtype))


def _true_div(s: Scope, x: Output, y: Output, name: str | None = None) -> Output:
    """TF's ``x / y``: integers are divided as floats (float64 for 32- and 64-bit ones)."""
    if x.dtype.is_integer:
        wide = float32 if x.dtype.itemsize <= 2 else float64
        x, y = s.cast(x, wide), s.cast(y, wide)
    return s.real_div(x, y, name=name)


def _composite_operands(s: Scope, data, segment_ids, num_segments) -> tuple:
    """The arguments as Outputs (constants for plain values), as TF's convert_to_tensor."""
    return tuple(as_operand(v) if as_operand(v) is not None else s.constant(v)
                 for v in (data, segment_ids, num_segments))


def unsorted_segment_mean(self: Scope, data, segment_ids, num_segments,
                          name: str | None = None) -> Output:
    """TF's ``tf.math.unsorted_segment_mean``: UnsortedSegmentSum divided by the rows per
    segment (at least 1, so an empty segment is 0). Integers give float64, as TF's ``/``."""
    s = self.with_sub_scope(name or "UnsortedSegmentMean")
    data, segment_ids, num_segments = _composite_operands(s, data, segment_ids, num_segments)
    n = _segment_counts(s, data, segment_ids, num_segments)
    return _true_div(s, s.unsorted_segment_sum(data, segment_ids, num_segments), n)


def unsorted_segment_sqrt_n(self: Scope, data, segment_ids, num_segments,
                            name: str | None = None) -> Output:
    """TF's ``tf.math.unsorted_segment_sqrt_n``: UnsortedSegmentSum divided by the square
    root of the rows per segment (at least 1)."""
    s = self.with_sub_scope(name or "UnsortedSegmentSqrtN")
    data, segment_ids, num_segments = _composite_operands(s, data, segment_ids, num_segments)
    n = _segment_counts(s, data, segment_ids, num_segments)
    return s.real_div(s.unsorted_segment_sum(data, segment_ids, num_segments), s.sqrt(n))


Scope.unsorted_segment_mean = unsorted_segment_mean
Scope.unsorted_segment_sqrt_n = unsorted_segment_sqrt_n


# -- gradients ----------------------------------------------------------------------------------
def gather_rows(s: Scope, params: Output, ids: Output) -> Output:
    """``params[ids]`` along dim 0, zeros where an id is negative: TF's
    ``_GatherDropNegatives``, as one GatherNd that ignores bad indices; a plain GatherV2
    (numpy's take, twice as fast) when the ids are constant and none is negative (a
    graph's edges, as a GNN holds them)."""
    known = constant_value(ids)
    if known is not None and (known.size == 0 or known.min() >= 0):
        return s.gather_v2(params, ids, 0)
    return s.gather_nd(params, s.expand_dims(ids, -1), bad_indices_policy="IGNORE")


@UnsortedSegmentSum.gradient
def _unsorted_segment_sum_grad(g, grad):
    """Each row gets its segment's gradient (none for a dropped, negative id)."""
    return [gather_rows(g.scope, grad, g.op.inputs[1]), None, None]


def _min_or_max_grad(g, grad, segment_sum):
    """TF's ``_UnsortedSegmentMinOrMaxGrad`` / ``_SegmentMinOrMaxGrad``: the rows equal to
    their segment's result share its gradient equally (ties divide it)."""
    s = g.scope
    data, ids = g.op.inputs[0], g.op.inputs[1]
    is_selected = s.equal(data, gather_rows(s, g.op.outputs[0], ids))
    num_selected = segment_sum(s, s.cast(is_selected, grad.dtype))
    weighted = s.real_div(grad, num_selected)
    return s.select_v2(is_selected, gather_rows(s, weighted, ids), s.zeros_like(data))


@UnsortedSegmentMax.gradient
@UnsortedSegmentMin.gradient
def _unsorted_min_or_max_grad(g, grad):
    ids, num = g.op.inputs[1], g.op.inputs[2]
    dx = _min_or_max_grad(g, grad, lambda s, x: s.unsorted_segment_sum(x, ids, num))
    return [dx, None, None]


def _prod_grad(g, grad, segment_sum, segment_prod):
    """TF's ``_UnsortedSegmentProdGrad`` / ``_SegmentProdGrad``: the product of the other
    rows of the segment: product / row, or, for a row that is zero, the product of the
    segment's non-zero rows (zero when the segment holds two zeros or more)."""
    s = g.scope
    data, ids = g.op.inputs[0], g.op.inputs[1]
    is_zero = s.equal(data, s.zeros_like(data))
    num_zeros = segment_sum(s, s.cast(is_zero, int32))
    grad = s.select_v2(s.greater(num_zeros, 1), s.zeros_like(grad), grad)
    non_zero_prod = segment_prod(s, s.select_v2(is_zero, s.ones_like(data), data))
    by_row = s.real_div(gather_rows(s, g.op.outputs[0], ids), data)  # may hold nan/inf
    partial = s.select_v2(is_zero, gather_rows(s, non_zero_prod, ids), by_row)
    return s.mul(gather_rows(s, grad, ids), partial)


@UnsortedSegmentProd.gradient
def _unsorted_segment_prod_grad(g, grad):
    ids, num = g.op.inputs[1], g.op.inputs[2]
    dx = _prod_grad(g, grad, lambda s, x: s.unsorted_segment_sum(x, ids, num),
                    lambda s, x: s.unsorted_segment_prod(x, ids, num))
    return [dx, None, None]


@SegmentSum.gradient
def _segment_sum_grad(g, grad):
    return [gather_rows(g.scope, grad, g.op.inputs[1]), None]


@SegmentMean.gradient
def _segment_mean_grad(g, grad):
    """TF's ``_SegmentMeanGrad``: each row gets its segment's gradient over the count."""
    s = g.scope
    data, ids = g.op.inputs
    ones = s.fill(s.shape(ids), s.constant(1, dtype=grad.dtype))
    counts = s.segment_sum(ones, ids)
    if data.shape.rank is not None:
        shape = np.array([-1] + [1] * (data.shape.rank - 1), np.int32)
    else:
        shape = s.concat([np.array([-1], np.int32),
                          s.fill(s.expand_dims(s.sub(s.rank(data), 1), 0), np.int32(1))], 0)
    scaled = s.real_div(grad, s.reshape(counts, shape))
    return [gather_rows(s, scaled, ids), None]


@SegmentMax.gradient
@SegmentMin.gradient
def _segment_min_or_max_grad(g, grad):
    ids = g.op.inputs[1]
    return [_min_or_max_grad(g, grad, lambda s, x: s.segment_sum(x, ids)), None]


@SegmentProd.gradient
def _segment_prod_grad(g, grad):
    ids = g.op.inputs[1]
    return [_prod_grad(g, grad, lambda s, x: s.segment_sum(x, ids),
                       lambda s, x: s.segment_prod(x, ids)), None]


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd",
           "SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin", "SegmentProd")
