"""Selection ops, with TensorFlow 2.21's semantics: ArgMax, ArgMin, TopKV2, OneHot, Where
(the indices of true elements), Split, SplitV and Unique, and their TF-named builders
``argmax``, ``argmin``, ``top_k``, ``one_hot``, ``where``, ``split`` (hand-written Scope
methods with TF's argument names and order).

Every kernel is written against the device's array module (``ctx.xp``: numpy, or cupy on
a GPU), so the CPU and GPU kernels are one function; strings stay on the CPU.

Choices where TensorFlow leaves room:

- ArgMax/ArgMin, NaN: TF's CPU kernel runs Eigen's pair reducer, which keeps the first
  index of the largest value it has seen starting from ``lowest()``; a NaN compares
  false both ways and never wins. So here a NaN (and -inf, which cannot beat
  ``lowest()``) counts as ``lowest()`` (ArgMin: ``highest()``): ``argmax([nan, 1.0])``
  is 1 and a row of NaNs gives 0, where numpy's argmax would give the first NaN. Ties
  give the first index, as TF.
- TopKV2: ties give the lower index first (TF's comparator); NaN ranks above +inf (the
  order of numpy's and cupy's sorts, reversed), except for k == 1, which is TF's argmax
  path, where a NaN never wins; ``sorted=False`` returns them sorted too (TF leaves that
  order unspecified).
- Unique: first-occurrence order; NaNs are all distinct (TF's hash map compares with
  ``==``), 0.0 and -0.0 are one value (the first seen).
"""
from __future__ import annotations

import math

import numpy as np

from graphflow.builder import as_operand
from graphflow.dtypes import ALL_TYPES, INDEX_TYPES, NON_STRING_TYPES, NUMBER_TYPES, \
    REAL_NUMBER_TYPES, as_dtype, bool_, float32, int8, int16, int32, int64, \
    uint8, uint16
from graphflow.errors import InvalidArgumentError
from graphflow.graph import Output
from graphflow.registry import BoolAttr, IntAttr, TypeAttr, register_op, same_as_tf
from graphflow.scope import Scope
from graphflow.shapes import TensorShape, debug_string


def _check_scalar_input(ctx, name: str) -> None:
    """A shape function's error for an input that must be a scalar."""
    rank = ctx.shape(name).rank
    if rank not in (None, 0):
        raise ctx.error(f"Shape must be rank 0 but is rank {rank} for {name}")


def _int_value(ctx, name: str) -> int | None:
    """A constant scalar input's value at build time, else None."""
    value = ctx.value(name)
    return None if value is None or np.ndim(value) else int(value)


# -- ArgMax / ArgMin ---------------------------------------------------------------------------
def _arg_op(name: str, doc: str, index_types):
    """ArgMax or ArgMin; ``index_types``: TF's Tidx and output_type lists (ArgMax's
    has int16 and uint16 beside int32 and int64, ArgMin's not)."""
    return register_op(
        name, inputs=["input: T", "dimension: Tidx"], outputs=["output: output_type"],
        attrs={"T": TypeAttr(NUMBER_TYPES + (bool_,)),
               "Tidx": TypeAttr(tuple(t for t in index_types if t != uint16), int32),
               "output_type": TypeAttr(index_types, int64)},
        doc=doc + " The dim `dimension` (a scalar, negative from the end) is dropped; ties "
        "give the first index; a NaN never wins (Eigen's reducer, as TF's CPU kernel: it "
        "counts as the dtype's lowest value for ArgMax, highest for ArgMin).")


ArgMax = _arg_op("ArgMax", "The index of the largest value of `input` along `dimension`.",
                 (int16, uint16, int32, int64))
ArgMin = _arg_op("ArgMin", "The index of the smallest value of `input` along `dimension`.",
                 (int32, int64))


