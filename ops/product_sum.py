"""``_ProductSum``: ``Sum(Mul(x, y), last axis)`` in one pass, the product never written.

Made by the plan-time rewrite of runtime/product_sum.py, never by users. A row-wise
dot product is how models score pairs (word2vec's ``reduce_sum(u * v, 1)``, an
attention logit) and how the gradient of a per-row weight comes out (``Mul``'s
gradient sums ``grad * x`` to the weight's ``[n, 1]``: an MoE's gate gradient). As
written, the [n, k] product is written to memory and read back by the Sum.

The row's products are summed the way numpy's ``add.reduce`` sums a contiguous row
(its pairwise summation: eight running sums over blocks of up to 128 elements,
halves above), starting from 0: the result is bit for bit the unfused graph's. A call
the loop does not cover (a dtype numba does not compile, shapes the rewrite did not
see) or that comes before the loop is compiled (ops/tiering.py) runs the two nodes'
own kernels, so results and errors are theirs.
"""
from __future__ import annotations

import math

import numpy as np

from graphflow.dtypes import float32, float64
from graphflow.lowering import Lowering, dtype_literal, shape_literal
from graphflow.registry import BoolAttr, TypeAttr, register_op

from .fused_elementwise import member_kernel, node_error
from .intra_op import run_in_chunks
from .jit import jittable, kernel
from .tiering import Tiered

ProductSum = register_op(
    "_ProductSum",
    inputs=["x: T", "y: T"], outputs=["output: T"],
    attrs={"T": TypeAttr([float32, float64]), "keep_dims": BoolAttr(False)},
    doc="Sum(Mul(x, y), axis=-1): x and y of one shape, the product's rows summed as "
        "numpy sums them (pairwise). The attr 'members' holds the Mul and the Sum it "
        "stands for, which run instead when a call is not covered.")

#: numpy's pairwise summation: blocks of up to this many elements are summed by eight
#: running sums (numpy/_core/src/umath/loops_utils.h.src, PW_BLOCKSIZE)
BLOCK = 128


