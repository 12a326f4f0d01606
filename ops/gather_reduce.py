"""``_GatherReduce``: gather rows, combine them with edge data, reduce them by segment, in
one pass.

Made by the plan-time rewrite of runtime/gather_reduce.py, never by users. It
stands for a graph neural network's message passing (DGL's g-SpMM, PyG's fused
``propagate``) as TF writes it::

    messages = GatherV2(params, gather_ids, axis=0)      # [E, F...]: one row per edge
    combined = Mul(messages, edge)                        # optional: Mul, Add, Sub or RealDiv,
                                                          # either order; edge [], [E, 1...] or
                                                          # [E, F...]
    combined = Relu(combined)                             # optional
    out      = UnsortedSegmentSum(combined, segment_ids, n)  # or Max / Min, or ScatterNd([E, 1]
                                                             # ids, combined, [n, F...])

which is ``out[segment_ids[e]] (+)= relu(params[gather_ids[e]] (op) edge[e])`` without the
[E, F] tensors. The gradient of a summing layer is the same pattern with the ids
swapped (UnsortedSegmentSum's gradient gathers, GatherV2's is an IndexedSlices
densified by a ScatterNd), so the rewrite serves both passes of a training step; a
max's gradient compares every edge with its winner, and stays as written.

The edges are bucketed by segment (a stable counting sort), then each output row is
reduced by one thread, in edge order, from the reduction's identity (0; lowest() or
highest() for max and min, folded by Eigen's rule as UnsortedSegmentMax's kernel
folds): every element is the same sequence of IEEE operations as the unfused nodes',
so the result is bit for bit the graph's. An id out of range, a shape the pattern does
not cover (an edge operand that broadcasts otherwise, a ScatterNd shape that does not
match), a dtype numba does not compile or an output past the memory limit runs the
original nodes' own kernels one by one (the attr ``members``), so results and errors
are theirs.
"""
from __future__ import annotations

import math

import numpy as np

from graphflow.dtypes import float32, float64
from graphflow.lowering import Lowering, dtype_literal, shape_literal
from graphflow.registry import IntAttr, TypeAttr, register_op

from .fused_elementwise import member_kernel, node_error
from .intra_op import run_in_chunks
from .jit import jittable, kernel

GatherReduce = register_op(
    "_GatherReduce",
    inputs=["params: T", "gather_ids: Tgather", "scale: S * T", "segment_ids: Tsegment",
            "size: Tsize"],
    outputs=["output: T"],
    attrs={"T": TypeAttr([float32, float64]), "Tgather": TypeAttr(),
           "Tsegment": TypeAttr(), "Tsize": TypeAttr(), "S": IntAttr(minimum=0)},
    doc="output[segment_ids[e]] (+)= act(params[gather_ids[e]] (combine) scale[e]) (scale "
        "optional: one element, [E, 1...] or the gathered rows' shape; attr 'combine' Mul, "
        "Add, Sub or RealDiv, 'scale_first' its operand order; attr 'activation' '' or "
        "'Relu'). Attr 'reduce': 'UnsortedSegmentSum', 'UnsortedSegmentMax' or "
        "'UnsortedSegmentMin' ('size' is num_segments, negative segment ids are dropped) "
        "or 'ScatterNd' ('size' is the dense shape, [E, 1] segment ids). The attr "
        "'members' holds the nodes it stands for, which run instead when a call is not "
        "covered.")

#: the reductions: the op type -> (its code in the loops, the input index of its rows)
REDUCES = {"UnsortedSegmentSum": (0, 0), "ScatterNd": (0, 1), "UnsortedSegmentMax": (1, 0),
           "UnsortedSegmentMin": (2, 0)}
SUM, MAX, MIN = 0, 1, 2
#: the combines of a gathered row with its edge operand -> their code in the loops
COMBINES = {"Mul": 0, "Add": 1, "Sub": 2, "RealDiv": 3}
MUL, ADD, SUB, DIV = 0, 1, 2, 3

