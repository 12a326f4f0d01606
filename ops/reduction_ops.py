"""Reductions and broadcasts: Sum, AddN, BroadcastTo and BroadcastGradientArgs.

These are the ops that gradients are made of: AddN totals the gradients that reach
one tensor, Sum reduces a gradient over the dims its operand was broadcast along
(which BroadcastGradientArgs works out from two run-time shapes), and BroadcastTo
carries a reduced gradient back to the shape of what was reduced.
"""
from __future__ import annotations

import math

import numpy as np

from graphflow.builder import as_operand
from graphflow.dtypes import INDEX_TYPES, NON_STRING_TYPES, NUMBER_TYPES, int32
from graphflow.errors import InvalidArgumentError
from graphflow.graph import Output
from graphflow.inference import constant_value
from graphflow.lowering import Lowering, dtype_literal, shape_literal
from graphflow.registry import BoolAttr, IntAttr, TypeAttr, register_op, same_as_tf
from graphflow.scope import Scope
from graphflow.shapes import TensorShape, debug_string

from .jit import jittable, kernel



# -- Sum -------------------------------------------------------------------------------
Sum = register_op(
    "Sum", inputs=["input: T", "axis: Tidx"], outputs=["output: T"],
    attrs={"T": TypeAttr(NUMBER_TYPES), "Tidx": TypeAttr(INDEX_TYPES, int32),
           "keep_dims": BoolAttr(False)},
    aliases=("reduce_sum",),
    doc="The sum of `input` over the dims in `axis` (a scalar or a vector; negative axes count "
        "from the end; a dim named twice is an error), which are dropped, or kept with size 1 "
        "under keep_dims. Integers wrap; float16 is summed in float32 and rounded once. "
        "`scope.reduce_sum(x)` without an axis sums every dim (TF's axis=None).")


def reduction_axes(axes, rank: int, at_build_time: bool = False) -> tuple[int, ...]:
    """The dims in [0, rank) that ``axes`` (ints, negative from the end) name, in order;
    an InvalidArgumentError for one out of range (in the words of TF's shape function at
    build time, of its kernel at run time, stray parenthesis included) or named twice."""
    seen: list[int] = []
    for axis in axes:
        if not -rank <= axis < rank:
            raise InvalidArgumentError(
                f"Invalid reduction dimension {axis} for input with {rank} dimensions."
                if at_build_time else
                f"Invalid reduction dimension ({axis} for input with {rank} dimension(s)")
        axis %= rank
        if axis in seen:
            raise InvalidArgumentError(
                f"Invalid reduction arguments: Axes contains duplicate dimension: {axis}")
        seen.append(axis)
    return tuple(seen)


def _reduced_dims(dims: list, axes: tuple[int, ...], keep_dims: bool) -> list:
    if keep_dims:
        return [1 if i in axes else d for i, d in enumerate(dims)]
    return [d for i, d in enumerate(dims) if i not in axes]


def check_reduction_axis(ctx) -> None:
    """A shape function's error for a reduction's `axis` that is neither a scalar nor a vector."""
    axis_shape = ctx.shape("axis")
    if axis_shape.rank is not None and axis_shape.rank > 1:
        raise ctx.error(f"axis must be a scalar or a vector, got shape {axis_shape}")


def reduced_shape(ctx) -> TensorShape:
    """A reduction's output shape: `input.shape` without the dims in `axis` (size 1 under
    keep_dims); when `axis` is not constant, only the rank under keep_dims."""
    shape, keep_dims, axes = ctx.shape("input"), ctx.attr("keep_dims"), ctx.value("axis")
    if shape.rank is None:
        return TensorShape(None)
    if axes is None:
        return TensorShape.unknown(shape.rank) if keep_dims else TensorShape(None)
    axes = reduction_axes(axes.reshape(-1).tolist(), shape.rank, at_build_time=True)
    return TensorShape(_reduced_dims(shape.as_list(), axes, keep_dims))


def reduction_output(ctx, x, axis) -> tuple:
    """A reduction kernel's dims in `axis`, keep_dims and its new output buffer."""
    axes = reduction_axes(axis.reshape(-1).tolist(), x.ndim)
    keep_dims = ctx.attrs["keep_dims"]
    return axes, keep_dims, ctx.empty(_reduced_dims(list(x.shape), axes, keep_dims), x.dtype)