@ArgMax.shape_fn
@ArgMin.shape_fn
def _arg_shape(ctx):
    """input.shape without `dimension`; with `dimension` unknown, the rank only."""
    _check_scalar_input(ctx, "dimension")
    shape, dim = ctx.shape("input"), _int_value(ctx, "dimension")
    if shape.rank is None:
        return TensorShape(None)
    if dim is None:
        return TensorShape.unknown(max(shape.rank - 1, 0))
    rank = shape.rank
    axis = dim + rank if dim < 0 else dim
    if not 0 <= axis < rank:
        raise ctx.error(f"Dimension ({dim}) must be in the range [{-rank}, {rank}), where "
                        f"{rank} is the number of dimensions in the input.")
    return TensorShape([d for i, d in enumerate(shape.as_list()) if i != axis])


def _arg_axis(x, dimension) -> int:
    """TF's run-time checks of ArgMax/ArgMin; the axis in [0, rank)."""
    if dimension.ndim != 0:
        raise InvalidArgumentError(f"dim must be a scalar, but received tensor of shape: "
                                   f"{debug_string(dimension.shape)}")
    dim, rank = int(dimension), x.ndim
    axis = dim + rank if dim < 0 else dim
    if not 0 <= axis < rank:
        raise InvalidArgumentError(f"Expected dimension in the range [{-rank}, {rank}), but got "
                                   f"{dim}")
    if x.shape[axis] == 0:
        raise InvalidArgumentError(f"Reduction axis {dim} is empty in shape "
                                   f"{debug_string(x.shape)}")
    return axis


def _ranked(xp, x, largest: bool):
    """``x`` as Eigen's pair reducer sees it: for floats, NaN (and what cannot beat the
    reducer's start, -inf for ArgMax) becomes lowest() (ArgMin: highest())."""
    if x.dtype.kind != "f":
        return x
    info = np.finfo(x.dtype)
    if largest:
        return xp.where(x >= info.min, x, info.min)
    return xp.where(x <= info.max, x, info.max)


def _arg_kernel(op, largest: bool) -> None:
    """ArgMax's (``largest``) or ArgMin's kernel on every device."""
    @op.kernel("cpu", T=REAL_NUMBER_TYPES + (bool_,))
    @op.kernel("gpu", T=REAL_NUMBER_TYPES + (bool_,))
    def _kernel(ctx, x, dimension):
        axis = _arg_axis(x, dimension)
        find = ctx.xp.argmax if largest else ctx.xp.argmin
        found = find(_ranked(ctx.xp, x, largest), axis=axis)
        return found.astype(ctx.attrs["output_type"].as_numpy_dtype)
    _kernel.__name__ = _kernel.__qualname__ = "_argmax" if largest else "_argmin"


_arg_kernel(ArgMax, largest=True)
_arg_kernel(ArgMin, largest=False)


def argmax(self: Scope, input, axis=None, output_type=int64, name: str | None = None) -> Output:
    """TF's ``tf.math.argmax``: ArgMax along ``axis`` (0 when None)."""
    return self.create_op(ArgMax, input, 0 if axis is None else axis,
                          output_type=output_type, name=name)


def argmin(self: Scope, input, axis=None, output_type=int64, name: str | None = None) -> Output:
    """TF's ``tf.math.argmin``: ArgMin along ``axis`` (0 when None)."""
    return self.create_op(ArgMin, input, 0 if axis is None else axis,
                          output_type=output_type, name=name)


# -- TopKV2 ----------------------------------------------------------------------------------
TopKV2 = register_op(
    "TopKV2", inputs=["input: T", "k: Tk"], outputs=["values: T", "indices: index_type"],
    attrs={"sorted": BoolAttr(True), "T": TypeAttr(REAL_NUMBER_TYPES),
           "Tk": TypeAttr((int16, int32, int64), int32),
           "index_type": TypeAttr((int16, int32, int64), int32)},
    doc="The k largest values along the last dim of `input`, largest first, and their "
        "indices; ties give the lower index first, NaN ranks above +inf. k must be in "
        "[0, input.shape[-1]].")