#: scale kinds: no scale, one element, one per edge, one per gathered element
NONE, ONE, PER_EDGE, FULL = 0, 1, 2, 3


# -- the compiled loops ------------------------------------------------------------------------
@kernel
def first_bad(ids, bound, negatives_drop):
    """The index of the first id out of [0, bound) (negative ids allowed when they drop),
    or -1."""
    for i in range(ids.shape[0]):
        j = ids[i]
        if j >= bound or (j < 0 and not negatives_drop):
            return i
    return -1


@kernel
def _bucket_by_segment(ids, n):
    """``(starts, order)``: the edges of segment r are order[starts[r]:starts[r + 1]], in
    edge order (a stable counting sort); negative ids are left out."""
    starts = np.zeros(n + 1, np.int64)
    for i in range(ids.shape[0]):
        if ids[i] >= 0:
            starts[ids[i] + 1] += 1
    for r in range(n):
        starts[r + 1] += starts[r]
    fill = starts[:n].copy()
    order = np.empty(starts[n], np.int64)
    for i in range(ids.shape[0]):
        j = ids[i]
        if j >= 0:
            order[fill[j]] = i
            fill[j] += 1
    return starts, order


@kernel
def _sum_rows(out, params, gather_ids, scale, kind, starts, order, lo, hi):
    """out[r] = the sum, in edge order, of scale * params[gather_ids[e]] over the edges e
    of segment r, for r in [lo, hi)."""
    width = out.shape[1]
    for r in range(lo, hi):
        for c in range(width):
            out[r, c] = 0
        for k in range(starts[r], starts[r + 1]):
            e = order[k]
            g = gather_ids[e]
            if kind == NONE:
                for c in range(width):
                    out[r, c] += params[g, c]
            elif kind == FULL:
                for c in range(width):
                    out[r, c] += scale[e, c] * params[g, c]
            else:
                s = scale[e if kind == PER_EDGE else 0, 0]
                for c in range(width):
                    out[r, c] += s * params[g, c]


@kernel
def _combine(row, params_row, edge, combine, edge_first):
    """row = params_row (combine) edge, or edge (combine) params_row: one IEEE operation
    per element, in the graph's operand order."""
    a, b = (edge, params_row) if edge_first else (params_row, edge)
    if combine == MUL:
        for c in range(row.shape[0]):
            row[c] = a[c] * b[c]
    elif combine == ADD:
        for c in range(row.shape[0]):
            row[c] = a[c] + b[c]
    elif combine == SUB:
        for c in range(row.shape[0]):
            row[c] = a[c] - b[c]
    else:
        for c in range(row.shape[0]):
            row[c] = a[c] / b[c]


@kernel
def _combine_rows(out, params, gather_ids, scale, kind, combine, edge_first, relu, reduce,
                  identity, starts, order, lo, hi):
    """out[r] = the reduction (from ``identity``, in edge order; max and min by Eigen's
    rule) of relu?(params[gather_ids[e]] (combine) scale[e]) over the edges e of segment
    r, for r in [lo, hi): each edge's row made in a small buffer, then folded."""
    width = out.shape[1]
    row = np.empty(width, out.dtype)
    edge = np.empty(width, out.dtype)
    for r in range(lo, hi):
        for c in range(width):
            out[r, c] = identity
        for k in range(starts[r], starts[r + 1]):
            e = order[k]
            if kind == NONE:
                row[:] = params[gather_ids[e]]
            else:
                if kind == FULL:
                    edge[:] = scale[e]
                else:
                    edge[:] = scale[e if kind == PER_EDGE else 0, 0]
                _combine(row, params[gather_ids[e]], edge, combine, edge_first)
            if relu:
                for c in range(width):
                    v = row[c]
                    if not (v > 0 or v != v):  # np.maximum(v, 0): NaN stays, -0 is +0
                        row[c] = 0
            if reduce == SUM:
                for c in range(width):
                    out[r, c] += row[c]
            elif reduce == MAX:
                for c in range(width):
                    if not row[c] < out[r, c]:
                        out[r, c] = row[c]
            else:
                for c in range(width):
                    if not out[r, c] < row[c]:
                        out[r, c] = row[c]


