"""Basic array ops: constants, placeholders, shapes, reshaping, casts, concat."""
from __future__ import annotations

import math

import numpy as np

from graphflow.dtypes import FLOAT_TYPES, INDEX_TYPES, NON_STRING_TYPES, \
    as_dtype, int8, int16, int32, int64, uint16, uint32
from graphflow.errors import InvalidArgumentError
from graphflow.inference import EMPTY_BOUNDS, bounds_rule, constant_value, value_bounds
from graphflow.registry import BoolAttr, IntAttr, IntListAttr, ShapeAttr, TensorAttr, TypeAttr, \
    op_def, register_op, same_as_tf
from graphflow.shapes import TensorShape, debug_string

from .cpu_index import lower_view
from .shape_rules import same_shape_as

INT32_MAX = 2 ** 31 - 1
INT64_MAX = 2 ** 63 - 1

# -- Const -----------------------------------------------------------------------
Const = register_op(
    "Const", outputs=["output: dtype"], attrs={"value": TensorAttr(), "dtype": TypeAttr()},
    fresh_outputs=False, doc="A constant tensor. Its value is read-only and never modified.")


@Const.shape_fn
def _const_shape(ctx):
    """shape of `value`."""
    value = ctx.attr("value")
    if as_dtype(value.dtype) != ctx.attr("dtype"):
        raise ctx.error(f"Const value has dtype {as_dtype(value.dtype).name}, attr dtype is "
                        f"{ctx.attr('dtype').name}")
    return TensorShape(value.shape)


@Const.kernel("cpu")
def _const(ctx):
    return ctx.attrs["value"]


@Const.kernel("gpu", dtype=NON_STRING_TYPES)
def _const_gpu(ctx):
    """The value is copied to the device once per plan, then reused."""
    value = ctx.cache.get("value")
    if value is None:
        value = ctx.cache.setdefault("value", ctx.xp.asarray(ctx.attrs["value"]))
    return value


# -- Placeholder -------------------------------------------------------------------
Placeholder = register_op(
    "Placeholder", outputs=["output: dtype"],
    attrs={"dtype": TypeAttr(), "shape": ShapeAttr(None)}, fresh_outputs=False,
    doc="A value that must be fed when the graph runs; the feed is checked "
        "against dtype and (partial) shape.")


@Placeholder.shape_fn
def _placeholder_shape(ctx):
    """the `shape` attr (unknown rank if None)."""
    return ctx.attr("shape")


@Placeholder.kernel("cpu")
def _placeholder(ctx):
    shape = ctx.attrs["shape"]
    raise InvalidArgumentError(
        f"You must feed a value for placeholder tensor '{ctx.node_name}' with dtype "
        f"{ctx.attrs['dtype'].name}" + ("" if shape.rank is None else f" and shape {shape}"))


# -- Identity, NoOp ----------------------------------------------------------------
Identity = register_op("Identity", inputs=["input: T"], outputs=["output: T"],
                       attrs={"T": TypeAttr()}, fresh_outputs=False,
                       doc="The input, unchanged (no copy).")


Identity.shape_fn(same_shape_as("input"))


@Identity.kernel("cpu")
@Identity.kernel("gpu", T=NON_STRING_TYPES)
def _identity(ctx, x):
    return x


NoOp = register_op("NoOp", doc="Does nothing; useful as a target for control dependencies.")


@NoOp.kernel("cpu")
@NoOp.kernel("gpu")
def _no_op(ctx):
    return None


# -- Shape, Size, Rank -------------------------------------------------------------
Shape = register_op("Shape", inputs=["input: T"], outputs=["output: out_type"],
                    attrs={"T": TypeAttr(), "out_type": TypeAttr(INDEX_TYPES, int32)},
                    doc="The shape of `input` as a 1-D tensor.")


@Shape.shape_fn
def _shape_shape(ctx):
    """[rank(input)]."""
    return TensorShape([ctx.shape("input").rank])


@Shape.kernel("cpu")
@Shape.kernel("gpu", T=NON_STRING_TYPES)
def _shape(ctx, x):
    out_type = ctx.attrs["out_type"]
    if out_type == int32:
        for i, d in enumerate(x.shape):
            if d > INT32_MAX:
                raise InvalidArgumentError(f"Shape output type is 32-bit but dim {i} is {d}")
    return ctx.xp.array(x.shape, dtype=out_type.as_numpy_dtype)


