"""Taking tensors apart and padding them back: Slice, Pad and Unpack.

Slice and Pad are each other's gradient (a slice's gradient is the output gradient
padded with zeros back to the input's shape), as Unpack and Pack are.
"""
from __future__ import annotations

import numpy as np

from graphflow.builder import as_operand
from graphflow.dtypes import INDEX_TYPES, NON_STRING_TYPES, int32
from graphflow.errors import InvalidArgumentError
from graphflow.inference import constant_value, shape_from_tensor
from graphflow.registry import IntAttr, TypeAttr, register_op, same_as_tf
from graphflow.scope import Scope
from graphflow.shapes import TensorShape, debug_string



# -- Slice -----------------------------------------------------------------------------
Slice = register_op(
    "Slice", inputs=["input: T", "begin: Index", "size: Index"], outputs=["output: T"],
    attrs={"T": TypeAttr(), "Index": TypeAttr(INDEX_TYPES, int32)},
    doc="input[begin[i] : begin[i] + size[i]] in every dim i, a new array; size[i] = -1 "
        "takes the rest of dim i.")


def slice_dims(dims: list, begin: list, size: list) -> list:
    """The output dims of a Slice, checking TensorFlow's rules wherever the numbers are
    known (None: unknown at build time): 0 <= begin[i] <= dims[i], and 0 <= size[i] <=
    dims[i] - begin[i] or size[i] = -1 (the rest); a dim of 0 takes begin 0, size 0."""
    out = []
    for i, (d, b, s) in enumerate(zip(dims, begin, size)):
        if d == 0 and b is not None:
            s = -b if s == -1 else s
            if b != 0 or s not in (0, None):
                raise InvalidArgumentError(
                    f"Expected begin[{i}] == 0 (got {b}) and size[{i}] == 0 (got {s}) when "
                    f"input.dim_size({i}) == 0")
            out.append(0)
            continue
        if b is not None and (b < 0 or d is not None and b > d):
            raise InvalidArgumentError(
                f"Expected begin[{i}] in [0, {'?' if d is None else d}], but got {b}")
        if d is None or b is None:
            if s is not None and s < -1:
                raise InvalidArgumentError(f"Expected size[{i}] >= -1, but got {s}")
            out.append(None if s is None or s == -1 else s)
        elif s == -1:
            out.append(d - b)
        elif s is not None and not 0 <= s <= d - b:
            raise InvalidArgumentError(f"Expected size[{i}] in [0, {d - b}], but got {s}")
        else:
            out.append(s)
    return out


def _slice_lengths_error(rank, begin_shape, size_shape) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Expected begin and size arguments to be 1-D tensors of size {rank}, but got shapes "
        f"{begin_shape} and {size_shape} instead.")


@Slice.shape_fn
def _slice_shape(ctx):
    """[size[i], or input.shape[i] - begin[i] where size[i] = -1]: known where the values
    are; begin and size checked against the input's dims at build time when known."""
    shape, begin_shape, size_shape = ctx.shape("input"), ctx.shape("begin"), ctx.shape("size")
    for name, s in (("begin", begin_shape), ("size", size_shape)):
        if s.rank is not None and s.rank != 1:
            raise ctx.error(f"{name} must be a vector, got shape {s}")
    lengths = {s[0] for s in (begin_shape, size_shape) if s.rank is not None} - {None}
    rank = shape.rank
    if len(lengths) > 1 or rank is not None and lengths and lengths != {rank}:
        raise _slice_lengths_error("?" if rank is None else rank, begin_shape, size_shape)
    if rank is None:
        if not lengths:
            return TensorShape(None)
        rank = lengths.pop()
        shape = TensorShape.unknown(rank)
    begin = ctx.value("begin")
    begin = [None] * rank if begin is None else begin.tolist()
    size = ctx.value("size")
    if size is None:  # partly known (a Pack of scalars): -1 is then an unknown dim
        partial = shape_from_tensor(ctx.input("size"))
        size = [None] * rank if partial.rank is None else partial.as_list()
    else:
        size = size.tolist()
    return TensorShape(slice_dims(shape.as_list(), begin, size))


