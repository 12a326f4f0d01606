"""Mean, Max, Min, Any and All: the reductions models need beside Sum
(ops/reduction_ops.py) and Prod (ops/tf_glue_ops.py), with TensorFlow's rules.

- ``axis`` as Sum's: a scalar or a vector, negative from the end, a dim named twice
  an error; ``keep_dims`` keeps reduced dims with size 1; the builders
  ``reduce_mean(input_tensor, axis=None, keepdims=False)`` etc. reduce every dim
  when ``axis`` is None.
- Max over nothing is the dtype's lowest value (-inf for floats), Min its highest;
  NaN wins both (TF's CPU kernels propagate it). Mean over nothing is NaN for
  floats; an integer Mean divides truncating toward zero, and over
  nothing is 0. An integer Mean sums in int64 (uint64), as TF's; float16 sums in
  float16 (TF's SumReducer<half>), so it overflows where TF's does.
- Gradients as TF's: Mean spreads the gradient evenly; Max/Min split it among the
  elements equal to the result (ties share it).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from graphflow.dtypes import INDEX_TYPES, NUMBER_TYPES, REAL_NUMBER_TYPES, bool_, int32
from graphflow.errors import InvalidArgumentError
from graphflow.lowering import Lowering, dtype_literal
from graphflow.registry import BoolAttr, TypeAttr, register_op, same_as_tf
from graphflow.scope import Scope

from .jit import kernel
from .reduction_ops import _kept_dims_shape, _reduced_dims, check_reduction_axis, lower_rows, \
    reduce_over, reduced_shape, reduction_axes, reduction_output, shape_of, static_reduction


def _reduction(name: str, types, doc: str, aliases=()):
    op = register_op(
        name, inputs=["input: T", "axis: Tidx"], outputs=["output: T"],
        attrs={"T": TypeAttr(types), "Tidx": TypeAttr(INDEX_TYPES, int32),
               "keep_dims": BoolAttr(False)},
        aliases=aliases, doc=doc)

    @op.shape_fn
    def _shape(ctx):
        """`input.shape` without the dims in `axis` (size 1 under keep_dims)."""
        check_reduction_axis(ctx)
        return reduced_shape(ctx)
    return op


Mean = _reduction("Mean", NUMBER_TYPES, "The mean of `input` over the dims in `axis` "
                  "(NaN over no elements for floats; integers divide truncating).")
Max = _reduction("Max", REAL_NUMBER_TYPES, "The largest element over the dims in `axis` "
                 "(the dtype's lowest value over none; NaN wins).")
Min = _reduction("Min", REAL_NUMBER_TYPES, "The smallest element over the dims in `axis` "
                 "(the dtype's highest value over none; NaN wins).")
Any = _reduction("Any", (bool_,), "Whether any element over the dims in `axis` is true.")
All = _reduction("All", (bool_,), "Whether every element over the dims in `axis` is true.")


def _limit(dtype: np.dtype, lowest: bool):
    if dtype.kind == "f":
        return dtype.type(-np.inf if lowest else np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.min if lowest else info.max)


def _reducing_kernel(op, reduce, limit=None):
    """Register ``reduce(x, axis=..., keepdims=...)`` (numpy's or cupy's, through
    ``ctx.xp``) as ``op``'s kernel on every device; ``limit(dtype)``: the value a
    reduction over no elements gives (numpy's ``initial``)."""
    @op.kernel("cpu")
    @op.kernel("gpu")
    def _kernel(ctx, x, axis):
        axes, keep_dims, out = reduction_output(ctx, x, axis)
        extra = {} if limit is None else {"initial": limit(x.dtype)}
        out[...] = getattr(ctx.xp, reduce)(x, axis=axes, keepdims=keep_dims, **extra)
        return out
    _kernel.__name__ = _kernel.__qualname__ = f"_{reduce}"
    return _kernel


_reducing_kernel(Max, "max", lambda dtype: _limit(dtype, True))
_reducing_kernel(Min, "min", lambda dtype: _limit(dtype, False))
_reducing_kernel(Any, "any")
_reducing_kernel(All, "all")


@Mean.kernel("cpu")
@Mean.kernel("gpu")
def _mean(ctx, x, axis):
    axes, keep_dims, out = reduction_output(ctx, x, axis)
    out[...] = mean_values(ctx.xp, x, axes, keep_dims)
    return out


def mean_values(xp, x, axes: tuple, keep_dims: bool):
    """Mean's values over ``axes`` (cast to x's dtype by the caller's output)."""
    count = math.prod(x.shape[a] for a in axes)
    if x.dtype.kind in "iu":
        return _integer_mean(xp, x, axes, keep_dims, count)
    # float16 too sums in float16, rounding each step as Eigen's half does (TF's
    # SumReducer<half>): two halves near 60000 make inf, as in TF
    total = xp.sum(x, axis=axes, dtype=x.dtype, keepdims=keep_dims)
    return total / x.dtype.type(count) if count else total * x.dtype.type(np.nan)


# -- lean kernels: the axes and the output's shape worked out once -------------------------
def _prepare_reduction(values):
    """``prepare`` for a reduction with a constant axis and a static input shape: the
    kernel's ``values(x, axes, keep_dims)`` into a buffer of the known output shape."""
    def prepare(spec):
        axis, shape, dtype = spec.value(1), spec.shape(0), spec.dtype(0)
        if axis is None or shape is None or dtype == object:
            return None
        try:
            axes = reduction_axes(np.asarray(axis).reshape(-1).tolist(), len(shape))
        except InvalidArgumentError:
            return None  # the full kernel raises it, at run time as before
        keep_dims = spec.attrs["keep_dims"]
        new = spec.allocator(_reduced_dims(list(shape), axes, keep_dims), dtype)

        def lean(ctx, x, axis_value):
            out = new()
            out[...] = values(x, axes, keep_dims)
            return out
        return lean
    return prepare


Mean.prepare("cpu")(_prepare_reduction(lambda x, axes, keep: mean_values(np, x, axes, keep)))
for _op, _reduce, _lowest in ((Max, np.max, True), (Min, np.min, False)):
    _op.prepare("cpu")(_prepare_reduction(
        lambda x, axes, keep, _reduce=_reduce, _lowest=_lowest: _reduce(
            x, axis=axes, keepdims=keep, initial=_limit(x.dtype, _lowest))))
Any.prepare("cpu")(_prepare_reduction(lambda x, axes, keep: np.any(x, axis=axes, keepdims=keep)))
All.prepare("cpu")(_prepare_reduction(lambda x, axes, keep: np.all(x, axis=axes, keepdims=keep)))


# -- inside a compiled segment (graphflow/lowering.py) -------------------------------------------
# A float Max/Min's bits are numpy's only where they do not depend on its loops' order:
# numpy's SIMD reductions return either zero of a run holding both, by lane (probed: no
# rule of first or last holds), and its own quiet NaN for any NaN in a vector (a NaN of
# other bits comes back as it is only from the scalar tail). So a lowered float Max/Min
# computes the run's value where it is one value's bits (a largest non-zero, zeros of
# one sign, NaNs all numpy's quiet NaN), and otherwise declines for that call: the
# segment's status False, its steps run one by one and the kernel gives the bits.
@kernel
def _extremum_rows(x, out, largest):
    """out[o, j] = the largest (``largest``) or smallest of x[o, :, j] (integers; n >= 1)."""
    outer, n, inner = x.shape
    for o in range(outer):
        for j in range(inner):
            acc = x[o, 0, j]
            for r in range(1, n):
                v = x[o, r, j]
                if (v > acc) if largest else (v < acc):
                    acc = v
            out[o, j] = acc


@kernel
def _float_extremum_rows(x, out, bits, largest, nan_bits):
    """As :func:`_extremum_rows` for floats, NaN winning (``bits``: x's bits as unsigned
    integers); False where numpy's bits are not known: a NaN of bits other than
    ``nan_bits`` in a run, or a zero result from a run holding zeros of both signs."""
    outer, n, inner = x.shape
    for o in range(outer):
        for j in range(inner):
            acc = x[o, 0, j]
            nan = False
            plus = False
            minus = False
            for r in range(n):
                v = x[o, r, j]
                if v != v:
                    if bits[o, r, j] != nan_bits:
                        return False
                    nan = True
                    acc = v
                elif nan:
                    continue
                elif v == 0:
                    if math.copysign(1.0, v) < 0:
                        minus = True
                    else:
                        plus = True
                if not nan and ((v > acc) if largest else (v < acc)):
                    acc = v
            if not nan and acc == 0 and plus and minus:
                return False
            out[o, j] = acc
    return True


@kernel
def _logical_rows(x, out, any_):
    """out[o, j] = any (``any_``) or all of the bools x[o, :, j]."""
    outer, n, inner = x.shape
    for o in range(outer):
        for j in range(inner):
            acc = not any_
            for r in range(n):
                if x[o, r, j] == any_:
                    acc = any_
                    break
            out[o, j] = acc


def _unsigned(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"u{dtype.itemsize}")


@functools.cache
def nan_rules() -> bool:
    """Whether np.max and np.min, as Max's and Min's kernels call them, give numpy's own
    quiet NaN (``np.array(np.nan, dtype)``) for every run holding it, at every position,
    length and layout probed, for float32 and float64: what :func:`_float_extremum_rows`
    assumes. Probed once per process, on first use."""
    for dtype in (np.float32, np.float64):
        nan = np.array(np.nan, dtype)
        for reduce, lowest in ((np.max, True), (np.min, False)):
            for n in (1, 2, 3, 7, 8, 16, 17, 31, 32, 33, 64, 65, 129):
                for inner in (1, 2, 3, 16):
                    x = np.linspace(-3, 3, 2 * n * inner).astype(dtype).reshape(2, n, inner)
                    for at in sorted({0, n // 3, n // 2, n - 1}):
                        y = x.copy()
                        y[:, at, :] = nan
                        got = reduce(y, axis=1, initial=_limit(y.dtype, lowest))
                        if got.tobytes() != np.full(got.shape, nan).tobytes():
                            return False
    return True


def _lower_extremum(spec, largest: bool) -> Lowering | None:
    """Max / Min over a constant axis forming one run of dims (see ``static_reduction``)."""
    static = static_reduction(spec, "iuf")
    if static is None:
        return None
    dtype = spec.dtype(0)
    if dtype.kind == "f":
        if dtype.itemsize not in (4, 8) or not nan_rules():
            return None
        bits = dtype_literal(_unsigned(dtype))
        nan_bits = int(np.array(np.nan, dtype).view(_unsigned(dtype)))
        return lower_rows(spec, static, "-np.inf" if largest else "np.inf",
                          f", {{t}}x.view({bits}), {largest}, {bits}({nan_bits})",
                          {"fn": _float_extremum_rows}, checked=True)
    limit = f"np.iinfo({dtype_literal(dtype)}).{'min' if largest else 'max'}"
    return lower_rows(spec, static, limit, f", {largest}", {"fn": _extremum_rows})


def _lower_logical(spec, any_: bool) -> Lowering | None:
    """Any / All over a constant axis forming one run of dims."""
    static = static_reduction(spec, "b")
    if static is None:
        return None
    return lower_rows(spec, static, str(not any_), f", {any_}", {"fn": _logical_rows})


Max.lower("cpu")(functools.partial(_lower_extremum, largest=True))
Min.lower("cpu")(functools.partial(_lower_extremum, largest=False))
Any.lower("cpu")(functools.partial(_lower_logical, any_=True))
All.lower("cpu")(functools.partial(_lower_logical, any_=False))


def _integer_mean(xp, x, axes, keep_dims: bool, count: int):
    """TF's integer Mean: the sum in int64 (uint64 for unsigned types: no overflow for
    the narrow types), divided there truncating toward zero (C's division), then cast
    back to T; over no elements 0."""
    wide = np.dtype(np.uint64 if x.dtype.kind == "u" else np.int64)
    total = xp.sum(x, axis=axes, dtype=wide, keepdims=keep_dims)
    if count == 0:
        return xp.zeros_like(total)
    n = wide.type(count)
    floor = total // n  # rounds toward -inf; C's (TF's) division toward zero
    return floor + ((total % n != 0) & (total < 0)).astype(wide)


# -- gradients -------------------------------------------------------------------------------
@Mean.gradient
def _mean_grad(g, grad):
    """Sum's gradient divided by the number of elements each output averaged."""
    s = g.scope
    x, axis = g.op.inputs
    y = g.op.outputs[0]
    if not g.attr("keep_dims"):
        grad = s.reshape(grad, _kept_dims_shape(s, x, axis))
    spread = s.broadcast_to(grad, shape_of(s, x))
    if x.shape.is_fully_defined() and y.shape.is_fully_defined():
        count = max(1, x.shape.num_elements() // max(1, y.shape.num_elements()))
        return [s.real_div(spread, count), None]
    count = s.maximum(s.real_div(s.cast(s.size(x), grad.dtype),
                                 s.cast(s.maximum(s.size(y), 1), grad.dtype)), 1)
    return [s.real_div(spread, count), None]


def _extremum_grad(g, grad):
    """TF's _MinOrMaxGrad: the gradient split evenly among the elements equal to the
    result."""
    s = g.scope
    x, axis = g.op.inputs
    y = g.op.outputs[0]
    kept = _kept_dims_shape(s, x, axis)
    if not g.attr("keep_dims"):
        y, grad = s.reshape(y, kept), s.reshape(grad, kept)
    indicators = s.cast(s.equal(y, x), grad.dtype)
    selected = s.reduce_sum(indicators, axis, keep_dims=True)
    return [s.mul(s.real_div(indicators, selected), grad), None]


Max.gradient(_extremum_grad)
Min.gradient(_extremum_grad)
Any.not_differentiable()
All.not_differentiable()


# -- builders with TensorFlow's Python signatures ---------------------------------------------
def _builder(op, tf_name: str):
    def build(self: Scope, input_tensor, axis=None, keepdims: bool | None = None, *,
              keep_dims: bool | None = None, name: str | None = None):
        return reduce_over(self, op, input_tensor, axis, keep_dims, keepdims, name)
    build.__name__ = build.__qualname__ = tf_name
    build.__doc__ = (f"``tf.{tf_name}(input_tensor, axis=None, keepdims=False)``: "
                     f"{op.name} over ``axis``, every dim when it is None.")
    return build


for _op, _name in ((Mean, "reduce_mean"), (Max, "reduce_max"), (Min, "reduce_min"),
                   (Any, "reduce_any"), (All, "reduce_all")):
    setattr(Scope, _name, _builder(_op, _name))


for _op in (Max, Min):
    _op.identity_over_no_axes = True  # dropped by the plan's simplification


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf(Mean, Max, Min)
same_as_tf(Any, All, dropped=("T",))  # TF's take bools only