# -- the kernel ------------------------------------------------------------------------------
@GatherReduce.kernel("cpu")
def _gather_reduce(ctx, params, gather_ids, scale, segment_ids, size):
    fallback = ctx.cache.get("members")
    if fallback is None:
        fallback = ctx.cache.setdefault("members", _members_one_by_one(ctx))
    covered = _covered(ctx, params, gather_ids, scale, segment_ids, size)
    if covered is None:
        return fallback(params, gather_ids, scale, segment_ids, size)
    n, inner, rows, gathered, kind, weights, ids = covered
    width = rows.shape[1]
    starts, order = _buckets(ctx, ids, n)
    out = ctx.empty((n, width), params.dtype)
    run = _rows_loop(ctx.attrs, kind, out.dtype)

    def part(lo, hi):
        run(out, rows, gathered, weights, starts, order, lo, hi)
    run_in_chunks(part, n, 2 * len(order) * width)
    return out.reshape((n,) + inner)


def _rows_loop(attrs, kind: int, dtype):
    """``run(out, params, gather_ids, weights, starts, order, lo, hi)``: the plain sum of
    scaled rows where the pattern is one (a GCN layer: its loop sums straight into the
    output), else the general loop with the node's combine, activation and reduction."""
    reduce, _ = REDUCES[attrs["reduce"]]
    combine = COMBINES.get(attrs["combine"], MUL)
    relu = attrs["activation"] == "Relu"
    if reduce == SUM and not relu and (kind == NONE or combine == MUL):
        return lambda out, *args: _sum_rows(out, args[0], args[1], args[2], kind, *args[3:])
    identity = dtype.type(0) if reduce == SUM else reduce_identity(reduce, dtype)
    edge_first = attrs["scale_first"]
    return lambda out, params, ids, weights, starts, order, lo, hi: _combine_rows(
        out, params, ids, weights, kind, combine, edge_first, relu, reduce, identity,
        starts, order, lo, hi)


def reduce_identity(reduce: int, dtype):
    """TF's start of an unsorted segment max (lowest()) or min (highest())."""
    info = np.finfo(dtype)
    return dtype.type(info.min if reduce == MAX else info.max)


def _buckets(ctx, ids, n: int):
    """:func:`_bucket_by_segment` of the ids, made once per plan when they are a constant
    (the edges of a graph)."""
    if not ctx.attrs["constant_segments"]:
        return _bucket_by_segment(ids, n)
    found = ctx.cache.get("buckets")
    if found is None or found[0] != n:
        found = ctx.cache["buckets"] = (n, *_bucket_by_segment(ids, n))
    return found[1:]


def _checked(ctx, ids, bound: int, negatives_drop: bool, constant: str) -> bool:
    """Whether every id is in [0, bound) (or negative, where those drop); known once per
    plan and bound for constant ids."""
    if not ctx.attrs[constant]:
        return first_bad(ids, bound, negatives_drop) < 0
    key = (constant, bound)
    ok = ctx.cache.get(key)
    if ok is None:
        ok = ctx.cache[key] = bool(first_bad(ids, bound, negatives_drop) < 0)
    return ok


def _covered(ctx, params, gather_ids, scale, segment_ids, size):
    """The operands of the compiled pass, or None when this call is not one it covers."""
    scatter = ctx.attrs["reduce"] == "ScatterNd"
    if params.ndim < 1 or params.dtype != np.dtype(ctx.attrs["T"].as_numpy_dtype):
        return None
    inner = params.shape[1:]
    gathered = np.ascontiguousarray(gather_ids).reshape(-1)
    edges = gathered.shape[0]
    if gathered.dtype.kind not in "iu" or gather_ids.ndim != 1:
        return None
    ids = segment_ids.reshape(-1) if segment_ids.shape == (edges, 1) and scatter \
        else segment_ids
    if ids.dtype.kind not in "iu" or ids.shape != (edges,) or np.ndim(size) != (1 if scatter else 0):
        return None
    n = _segment_count(size, inner, scatter)
    width = math.prod(inner)
    if n is None or n < 0 or not ctx.fits(n * width, params.dtype):
        return None
    kind, weights = _scale_kind(scale, edges, inner, params.dtype)
    if kind is None:
        return None
    if not _checked(ctx, gathered, params.shape[0], False, "constant_gather") \
            or not _checked(ctx, ids, n, not scatter, "constant_segments"):
        return None  # the members raise it, as the graph would
    rows = np.ascontiguousarray(params).reshape(params.shape[0], width)
    return n, inner, rows, gathered, kind, weights, np.ascontiguousarray(ids)