Size = register_op("Size", inputs=["input: T"], outputs=["output: out_type"],
                   attrs={"T": TypeAttr(), "out_type": TypeAttr(INDEX_TYPES, int32)},
                   doc="The number of elements of `input` (a scalar).")


@Size.shape_fn
def _size_shape(ctx):
    """[] (a scalar)."""
    return TensorShape([])


@Size.kernel("cpu")
@Size.kernel("gpu", T=NON_STRING_TYPES)
def _size(ctx, x):
    out_type = ctx.attrs["out_type"]
    if out_type == int32 and x.size > INT32_MAX:
        raise InvalidArgumentError(
            "Number of elements was larger than representable by 32-bit output type")
    return ctx.xp.array(x.size, dtype=out_type.as_numpy_dtype)


Rank = register_op("Rank", inputs=["input: T"], outputs=["output: int32"],
                   attrs={"T": TypeAttr()}, doc="The rank of `input` (a scalar int32).")


@Rank.shape_fn
def _rank_shape(ctx):
    """[] (a scalar)."""
    return TensorShape([])


@Rank.kernel("cpu")
@Rank.kernel("gpu", T=NON_STRING_TYPES)
def _rank(ctx, x):
    return ctx.xp.array(x.ndim, dtype=np.int32)


# -- Reshape -----------------------------------------------------------------------
Reshape = register_op("Reshape", inputs=["tensor: T", "shape: Tshape"], outputs=["output: T"],
                      attrs={"T": TypeAttr(), "Tshape": TypeAttr(INDEX_TYPES, int32)},
                      fresh_outputs=False,
                      doc="`tensor` with the same elements in `shape`; one dim may be -1 (inferred).")


def reshaped_dims(input_dims: list | None, sizes: list[int], static: bool = False) -> list:
    """The output dims of Reshape: ``sizes`` (at most one -1, none below) with its -1
    filled in as TensorFlow's kernel does, wherever the input dims it needs are known
    (``input_dims`` None or a None dim: unknown at build time, ``static``). When
    ``sizes`` has a 0, the input's zero dims are left out of the count the -1 is
    inferred from, so reshape(zeros([0, 3]), [-1, 0]) is [3, 0] and [0, -1] is [0, 3].
    InvalidArgumentError when the element counts cannot agree."""
    out = [None if d == -1 else d for d in sizes]
    if input_dims is None:
        return out
    product = math.prod(d for d in sizes if d > 0)
    has_zero = 0 in sizes
    total = 0 if 0 in input_dims else (None if None in input_dims else math.prod(input_dims))
    if -1 in sizes:
        if has_zero:  # an unknown input dim may be one of the zeros left out: count unknown
            counted = [d for d in input_dims if d != 0]
            count = None if None in counted else math.prod(counted)
        else:
            count = total
        if count is not None:
            missing = count // product
            if not (has_zero and 0 in input_dims) and missing * product != count:
                shown = "[" + ",".join(str(d) for d in sizes) + "]"
                raise InvalidArgumentError(
                    f"Cannot reshape a tensor with {count} elements to shape {shown}: the number "
                    f"of elements is not a multiple of {product}" if static else
                    f"Input to reshape is a tensor with {count} values, but the requested shape "
                    f"requires a multiple of {product}")
            out[sizes.index(-1)] = missing
    if total is not None and None not in out and math.prod(out) != total:
        raise InvalidArgumentError(
            f"Cannot reshape a tensor with {total} elements to shape {debug_string(out)} "
            f"({math.prod(out)} elements)" if static else
            f"Input to reshape is a tensor with {total} values, but the requested shape has "
            f"{math.prod(out)}")
    return out


