"""The index primitives behind the CPU kernels of the scatter family and GatherNd.

The CPU's counterpart of ``ops/gpu_index.py``: the kernels share the shape
checks (``ops/index_checks.py``) and differ in how index tuples become
offsets and how updates reach the output, which is here.

* ``locate`` turns index tuples into int64 linear slice offsets and validates
  them all in one pass, before anything is written: a bad tuple raises, or is
  dropped under ``bad_indices_policy="IGNORE"``.
* ``scatter_into`` applies ``[n, slice_size]`` updates in index order: the
  compiled loops of ``ops/scatter_loops.py``, or numpy's sequential
  ``ufunc.at`` for what numba does not compile (strings, float16 sums and
  min/max).
* ``static_layout``, ``locator``, ``column_adder`` and ``row_writer`` are what
  a lean kernel (``OpDef.prepare``) decides once from static shapes and
  constant indices.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Sequence

import numpy as np

from graphflow.errors import InvalidArgumentError
from graphflow.lowering import Lowering, dtype_literal, shape_literal

from . import scatter_loops
from .index_checks import MAX_INDEX_DEPTH
from .jit import jittable


# -- locate -------------------------------------------------------------------------------------
def locate(tuples: np.ndarray, dims: Sequence[int], policy: str,
           bad_index: Callable[[int], str]) -> tuple[np.ndarray, np.ndarray | None]:
    """Int64 linear offsets of the index tuples ``tuples`` ``[n, depth]`` into ``dims``.

    All tuples are validated in one pass. Tuples outside ``[0, dims)`` raise
    ``InvalidArgumentError(bad_index(position))`` for the last bad position
    (TensorFlow's CPU kernels record each bad position in turn), or under
    ``policy == "IGNORE"`` are dropped: the second result is then the bool
    mask of the kept tuples (None when every tuple is good).
    """
    if tuples.shape[1] != 1:  # one compiled pass computes and checks every tuple
        offsets, last_bad = scatter_loops.linear_offsets(tuples, dims)
        if last_bad < 0:
            return offsets, None
        if policy == "IGNORE":
            keep = offsets >= 0
            return offsets[keep], keep
        raise InvalidArgumentError(bad_index(last_bad))
    # depth 1: an int64 column is the offsets as it is, checked by one max. Seen as
    # unsigned, a negative index is huge (in 64 bits when the dimension is past the index
    # type's range)
    unsigned = tuples.view(np.dtype(f"u{tuples.dtype.itemsize}"))
    if dims[0] > np.iinfo(unsigned.dtype).max:
        unsigned = tuples.astype(np.int64).view(np.uint64)
    offsets = tuples[:, 0].astype(np.int64, copy=False)
    if len(tuples) == 0 or int(unsigned.max()) < dims[0]:
        return offsets, None
    bad = unsigned[:, 0] >= dims[0]
    if policy == "IGNORE":
        keep = ~bad
        return offsets[keep], keep
    raise InvalidArgumentError(bad_index(len(bad) - 1 - int(np.argmax(bad[::-1]))))



# -- the bulk update ----------------------------------------------------------------------------
#: op -> (ufunc applied in index order, value that replaces a NaN update so that it has no
#:        effect under the ufunc): numpy's path, for what numba does not compile.
_UFUNC_AT = {
    "add": (np.add, None),
    "sub": (np.subtract, None),
    "min": (np.minimum, np.inf),
    "max": (np.maximum, -np.inf),
}


def scatter_into(out: np.ndarray, offsets: np.ndarray, updates: np.ndarray, op: str) -> None:
    """Apply ``updates`` ``[n, slice_size]`` to the slices ``offsets`` of ``out`` in place.

    ``op`` is ``"update"`` (assign; the last duplicate wins), ``"add"``,
    ``"sub"``, ``"min"`` or ``"max"`` (duplicates combine in index order; min/max
    with Eigen's rules: a NaN update never wins, a NaN already there stays, of
    equal values the earlier stays). ``out`` must be C-contiguous and non-empty,
    the offsets validated.

    The compiled loops (``ops/scatter_loops.py``) do every dtype numba compiles;
    numpy's ``ufunc.at``, which is sequential too, does float16 sums and min/max
    and strings.
    """
    out2d = out.reshape(-1, updates.shape[1])
    if scatter_loops.can_combine(op, out.dtype):
        scatter_loops.scatter(out2d, offsets, updates, op)
        return
    if op == "update":  # strings and objects: fancy assignment writes in order
        out2d[offsets] = updates
        return
    ufunc, nan_neutral = _UFUNC_AT[op]
    if nan_neutral is not None and updates.dtype.kind == "f" and np.isnan(updates).any():
        updates = np.where(np.isnan(updates), updates.dtype.type(nan_neutral), updates)
    slice_size = updates.shape[1]
    if slice_size > 1:
        offsets = (offsets[:, None] * slice_size + np.arange(slice_size)).reshape(-1)
    flat, values = out.reshape(-1), updates.reshape(-1)
    if nan_neutral is not None and out.dtype.kind == "f" and not values.all():
        _min_max_at(ufunc, flat, offsets, values)  # a zero update can tie 0.0 with -0.0
    else:
        ufunc.at(flat, offsets, values)


def _min_max_at(ufunc, flat: np.ndarray, offsets: np.ndarray, values: np.ndarray) -> None:
    """``ufunc.at`` for float min/max with Eigen's tie rule: of equal values (0.0 and
    -0.0) the earliest of (current, update 1, update 2, ...) stays. Where numpy keeps
    the first of two equal values (float16), that is ``ufunc.at`` in order. Where it
    returns the later (float32/64), updates run in reverse order, so among updates the
    earliest wins; where the result equals the current value, the current stays."""
    if _at_keeps_ties(ufunc, flat.dtype):
        ufunc.at(flat, offsets, values)
        return
    before = flat[offsets]
    ufunc.at(flat, offsets[::-1], values[::-1])
    after = flat[offsets]
    flat[offsets] = np.where(after == before, before, after)


@functools.cache
def _at_keeps_ties(ufunc, dtype: np.dtype) -> bool:
    """Whether ``ufunc.at`` keeps the current value when an update equals it: asked of
    numpy once per (ufunc, dtype), as it differs by dtype (float16 keeps it)."""
    out = np.zeros(1, dtype)
    ufunc.at(out, np.zeros(1, np.intp), np.array([-0.0], dtype))
    return not np.signbit(out[0])


# -- gather -------------------------------------------------------------------------------------
def gather_rows(out2d: np.ndarray, source: np.ndarray, offsets: np.ndarray,
                keep: np.ndarray | None) -> None:
    """``out2d[r] = source[offsets[r]]`` for the ``[n, slice_size]`` views ``out2d`` and
    ``source``, with ``offsets`` and ``keep`` from :func:`locate`: under IGNORE
    (``keep`` given) a dropped tuple gives zeros, or empty strings, as TensorFlow's CPU
    kernel."""
    if source.dtype == object:  # strings: numpy
        if keep is None:
            out2d[...] = source[offsets]
        else:
            out2d[~keep] = b""
            out2d[keep] = source[offsets]
        return
    if keep is not None:
        kept, offsets = offsets, np.full(len(out2d), -1, np.int64)
        offsets[keep] = kept
    scatter_loops.gather(out2d, source, offsets, skipped=keep is not None)


# -- lean kernels: what a plan knows before it runs (OpDef.prepare) ----------------------------
def static_layout(dims, index_shape, update_shape, dtype: np.dtype,
                  op: str) -> tuple | None:
    """``(depth, rows shape, slice size)`` of a scatter whose static shapes pass every
    shape check, with a non-empty output and update, that the compiled loops do; else
    None (the full kernel then checks and reports as it always did)."""
    if dims is None or index_shape is None or update_shape is None or len(index_shape) < 2:
        return None  # (rank-1 indices have TensorFlow's own batch rule: the full kernel's)
    depth, outer = index_shape[-1], index_shape[:-1]
    if not 1 <= depth <= min(len(dims), MAX_INDEX_DEPTH) or min(dims, default=1) < 0:
        return None
    if math.prod(dims) == 0 or math.prod(outer) == 0 or not update_shape \
            or tuple(update_shape) != tuple(outer) + tuple(dims[depth:]) \
            or not scatter_loops.can_combine(op, dtype):
        return None
    slice_size = math.prod(dims[depth:])
    return depth, (math.prod(outer), slice_size), slice_size


def locator(spec, i: int, dims: tuple, attrs) -> Callable | None:
    """``locate(indices) -> int64 offsets into dims``, None for an index out of bounds.
    Constant indices are located once, here (None when one is out of bounds: the full
    kernel reports it); fed ones are checked on every call, before any write."""
    if attrs.get("bad_indices_policy", "") == "IGNORE" or any(d > _INT64_MAX for d in dims):
        return None
    depth = len(dims)
    constant = spec.value(i)
    if constant is not None:
        offsets, last_bad = scatter_loops.linear_offsets(constant.reshape(-1, depth), dims)
        if last_bad >= 0:
            return None
        offsets.flags.writeable = False
        return lambda indices: offsets
    dtype = spec.dtype(i)
    if depth > 1:
        def locate_tuples(indices):
            offsets, last_bad = scatter_loops.linear_offsets(indices.reshape(-1, depth), dims)
            return None if last_bad >= 0 else offsets
        return locate_tuples
    unsigned, bound = np.dtype(f"u{dtype.itemsize}"), dims[0]
    if bound > np.iinfo(unsigned).max:
        return None

    def locate_column(indices):
        # seen as unsigned, a negative index is huge: one max checks both bounds
        flat = indices.reshape(-1)
        if flat.size and int(flat.view(unsigned).max()) >= bound:
            return None
        return flat
    return locate_column


_INT64_MAX = 2 ** 63 - 1

#: Up to this many single-element updates, numpy's ``ufunc.at`` beats a compiled call.
_FEW_UPDATES = 256


def column_adder(spec, i: int, dims: tuple, layout: tuple, op: str,
                 dtype: np.dtype) -> Callable | None:
    """For fed indices into a 1-D scatter of single elements (+ or -): one compiled call
    that checks every index, then writes (scatter_loops.checked_column_adder)."""
    depth, _, slice_size = layout
    if spec.value(i) is not None or depth != 1 or slice_size != 1 or len(dims) != 1 \
            or spec.attrs.get("bad_indices_policy", "") == "IGNORE":
        return None
    return scatter_loops.checked_column_adder(op, dtype)


def row_writer(op: str, dtype: np.dtype, rows_shape: tuple, slice_size: int) -> Callable:
    """``write(out, offsets, updates)``: the scatter of validated ``offsets`` (any integer
    dtype) as the compiled loops do it. A few single-element sums go through numpy's
    ``ufunc.at``, which is sequential too (the same order, the same bits) and costs less
    than a compiled call at that size."""
    if op in ("add", "sub") and slice_size == 1 and rows_shape[0] <= _FEW_UPDATES \
            and dtype.kind in "iuf":
        at = np.add.at if op == "add" else np.subtract.at

        def few(out, offsets, updates):
            at(out.reshape(-1), offsets, updates.reshape(-1))
        return few

    def rows(out, offsets, updates):
        scatter_loops.scatter(out.reshape(-1, slice_size), offsets,
                              updates.reshape(rows_shape), op)
    return rows


def over_memory_limit(ctx, dims: Sequence[int], dtype: np.dtype) -> bool:
    """Whether an output of ``dims`` would pass the session's memory limit: the lean
    kernel then steps aside, and the full kernel raises, in its words."""
    return not ctx.fits(math.prod(dims), dtype)


# -- lowerings: the same steps inside compiled segments (graphflow/lowering.py) -------------------
def _lowerable(spec, dtype: np.dtype, *shapes: Sequence[int]) -> bool:
    """Whether numba compiles loops over ``dtype`` and every output of ``shapes`` is a
    small plain array (what a compiled segment allocates)."""
    return jittable(dtype) and all(
        spec.small_output(s, dtype) for s in shapes)


def lower_tensor_scatter(spec, op: str) -> Lowering | None:
    """TensorScatter*(tensor, indices, updates) with static shapes that pass the checks:
    a copy of ``tensor``, then the rows written at the located indices."""
    dims, index_shape, update_shape = spec.shape(0), spec.shape(1), spec.shape(2)
    dtype = spec.dtype(0)
    layout = static_layout(dims, index_shape, update_shape, dtype, op)
    if layout is None or spec.attrs.get("bad_indices_policy", "") == "IGNORE" \
            or not _lowerable(spec, dtype, dims):
        return None
    depth, (n, width), _ = layout
    slices = math.prod(dims[:depth])
    loop, flag = scatter_loops.row_loop(op)
    return Lowering("\n".join([
        "{o0} = {i0}.copy()",
        f"{{t}}f, {{t}}good = {{locate}}(np.ascontiguousarray({{i1}}).reshape(({n}, {depth})), "
        f"{tuple(dims[:depth])})",
        "if {t}good:",
        f"    {{loop}}({{o0}}.reshape(({slices}, {width})), {{t}}f, "
        f"np.ascontiguousarray({{i2}}).reshape(({n}, {width})), {flag})",
        "else:",
        "    {ok} = False"]),
        {"loop": loop, "locate": scatter_loops.located_offsets})


def lower_gather_nd(spec) -> Lowering | None:
    """GatherNd(params, indices) with static shapes, batch_dims 0 and bad indices an
    error: the rows at the located indices."""
    params_shape, index_shape = spec.shape(0), spec.shape(1)
    dtype = spec.dtype(0)
    if spec.attrs["batch_dims"] or spec.attrs.get("bad_indices_policy", "") == "IGNORE" \
            or params_shape is None or index_shape is None or not index_shape:
        return None
    depth = index_shape[-1]
    n = math.prod(index_shape[:-1])
    out_shape = tuple(index_shape[:-1]) + tuple(params_shape[depth:])
    if not 1 <= depth <= len(params_shape) or n == 0 or math.prod(params_shape) == 0 \
            or any(d > _INT64_MAX for d in params_shape) \
            or not _lowerable(spec, dtype, out_shape):
        return None
    slices, width = math.prod(params_shape[:depth]), math.prod(params_shape[depth:])
    return Lowering(
        f"{{t}}f, {{t}}good = {{locate}}(np.ascontiguousarray({{i1}}).reshape(({n}, {depth})), "
        f"{tuple(params_shape[:depth])})\n"
        + checked_gather(f"np.ascontiguousarray({{i0}}).reshape(({slices}, {width}))",
                         out_shape, dtype),
        {"gather": scatter_loops.gathered_rows, "locate": scatter_loops.located_offsets})


def checked_gather(rows: str, out_shape: Sequence[int], dtype: np.dtype) -> str:
    """The lines of a lowered gather of the 2-D ``rows`` at the offsets ``{t}f`` located
    as ``{t}good``: the rows in ``out_shape``, or (an index out of bounds) zeros and the
    segment's ``{ok}`` False."""
    return "\n".join([
        "if {t}good:",
        f"    {{o0}} = {{gather}}({rows}, {{t}}f).reshape({shape_literal(out_shape)})",
        "else:",
        "    {ok} = False",
        f"    {{o0}} = np.zeros({shape_literal(out_shape)}, {dtype_literal(dtype)})"])


def lower_view(spec) -> Lowering | None:
    """Reshape, ExpandDims, Squeeze: the input's elements in the output's static shape."""
    shape, dims = spec.output_shape(0), spec.shape(0)
    if shape is None or dims is None or math.prod(dims) != math.prod(shape) \
            or not _lowerable(spec, spec.dtype(0)):
        return None
    return Lowering(f"{{o0}} = np.ascontiguousarray({{i0}}).reshape({shape_literal(shape)})")