@TopKV2.shape_fn
def _top_k_shape(ctx):
    """input.shape with its last dim k; input has rank >= 1 and last dim >= k."""
    _check_scalar_input(ctx, "k")
    shape, k = ctx.shape("input"), _int_value(ctx, "k")
    if shape.rank is not None and shape.rank < 1:
        raise ctx.error(f"Shape must be at least rank 1 but is rank {shape.rank} for input")
    if k is not None and k < 0:
        raise ctx.error(f"Need k >= 0, got {k}")
    if shape.rank is None:
        return [TensorShape(None)] * 2
    last = shape[-1]
    if k is not None and last is not None and last < k:
        raise ctx.error(f"input must have last dimension >= k = {k} but is {last}")
    out = TensorShape(shape.as_list()[:-1] + [k])
    return [out, out]


def _top_k_count(x, k) -> int:
    if k.ndim != 0:
        raise InvalidArgumentError(f"k must be scalar, got shape {debug_string(k.shape)}")
    k = int(k)
    if k < 0:
        raise InvalidArgumentError(f"Need k >= 0, got {k}")
    if x.ndim < 1:
        raise InvalidArgumentError(f"input must be >= 1-D, got shape {debug_string(x.shape)}")
    if x.shape[-1] < k:
        raise InvalidArgumentError(f"input must have at least k columns. Had {x.shape[-1]}, "
                                   f"needed {k}")
    return k


@TopKV2.kernel("cpu")
@TopKV2.kernel("gpu")
def _top_k(ctx, x, k):
    """One stable sort of the reversed rows (descending, lower index first on ties);
    k == 1 is TF's own k == 1 path, ArgMax's rule: a NaN never wins (the first largest
    number does; a row of NaNs gives index 0)."""
    xp = ctx.xp
    k = _top_k_count(x, k)
    index_type = ctx.attrs["index_type"].as_numpy_dtype
    n = x.shape[-1]
    if k == 0 or x.size == 0:
        shape = x.shape[:-1] + (k,)
        return [xp.empty(shape, x.dtype), xp.empty(shape, index_type)]
    if k == 1:
        top = xp.expand_dims(xp.argmax(_ranked(xp, x, True), axis=-1), -1)
    else:
        ascending = xp.argsort(x[..., ::-1], axis=-1, kind="stable")
        top = (n - 1) - ascending[..., ::-1][..., :k]
    return [xp.take_along_axis(x, top, axis=-1), top.astype(index_type)]


@TopKV2.prepare("cpu")
def _prepare_top_k(spec):
    """A constant k in [2, MAX_K] over static rows of a dtype numba compiles: one scan
    of each row (ops/top_k_loop.py), the same order as the sort, once compiled."""
    from .jit import jittable
    from .tiering import Tiered
    from .top_k_loop import MAX_K, top_k_rows
    shape, k = spec.shape(0), spec.value(1)
    if shape is None or not shape or k is None or np.ndim(k) != 0:
        return None
    k, dtype = int(k), spec.dtype(0)
    index_type = np.dtype(spec.attrs["index_type"].as_numpy_dtype)
    if not 2 <= k <= min(MAX_K, shape[-1]) or not jittable(dtype) or dtype.kind == "b" \
            or shape[-1] > np.iinfo(index_type).max or math.prod(shape) == 0:
        return None
    rows, out = math.prod(shape[:-1]), shape[:-1] + (k,)
    new_values, new_indices = spec.allocator(out, dtype), spec.allocator(out, index_type)
    compiled = Tiered(top_k_rows)

    def lean(ctx, x, k_value):
        values, indices = new_values(), new_indices()
        args = (np.ascontiguousarray(x).reshape(rows, shape[-1]), k,
                values.reshape(rows, k), indices.reshape(rows, k))
        if not compiled.ready(*args):
            return _top_k(ctx, x, k_value)
        top_k_rows(*args)
        return [values, indices]
    return lean


def top_k(self: Scope, input, k=1, sorted: bool = True, name: str | None = None) -> tuple:
    """TF's ``tf.math.top_k``: ``(values, indices)`` of the k largest along the last dim
    (int32 indices)."""
    values, indices = self.create_op(TopKV2, input, k, sorted=sorted, name=name)
    return values, indices