@Reshape.shape_fn
def _reshape_shape(ctx):
    """`shape`, with a -1 dim inferred as the kernel infers it wherever the input dims
    it needs are known."""
    target = ctx.shape_value("shape")
    shape_shape = ctx.shape("shape")
    if shape_shape.rank is not None and shape_shape.rank > 1:
        raise ctx.error(f"shape must be a vector, got shape {shape_shape}")
    if target.rank is None:
        return target
    value = ctx.value("shape")
    if value is not None and int(np.sum(value.reshape(-1) == -1)) > 1:
        raise ctx.error("Only one input size may be -1, not both "
                        + " and ".join(str(i) for i in np.flatnonzero(value == -1)))
    if value is None:
        return target  # dims from a Pack are final values, not -1 placeholders
    sizes = [int(d) for d in value.reshape(-1).tolist()]
    return TensorShape(reshaped_dims(ctx.shape("tensor").dims, sizes, static=True))


@Reshape.kernel("cpu")
@Reshape.kernel("gpu", T=NON_STRING_TYPES)
def _reshape(ctx, x, shape):
    if np.ndim(shape) != 1:
        raise InvalidArgumentError(f"sizes input must be 1-D, not {debug_string(np.shape(shape))}")
    dims = [int(d) for d in shape.tolist()]
    unknown = [i for i, d in enumerate(dims) if d == -1]
    if len(unknown) > 1:
        raise InvalidArgumentError(f"Only one input size may be -1, not both {unknown[0]} and "
                                   f"{unknown[1]}")
    for i, d in enumerate(dims):
        if d < -1:
            raise InvalidArgumentError(f"Size {i} must be non-negative, not {d}")
    return x.reshape(reshaped_dims(list(x.shape), dims))


def _prepare_view(spec):
    """A view whose output shape the plan knows (Reshape, ExpandDims): one reshape."""
    dims, out = spec.shape(0), spec.output_shape()
    if dims is None or out is None or math.prod(dims) != math.prod(out):
        return None
    return lambda ctx, x, _: x.reshape(out)


Reshape.prepare("cpu")(_prepare_view)
Reshape.lower("cpu")(lower_view)


# -- Range -------------------------------------------------------------------------
RANGE_TYPES = FLOAT_TYPES + (int8, int16, int32, int64, uint16, uint32)
Range = register_op("Range", inputs=["start: Tidx", "limit: Tidx", "delta: Tidx"],
                    outputs=["output: Tidx"], attrs={"Tidx": TypeAttr(RANGE_TYPES, int32)},
                    doc="[start, start + delta, ...] up to but excluding `limit`.")


def _range_size(start, limit, delta, dtype) -> int:
    """The length of range(start, limit, delta) of ``dtype``, as TensorFlow's kernel
    computes it (floats in the dtype's own precision; ints exactly, so nothing wraps),
    with its errors: also for NaN, which fails the order checks, and for a length past
    int64 (an infinite limit, or an absurdly small delta)."""
    if delta == 0:
        raise InvalidArgumentError(f"Requires delta != 0: {delta}")
    if delta > 0:
        if not start <= limit:
            raise InvalidArgumentError(f"Requires start <= limit when delta > 0: {start}/{limit}")
    elif not start >= limit:
        raise InvalidArgumentError(f"Requires start >= limit when delta < 0: {start}/{limit}")
    if dtype.is_integer:
        size = (abs(int(limit) - int(start)) + abs(int(delta)) - 1) // abs(int(delta))
    else:
        t = dtype.as_numpy_dtype.type
        with np.errstate(all="ignore"):
            size = np.ceil(np.abs((t(limit) - t(start)) / t(delta)))
        size = int(size) if np.isfinite(size) else INT64_MAX + 1
    if size > INT64_MAX:
        raise InvalidArgumentError(f"Requires ((limit - start) / delta) <= {INT64_MAX}")
    return size


@Range.shape_fn
def _range_shape(ctx):
    """[size] with size = ceil((limit - start) / delta), known when all three are constant."""
    for name in ("start", "limit", "delta"):
        rank = ctx.shape(name).rank
        if rank not in (None, 0):
            raise ctx.error(f"{name} must be a scalar, not shape {ctx.shape(name)}")
    values = [ctx.value(n) for n in ("start", "limit", "delta")]
    if any(v is None for v in values):
        return TensorShape([None])
    start, limit, delta = (v.item() for v in values)
    return TensorShape([_range_size(start, limit, delta, ctx.attr("Tidx"))])


