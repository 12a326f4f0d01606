"""A mixture of experts' combine and its gradient without the [n, F] routed tensors.

Made by the plan-time rewrite of runtime/stitch_reduce.py, never by users. A top-k
MoE layer as TF writes it routes n = k * tokens rows to K experts and back::

    rows    = DynamicPartition(Range(0, n), expert_of, K)        # where each row came from
    merged  = DynamicStitch(rows, [expert_e(part_e) ...])         # [n, F]
    y       = UnsortedSegmentSum(merged * weight, token_of, tokens)

and its gradient reads the [n, F] rows of the output's gradient::

    g_rows    = GatherNd(g_y, token_of[:, None])                  # UnsortedSegmentSum's
    g_weight  = _ProductSum(merged, g_rows)                       # Mul's, for the gate
    g_part[e] = GatherNd(g_rows * weight, winners[e][:, None])    # the stitch's

Three nodes stand for them, reading rows where they lie:

- ``_StitchSegmentSum``: ``y[seg[p]] += data[e][j] * scale[p]`` for every row p the
  stitch places from part e's row j, p in order (the segment sum's order);
- ``_StitchProductSum``: ``out[p] = sum(data[e][j] * params[ids[p]])``, the row's
  products summed as numpy sums them (ops/product_sum.py);
- ``_ScaledGatherRows``: ``out[m][i] = params[ids[q]] * scale[q]`` for q =
  picks[m][i], zeros where the pick (or the id, under GatherNd's IGNORE) is out of range.

Every element is the same IEEE operations, in the same order, as the unfused nodes',
so results are bit for bit the graph's. A stitch that does not place each row exactly
once, an id out of range where the gather would raise, a shape the loops do not cover,
or a call before the loops are compiled (ops/tiering.py) runs the nodes the fused node
stands for (the attr ``members``) one by one, so results and errors are theirs.
"""
from __future__ import annotations

import numpy as np

from graphflow.dtypes import float32, float64
from graphflow.registry import BoolAttr, IntAttr, TypeAttr, register_op

from .fused_elementwise import run_members
from . import partition_loops
from .gather_reduce import FULL, NONE, ONE, PER_EDGE, first_bad, scale_kind_of
from .intra_op import run_in_chunks
from .jit import kernel
from .product_sum import row_product_sum
from .tiering import Tiered

_FLOATS = [float32, float64]
_MEMBERS_DOC = (" The attrs 'members', 'externals' and 'results' hold the nodes it stands "
                "for, which run instead when a call is not covered.")

StitchSegmentSum = register_op(
    "_StitchSegmentSum",
    inputs=["indices: N * int32", "data: N * T", "scale: S * T", "segment_ids: Tsegment",
            "num_segments: Tsize"],
    outputs=["output: T"],
    attrs={"T": TypeAttr(_FLOATS), "N": IntAttr(minimum=1), "S": IntAttr(minimum=0),
           "Tsegment": TypeAttr(), "Tsize": TypeAttr(), "scale_first": BoolAttr(False)},
    doc="UnsortedSegmentSum(DynamicStitch(indices, data) (* scale), segment_ids, "
        "num_segments) for a stitch that places every row once, without the stitched "
        "rows." + _MEMBERS_DOC)

StitchProductSum = register_op(
    "_StitchProductSum",
    inputs=["indices: N * int32", "data: N * T", "params: T", "row_ids: Tids"],
    outputs=["output: T"],
    attrs={"T": TypeAttr(_FLOATS), "N": IntAttr(minimum=1), "Tids": TypeAttr(),
           "keep_dims": BoolAttr(False), "stitch_first": BoolAttr(True),
           "ignore_bad": BoolAttr(False)},
    doc="_ProductSum(DynamicStitch(indices, data), params[row_ids]) (either order) for a "
        "stitch that places every row once; 'ignore_bad': a bad row id gives a zero row "
        "(GatherNd's IGNORE), else the gather raises." + _MEMBERS_DOC)

ScaledGatherRows = register_op(
    "_ScaledGatherRows",
    inputs=["params: T", "row_ids: Tids", "scale: T", "picks: N * Tpicks"],
    outputs=["output: N * T"],
    attrs={"T": TypeAttr(_FLOATS), "N": IntAttr(minimum=1), "Tids": TypeAttr(),
           "Tpicks": TypeAttr(), "scale_first": BoolAttr(False),
           "ignore_bad": BoolAttr(False)},
    doc="output[m] = GatherNd(params[row_ids] * scale, picks[m], bad_indices_policy="
        "'IGNORE') for [k, 1] picks, without the [n, F] product." + _MEMBERS_DOC)


# -- the compiled loops ------------------------------------------------------------------------
@kernel
def stitch_sources(indices, part, row) -> bool:
    """part[p], row[p] = the part and its row that the stitch places at row p; False
    unless every row of [0, len(part)) is placed exactly once (the caller checks that
    the indices hold len(part) in all)."""
    part[:] = -1
    for e in range(len(indices)):
        at = indices[e]
        for j in range(at.shape[0]):
            p = at[j]
            if p < 0 or p >= part.shape[0] or part[p] >= 0:
                return False
            part[p] = e
            row[p] = j
    return True