@TopKV2.gradient
def _top_k_grad(g, grad_values, _grad_indices):
    """TF's ``_TopKGrad``: the values' gradient scattered back to the positions they came
    from, row by row (flat offsets row * n + index), in the input's shape."""
    s = g.scope
    x, indices = g.op.inputs[0], g.op.outputs[1]
    if indices.dtype != int32:
        indices = s.cast(indices, int32)
    in_shape, ind_shape = s.shape(x), s.shape(indices)
    last = s.sub(s.size(in_shape), 1)
    n = s.gather_v2(in_shape, last, 0)
    k = s.gather_v2(ind_shape, last, 0)
    rows = s.create_op("Prod", s.slice(in_shape, np.array([0], np.int32), s.expand_dims(last, 0)),
                       np.array([0], np.int32))
    ind_2d = s.reshape(indices, s.pack([rows, k]))
    offsets = s.expand_dims(s.mul(s.range(0, rows, 1), n), -1)
    flat = s.reshape(s.add(ind_2d, offsets), np.array([-1], np.int32))
    scattered = s.scatter_nd(s.expand_dims(flat, -1), s.reshape(grad_values, np.array([-1], np.int32)),
                             s.expand_dims(s.mul(rows, n), 0))
    return [s.reshape(scattered, in_shape), None]


# -- OneHot ----------------------------------------------------------------------------------
OneHot = register_op(
    "OneHot", inputs=["indices: TI", "depth: int32", "on_value: T", "off_value: T"],
    outputs=["output: T"],
    attrs={"axis": IntAttr(-1), "T": TypeAttr(), "TI": TypeAttr((uint8, int8, int32, int64), int64)},
    doc="on_value where the new dim `axis` (-1: last) equals indices, off_value elsewhere; "
        "an index outside [0, depth) gives a row of off_value.")


@OneHot.shape_fn
def _one_hot_shape(ctx):
    """indices.shape with depth inserted at axis (-1: at the end)."""
    axis = ctx.attr("axis")
    if axis < -1:
        raise ctx.error("axis must be >= -1")
    for name in ("depth", "on_value", "off_value"):
        _check_scalar_input(ctx, name)
    depth = _int_value(ctx, "depth")
    if depth is not None and depth < 0:
        raise ctx.error(f"Dimension size, given by scalar input 1, must be non-negative but "
                        f"is {depth}")
    indices = ctx.shape("indices")
    if indices.rank is None:
        return TensorShape(None)
    if axis > indices.rank:
        raise ctx.error(f"Expected axis to be -1 or between [0, {indices.rank + 1}).  But "
                        f"received: {axis}")
    dims = indices.as_list()
    dims.insert(indices.rank if axis == -1 else axis, depth)
    return TensorShape(dims)


@OneHot.kernel("cpu")
@OneHot.kernel("gpu", T=NON_STRING_TYPES)
def _one_hot(ctx, indices, depth, on_value, off_value):
    xp, axis = ctx.xp, ctx.attrs["axis"]
    rank = indices.ndim + 1
    if not (axis == -1 or 0 <= axis < rank):
        raise InvalidArgumentError(f"Expected axis to be -1 or between [0, {rank}).  But "
                                   f"received: {axis}")
    for what, value in (("depth", depth), ("on_value", on_value), ("off_value", off_value)):
        if value.ndim != 0:
            raise InvalidArgumentError(f"{what} must be a scalar, but got: "
                                       f"{debug_string(value.shape)}")
    depth = int(depth)
    if depth < 0:
        raise InvalidArgumentError(f"depth must be non-negative, got: {depth}")
    axis = indices.ndim if axis == -1 else axis
    ctx.check_allocation(indices.size * depth, on_value.dtype)
    positions = xp.arange(depth, dtype=np.int64).reshape(
        tuple(depth if i == axis else 1 for i in range(rank)))
    hit = xp.expand_dims(indices.astype(np.int64), axis) == positions
    return xp.where(hit, on_value, off_value)


def _converted(scope: Scope, value, dtype):
    """TF's ``convert_to_tensor(value, dtype_hint=dtype)``: an Output as it is, else a
    constant of ``dtype`` when the value converts to it, else of its own dtype."""
    out = as_operand(value)
    if out is not None:
        return out
    if dtype is not None:
        try:
            return scope.constant(value, dtype=dtype)
        except (TypeError, ValueError):
            pass
    return scope.constant(value)