@Range.kernel("cpu")
@Range.kernel("gpu")
def _range(ctx, start, limit, delta):
    dtype = ctx.attrs["Tidx"]
    for name, v in (("start", start), ("limit", limit), ("delta", delta)):
        if np.ndim(v) != 0:
            raise InvalidArgumentError(f"{name} must be a scalar, not shape {list(np.shape(v))}")
    s, l, d = start.item(), limit.item(), delta.item()
    n = _range_size(s, l, d, dtype)
    ctx.check_allocation(n, dtype.as_numpy_dtype)
    return _range_values(s, d, ctx.xp.arange(n, dtype=np.int64), dtype)


def _range_values(start, delta, index, dtype):
    """start + i * delta for the int64 indices ``index``, as TensorFlow's kernel computes
    it: in ``dtype`` (float32 rounds as float32; integers wrap as their type)."""
    t = dtype.as_numpy_dtype
    if dtype.is_floating:
        return t.type(start) + index.astype(t) * t.type(delta)
    return (start + index * delta).astype(t)


@bounds_rule("Range")
def _range_bounds(output):
    """The first and last element, computed as the kernel computes them, from constant
    start, limit and delta: a shape function learns them without building the range."""
    values = [constant_value(i) for i in output.op.inputs]
    if any(v is None or v.ndim != 0 for v in values):
        return None
    dtype = output.dtype
    s, l, d = (v.item() for v in values)
    try:
        n = _range_size(s, l, d, dtype)
    except InvalidArgumentError:
        return None  # the kernel raises it when the graph runs
    if n == 0:
        return EMPTY_BOUNDS
    first, last = _range_values(s, d, np.array([0, n - 1], np.int64), dtype).tolist()
    return (min(first, last), max(first, last))


# -- Cast --------------------------------------------------------------------------
Cast = register_op("Cast", inputs=["x: SrcT"], outputs=["y: DstT"],
                   attrs={"SrcT": TypeAttr(), "DstT": TypeAttr(), "Truncate": BoolAttr(False)},
                   doc="`x` converted to DstT (complex to real keeps the real part); floats "
                       "round to nearest, or toward zero with Truncate=True.")


Cast.shape_fn(same_shape_as("x"))


@Cast.kernel("cpu", SrcT=NON_STRING_TYPES, DstT=NON_STRING_TYPES)
@Cast.kernel("gpu", SrcT=NON_STRING_TYPES, DstT=NON_STRING_TYPES)
def _cast(ctx, x):
    dst = ctx.attrs["DstT"].as_numpy_dtype
    xp = ctx.xp
    if x.dtype.kind == "c" and dst.kind != "c":
        x = xp.real(x)
    if ctx.attrs["Truncate"] and x.dtype.kind in "fc" and dst.kind in "fc":
        x = _truncated(x, dst, xp)
    if dst == np.float16 and x.dtype in (np.float64, np.complex128):
        x = x.astype(np.float32)  # Eigen rounds double -> half through float: twice
    return x.astype(dst, copy=True)  # NaN to int and overflow: no warning, as in TF


def _truncated(x, dst: np.dtype, xp):
    """``x`` without the low significand bits ``dst`` cannot hold (NaN kept), so that the
    cast after it rounds toward zero: TensorFlow's Truncate=True. A complex ``x`` is
    cut in both parts. (TensorFlow cuts float64 -> complex64 by 53 bits, dropping an
    exponent bit too; this cuts it by 29, as float64 -> float32.)"""
    cut = np.finfo(x.dtype).nmant - np.finfo(dst).nmant
    if cut <= 0:
        return x
    if x.dtype.kind == "c":  # the pairs of floats under the complex numbers, all cut
        parts = xp.ascontiguousarray(x).reshape(-1).view(np.finfo(x.dtype).dtype)
        return _zero_low_bits(parts, cut, xp).view(x.dtype).reshape(x.shape)
    return _zero_low_bits(x, cut, xp)


def _zero_low_bits(x, n: int, xp):
    """The floats ``x`` with the ``n`` low bits of their representation cleared, NaN kept."""
    uint = np.dtype(f"u{x.dtype.itemsize}")
    keep = uint.type(((1 << (8 * x.dtype.itemsize)) - 1) ^ ((1 << n) - 1))
    cleared = (xp.ascontiguousarray(x).view(uint) & keep).view(x.dtype)
    return xp.where(xp.isnan(x), x, cleared)