def _segment_count(size, inner: tuple, scatter: bool) -> int | None:
    """The output's row count from ``size``: num_segments, or (ScatterNd) the dense
    shape, whose other dims must be the gathered rows'; None where they are not."""
    if not scatter:
        return int(size)
    if len(size) != 1 + len(inner) or tuple(int(d) for d in size[1:]) != inner:
        return None
    return int(size[0])


def _scale_kind(scale, edges: int, inner: tuple, dtype):
    """(kind, the scale as a 2-D array) for a scale the pass covers, else (None, None)."""
    if not scale:
        return NONE, np.zeros((1, 1), dtype)
    (s,) = scale
    if s.dtype != dtype:
        return None, None
    kind = scale_kind_of(s.shape, edges, inner)
    if kind is None:
        return None, None
    return kind, np.ascontiguousarray(s).reshape(_weights_shape(kind, edges, inner))


def scale_kind_of(shape: tuple, edges: int, inner: tuple) -> int | None:
    """The kind of a scale of ``shape`` (not NONE) for ``edges`` rows of ``inner``, or None
    when the pass does not cover it."""
    if len(shape) > 1 + len(inner):
        return None
    if math.prod(shape) == 1 and edges != 1:
        return ONE
    if tuple(shape) == (edges,) + (1,) * len(inner) and len(inner) > 0:
        return PER_EDGE
    if tuple(shape) == (edges,) + tuple(inner):
        return FULL
    return None


def _weights_shape(kind: int, edges: int, inner: tuple) -> tuple:
    """The 2-D shape the pass reads a scale of ``kind`` in."""
    return {NONE: (1, 1), ONE: (1, 1), PER_EDGE: (edges, 1),
            FULL: (edges, math.prod(inner))}[kind]


# -- inside a compiled segment (graphflow/lowering.py) ----------------------------------------
@GatherReduce.lower("cpu")
def _lower_gather_reduce(spec) -> Lowering | None:
    """The compiled pass with every shape static and ``size`` a constant, for what
    :func:`_covered` covers (decided from the shapes); an id out of range (what the
    members raise) sets the segment's status False and gives zeros."""
    static = _static_pass(spec)
    if static is None:
        return None
    n, width, kind, edges, inner = static
    scales, scatter = spec.attrs["S"], spec.attrs["reduce"] == "ScatterNd"
    params, dtype, out_shape = spec.shape(0), spec.dtype(0), spec.output_shape(0)
    literal = dtype_literal(dtype)
    weights = f"np.zeros((1, 1), {literal})" if kind == NONE else \
        f"np.ascontiguousarray({{i2}}).reshape({shape_literal(_weights_shape(kind, edges, inner))})"
    operands = f"np.ascontiguousarray({{i0}}).reshape(({params[0]}, {width})), {{t}}g, {weights}"
    reduce, _ = REDUCES[spec.attrs["reduce"]]
    combine = COMBINES.get(spec.attrs["combine"], MUL)
    relu = spec.attrs["activation"] == "Relu"
    if reduce == SUM and not relu and (kind == NONE or combine == MUL):
        loop, call = _sum_rows, f"{operands}, {kind}, {{t}}starts, {{t}}order, 0, {n}"
    else:
        identity = dtype.type(0) if reduce == SUM else reduce_identity(reduce, dtype)
        loop = _combine_rows
        call = (f"{operands}, {kind}, {combine}, {spec.attrs['scale_first']}, {relu}, "
                f"{reduce}, {literal}({float(identity)!r}), {{t}}starts, {{t}}order, 0, {n}")
    return Lowering("\n".join([
        f"{{t}}g = np.ascontiguousarray({{i1}}).reshape(-1)",
        f"{{t}}ids = np.ascontiguousarray({{i{2 + scales}}}).reshape(-1)",
        f"if {{first_bad}}({{t}}g, {params[0]}, False) >= 0 "
        f"or {{first_bad}}({{t}}ids, {n}, {not scatter}) >= 0:",
        "    {ok} = False",
        f"    {{o0}} = np.zeros({shape_literal(out_shape)}, {literal})",
        "else:",
        f"    {{t}}starts, {{t}}order = {{bucket}}({{t}}ids, {n})",
        f"    {{t}}out = np.empty(({n}, {width}), {literal})",
        f"    {{rows}}({{t}}out, {call})",
        f"    {{o0}} = {{t}}out.reshape({shape_literal(out_shape)})"]),
        {"first_bad": first_bad, "bucket": _bucket_by_segment, "rows": loop}, weight=2)