def one_hot(self: Scope, indices, depth, on_value=None, off_value=None, axis=None, dtype=None,
            name: str | None = None) -> Output:
    """TF's ``tf.one_hot``: dtype from on_value / off_value when given (they must agree
    with each other and with ``dtype``), else ``dtype``, else float32; on_value defaults
    to 1 and off_value to 0; axis defaults to -1."""
    helpers = self.without_op_name()
    dtype = as_dtype(dtype) if dtype is not None else None
    on = _converted(helpers, on_value, dtype) if on_value is not None else None
    off = _converted(helpers, off_value, dtype) if off_value is not None else None
    for what, given in (("on_value", on), ("off_value", off)):
        if given is not None and dtype is not None and given.dtype != dtype:
            raise TypeError(f"dtype {given.dtype} of {what} does not match dtype parameter "
                            f"{dtype}")
    if dtype is None:
        dtype = on.dtype if on is not None else off.dtype if off is not None else float32
    on = on if on is not None else helpers.constant(1, dtype=dtype)
    off = off if off is not None else helpers.constant(0, dtype=dtype)
    if on.dtype != off.dtype:
        raise TypeError(f"dtype {on.dtype} of on_value does not match dtype {off.dtype} of "
                        f"off_value")
    return self.create_op(OneHot, indices, depth, on, off, axis=-1 if axis is None else axis,
                          name=name)


# -- Where -----------------------------------------------------------------------------------
Where = register_op(
    "Where", inputs=["input: T"], outputs=["index: int64"],
    attrs={"T": TypeAttr(NUMBER_TYPES + (bool_,), bool_)},
    doc="The coordinates of the true (non-zero) elements of `input`, in row-major order: "
        "int64 [n, rank(input)].")


@Where.shape_fn
def _where_shape(ctx):
    """[None, rank(input)]."""
    return TensorShape([None, ctx.shape("input").rank])


@Where.kernel("cpu")
@Where.kernel("gpu")
def _where(ctx, x):
    return ctx.xp.argwhere(x).astype(np.int64)


def where(self: Scope, condition, x=None, y=None, name: str | None = None) -> Output:
    """TF's ``tf.where``: with ``condition`` alone the int64 [n, rank] coordinates of its
    true elements (Where); with ``x`` and ``y`` the element-wise select, broadcasting
    (SelectV2)."""
    if x is None and y is None:
        return self.create_op(Where, _converted(self.without_op_name(), condition, bool_),
                              name=name)
    if x is None or y is None:
        raise ValueError("x and y must both be non-None or both be None.")
    return self.select_v2(condition, x, y, name=name)


# -- Split / SplitV --------------------------------------------------------------------------
Split = register_op(
    "Split", inputs=["split_dim: int32", "value: T"], outputs=["output: num_split * T"],
    attrs={"num_split": IntAttr(minimum=1), "T": TypeAttr()}, fresh_outputs=False,
    doc="`value` cut along `split_dim` into num_split equal parts (views of it); the dim "
        "must divide evenly.")

SplitV = register_op(
    "SplitV", inputs=["value: T", "size_splits: Tlen", "split_dim: int32"],
    outputs=["output: num_split * T"],
    attrs={"num_split": IntAttr(minimum=1), "T": TypeAttr(),
           "Tlen": TypeAttr((int8, int32, int64), int64)}, fresh_outputs=False,
    doc="`value` cut along `split_dim` into parts of the sizes in `size_splits` (views of "
        "it); one size may be -1 (the rest); the sizes must add up to the dim.")


def _split_axis(dim: int, rank: int) -> int:
    """TF's split_dim check: a dim in [-rank, rank), negative from the end."""
    axis = dim + rank if dim < 0 else dim
    if not 0 <= axis < rank:
        raise InvalidArgumentError(f"-input rank(-{rank}) <= split_dim < input rank ({rank}), "
                                   f"but got {dim}")
    return axis