def _reduces_every_dim(axis: Output, input_: Output) -> bool:
    """``axis`` is ``Range(0, Rank(input), 1)``: what ``scope.reduce_sum(x)`` builds for
    an ``x`` of unknown rank. The sum is then a scalar at any rank."""
    op = axis.op
    if op.type != "Range":
        return False
    start, limit, delta = op.inputs
    if limit.op.type != "Rank" or limit.op.inputs[0] is not input_:
        return False
    start, delta = constant_value(start), constant_value(delta)
    return start is not None and delta is not None and start == 0 and delta == 1


@Sum.shape_fn
def _sum_shape(ctx):
    """`input.shape` without the dims in `axis` (size 1 under keep_dims); when `axis` is not
    constant, only the rank under keep_dims."""
    check_reduction_axis(ctx)
    if not ctx.attr("keep_dims") and _reduces_every_dim(ctx.input("axis"), ctx.input("input")):
        return TensorShape([])
    return reduced_shape(ctx)


@Sum.kernel("cpu")
@Sum.kernel("gpu")
def _sum(ctx, x, axis):
    axes = reduction_axes(axis.reshape(-1).tolist(), x.ndim)
    if not axes:  # nothing to reduce (a gradient's sum to a shape that did not broadcast)
        return ctx.forward_or_copy(0, x)  # the input itself when nothing else reads it
    keep_dims = ctx.attrs["keep_dims"]
    out = ctx.empty(_reduced_dims(list(x.shape), axes, keep_dims), x.dtype)
    if x.dtype == np.float16:  # as TensorFlow's GPU kernel: a float32 sum, rounded once
        out[...] = ctx.xp.sum(x, axis=axes, dtype=np.float32, keepdims=keep_dims)
    else:  # in the input's type: integers wrap around, as in TensorFlow
        ctx.xp.sum(x, axis=axes, dtype=x.dtype, keepdims=keep_dims, out=out)
    return out


@Sum.prepare("cpu")
def _prepare_sum(spec):
    """The lean Sum: with a constant axis and the input's shape known, the axes and the
    output's shape are worked out once, and a call is one ``add.reduce`` (what
    ``np.sum`` calls) into a new buffer."""
    axis, shape, dtype = spec.value(1), spec.shape(0), spec.dtype(0)
    if axis is None or shape is None or dtype in (np.float16, object):
        return None
    try:
        axes = reduction_axes(axis.reshape(-1).tolist(), len(shape))
    except InvalidArgumentError:
        return None  # the full kernel raises it, at run time as before
    if not axes:
        return None
    keep_dims = spec.attrs["keep_dims"]
    out_shape = tuple(_reduced_dims(list(shape), axes, keep_dims))
    add_reduce = np.add.reduce
    new = spec.allocator(out_shape, dtype)

    def lean(ctx, x, axis_value):
        out = new()
        add_reduce(x, axis=axes, dtype=dtype, keepdims=keep_dims, out=out)
        return out
    return lean


# -- inside a compiled segment (graphflow/lowering.py) -------------------------------------------
def static_reduction(spec, types: str) -> tuple | None:
    """``(outer, n, inner, out_shape)`` of a reduction step whose input's shape is static,
    whose dtype (its kind one of ``types``) numba compiles, whose axis is a constant naming
    one contiguous run of dims (in any order) and whose output is small: the input seen as
    ``[outer, n, inner]`` is reduced along its middle dim into ``[outer, inner]``, the
    output's ``out_shape``. No axes: runs of one element. Else None."""
    axis, shape, dtype, out_shape = spec.value(1), spec.shape(0), spec.dtype(0), \
        spec.output_shape(0)
    if axis is None or shape is None or out_shape is None or dtype.kind not in types \
            or not jittable(dtype):
        return None
    try:
        axes = reduction_axes(np.asarray(axis).reshape(-1).tolist(), len(shape))
    except InvalidArgumentError:
        return None  # the kernel raises it
    if tuple(_reduced_dims(list(shape), axes, spec.attrs["keep_dims"])) != tuple(out_shape) \
            or not spec.small_output(out_shape, dtype):
        return None
    run = sorted(axes)
    if run and run[-1] - run[0] + 1 != len(run):
        return None  # not one run of dims
    lo, hi = (run[0], run[-1] + 1) if run else (len(shape), len(shape))
    return (math.prod(shape[:lo]), math.prod(shape[lo:hi]), math.prod(shape[hi:]),
            tuple(out_shape))