@kernel
def stitch_scale_sum(out, data, part, row, segment_ids, scale, kind, scale_first):
    """out[segment_ids[p]] += data[part[p]][row[p]] (* scale), for the rows p in order
    (negative segment ids drop), from zeros: the segment sum's additions, in its order."""
    width = out.shape[1]
    for t in range(out.shape[0]):
        for c in range(width):
            out[t, c] = 0
    for p in range(segment_ids.shape[0]):
        t = segment_ids[p]
        if t < 0:
            continue
        d = data[part[p]]
        j = row[p]
        if kind == NONE:
            for c in range(width):
                out[t, c] += d[j, c]
        elif kind == FULL:
            if scale_first:
                for c in range(width):
                    out[t, c] += scale[p, c] * d[j, c]
            else:
                for c in range(width):
                    out[t, c] += d[j, c] * scale[p, c]
        else:
            s = scale[p if kind == PER_EDGE else 0, 0]
            if scale_first:
                for c in range(width):
                    out[t, c] += s * d[j, c]
            else:
                for c in range(width):
                    out[t, c] += d[j, c] * s


@kernel
def part_product_rows(out, part, at, params, ids, zero_row, stitch_first, lo, hi):
    """out[at[j]] = 0 + the pairwise sum of part[j] * params[ids[at[j]]] (a zero row for an
    id out of range) for the rows j in [lo, hi) of one stitched part: ops/product_sum.py's
    sums, row by row."""
    width = params.shape[1]
    bound = params.shape[0]
    sums = np.empty(8, out.dtype)
    for j in range(lo, hi):
        p = at[j]
        q = ids[p]
        g = params[q] if 0 <= q < bound else zero_row
        if stitch_first:
            out[p] = 0 + row_product_sum(part[j], g, width, sums)
        else:
            out[p] = 0 + row_product_sum(g, part[j], width, sums)


@kernel
def scaled_gather_rows(out, params, ids, scale, kind, scale_first, picks, zero_row, lo, hi):
    """out[i] = params[ids[q]] * scale[q] for q = picks[i], i in [lo, hi); a zero row
    (times the scale) for an id out of range, zeros for a pick out of range."""
    width = out.shape[1]
    bound = params.shape[0]
    n = ids.shape[0]
    for i in range(lo, hi):
        q = picks[i]
        if q < 0 or q >= n:
            for c in range(width):
                out[i, c] = 0
            continue
        t = ids[q]
        g = params[t] if 0 <= t < bound else zero_row
        for c in range(width):
            if kind == FULL:
                s = scale[q, c]
            else:
                s = scale[q if kind == PER_EDGE else 0, 0]
            out[i, c] = s * g[c] if scale_first else g[c] * s


_SOURCES, _FIRST_BAD = Tiered(stitch_sources), Tiered(first_bad)
_SUM, _PRODUCTS, _SCALED = (Tiered(f) for f in (stitch_scale_sum, part_product_rows,
                                                 scaled_gather_rows))


# -- shared steps --------------------------------------------------------------------------
def _frozen(arrays) -> tuple:
    """Contiguous, read-only views of ``arrays``: one numba type for the tuple's items."""
    return tuple(partition_loops.readonly(np.ascontiguousarray(a)) for a in arrays)


def _placed(indices, data, dtype):
    """``(parts, indices, part, row, width)`` (read-only, contiguous parts and indices)
    where the stitch places each of its rows exactly once from 2-D parts of one width
    and ``dtype``, else None."""
    if any(i.ndim != 1 or i.dtype != np.int32 for i in indices) \
            or any(d.ndim != 2 or d.dtype != dtype for d in data):
        return None
    width = data[0].shape[1]
    if any(d.shape != (i.shape[0], width) for i, d in zip(indices, data)):
        return None
    n = sum(i.shape[0] for i in indices)
    at = _frozen(indices)
    part, row = np.empty(n, np.int32), np.empty(n, np.int32)
    if not _SOURCES.ready(at, part, row) or not stitch_sources(at, part, row):
        return None
    return _frozen(data), at, part, row, width


def _row_ids(ids, bound: int, ignore_bad: bool):
    """1-D ids (GatherNd's [n, 1] indices flattened) when every id is in [0, bound) or
    bad ids give zeros; else None (the gather raises)."""
    flat = np.ascontiguousarray(ids.reshape(-1) if ids.ndim == 2 and ids.shape[1] == 1
                                else ids)
    if flat.ndim != 1 or flat.dtype.kind not in "iu" or (ids.ndim == 2 and ids.shape[1] != 1):
        return None
    if not ignore_bad and (not _FIRST_BAD.ready(flat, bound, False)
                           or first_bad(flat, bound, False) >= 0):
        return None
    return flat