# -- Fill, ZerosLike, OnesLike -----------------------------------------------------
Fill = register_op("Fill", inputs=["dims: index_type", "value: T"], outputs=["output: T"],
                   attrs={"T": TypeAttr(), "index_type": TypeAttr(INDEX_TYPES, int32)},
                   doc="A tensor of shape `dims` filled with the scalar `value`.")


@Fill.shape_fn
def _fill_shape(ctx):
    """the shape held by `dims`."""
    if ctx.shape("value").rank not in (None, 0):
        raise ctx.error(f"value must be a scalar, got shape {ctx.shape('value')}")
    if ctx.shape("dims").rank not in (None, 1):
        raise ctx.error(f"dims must be a vector, got shape {ctx.shape('dims')}")
    dims = ctx.value("dims")  # a constant's -1 is a negative dim here, not an unknown one
    if dims is not None and (dims < 0).any():
        raise ctx.error(f"Fill dimensions must be >= 0, got {dims.tolist()}")
    target = ctx.shape_value("dims")
    return target


@Fill.kernel("cpu")
@Fill.kernel("gpu", T=NON_STRING_TYPES)
def _fill(ctx, dims, value):
    if np.ndim(dims) != 1:
        raise InvalidArgumentError(f"dims must be a vector, got shape {list(np.shape(dims))}")
    if np.ndim(value) != 0:
        raise InvalidArgumentError(f"value must be a scalar, got shape {list(np.shape(value))}")
    shape = [int(d) for d in dims.tolist()]
    if any(d < 0 for d in shape):
        raise InvalidArgumentError(f"dims must be non-negative, got {shape}")
    ctx.check_allocation(math.prod(shape), value.dtype)  # exact: an int64 product may wrap
    return ctx.xp.full(shape, value, dtype=value.dtype)


@bounds_rule("Fill")
def _fill_bounds(output):
    """``value`` when the static shape says the output is not empty."""
    shape = output.shape
    if shape.rank is not None and 0 in shape.dims:
        return EMPTY_BOUNDS
    return value_bounds(output.op.inputs[1]) if shape.is_fully_defined() else None


ZerosLike = register_op("ZerosLike", inputs=["x: T"], outputs=["y: T"], attrs={"T": TypeAttr()},
                        doc="Zeros (empty strings, False) of the shape and dtype of `x`.")
OnesLike = register_op("OnesLike", inputs=["x: T"], outputs=["y: T"],
                       attrs={"T": TypeAttr(NON_STRING_TYPES)},
                       doc="Ones (True) of the shape and dtype of `x`.")


ZerosLike.shape_fn(same_shape_as("x"))
OnesLike.shape_fn(same_shape_as("x"))


@ZerosLike.kernel("cpu")
@ZerosLike.kernel("gpu", T=NON_STRING_TYPES)
def _zeros_like(ctx, x):
    ctx.check_allocation(x.size, x.dtype)  # x may be a broadcast view that owns little memory
    if ctx.attrs["T"].is_string:
        out = np.empty(np.shape(x), dtype=object)
        out.fill(b"")
        return out
    return ctx.xp.zeros_like(x)


@OnesLike.kernel("cpu")
@OnesLike.kernel("gpu")
def _ones_like(ctx, x):
    ctx.check_allocation(x.size, x.dtype)
    return ctx.xp.ones_like(x)


# -- ExpandDims, Squeeze -------------------------------------------------------------
ExpandDims = register_op("ExpandDims", inputs=["input: T", "dim: Tdim"], outputs=["output: T"],
                         attrs={"T": TypeAttr(), "Tdim": TypeAttr(INDEX_TYPES, int32)},
                         fresh_outputs=False, doc="`input` with a new dim of size 1 at `dim`.")


def _check_axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"{what} {axis} is out of range [{-rank}, {rank})")
    return axis % rank


def _check_dim_index(axis: int, rank: int, verb: str, limit: int) -> int:
    """``axis`` in ``[-limit, limit)`` as a non-negative index, or TensorFlow's error:
    "Tried to <verb> dim index 5 for tensor with 2 dimensions."."""
    if not -limit <= axis < limit:
        raise InvalidArgumentError(f"Tried to {verb} dim index {axis} for tensor with {rank} "
                                   f"dimensions.")
    return axis % limit