@Slice.kernel("cpu")
@Slice.kernel("gpu", T=NON_STRING_TYPES)
def _slice(ctx, x, begin, size):
    if begin.ndim != 1 or size.ndim != 1 or begin.size != x.ndim or size.size != x.ndim:
        raise _slice_lengths_error(x.ndim, debug_string(begin.shape), debug_string(size.shape))
    begin = [int(b) for b in begin.tolist()]
    dims = slice_dims(list(x.shape), begin, [int(s) for s in size.tolist()])
    out = ctx.empty(dims, x.dtype)
    out[...] = x[tuple(slice(b, b + n) for b, n in zip(begin, dims))]
    return out


# -- Pad -------------------------------------------------------------------------------
Pad = register_op(
    "Pad", inputs=["input: T", "paddings: Tpaddings"], outputs=["output: T"],
    attrs={"T": TypeAttr(), "Tpaddings": TypeAttr(INDEX_TYPES, int32)},
    doc="`input` with paddings[i, 0] zeros (empty strings, False) before and paddings[i, 1] "
        "after it in every dim i.")


def _check_paddings(paddings: list[list[int]]) -> None:
    for before, after in paddings:
        if before < 0 or after < 0:
            raise InvalidArgumentError(f"Paddings must be non-negative: {before} {after}")


@Pad.shape_fn
def _pad_shape(ctx):
    """input.shape[i] + paddings[i, 0] + paddings[i, 1]; paddings is [rank(input), 2]."""
    shape, pad_shape = ctx.shape("input"), ctx.shape("paddings")
    if pad_shape.rank is not None:
        if pad_shape.rank != 2 or pad_shape[1] not in (None, 2):
            raise ctx.error(f"paddings must be a matrix with 2 columns: {pad_shape}")
        if shape.rank is not None and pad_shape[0] not in (None, shape.rank):
            raise ctx.error(f"The first dimension of paddings must be the rank of inputs "
                            f"{pad_shape} {shape}")
    rank = shape.rank if shape.rank is not None else (
        pad_shape[0] if pad_shape.rank is not None else None)
    paddings = ctx.value("paddings")
    if rank is None or paddings is None:
        return TensorShape.unknown(rank)
    paddings = paddings.tolist()
    _check_paddings(paddings)
    return TensorShape([None if d is None else d + before + after
                        for d, (before, after) in zip(shape.as_list() if shape.rank is not None
                                                      else [None] * rank, paddings)])


@Pad.kernel("cpu")
@Pad.kernel("gpu", T=NON_STRING_TYPES)
def _pad(ctx, x, paddings):
    if paddings.ndim != 2 or paddings.shape[1] != 2:
        raise InvalidArgumentError(f"paddings must be a matrix with 2 columns: "
                                   f"{debug_string(paddings.shape)}")
    if paddings.shape[0] != x.ndim:
        raise InvalidArgumentError(f"The first dimension of paddings must be the rank of inputs"
                                   f"{debug_string(paddings.shape)} {debug_string(x.shape)}")
    pads = [[int(p) for p in row] for row in paddings.tolist()]
    _check_paddings(pads)
    out = ctx.empty([d + before + after for d, (before, after) in zip(x.shape, pads)], x.dtype)
    out.fill(ctx.attrs["T"].zero())
    out[tuple(slice(before, before + d) for d, (before, _) in zip(x.shape, pads))] = x
    return out


# -- Unpack ----------------------------------------------------------------------------
Unpack = register_op(
    "Unpack", inputs=["value: T"], outputs=["output: num * T"],
    attrs={"T": TypeAttr(), "num": IntAttr(minimum=0), "axis": IntAttr(0)},
    aliases=("unstack",),
    doc="The `num` slices of `value` along `axis` (new arrays, without that dim); "
        "`scope.unpack(x)` takes `num` from x's static shape, as tf.unstack.")


def unpack_axis(axis: int, rank: int) -> int:
    """``axis`` in [-rank, rank) as an index in [0, rank)."""
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"Invalid axis: {axis}; must be in [{-rank}, {rank})")
    return axis % rank