# -- the compiled loop ---------------------------------------------------------------------------
@kernel
def _block_product_sum(x, y, lo, n):
    """The sum of x[lo:lo+n] * y[lo:lo+n] (n <= BLOCK), each product rounded to the
    dtype, added as numpy adds a block: in order below 8 elements, else by eight
    running sums joined pairwise, the rest after."""
    if n < 8:
        res = x.dtype.type(-0.0)
        for i in range(lo, lo + n):
            res += x[i] * y[i]
        return res
    r0 = x[lo] * y[lo]
    r1 = x[lo + 1] * y[lo + 1]
    r2 = x[lo + 2] * y[lo + 2]
    r3 = x[lo + 3] * y[lo + 3]
    r4 = x[lo + 4] * y[lo + 4]
    r5 = x[lo + 5] * y[lo + 5]
    r6 = x[lo + 6] * y[lo + 6]
    r7 = x[lo + 7] * y[lo + 7]
    i = lo + 8
    whole = lo + n - n % 8
    while i < whole:
        r0 += x[i] * y[i]
        r1 += x[i + 1] * y[i + 1]
        r2 += x[i + 2] * y[i + 2]
        r3 += x[i + 3] * y[i + 3]
        r4 += x[i + 4] * y[i + 4]
        r5 += x[i + 5] * y[i + 5]
        r6 += x[i + 6] * y[i + 6]
        r7 += x[i + 7] * y[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < lo + n:
        res += x[i] * y[i]
        i += 1
    return res


@kernel
def _pairwise_product_sum(x, y, n):
    """The sum of x[:n] * y[:n] in numpy's pairwise order: above BLOCK elements, the
    sum of the first ``half`` (n // 2 less its remainder by 8) plus the sum of the rest,
    each summed so in turn. Walked with a stack, not by recursion (numba's cache does
    not load recursive functions)."""
    if n <= BLOCK:
        return _block_product_sum(x, y, 0, n)
    los = np.empty(64, np.int64)  # the spans being summed, outermost first
    sizes = np.empty(64, np.int64)
    stages = np.empty(64, np.int64)  # 0: nothing summed yet, 1: the first half summed
    sums = np.empty(64, x.dtype)  # the sums of finished spans, in the order they finished
    top, done = 0, 0
    los[0], sizes[0], stages[0] = 0, n, 0
    while top >= 0:
        lo, size = los[top], sizes[top]
        half = size // 2
        half -= half % 8
        if size <= BLOCK:
            sums[done] = _block_product_sum(x, y, lo, size)
            done += 1
            top -= 1
        elif stages[top] == 0:
            stages[top] = 1
            top += 1
            los[top], sizes[top], stages[top] = lo, half, 0
        elif stages[top] == 1:
            stages[top] = 2
            top += 1
            los[top], sizes[top], stages[top] = lo + half, size - half, 0
        else:
            sums[done - 2] = sums[done - 2] + sums[done - 1]
            done -= 1
            top -= 1
    return sums[0]


@kernel(inline="always")
def row_product_sum(x, y, n, sums):
    """The pairwise sum of x[:n] * y[:n] for one row (1-D ``x``, ``y``): for a row of one
    block (8 <= n <= BLOCK, the common case) the eight running sums kept in ``sums``
    (8 elements), which LLVM turns into one vector register; else
    :func:`_pairwise_product_sum`."""
    if n > BLOCK or n < 8:
        return _pairwise_product_sum(x, y, n)
    whole = n - n % 8
    for j in range(8):
        sums[j] = x[j] * y[j]
    for i in range(8, whole, 8):
        for j in range(8):
            sums[j] += x[i + j] * y[i + j]
    res = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + \
        ((sums[4] + sums[5]) + (sums[6] + sums[7]))
    for i in range(whole, n):
        res += x[i] * y[i]
    return res


@kernel
def product_rows(x, y, out, lo, hi):
    """out[r] = 0 + the pairwise sum of x[r] * y[r] for the rows r in [lo, hi) of the
    [rows, k] operands (numpy's reduction starts from its identity)."""
    n = x.shape[1]
    sums = np.empty(8, x.dtype)
    for r in range(lo, hi):
        out[r] = 0 + row_product_sum(x[r], y[r], n, sums)


# -- the kernel ---------------------------------------------------------------------------------
@ProductSum.kernel("cpu")
def _product_sum(ctx, x, y):
    members = ctx.cache.get("members")
    if members is None:
        members = ctx.cache.setdefault("members", _members_one_by_one(ctx))
    loop = ctx.cache.get("loop")
    if loop is None:
        loop = ctx.cache.setdefault("loop", Tiered(product_rows))
    if x.shape != y.shape or x.ndim < 1 or x.dtype != y.dtype \
            or x.dtype != np.dtype(ctx.attrs["T"].as_numpy_dtype):
        return members(x, y)
    width = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    x2 = np.ascontiguousarray(x).reshape(rows, width)
    y2 = np.ascontiguousarray(y).reshape(rows, width)
    out = ctx.empty((rows,), x.dtype)
    if not loop.ready(x2, y2, out, 0, rows):
        return members(x, y)  # numpy's product and sum meanwhile: the same bits

    def part(lo, hi):
        product_rows(x2, y2, out, lo, hi)
    run_in_chunks(part, rows, 2 * rows * width)
    return out.reshape(x.shape[:-1] + ((1,) if ctx.attrs["keep_dims"] else ()))


def _members_one_by_one(ctx):
    """The Mul and the Sum, run with their own kernels (an error names the node that
    raised it)."""
    mul, reduce = ctx.attrs["members"]
    steps = [(op, *member_kernel(op, ctx)) for op in (mul, reduce)]
    axis = ctx.attrs["axis"]

    def call(step, *args):
        op, fn, member_ctx = step
        try:
            return fn(member_ctx, *args)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - re-raised naming the node
            raise node_error(op, e) from e

    def run(x, y):
        return call(steps[1], call(steps[0], x, y), axis)
    return run


# -- inside a compiled segment (graphflow/lowering.py) ----------------------------------------
@ProductSum.lower("cpu")
def _lower_product_sum(spec) -> Lowering | None:
    """The loop over static shapes of one dtype numba compiles."""
    x, y, out_shape, dtype = spec.shape(0), spec.shape(1), spec.output_shape(0), spec.dtype(0)
    if x is None or y is None or out_shape is None or x != y or not x \
            or dtype != np.dtype(spec.attrs["T"].as_numpy_dtype) or spec.dtype(1) != dtype \
            or not jittable(dtype):
        return None
    rows, width = math.prod(x[:-1]), x[-1]
    return Lowering("\n".join([
        f"{{t}}out = np.empty({rows}, {dtype_literal(dtype)})",
        f"{{rows}}(np.ascontiguousarray({{i0}}).reshape(({rows}, {width})), "
        f"np.ascontiguousarray({{i1}}).reshape(({rows}, {width})), {{t}}out, 0, {rows})",
        f"{{o0}} = {{t}}out.reshape({shape_literal(out_shape)})"]),
        {"rows": product_rows}, weight=2)


__all__ = ["ProductSum", "product_rows", "row_product_sum"]