@ExpandDims.shape_fn
def _expand_dims_shape(ctx):
    """`input.shape` with 1 inserted at `dim` (in [-rank-1, rank])."""
    shape, dim = ctx.shape("input"), ctx.value("dim")
    if dim is None or shape.rank is None:
        return TensorShape(None if shape.rank is None else [None] * (shape.rank + 1))
    if dim.size != 1:
        raise ctx.error(f"'dim' must be a tensor with a single value, got {dim.tolist()}")
    axis = _check_dim_index(int(dim.reshape(-1)[0]), shape.rank, "expand", shape.rank + 1)
    dims = shape.as_list()
    return TensorShape(dims[:axis] + [1] + dims[axis:])


@ExpandDims.kernel("cpu")
@ExpandDims.kernel("gpu", T=NON_STRING_TYPES)
def _expand_dims(ctx, x, dim):
    if np.size(dim) != 1:
        raise InvalidArgumentError(f"'dim' must be a tensor with a single value, got {dim.tolist()}")
    axis = _check_dim_index(int(dim.reshape(-1)[0]), x.ndim, "expand", x.ndim + 1)
    return ctx.xp.expand_dims(x, axis)


ExpandDims.prepare("cpu")(_prepare_view)
ExpandDims.lower("cpu")(lower_view)


Squeeze = register_op("Squeeze", inputs=["input: T"], outputs=["output: T"],
                      attrs={"T": TypeAttr(), "squeeze_dims": IntListAttr(())},
                      fresh_outputs=False,
                      doc="`input` without its size-1 dims (only `squeeze_dims` if given).")


def _squeezed(dims: list, axes: tuple, exact: bool) -> list:
    rank = len(dims)
    if axes:
        wanted = {_check_dim_index(a, rank, "squeeze", rank) for a in axes}
        for a in sorted(wanted):
            if dims[a] is not None and dims[a] != 1:
                raise InvalidArgumentError(
                    f"Can not squeeze dim[{a}], expected a dimension of 1, got {dims[a]}")
        return [d for i, d in enumerate(dims) if i not in wanted]
    if not exact and None in dims:
        return None
    return [d for d in dims if d != 1]


@Squeeze.shape_fn
def _squeeze_shape(ctx):
    """`input.shape` without the size-1 dims named by `squeeze_dims` (all if empty)."""
    shape = ctx.shape("input")
    if shape.rank is None:
        return TensorShape(None)
    return TensorShape(_squeezed(shape.as_list(), ctx.attr("squeeze_dims"), exact=False))


@Squeeze.kernel("cpu")
@Squeeze.kernel("gpu", T=NON_STRING_TYPES)
def _squeeze(ctx, x):
    dims = _squeezed(list(x.shape), ctx.attrs["squeeze_dims"], exact=True)
    return x.reshape(dims)


Squeeze.lower("cpu")(lower_view)


# -- ConcatV2, Pack ------------------------------------------------------------------
ConcatV2 = register_op("ConcatV2", inputs=["values: N * T", "axis: Tidx"], outputs=["output: T"],
                       attrs={"N": IntAttr(minimum=2), "T": TypeAttr(),
                              "Tidx": TypeAttr(INDEX_TYPES, int32)},
                       aliases=("concat",), doc="`values` joined along `axis`.")


@ConcatV2.shape_fn
def _concat_shape(ctx):
    """inputs agree in rank and in every dim but `axis`; output[axis] = sum of theirs."""
    shapes = ctx.shape("values")
    axis_value = ctx.value("axis")
    rank = next((s.rank for s in shapes if s.rank is not None), None)
    for i, s in enumerate(shapes):
        if s.rank is not None and s.rank != rank:
            raise ctx.error(f"Shape must be rank {rank} but is rank {s.rank} for values[{i}]")
    if rank is None:
        return TensorShape(None)
    if rank == 0:
        raise ctx.error("Can't concatenate scalars (use tf.stack instead)")
    if axis_value is None:
        return TensorShape.unknown(rank)
    axis = _concat_axis(int(axis_value), rank)
    out = [None] * rank
    total = 0
    for i, s in enumerate(shapes):
        for d in range(rank):
            if d == axis:
                continue
            a, b = out[d], s[d]
            if a is not None and b is not None and a != b:
                raise ctx.error(f"Dimension {d} in both shapes must be equal: shape[0] = "
                                f"{shapes[0]} vs. shape[{i}] = {s}")
            out[d] = a if a is not None else b
        total = None if total is None or s[axis] is None else total + s[axis]
    out[axis] = total
    return TensorShape(out)