def lower_rows(spec, static: tuple, fill: str, loop: str, functions: dict,
               checked: bool = False) -> Lowering:
    """The lines of a lowered reduction: the output filled with ``fill`` (a numba
    expression) when it reduces runs of no element, else ``{fn}(x3, out2, ...)`` with the
    arguments ``loop`` adds (``{fn}({t}x, {t}out{loop})``); ``checked``: the loop returns
    False where the step cannot give its kernel's bits (the segment's status is then False:
    its steps run one by one, the kernel gives them)."""
    outer, n, inner, out_shape = static
    dtype = dtype_literal(spec.dtype(0))
    if n == 0:
        return Lowering(f"{{o0}} = np.full({shape_literal(out_shape)}, {fill}, {dtype})")
    call = f"{{fn}}({{t}}x, {{t}}out{loop})"
    lines = [f"{{t}}x = np.ascontiguousarray({{i0}}).reshape(({outer}, {n}, {inner}))",
             f"{{t}}out = np.zeros(({outer}, {inner}), {dtype})"]
    lines += [f"if not {call}:", "    {ok} = False", "    {t}out[:] = 0"] if checked \
        else [call]
    lines.append(f"{{o0}} = {{t}}out.reshape({shape_literal(out_shape)})")
    return Lowering("\n".join(lines), functions)


@kernel
def _wrapping_sum_rows(x, out):
    """out[o, j] = the sum of x[o, :, j], wrapping as the integer dtype's (computed in
    uint64, which wraps and is cast back; numba's signed sums may not wrap)."""
    outer, n, inner = x.shape
    for o in range(outer):
        for j in range(inner):
            acc = np.uint64(0)
            for r in range(n):
                acc += np.uint64(x[o, r, j])
            out[o, j] = acc


@Sum.lower("cpu")
def _lower_sum(spec) -> Lowering | None:
    """Integer Sum only: integer sums wrap, so any order gives the kernel's bits. A float
    sum is numpy's pairwise summation, which a loop does not repeat bit for bit."""
    static = static_reduction(spec, "iu")
    if static is None or not reduction_axes(np.asarray(spec.value(1)).reshape(-1).tolist(),
                                            len(spec.shape(0))):
        return None  # nothing to reduce: the kernel forwards its input
    return lower_rows(spec, static, "0", "", {"fn": _wrapping_sum_rows})


def reduce_sum(self: Scope, input, axis=None, keep_dims: bool | None = None, *,
               keepdims: bool | None = None, name: str | None = None) -> Output:
    """``Sum`` of ``input`` over ``axis``; every dim when ``axis`` is None (TF's
    ``tf.reduce_sum``): a constant ``range(rank)`` when the rank is known, else
    ``Range(0, Rank(input), 1)``. ``keepdims`` is accepted for ``keep_dims``."""
    return reduce_over(self, Sum, input, axis, keep_dims, keepdims, name)


def reduce_over(self: Scope, op, input, axis, keep_dims: bool | None, keepdims: bool | None,
                name: str | None) -> Output:
    """The reduction ``op`` of ``input`` over ``axis`` as TF's ``reduce_*`` builds it:
    every dim when ``axis`` is None (``Range(0, Rank(input), 1)`` when the rank is not
    known at build time); ``keep_dims`` and ``keepdims`` are the same argument."""
    if keep_dims is not None and keepdims is not None and bool(keep_dims) != bool(keepdims):
        raise InvalidArgumentError(f"{op.builder_name}: pass keep_dims or keepdims, not both")
    keep = bool(keep_dims if keep_dims is not None else keepdims or False)
    helpers = self.without_op_name()  # a with_name() name belongs to the reduction itself
    if axis is None:
        operand = as_operand(input)  # never `or`: an Output is no Python bool
        if operand is None:
            operand = helpers.constant(input)
        rank = operand.shape.rank
        axis = (np.arange(rank, dtype=np.int32) if rank is not None
                else helpers.range(0, helpers.rank(operand), 1))
        input = operand
    return self.create_op(op, input, axis, keep_dims=keep, name=name)


# -- AddN ------------------------------------------------------------------------------
AddN = register_op(
    "AddN", inputs=["inputs: N * T"], outputs=["sum: T"],
    attrs={"N": IntAttr(minimum=1), "T": TypeAttr(NUMBER_TYPES)},
    doc="The element-wise sum of N tensors of one shape (no broadcasting), added left to "
        "right in their type as TensorFlow does.")


@AddN.shape_fn
def _add_n_shape(ctx):
    """every input has one shape; the output has it too."""
    shapes = ctx.shape("inputs")
    merged = shapes[0]
    for i, s in enumerate(shapes[1:], 1):
        if not merged.is_compatible_with(s):
            raise ctx.error(f"Inputs must have the same shape: inputs[0] has shape {shapes[0]} "
                            f"but inputs[{i}] has shape {s}")
        merged = merged.merge_with(s)
    return merged