def _even_parts(size: int, num: int, axis: int) -> int:
    if size % num:
        raise InvalidArgumentError(
            f"Number of ways to split should evenly divide the split dimension, but got "
            f"split_dim {axis} (size = {size}) and num_split {num}")
    return size // num


def _split_sizes(sizes: list[int], num: int, total: int | None) -> list[int | None]:
    """TF's SplitV size checks; the one -1 resolved when ``total`` is known."""
    if len(sizes) != num:
        raise InvalidArgumentError(f"size of the split_tensor must be 1-D and have the same "
                                   f"elements as outputs got 1 -D and {len(sizes)} elements")
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1:
        raise InvalidArgumentError("There can only be one -1 in the input.")
    determined = sum(s for s in sizes if s != -1)
    if total is not None and not ((not unknown and determined == total)
                                  or (unknown and determined <= total)):
        raise InvalidArgumentError(
            f"Determined shape must either match input shape along split_dim exactly if fully "
            f"specified, or be less than the size of the input along split_dim if not fully "
            f"specified.  Got: {determined}")
    sizes = list(sizes)
    if unknown:
        sizes[unknown[0]] = None if total is None else total - determined
    for i, s in enumerate(sizes):
        if s is not None and s < 0:
            raise InvalidArgumentError(f"Split size at index {i} must be >= 0. Got: {s}")
    return sizes


@Split.shape_fn
def _split_shape(ctx):
    """value.shape with the split dim divided by num_split (which must divide it)."""
    _check_scalar_input(ctx, "split_dim")
    num, shape, dim = ctx.attr("num_split"), ctx.shape("value"), _int_value(ctx, "split_dim")
    if shape.rank is None:
        return [TensorShape(None)] * num
    if dim is None:
        return [TensorShape.unknown(shape.rank)] * num
    try:
        axis = _split_axis(dim, shape.rank)
        dims = shape.as_list()
        if dims[axis] is not None:
            dims[axis] = _even_parts(dims[axis], num, axis)
    except InvalidArgumentError as e:
        raise ctx.error(e.message) from None
    return [TensorShape(dims)] * num


@SplitV.shape_fn
def _split_v_shape(ctx):
    """value.shape with the split dim replaced by each size (a -1 resolved when the dim is
    known); the sizes must add up to the dim."""
    _check_scalar_input(ctx, "split_dim")
    num, shape, dim = ctx.attr("num_split"), ctx.shape("value"), _int_value(ctx, "split_dim")
    sizes = ctx.value("size_splits")
    if shape.rank is None:
        return [TensorShape(None)] * num
    if dim is None:
        return [TensorShape.unknown(shape.rank)] * num
    try:
        axis = _split_axis(dim, shape.rank)
        parts = [None] * num if sizes is None else \
            _split_sizes(np.asarray(sizes).reshape(-1).tolist(), num, shape[axis])
    except InvalidArgumentError as e:
        raise ctx.error(e.message) from None
    dims = shape.as_list()
    return [TensorShape(dims[:axis] + [p] + dims[axis + 1:]) for p in parts]


def _split_dim_value(split_dim) -> int:
    if split_dim.ndim != 0:
        raise InvalidArgumentError(f"split_dim must be a scalar but has rank {split_dim.ndim}")
    return int(split_dim)


@Split.kernel("cpu")
@Split.kernel("gpu", T=NON_STRING_TYPES)
def _split(ctx, split_dim, value):
    num = ctx.attrs["num_split"]
    axis = _split_axis(_split_dim_value(split_dim), value.ndim)
    _even_parts(value.shape[axis], num, axis)
    return list(ctx.xp.split(value, num, axis=axis))