def _scale(scale, rows: int, width: int, dtype):
    """(kind, the scale as a 2-D array), or (None, None) where Mul would broadcast
    otherwise."""
    if scale.dtype != dtype:
        return None, None
    kind = scale_kind_of(scale.shape, rows, (width,))
    if kind is None:
        return None, None
    shape = {ONE: (1, 1), PER_EDGE: (rows, 1), FULL: (rows, width)}[kind]
    return kind, np.ascontiguousarray(scale).reshape(shape)


# -- the kernels -------------------------------------------------------------------------------
@StitchSegmentSum.kernel("cpu")
def _stitch_segment_sum(ctx, indices, data, scale, segment_ids, num_segments):
    dtype = np.dtype(ctx.attrs["T"].as_numpy_dtype)
    placed = _placed(indices, data, dtype)
    if placed is None or segment_ids.ndim != 1 or np.ndim(num_segments) != 0:
        return run_members(ctx, *indices, *data, *scale, segment_ids, num_segments)[0]
    parts, _, part, row, width = placed
    n, size = part.shape[0], int(num_segments)
    kind, weights = (NONE, np.zeros((1, 1), dtype)) if not scale else \
        _scale(scale[0], n, width, dtype)
    seg = np.ascontiguousarray(segment_ids)
    if kind is None or seg.shape[0] != n or seg.dtype.kind not in "iu" or size < 0 \
            or not ctx.fits(size * width, dtype) or not _FIRST_BAD.ready(seg, size, True) \
            or first_bad(seg, size, True) >= 0:
        return run_members(ctx, *indices, *data, *scale, segment_ids, num_segments)[0]
    out = ctx.empty((size, width), dtype)
    args = (out, parts, part, row, seg, weights, kind, ctx.attrs["scale_first"])
    if not _SUM.ready(*args):
        return run_members(ctx, *indices, *data, *scale, segment_ids, num_segments)[0]
    stitch_scale_sum(*args)
    return out


@StitchProductSum.kernel("cpu")
def _stitch_product_sum(ctx, indices, data, params, row_ids):
    dtype = np.dtype(ctx.attrs["T"].as_numpy_dtype)
    placed = _placed(indices, data, dtype)
    if placed is None or params.ndim != 2 or params.dtype != dtype:
        return run_members(ctx, *indices, *data, params, row_ids)[0]
    parts, at, part, _, width = placed
    n = part.shape[0]
    ids = _row_ids(row_ids, params.shape[0], ctx.attrs["ignore_bad"])
    if ids is None or ids.shape[0] != n or params.shape[1] != width:
        return run_members(ctx, *indices, *data, params, row_ids)[0]
    rows, zero_row = _frozen((params, np.zeros(width, dtype)))
    out = ctx.empty((n,), dtype)
    stitch_first = ctx.attrs["stitch_first"]
    if not all(_PRODUCTS.ready(out, d, a, rows, ids, zero_row, stitch_first, 0, a.shape[0])
               for d, a in zip(parts, at)):
        return run_members(ctx, *indices, *data, params, row_ids)[0]
    for d, a in zip(parts, at):  # each part's rows split over the cores
        def chunk(lo, hi, d=d, a=a):
            part_product_rows(out, d, a, rows, ids, zero_row, stitch_first, lo, hi)
        run_in_chunks(chunk, a.shape[0], 2 * a.shape[0] * width)
    return out.reshape((n, 1)) if ctx.attrs["keep_dims"] else out


@ScaledGatherRows.kernel("cpu")
def _scaled_gather_rows(ctx, params, row_ids, scale, picks):
    dtype = np.dtype(ctx.attrs["T"].as_numpy_dtype)
    if params.ndim != 2 or params.dtype != dtype:
        return run_members(ctx, params, row_ids, scale, *picks)
    ids = _row_ids(row_ids, params.shape[0], ctx.attrs["ignore_bad"])
    width = params.shape[1]
    kind, weights = (None, None) if ids is None else _scale(scale, ids.shape[0], width, dtype)
    flat = [np.ascontiguousarray(p).reshape(-1) for p in picks]
    if kind is None or any(p.ndim != 2 or p.shape[1] != 1 or p.dtype.kind not in "iu"
                           for p in picks) \
            or not ctx.fits(sum(f.shape[0] for f in flat) * width, dtype):
        return run_members(ctx, params, row_ids, scale, *picks)
    rows, zero_row = _frozen((params, np.zeros(width, dtype)))
    scale_first = ctx.attrs["scale_first"]
    outs = [ctx.empty((f.shape[0], width), dtype) for f in flat]
    if not all(_SCALED.ready(o, rows, ids, weights, kind, scale_first, f, zero_row, 0,
                             f.shape[0]) for o, f in zip(outs, flat)):
        return run_members(ctx, params, row_ids, scale, *picks)
    for o, f in zip(outs, flat):
        def chunk(lo, hi, o=o, f=f):
            scaled_gather_rows(o, rows, ids, weights, kind, scale_first, f, zero_row, lo, hi)
        run_in_chunks(chunk, f.shape[0], 2 * f.shape[0] * width)
    return outs


__all__ = ["StitchProductSum", "StitchSegmentSum", "ScaledGatherRows"]