@AddN.kernel("cpu")
@AddN.kernel("gpu")
def _add_n(ctx, inputs):
    first = inputs[0]
    for i, v in enumerate(inputs[1:], 1):
        if v.shape != first.shape:
            raise InvalidArgumentError(
                f"Inputs to operation {ctx.node_name} of type AddN must have the same size and "
                f"shape.  Input 0: {debug_string(first.shape)} != input {i}: "
                f"{debug_string(v.shape)}")
    out = ctx.empty(first.shape, first.dtype)
    if len(inputs) == 1:
        out[...] = first
        return out
    xp = ctx.xp
    xp.add(first, inputs[1], out=out)
    for v in inputs[2:]:
        xp.add(out, v, out=out)
    return out


# -- BroadcastTo -----------------------------------------------------------------------
BroadcastTo = register_op(
    "BroadcastTo", inputs=["input: T", "shape: Tidx"], outputs=["output: T"],
    attrs={"T": TypeAttr(), "Tidx": TypeAttr(INDEX_TYPES, int32)},
    doc="`input` broadcast to `shape` by numpy's rules (a new array); the input's rank must "
        "be at most len(shape).")


@BroadcastTo.shape_fn
def _broadcast_to_shape(ctx):
    """`shape`, where a dim it leaves unknown takes the input's dim if that is not 1."""
    shape_shape = ctx.shape("shape")
    if shape_shape.rank is not None and shape_shape.rank != 1:
        raise ctx.error(f"shape must be a vector of {{int32,int64}}, got shape {shape_shape}")
    target, shape = ctx.shape_value("shape"), ctx.shape("input")
    if target.rank is None or shape.rank is None:
        return target
    if shape.rank > target.rank:
        raise ctx.error(f"Rank of input ({shape.rank}) must be no greater than rank of output "
                        f"shape ({target.rank}).")
    dims = target.as_list()
    lead = target.rank - shape.rank
    for i, d in enumerate(shape.as_list()):
        want = dims[lead + i]
        if d is None or d == 1:
            continue
        if want is None:
            dims[lead + i] = d
        elif want != d:
            raise ctx.error(f"Dimensions must be equal, but are {d} and {want}: cannot "
                            f"broadcast shape {shape} to {target}")
    return TensorShape(dims)


@BroadcastTo.kernel("cpu")
@BroadcastTo.kernel("gpu", T=NON_STRING_TYPES)
def _broadcast_to(ctx, x, shape):
    if shape.ndim != 1:
        raise InvalidArgumentError(f"shape must be a vector of {{int32,int64}}, got shape "
                                   f"{debug_string(shape.shape)}")
    dims = tuple(int(d) for d in shape.tolist())
    for d in dims:
        if d < 0:
            raise InvalidArgumentError(f"Dimension {d} must be >= 0")
    if x.ndim > len(dims):
        raise InvalidArgumentError(f"Rank of input ({x.ndim}) must be no greater than rank of "
                                   f"output shape ({len(dims)}).")
    try:
        broadcast = np.broadcast_shapes(x.shape, dims)
    except ValueError:
        raise InvalidArgumentError(f"Incompatible shapes: {debug_string(x.shape)} vs. "
                                   f"{debug_string(dims)}") from None
    if broadcast != dims:  # a dim of the input is larger, or 0 against 1
        raise InvalidArgumentError(f"Unable to broadcast tensor of shape {debug_string(x.shape)} "
                                   f"to tensor of shape {debug_string(dims)}")
    out = ctx.empty(dims, x.dtype)
    out[...] = x
    return out


# -- BroadcastGradientArgs ---------------------------------------------------------------
BroadcastGradientArgs = register_op(
    "BroadcastGradientArgs", inputs=["s0: T", "s1: T"], outputs=["r0: T", "r1: T"],
    attrs={"T": TypeAttr(INDEX_TYPES, int32)},
    doc="For a binary op that broadcasts operands of shapes s0 and s1: the dims of the "
        "broadcast result each operand's gradient is summed over (r0, r1), ascending: the "
        "dims where the operand, padded with leading 1s, has size 1.")