def _concat_axis(axis: int, rank: int) -> int:
    """``axis`` in [0, rank), from [-rank, rank) (TensorFlow's ConcatOp message)."""
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"ConcatOp : Expected concatenating dimensions in the "
                                   f"range [{-rank}, {rank}), but got {axis}")
    return axis % rank


@ConcatV2.kernel("cpu")
@ConcatV2.kernel("gpu", T=NON_STRING_TYPES)
def _concat(ctx, values, axis):
    rank = np.ndim(values[0])
    if rank == 0:
        raise InvalidArgumentError("Can't concatenate scalars (use tf.stack instead)")
    a = _concat_axis(int(axis), rank)
    for i, v in enumerate(values[1:], 1):
        if np.ndim(v) != rank or any(np.shape(v)[d] != np.shape(values[0])[d]
                                     for d in range(rank) if d != a):
            raise InvalidArgumentError(
                f"ConcatOp : Dimension mismatch in shape [0] = {debug_string(np.shape(values[0]))} "
                f"vs. shape[{i}] = {debug_string(np.shape(v))}")
    return ctx.xp.concatenate(values, axis=a)


Pack = register_op("Pack", inputs=["values: N * T"], outputs=["output: T"],
                   attrs={"N": IntAttr(minimum=1), "T": TypeAttr(), "axis": IntAttr(0)},
                   aliases=("stack",), doc="`values` (all of one shape) stacked along a new `axis`.")


@Pack.shape_fn
def _pack_shape(ctx):
    """all inputs have one shape S; output = S with N inserted at `axis`."""
    shapes = ctx.shape("values")
    merged = TensorShape(None)
    for i, s in enumerate(shapes):
        if not merged.is_compatible_with(s):
            raise ctx.error(f"Shapes of all inputs must match: values[0].shape = {shapes[0]} "
                            f"!= values[{i}].shape = {s}")
        merged = merged.merge_with(s)
    if merged.rank is None:
        return TensorShape(None)
    axis = _check_axis(ctx.attr("axis"), merged.rank + 1, "Pack axis")
    dims = merged.as_list()
    return TensorShape(dims[:axis] + [len(shapes)] + dims[axis:])


@Pack.kernel("cpu")
@Pack.kernel("gpu", T=NON_STRING_TYPES)
def _pack(ctx, values):
    first = np.shape(values[0])
    for i, v in enumerate(values[1:], 1):
        if np.shape(v) != first:
            raise InvalidArgumentError(
                f"Shapes of all inputs must match: values[0].shape = {debug_string(first)} != "
                f"values[{i}].shape = {debug_string(np.shape(v))}")
    axis = _check_axis(ctx.attrs["axis"], len(first) + 1, "Pack axis")
    return ctx.xp.stack(values, axis=axis)


# -- gradients -------------------------------------------------------------------------
def _shape_of(scope, t):
    """``t``'s shape: a constant when static, else a Shape node."""
    return t.shape.as_list() if t.shape.is_fully_defined() else scope.shape(t)


@Identity.gradient
def _identity_grad(g, grad):
    return [grad]


@Cast.gradient
def _cast_grad(g, grad):
    """Between float and complex types: the gradient cast back (complex -> real keeps
    the real part, which is dL/dRe). Through integers and bools: None."""
    src, dst = g.attr("SrcT"), g.attr("DstT")
    if not (src.is_floating or src.is_complex) or not (dst.is_floating or dst.is_complex):
        return [None]
    return [g.scope.cast(grad, DstT=src)]


@Reshape.gradient
def _reshape_grad(g, grad):
    return [g.scope.reshape(grad, _shape_of(g.scope, g.op.inputs[0])), None]