@Unpack.shape_fn
def _unpack_shape(ctx):
    """num outputs of value.shape without dim `axis`, which must be num."""
    shape, num = ctx.shape("value"), ctx.attr("num")
    if shape.rank is None:
        return [TensorShape(None)] * num
    axis = unpack_axis(ctx.attr("axis"), shape.rank)
    dims = shape.as_list()
    if dims[axis] is not None and dims[axis] != num:
        raise ctx.error(f"Input shape axis {axis} must equal {num}, got shape {shape}")
    return [TensorShape(dims[:axis] + dims[axis + 1:])] * num


@Unpack.kernel("cpu")
@Unpack.kernel("gpu", T=NON_STRING_TYPES)
def _unpack(ctx, x):
    num = ctx.attrs["num"]
    axis = unpack_axis(ctx.attrs["axis"], x.ndim)
    if x.shape[axis] != num:
        raise InvalidArgumentError(f"Input shape axis {axis} must equal {num}, got shape "
                                   f"{debug_string(x.shape)}")
    dims = x.shape[:axis] + x.shape[axis + 1:]
    lead = (slice(None),) * axis
    outputs = []
    for i in range(num):  # one copy per output
        out = ctx.empty(dims, x.dtype)
        out[...] = x[lead + (i,)]
        outputs.append(out)
    return outputs


def unpack(self: Scope, value, num: int | None = None, axis: int = 0, *,
           name: str | None = None) -> list:
    """``Unpack`` of ``value`` along ``axis``; ``num`` defaults to the size of that dim,
    which must then be known at build time (as ``tf.unstack``)."""
    if num is None:
        operand = as_operand(value)
        shape = operand.shape if operand is not None else TensorShape(np.shape(value))
        if shape.rank is None:
            raise InvalidArgumentError(f"Cannot infer argument `num` from shape {shape}")
        num = shape[unpack_axis(axis, shape.rank)]
        if num is None:
            raise InvalidArgumentError(f"Cannot infer argument `num` from shape {shape}")
    return self.create_op(Unpack, value, num=num, axis=axis, name=name)


for _name in ("unpack", "unstack"):
    setattr(Scope, _name, unpack)  # in place of the generated builder, which needs num


# -- gradients -------------------------------------------------------------------------
@Slice.gradient
def _slice_grad(g, grad):
    """``grad`` padded with zeros back to the input's shape: begin[i] zeros before it in
    dim i, input.shape[i] - size[i] - begin[i] after."""
    s = g.scope
    x, begin, _ = g.op.inputs
    out = g.op.outputs[0]
    index = begin.dtype
    before = constant_value(begin)
    if before is not None and x.shape.is_fully_defined() and out.shape.is_fully_defined():
        after = np.array(x.shape.as_list()) - np.array(out.shape.as_list()) - before
        paddings = np.stack([before, after], axis=1).astype(index.as_numpy_dtype)
    else:
        after = s.sub(s.sub(s.shape(x, index), s.shape(out, index)), begin)
        paddings = s.concat([s.reshape(begin, [-1, 1]), s.reshape(after, [-1, 1])], 1)
    return [s.pad(grad, paddings), None, None]


@Pad.gradient
def _pad_grad(g, grad):
    """The part of ``grad`` where the input sits: a Slice at paddings[:, 0]."""
    s = g.scope
    x, paddings = g.op.inputs
    index = paddings.dtype
    known = constant_value(paddings)
    begin = (known[:, 0] if known is not None
             else s.reshape(s.slice(paddings, [0, 0], [-1, 1]), [-1]))
    size = (np.array(x.shape.as_list(), index.as_numpy_dtype) if x.shape.is_fully_defined()
            else s.shape(x, index))
    return [s.slice(grad, begin, size), None]


@Unpack.gradient
def _unpack_grad(g, *grads):
    return [g.scope.pack(list(grads), axis=g.attr("axis"))]


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("Slice", "Pad", "Unpack")