def broadcast_gradient_args(s0: np.ndarray, s1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TensorFlow's BCast reduction indices of two 1-D shape arrays (host numpy). Equal
    shapes reduce nothing, also over dims of size 1 (BCast's fast path: [1] vs [1] gives
    [] and [], not [0] and [0])."""
    if np.array_equal(s0, s1):
        return np.zeros(0, s0.dtype), np.zeros(0, s1.dtype)
    rank = max(s0.size, s1.size)
    a = np.concatenate([np.ones(rank - s0.size, s0.dtype), s0])
    b = np.concatenate([np.ones(rank - s1.size, s1.dtype), s1])
    if np.any((a != b) & (a != 1) & (b != 1)):
        raise InvalidArgumentError(f"Incompatible shapes: {debug_string(s0.tolist())} vs. "
                                   f"{debug_string(s1.tolist())}")
    return (np.flatnonzero(a == 1).astype(s0.dtype), np.flatnonzero(b == 1).astype(s1.dtype))


@BroadcastGradientArgs.shape_fn
def _broadcast_gradient_args_shape(ctx):
    """two vectors; their lengths when both shapes are constant."""
    for name in ("s0", "s1"):
        rank = ctx.shape(name).rank
        if rank is not None and rank != 1:
            raise ctx.error(f"{name} must be a vector, got shape {ctx.shape(name)}")
    s0, s1 = ctx.value("s0"), ctx.value("s1")
    if s0 is None or s1 is None:
        return [TensorShape([None]), TensorShape([None])]
    return [TensorShape([r.size]) for r in broadcast_gradient_args(s0, s1)]


@BroadcastGradientArgs.kernel("cpu")
@BroadcastGradientArgs.kernel("gpu")
def _broadcast_gradient_args(ctx, s0, s1):
    """Shapes are a few numbers: worked out on the host, as TensorFlow's host-memory kernel."""
    host = []
    for i, s in enumerate((s0, s1)):
        if s.ndim != 1:
            raise InvalidArgumentError(f"In[{i}] must be a vector.{debug_string(s.shape)}")
        host.append(np.array(s.tolist(), dtype=s.dtype))
    return [ctx.xp.asarray(r) for r in broadcast_gradient_args(*host)]


for _name in ("sum", "reduce_sum"):
    setattr(Scope, _name, reduce_sum)  # in place of the generated builder, which needs an axis


# -- gradients -------------------------------------------------------------------------
def shape_of(scope: Scope, t: Output, out_type=int32):
    """``t``'s shape as a vector of ``out_type``: a constant when static, else a Shape node."""
    if t.shape.is_fully_defined():
        return np.array(t.shape.as_list(), out_type.as_numpy_dtype)
    return scope.shape(t, out_type)


def _kept_dims_shape(scope: Scope, x: Output, axis: Output):
    """The shape of ``Sum(x, axis, keep_dims=True)``: a constant when x's shape and the
    axes are static, else computed from Shape(x) (TensorFlow's ``reduced_shape``): x's
    shape with 1 stitched in at the (wrapped) axes."""
    axes = constant_value(axis)
    if axes is not None and x.shape.is_fully_defined():
        dims = x.shape.as_list()
        return _reduced_dims(dims, reduction_axes(axes.reshape(-1).tolist(), len(dims)), True)
    shape = scope.shape(x)
    rank = scope.size(shape)
    axes = scope.reshape(axis if axis.dtype == int32 else scope.cast(axis, int32), [-1])
    axes = scope.select_v2(scope.less(axes, 0), scope.add(axes, rank), axes)
    ones = scope.fill(scope.shape(axes), 1)
    return scope.dynamic_stitch([scope.range(0, rank, 1), axes], [shape, ones])


@Sum.gradient
def _sum_grad(g, grad):
    """``grad`` broadcast back over the summed dims: reshaped to the kept-dims shape, then
    broadcast to the input's shape (static or run-time)."""
    s = g.scope
    x, axis = g.op.inputs
    if not g.attr("keep_dims"):
        grad = s.reshape(grad, _kept_dims_shape(s, x, axis))
    return [s.broadcast_to(grad, shape_of(s, x)), None]


@AddN.gradient
def _add_n_grad(g, grad):
    return [grad] * len(g.op.inputs)


@BroadcastTo.gradient
def _broadcast_to_grad(g, grad):
    """``grad`` summed over the broadcast dims (BroadcastGradientArgs when the shapes are
    only known at run time), reshaped to the input's shape."""
    from .math_ops import sum_to_shape_of

    return [sum_to_shape_of(g.scope, grad, g.op.inputs[0]), None]


BroadcastGradientArgs.not_differentiable()


Sum.identity_over_no_axes = True  # dropped by the plan's simplification
BroadcastTo.identity_when_same_shape = True
BroadcastTo.fails_by_shape_only = True  # its shape function checks the broadcast


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf(Sum, "AddN", BroadcastTo, BroadcastGradientArgs)