@SplitV.kernel("cpu")
@SplitV.kernel("gpu", T=NON_STRING_TYPES)
def _split_v(ctx, value, size_splits, split_dim):
    num = ctx.attrs["num_split"]
    if size_splits.ndim != 1:
        raise InvalidArgumentError(f"size of the split_tensor must be 1-D and have the same "
                                   f"elements as outputs got {size_splits.ndim} -D and "
                                   f"{size_splits.size} elements")
    axis = _split_axis(_split_dim_value(split_dim), value.ndim)
    if num == 1 and size_splits.size == 1 and int(size_splits[0]) != value.shape[axis]:
        raise InvalidArgumentError(  # TF's first easy case: no -1 resolved for one part
            f"If there is only one output, it must have the same size as the input. Input "
            f"size: {value.shape[axis]} output size: {int(size_splits[0])}")
    sizes = _split_sizes([int(s) for s in size_splits.tolist()], num, value.shape[axis])
    return list(ctx.xp.split(value, np.cumsum(sizes[:-1]).tolist(), axis=axis))


def split(self: Scope, value, num_or_size_splits, axis=0, num: int | None = None,
          name: str | None = None) -> list:
    """TF's ``tf.split``: an int splits ``value`` into that many equal parts (Split); a
    list or 1-D tensor of sizes splits it into parts of those sizes (SplitV), ``num``
    giving their count when the sizes' shape does not."""
    if isinstance(num_or_size_splits, (int, np.integer)) and not isinstance(num_or_size_splits,
                                                                            bool):
        return self.create_op(Split, axis, value, num_split=int(num_or_size_splits), name=name)
    sizes = _converted(self.without_op_name(), num_or_size_splits, int32)
    if num is None:
        if sizes.shape.rank == 1 and sizes.shape[0] is not None:
            num = sizes.shape[0]
        else:
            raise ValueError(f"Cannot infer argument `num` from shape {sizes.shape}")
    return self.create_op(SplitV, value, sizes, axis, num_split=num, name=name)


@Split.gradient
def _split_grad(g, *grads):
    return [None, g.scope.concat(list(grads), g.op.inputs[0])]


@SplitV.gradient
def _split_v_grad(g, *grads):
    return [g.scope.concat(list(grads), g.op.inputs[2]), None, None]


# -- Unique ----------------------------------------------------------------------------------
Unique = register_op(
    "Unique", inputs=["x: T"], outputs=["y: T", "idx: out_idx"],
    attrs={"T": TypeAttr(ALL_TYPES), "out_idx": TypeAttr(INDEX_TYPES, int32)},
    doc="The distinct values of the vector `x` in the order they first occur, and for each "
        "element of x its value's position in y (x == y[idx]). NaNs are all distinct.")


@Unique.shape_fn
def _unique_shape(ctx):
    """y: [None]; idx: x.shape (a vector)."""
    shape = ctx.shape("x")
    if shape.rank not in (None, 1):
        raise ctx.error(f"Shape must be rank 1 but is rank {shape.rank} for x")
    return [TensorShape([None]), TensorShape([None]) if shape.rank is None else shape]


@Unique.kernel("cpu")
@Unique.kernel("gpu", T=NON_STRING_TYPES)
def _unique(ctx, x):
    """One sort (numpy's or cupy's unique), then the distinct values reordered by where
    each first occurs."""
    xp = ctx.xp
    if x.ndim != 1:
        raise InvalidArgumentError("unique expects a 1D vector.")
    out_idx = ctx.attrs["out_idx"].as_numpy_dtype
    if x.size == 0:
        return [x.copy(), xp.zeros(0, out_idx)]
    nan_rule = {"equal_nan": False} if xp is np else {}
    _, first, inverse = xp.unique(x, return_index=True, return_inverse=True, **nan_rule)
    order = xp.argsort(first)
    rank = xp.empty(len(first), np.int64)
    rank[order] = xp.arange(len(first), dtype=np.int64)
    return [x[first[order]], rank[inverse.reshape(-1)].astype(out_idx)]


for _op in (ArgMax, ArgMin, OneHot, Where, Unique):
    _op.not_differentiable()

for _name, _fn in (("argmax", argmax), ("argmin", argmin), ("top_k", top_k),
                   ("one_hot", one_hot), ("where", where), ("split", split)):
    setattr(Scope, _name, _fn)  # TF's Python signatures, in place of the raw ops' builders


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("ArgMax", "ArgMin", "TopKV2", "OneHot", "Where", "Split", "SplitV", "Unique")