def _static_pass(spec) -> tuple | None:
    """``(segments, row width, scale kind, edges, row shape)`` of a step whose shapes and
    size the plan knows and which :func:`_covered` would cover, else None."""
    scales = spec.attrs["S"]
    scatter = spec.attrs["reduce"] == "ScatterNd"
    params, gather_ids = spec.shape(0), spec.shape(1)
    segment_ids, size = spec.shape(2 + scales), spec.value(3 + scales)
    dtype, out_shape = spec.dtype(0), spec.output_shape(0)
    if params is None or gather_ids is None or segment_ids is None or size is None \
            or out_shape is None or scales > 1 or not params or len(gather_ids) != 1 \
            or dtype != np.dtype(spec.attrs["T"].as_numpy_dtype) or not jittable(dtype) \
            or spec.dtype(1).kind not in "iu" or spec.dtype(2 + scales).kind not in "iu" \
            or np.ndim(size) != (1 if scatter else 0):
        return None
    edges, inner = gather_ids[0], tuple(params[1:])
    if tuple(segment_ids) != ((edges, 1) if scatter else (edges,)):
        return None
    n = _segment_count(size, inner, scatter)
    if n is None:
        return None
    kind = NONE
    if scales:
        if spec.dtype(2) != dtype or spec.shape(2) is None:
            return None
        kind = scale_kind_of(spec.shape(2), edges, inner)
    if kind is None or n < 0 or (n,) + inner != tuple(out_shape) \
            or not spec.small_output(out_shape, dtype):
        return None
    return n, math.prod(inner), kind, edges, inner


def _members_one_by_one(ctx):
    """The nodes the op stands for, run with their own kernels one after the other (an
    error names the node that raised it)."""
    gather, combine, activation, reduce = ctx.attrs["members"]
    steps = [None if op is None else (op, *member_kernel(op, ctx))
             for op in (gather, combine, activation, reduce)]
    scale_first = ctx.attrs["scale_first"]
    axis = np.zeros((), np.dtype(gather.inputs[2].dtype.as_numpy_dtype))

    def call(step, *args):
        op, fn, member_ctx = step
        try:
            return fn(member_ctx, *args)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - re-raised naming the node
            raise node_error(op, e) from e

    def run(params, gather_ids, scale, segment_ids, size):
        value = call(steps[0], params, gather_ids, axis)
        if steps[1] is not None:
            value = call(steps[1], *((scale[0], value) if scale_first else (value, scale[0])))
        if steps[2] is not None:
            value = call(steps[2], value)
        return call(steps[3], *((segment_ids, value, size) if ctx.attrs["reduce"] == "ScatterNd"
                                else (value, segment_ids, size)))
    return run


__all__ = ["GatherReduce"]