@ExpandDims.gradient
def _expand_dims_grad(g, grad):
    return [g.scope.reshape(grad, _shape_of(g.scope, g.op.inputs[0])), None]


@Squeeze.gradient
def _squeeze_grad(g, grad):
    return [g.scope.reshape(grad, _shape_of(g.scope, g.op.inputs[0]))]


@Pack.gradient
def _pack_grad(g, grad):
    return list(g.scope.unpack(grad, num=g.attr("N"), axis=g.attr("axis")))


@ConcatV2.gradient
def _concat_grad(g, grad):
    """Each input's part of ``grad``: a Slice at its offset along ``axis``."""
    s = g.scope
    *values, axis = g.op.inputs
    axis_value = constant_value(axis)
    rank = grad.shape.rank
    if axis_value is None or rank is None:
        return _concat_grad_at_run_time(s, grad, values, axis) + [None]
    axis_value = int(axis_value) % rank
    sizes = [v.shape[axis_value] for v in values]
    if all(n is not None for n in sizes):
        begins = np.cumsum([0] + sizes[:-1]).tolist()
        parts = []
        for begin, n in zip(begins, sizes):
            start = [0] * rank
            start[axis_value] = begin
            size = [-1] * rank
            size[axis_value] = n
            parts.append(s.slice(grad, start, size))
        return parts + [None]
    offset = s.constant(0, dtype=int32)
    parts = []
    for v in values:
        n = s.reshape(s.slice(s.shape(v), [axis_value], [1]), [1])
        start = s.scatter_nd([[axis_value]], s.reshape(offset, [1]), [rank])
        size = s.tensor_scatter_update(s.fill([rank], -1), [[axis_value]], n)
        parts.append(s.slice(grad, start, size))
        offset = s.add(offset, s.reshape(n, []))
    return parts + [None]


def _concat_grad_at_run_time(s, grad, values, axis):
    """ConcatV2's gradient when the axis or the rank is known only at run time."""
    rank = s.rank(grad)
    axis = axis if axis.dtype == int32 else s.cast(axis, int32)
    axis = s.select_v2(s.less(axis, 0), s.add(axis, rank), axis)
    at, dims = s.reshape(axis, [1, 1]), s.reshape(rank, [1])
    offset, parts = s.constant([0], dtype=int32), []
    for v in values:
        n = s.slice(s.shape(v), s.reshape(axis, [1]), [1])
        start = s.scatter_nd(at, offset, dims)
        size = s.tensor_scatter_update(s.fill(dims, -1), at, n)
        parts.append(s.reshape(s.slice(grad, start, size), _shape_of(s, v)))
        offset = s.add(offset, n)
    return parts


@Fill.gradient
def _fill_grad(g, grad):
    return [None, g.scope.reduce_sum(grad)]


for _op in (Const, Placeholder, NoOp, Shape, Size, Rank, Range, ZerosLike, OnesLike):
    _op.not_differentiable()


# -- StopGradient ----------------------------------------------------------------------
StopGradient = register_op(
    "StopGradient", inputs=["input: T"], outputs=["output: T"], attrs={"T": TypeAttr()},
    fresh_outputs=False, doc="The input, unchanged (no copy); no gradient flows through it.")
StopGradient.shape_fn(same_shape_as("input"))
StopGradient.kernel("cpu")(_identity)
StopGradient.kernel("gpu", T=NON_STRING_TYPES)(_identity)
StopGradient.not_differentiable()


for _name in ("Shape", "Size", "Rank", "ZerosLike", "OnesLike"):
    op_def(_name).shape_only = True  # folded from a static shape (runtime/folding.py)
op_def("Const").hoistable = True
for _name in ("Reshape", "Squeeze", "ExpandDims"):
    op_def(_name).identity_when_same_shape = True  # dropped by the plan's simplification
    op_def(_name).fails_by_shape_only = True  # its shape function checks what it would


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("Const", "Placeholder", "Identity", "NoOp", "Shape", "Size", "Rank", "Reshape",
           "Range", "Cast", "Fill", "ZerosLike", "OnesLike", "ExpandDims", "Squeeze", "ConcatV2",
           "Pack", "StopGradient")
