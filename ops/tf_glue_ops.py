"""The glue ops of TensorFlow graphs: StridedSlice (and its gradient), GatherV2, Prod,
Transpose, Tile and VarIsInitializedOp, with TensorFlow's semantics.

Real TF graphs carry these around the scatter/gather set (``x[1:, ..., tf.newaxis]``,
``tf.gather``, the reshapes TF's Python builds for ``gather_nd(batch_dims=...)``), so
``gf.import_tf_graph`` needs them; they are ordinary ops with builder methods too.
"""
from __future__ import annotations

import math

import numpy as np

from graphflow.dtypes import INDEX_TYPES, NON_STRING_TYPES, NUMBER_TYPES, int32
from graphflow.errors import InvalidArgumentError, UnimplementedError
from graphflow.indexed_slices import IndexedSlices
from graphflow.registry import BoolAttr, IntAttr, TypeAttr, register_op, same_as_tf
from graphflow.inference import constant_value
from graphflow.lowering import Lowering
from graphflow.shapes import MAX_RANK, TensorShape, debug_string

from . import parallel_gather, scatter_loops
from .cpu_index import checked_gather
from .intra_op import kernel_threads
from .jit import jittable
from .reduction_ops import check_reduction_axis, reduced_shape, reduction_output
from .variable_ops import _variable_of

_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


# -- StridedSlice ----------------------------------------------------------------------
def _mask_attrs() -> dict:
    return {m: IntAttr(0) for m in _MASKS}


StridedSlice = register_op(
    "StridedSlice", inputs=["input: T", "begin: Index", "end: Index", "strides: Index"],
    outputs=["output: T"],
    attrs={"T": TypeAttr(), "Index": TypeAttr(INDEX_TYPES), **_mask_attrs()},
    doc="Python's input[begin:end:strides] per spec entry (TensorFlow's tf.strided_slice): bit "
        "i of begin_mask/end_mask ignores begin[i]/end[i] (the whole range), ellipsis_mask "
        "makes entry i a `...`, new_axis_mask a new dim of size 1, shrink_axis_mask takes the "
        "single index begin[i] and drops the dim. Out-of-range begin/end are clamped; a "
        "shrunk index out of range is an error.")


def strided_spec(dims: list, begin: list, end: list, strides: list, masks: dict) -> list:
    """The slice spec against input ``dims`` (None: unknown): a list of output entries,
    ``("new",)`` for a new axis, ``("index", dim, i)`` for a shrunk dim, ``("slice", dim,
    start, size, stride)`` otherwise (start/size None when the dim is unknown). Raises
    TensorFlow's errors for bad masks, strides and shrunk indices."""
    n, rank = len(begin), len(dims)
    ellipsis = [i for i in range(n) if masks["ellipsis_mask"] >> i & 1]
    if len(ellipsis) > 1:
        raise InvalidArgumentError("Multiple ellipses in slice spec not allowed")
    new_axis = [bool(masks["new_axis_mask"] >> i & 1) and i not in ellipsis for i in range(n)]
    consuming = sum(1 for i in range(n) if not new_axis[i] and i not in ellipsis)
    if consuming > rank:
        raise InvalidArgumentError(f"Index out of range using input dim {rank}; input has "
                                   f"only {rank} dims")
    out, d = [], 0
    for i in range(n):
        if i in ellipsis:
            for _ in range(rank - consuming):
                out.append(("slice", d, *_full(dims[d])))
                d += 1
            continue
        if new_axis[i]:
            out.append(("new",))
            continue
        stride = strides[i]
        if stride == 0:
            raise InvalidArgumentError(f"strides[{i}] must be non-zero")
        size = dims[d]
        if masks["shrink_axis_mask"] >> i & 1:
            if stride is not None and stride < 0:
                raise InvalidArgumentError("only stride 1 allowed on non-range indexing.")
            b = begin[i]
            if b is not None and size is not None:
                index = b + size if b < 0 else b
                if not 0 <= index < size:  # TF names the index made non-negative
                    raise InvalidArgumentError(f"slice index {index} of dimension {d} out of "
                                               f"bounds.")
                b = index
            out.append(("index", d, b))
        else:
            out.append(("slice", d, *_range(size, begin[i], end[i], stride,
                                            masks["begin_mask"] >> i & 1,
                                            masks["end_mask"] >> i & 1)))
        d += 1
    while d < rank:  # an implicit ellipsis at the end
        out.append(("slice", d, *_full(dims[d])))
        d += 1
    return out


def _full(size):
    return 0, size, 1


def _range(size, begin, end, stride, begin_masked, end_masked):
    """(start, length, stride) of one sliced dim, as TensorFlow canonicalizes it."""
    if size is None or stride is None or (begin is None and not begin_masked) or (
            end is None and not end_masked):
        return None, None, stride
    lower, upper = (0, size) if stride > 0 else (-1, size - 1)

    def canonical(x, masked, c):
        if masked:
            return (lower, upper)[c] if stride > 0 else (upper, lower)[c]
        x = x + size if x < 0 else x
        return min(max(x, lower), upper)

    start, stop = canonical(begin, begin_masked, 0), canonical(end, end_masked, 1)
    length = stop - start
    if length == 0 or (length < 0) != (stride < 0):
        return start, 0, stride
    return start, length // stride + (length % stride != 0), stride


def _spec_dims(spec: list) -> list:
    return [1 if e[0] == "new" else e[3] for e in spec if e[0] != "index"]


def _spec_index(spec: list) -> tuple:
    """A numpy basic index doing ``spec`` (every entry known)."""
    index: list = []
    for e in spec:
        if e[0] == "new":
            index.append(None)
        elif e[0] == "index":
            index.append(e[2])
        else:
            _, _, start, length, stride = e
            if length == 0:
                index.append(slice(0, 0))
            else:
                stop = start + length * stride
                index.append(slice(start, stop if stop >= 0 else None, stride))
    return tuple(index)


def _check_spec_vectors(begin, end, strides) -> None:
    shapes = [tuple(v.shape) for v in (begin, end, strides)]  # arrays of any device
    if any(len(s) != 1 for s in shapes) or len({s[0] for s in shapes}) != 1:
        raise InvalidArgumentError(
            f"Expected begin, end, and strides to be 1D equal size tensors, but got shapes "
            f"{', '.join(debug_string(s) for s in shapes[:2])}, and {debug_string(shapes[2])} "
            f"instead.")
    if shapes[0][0] > 64:  # TF's bit masks are 32 bits wide; numpy's arrays 64 dims
        raise InvalidArgumentError(f"A slice spec of {shapes[0][0]} entries is too long")


def _strided_shape(ctx, shape: TensorShape) -> TensorShape:
    specs = [ctx.shape(n) for n in ("begin", "end", "strides")]
    for name, s in zip(("begin", "end", "strides"), specs):
        if s.rank is not None and s.rank != 1:
            raise ctx.error(f"{name} must be a vector, got shape {s}")
    lengths = {s[0] for s in specs if s.rank is not None} - {None}
    if len(lengths) > 1:
        raise ctx.error(f"Expected begin, end, and strides to be 1D equal size tensors, but got "
                        f"shapes {specs[0]}, {specs[1]}, and {specs[2]} instead.")
    if not lengths or shape.rank is None:
        return TensorShape(None)
    n = lengths.pop()
    if n > 64 * MAX_RANK:  # more slice specs than any shape has dims (with new axes)
        raise ctx.error(f"begin, end and strides have {n} elements: more than a shape of at "
                        f"most {MAX_RANK} dims can be sliced by")
    masks = {m: ctx.attr(m) for m in _MASKS}
    values = [ctx.value(v) for v in ("begin", "end", "strides")]
    begin, end, strides = ([None] * n if v is None else [int(x) for x in v.tolist()]
                           for v in values)
    return TensorShape(_spec_dims(strided_spec(shape.as_list(), begin, end, strides, masks)))


@StridedSlice.shape_fn
def _strided_slice_shape(ctx):
    """input[spec]: dims known where the input dim and the spec values are; the rank when
    the spec's length and the input's rank are."""
    return _strided_shape(ctx, ctx.shape("input"))


def _strided_slice_array(ctx, x, begin, end, strides):
    _check_spec_vectors(begin, end, strides)
    masks = {m: ctx.attrs[m] for m in _MASKS}
    spec = strided_spec(list(x.shape), begin.tolist(), end.tolist(), strides.tolist(), masks)
    return spec, _spec_index(spec)


@StridedSlice.kernel("cpu")
@StridedSlice.kernel("gpu", T=NON_STRING_TYPES)
def _strided_slice(ctx, x, begin, end, strides):
    spec, index = _strided_slice_array(ctx, x, begin, end, strides)
    out = ctx.empty(_spec_dims(spec), x.dtype)
    out[...] = x[index]
    return out


StridedSliceGrad = register_op(
    "StridedSliceGrad",
    inputs=["shape: Index", "begin: Index", "end: Index", "strides: Index", "dy: T"],
    outputs=["output: T"],
    attrs={"T": TypeAttr(), "Index": TypeAttr(INDEX_TYPES), **_mask_attrs()},
    doc="StridedSlice's gradient: zeros of `shape` with `dy` where the slice took its values.")


@StridedSliceGrad.shape_fn
def _strided_slice_grad_shape(ctx):
    """The value of `shape` (partially known from a Shape node)."""
    return ctx.shape_value("shape")


@StridedSliceGrad.kernel("cpu")
@StridedSliceGrad.kernel("gpu", T=NON_STRING_TYPES)
def _strided_slice_grad(ctx, shape, begin, end, strides, dy):
    dims = [int(d) for d in shape.tolist()] if shape.ndim == 1 else None
    if dims is None or any(d < 0 for d in dims):
        raise InvalidArgumentError(f"shape must be a vector of dims >= 0, got {shape.tolist()}")
    _check_spec_vectors(begin, end, strides)
    masks = {m: ctx.attrs[m] for m in _MASKS}
    spec = strided_spec(dims, begin.tolist(), end.tolist(), strides.tolist(), masks)
    if list(dy.shape) != _spec_dims(spec):
        raise InvalidArgumentError(f"dy has shape {debug_string(dy.shape)}, the slice of "
                                   f"{debug_string(dims)} has {debug_string(_spec_dims(spec))}")
    out = ctx.zeros(dims, dy.dtype)
    out[_spec_index(spec)] = dy
    return out


def _mask_kwargs(g) -> dict:
    return {m: g.attr(m) for m in _MASKS}


@StridedSlice.gradient
def _strided_slice_gradient(g, grad):
    x, begin, end, strides = g.op.inputs
    s = g.scope
    shape = (np.asarray(x.shape.as_list(), dtype=begin.dtype.as_numpy_dtype)
             if x.shape.is_fully_defined() else s.shape(x, out_type=begin.dtype))
    return [s.strided_slice_grad(shape, begin, end, strides, grad, **_mask_kwargs(g)),
            None, None, None]


@StridedSliceGrad.gradient
def _strided_slice_grad_gradient(g, grad):
    _, begin, end, strides, _ = g.op.inputs
    return [None, None, None, None,
            g.scope.strided_slice(grad, begin, end, strides, **_mask_kwargs(g))]


# -- GatherV2 --------------------------------------------------------------------------
GatherV2 = register_op(
    "GatherV2", inputs=["params: Tparams", "indices: Tindices", "axis: Taxis"],
    outputs=["output: Tparams"],
    attrs={"Tparams": TypeAttr(), "Tindices": TypeAttr(INDEX_TYPES),
           "Taxis": TypeAttr(INDEX_TYPES), "batch_dims": IntAttr(0)},
    aliases=("gather",),
    doc="Slices of params along `axis` at `indices` (tf.gather): output shape "
        "params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis+1:]; the first "
        "batch_dims dims of params and indices are matched, not gathered. An index out of "
        "[0, params.shape[axis]) is an error on CPU.")


def _gather_axes(axis: int, batch_dims: int, params_rank: int, indices_rank: int | None):
    """(axis, batch_dims) made non-negative, checked as TensorFlow checks them."""
    if not -params_rank <= axis < params_rank:
        raise InvalidArgumentError(f"Expected axis in the range [{-params_rank}, {params_rank}), "
                                   f"but got {axis}")
    axis %= params_rank
    if indices_rank is not None:
        if batch_dims < 0:
            batch_dims += indices_rank
        if not 0 <= batch_dims <= indices_rank:
            raise InvalidArgumentError(f"Expected batch_dims in the range [{-indices_rank}, "
                                       f"{indices_rank}], but got {batch_dims}")
    if batch_dims > axis:
        raise InvalidArgumentError(f"batch_dims ({batch_dims}) must be less than or equal to "
                                   f"axis ({axis}).")
    return axis, batch_dims


@GatherV2.shape_fn
def _gather_v2_shape(ctx):
    """params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis + 1:] once the
    axis is a known constant and both ranks are known."""
    params, indices = ctx.shape("params"), ctx.shape("indices")
    axis_shape = ctx.shape("axis")
    if axis_shape.rank not in (None, 0):
        raise ctx.error(f"axis must be a scalar, got shape {axis_shape}")
    axis = ctx.value("axis")
    batch_dims = ctx.attr("batch_dims")
    if axis is None or params.rank is None or indices.rank is None:
        return TensorShape(None)
    if params.rank == 0:
        raise ctx.error("params must be at least 1 dimensional")
    axis, batch_dims = _gather_axes(int(axis), batch_dims, params.rank, indices.rank)
    for i in range(batch_dims):
        if None not in (params[i], indices[i]) and params[i] != indices[i]:
            raise ctx.error(f"params.shape[{i}]: {params[i]} should be equal to "
                            f"indices.shape[{i}]: {indices[i]}")
    dims = params.as_list()
    return TensorShape(dims[:axis] + indices.as_list()[batch_dims:] + dims[axis + 1:])


@GatherV2.kernel("cpu")
def _gather_v2(ctx, params, indices, axis):
    if np.ndim(axis) != 0:
        raise InvalidArgumentError(f"axis must be a scalar, got shape "
                                   f"{debug_string(np.shape(axis))}")
    if params.ndim == 0:
        raise InvalidArgumentError("params must be at least 1 dimensional")
    axis, bd = _gather_axes(int(axis), ctx.attrs["batch_dims"], params.ndim, indices.ndim)
    if params.shape[:bd] != indices.shape[:bd]:
        raise InvalidArgumentError(f"params.shape[:{bd}] {list(params.shape[:bd])} should be "
                                   f"equal to indices.shape[:{bd}] {list(indices.shape[:bd])}")
    limit = params.shape[axis]
    if axis == 0 and bd == 0 and params.dtype != object and indices.size and params.size:
        width = params.size // limit
        if parallel_gather.splits(indices.size, indices.size * width * params.dtype.itemsize):
            # big: each intra-op thread (one, if so configured) checks and copies its own
            # rows in one pass (ops/parallel_gather.py); a bad index (False) is reported
            # below, in its words
            out = ctx.empty(indices.shape + params.shape[1:], params.dtype)
            if parallel_gather.gather(out.reshape(indices.size, width),
                                      params.reshape(limit, width), indices.reshape(-1, 1),
                                      (limit,), kernel_threads(ctx)):
                return out
    bad = (indices < 0) | (indices >= limit)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InvalidArgumentError(f"indices[{','.join(map(str, where))}] = "
                                   f"{int(indices[where])} is not in [0, {limit})")
    out_dims = list(params.shape[:axis]) + list(indices.shape[bd:]) + list(params.shape[axis + 1:])
    out = ctx.empty(out_dims, params.dtype)
    if bd == 0:
        # every index is checked: "wrap" changes none of them, and unlike "raise" it
        # writes into out directly (numpy buffers a whole copy for "raise")
        np.take(params, indices, axis=axis, out=out, mode="wrap")
        return out
    nb = math.prod(params.shape[:bd])
    p = params.reshape((nb,) + params.shape[bd:])
    ind = indices.reshape((nb,) + indices.shape[bd:])
    rel = axis - bd                         # p: (nb, O..., A, I...)
    p = np.moveaxis(p, 1 + rel, 1)          # (nb, A, O..., I...)
    batch = np.arange(nb).reshape((nb,) + (1,) * (ind.ndim - 1))
    got = p[batch, ind]                     # (nb, J..., O..., I...)
    nj = ind.ndim - 1
    got = np.moveaxis(got, list(range(1, 1 + nj)), list(range(1 + rel, 1 + rel + nj)))
    out[...] = got.reshape(out_dims)
    return out


@GatherV2.lower("cpu")
def _lower_gather_v2(spec):
    """GatherV2 along axis 0 (batch_dims 0) with static shapes: the rows at the indices,
    every index checked against the row count first (a bad one, negative ones too: zeros
    and the segment's status False; the kernel then raises)."""
    params, indices, axis = spec.shape(0), spec.shape(1), spec.value(2)
    dtype, out_shape = spec.dtype(0), spec.output_shape(0)
    if params is None or indices is None or axis is None or out_shape is None \
            or np.ndim(axis) != 0 or spec.attrs["batch_dims"] != 0 or not params \
            or int(axis) not in (0, -len(params)) or math.prod(params) == 0 \
            or tuple(indices) + tuple(params[1:]) != tuple(out_shape) \
            or not jittable(dtype) or not spec.small_output(out_shape, dtype):
        return None
    rows, width = params[0], math.prod(params[1:])
    return Lowering(
        f"{{t}}f, {{t}}good = {{column}}(np.ascontiguousarray({{i1}}).reshape(-1), {rows})\n"
        + checked_gather(f"np.ascontiguousarray({{i0}}).reshape(({rows}, {width}))",
                         out_shape, dtype),
        {"gather": scatter_loops.gathered_rows, "column": scatter_loops.located_rows})


@GatherV2.gradient
def _gather_v2_grad(g, grad):
    """Axis 0: rows of params (an IndexedSlices), as TensorFlow. Another axis a: grad's
    index dims moved to the front, scattered (duplicates add up) into params with dim a
    first, moved back. Needs a constant axis, batch_dims 0, and, off axis 0, known ranks."""
    params, indices, axis = g.op.inputs
    axis_value = constant_value(axis)
    rank = params.shape.rank
    if axis_value is None or g.attr("batch_dims") != 0:
        raise UnimplementedError(f"The gradient of GatherV2 '{g.op.name}' needs a constant "
                                 f"axis and batch_dims 0 (batched gathers: gather_nd)")
    s = g.scope
    index_type = indices.dtype
    if rank is not None and int(axis_value) % rank != 0:
        return [_gather_grad_off_axis0(g, grad, int(axis_value) % rank), None, None]
    if int(axis_value) != 0 and rank is None:
        raise UnimplementedError(f"The gradient of GatherV2 '{g.op.name}' along axis "
                                 f"{int(axis_value)} needs params' rank at build time")
    if params.shape.is_fully_defined():
        dense_shape = s.constant(np.asarray(params.shape.as_list(), index_type.as_numpy_dtype))
    else:
        dense_shape = s.shape(params, out_type=index_type)
    tail = params.shape[1:]
    rows = ([-1] + tail.as_list() if tail.is_fully_defined()
            else s.concat([s.constant([-1], index_type), s.slice(dense_shape, [1], [-1])], 0))
    return [IndexedSlices(s.reshape(grad, rows), s.reshape(indices, [-1]), dense_shape),
            None, None]


def _gather_grad_off_axis0(g, grad, axis: int):
    params, indices, _ = g.op.inputs
    if indices.shape.rank is None:
        raise UnimplementedError(f"The gradient of GatherV2 '{g.op.name}' along axis {axis} "
                                 f"needs the indices' rank at build time")
    s, rank, q = g.scope, params.shape.rank, indices.shape.rank
    index_type = indices.dtype
    # grad: params[:axis] + indices.shape + params[axis+1:] -> indices.shape first
    front = list(range(axis, axis + q)) + list(range(axis)) + \
        list(range(axis + q, axis + q + rank - axis - 1))
    moved = s.transpose(grad, np.asarray(front, np.int32))
    # params with dim `axis` first, its shape, and back
    to_front = [axis] + list(range(axis)) + list(range(axis + 1, rank))
    shape_t = s.gather(s.shape(params, out_type=index_type), np.asarray(to_front, np.int32), 0)
    values = s.reshape(moved, s.concat([s.constant([-1], index_type),
                                        s.slice(shape_t, [1], [-1])], 0))
    dense_t = s.scatter_nd(s.reshape(indices, [-1, 1]), values, shape_t)
    return s.transpose(dense_t, np.argsort(to_front).astype(np.int32))


# -- Prod ------------------------------------------------------------------------------
Prod = register_op(
    "Prod", inputs=["input: T", "axis: Tidx"], outputs=["output: T"],
    attrs={"T": TypeAttr(NUMBER_TYPES), "Tidx": TypeAttr(INDEX_TYPES, int32),
           "keep_dims": BoolAttr(False)},
    aliases=("reduce_prod",),
    doc="The product of `input` over the dims in `axis` (as Sum: a scalar or a vector, "
        "negative from the end), dropped or kept with size 1 under keep_dims. Integers wrap.")


@Prod.shape_fn
def _prod_shape(ctx):
    """`input.shape` without the dims in `axis` (size 1 under keep_dims)."""
    check_reduction_axis(ctx)
    return reduced_shape(ctx)


@Prod.kernel("cpu")
def _prod(ctx, x, axis):
    axes, keep_dims, out = reduction_output(ctx, x, axis)
    if not axes:
        out[...] = x
    else:
        out[...] = np.prod(x, axis=axes, dtype=x.dtype, keepdims=keep_dims)
    return out


# -- Transpose -------------------------------------------------------------------------
Transpose = register_op(
    "Transpose", inputs=["x: T", "perm: Tperm"], outputs=["y: T"],
    attrs={"T": TypeAttr(), "Tperm": TypeAttr(INDEX_TYPES, int32)},
    doc="y.shape[i] = x.shape[perm[i]]: the dims of x permuted (a new array).")


def _check_perm(perm: list, rank: int) -> list:
    if len(perm) != rank:
        raise InvalidArgumentError(f"transpose expects a vector of size {rank}. But input(1) "
                                   f"is a vector of size {len(perm)}")
    for i, p in enumerate(perm):
        if not 0 <= p < rank:
            raise InvalidArgumentError(f"perm[{i}] = {p} is not in [0, {rank})")
    missing = sorted(set(range(rank)) - set(perm))
    if missing:
        raise InvalidArgumentError(f"{missing[0]} is missing from {{{','.join(map(str, perm))}}}.")
    return perm


def _rank_of_input_or_dims_vector(ctx, input_name: str, vector_name: str) -> int | None:
    """The rank of `input_name`, else the length of `vector_name` (one entry per dim, as
    Transpose's perm and Tile's multiples), else None; an error unless the vector is one."""
    shape, vector_shape = ctx.shape(input_name), ctx.shape(vector_name)
    if vector_shape.rank not in (None, 1):
        raise ctx.error(f"{vector_name} must be a vector, got shape {vector_shape}")
    return shape.rank if shape.rank is not None else vector_shape[0] if vector_shape.rank else None


def _check_dims_vector_length(ctx, rank: int, vector_name: str) -> None:
    """A shape function's error for a per-dim vector longer than MAX_RANK: a vector of
    2**40 elements is refused before a shape is made of it."""
    if rank > MAX_RANK:
        raise ctx.error(f"Shape must have at most {MAX_RANK} dims, but {vector_name} has {rank} "
                        f"elements")


@Transpose.shape_fn
def _transpose_shape(ctx):
    """x's dims in the order of perm; the rank alone while perm is not constant."""
    shape, rank = ctx.shape("x"), _rank_of_input_or_dims_vector(ctx, "x", "perm")
    perm = ctx.value("perm")
    if rank is None:
        return TensorShape(None)
    _check_dims_vector_length(ctx, rank, "perm")
    if perm is None:
        return TensorShape.unknown(rank)
    perm = _check_perm(perm.tolist(), rank)
    dims = shape.as_list() if shape.rank is not None else [None] * rank
    return TensorShape([dims[p] for p in perm])


@Transpose.kernel("cpu")
@Transpose.kernel("gpu", T=NON_STRING_TYPES)
def _transpose(ctx, x, perm):
    if perm.ndim != 1:
        raise InvalidArgumentError(f"perm must be a vector, got shape {debug_string(perm.shape)}")
    perm = _check_perm([int(p) for p in perm.tolist()], x.ndim)
    out = ctx.empty([x.shape[p] for p in perm], x.dtype)
    out[...] = x.transpose(perm)
    return out


@Transpose.gradient
def _transpose_grad(g, grad):
    """grad transposed by the inverse permutation (ScatterNd of range(n) at perm when perm
    is known only at run time)."""
    s = g.scope
    perm = g.op.inputs[1]
    value = constant_value(perm)
    if value is not None:
        inverse = np.argsort(value).astype(perm.dtype.as_numpy_dtype)
    else:
        n = s.size(perm, out_type=perm.dtype)
        inverse = s.scatter_nd(s.expand_dims(perm, 1), s.range(s.constant(0, perm.dtype), n,
                                                                  s.constant(1, perm.dtype)),
                               s.reshape(n, [1]))
    return [s.transpose(grad, inverse), None]


# -- Tile ------------------------------------------------------------------------------
Tile = register_op(
    "Tile", inputs=["input: T", "multiples: Tmultiples"], outputs=["output: T"],
    attrs={"T": TypeAttr(), "Tmultiples": TypeAttr(INDEX_TYPES, int32)},
    doc="`input` repeated multiples[i] times along each dim i (output dim i = "
        "input.shape[i] * multiples[i]).")


def _check_multiples(multiples: list, rank: int) -> None:
    if len(multiples) != rank:
        raise InvalidArgumentError(f"Expected multiples argument to be a vector of length "
                                   f"{rank} but got length {len(multiples)}")
    for i, m in enumerate(multiples):
        if m is not None and m < 0:
            raise InvalidArgumentError(f"Expected multiples[{i}] >= 0, but got {m}")


@Tile.shape_fn
def _tile_shape(ctx):
    """input.shape[i] * multiples[i], known where both are."""
    shape, rank = ctx.shape("input"), _rank_of_input_or_dims_vector(ctx, "input", "multiples")
    if rank is None:
        return TensorShape(None)
    _check_dims_vector_length(ctx, rank, "multiples")
    value = ctx.value("multiples")
    if value is not None:
        multiples = [int(m) for m in value.reshape(-1).tolist()]
    else:  # partly known (a Pack of scalars)
        partial = ctx.shape_value("multiples")
        multiples = partial.as_list() if partial.rank == rank else [None] * rank
    _check_multiples(multiples, rank)
    dims = shape.as_list() if shape.rank is not None else [None] * rank
    return TensorShape([None if d is None or m is None else d * m
                        for d, m in zip(dims, multiples)])


@Tile.kernel("cpu")
@Tile.kernel("gpu", T=NON_STRING_TYPES)
def _tile(ctx, x, multiples):
    if multiples.ndim != 1:
        raise InvalidArgumentError(f"Expected multiples argument to be a vector of length "
                                   f"{x.ndim} but got shape {debug_string(multiples.shape)}")
    multiples = [int(m) for m in multiples.tolist()]
    _check_multiples(multiples, x.ndim)
    ctx.check_allocation(math.prod(d * m for d, m in zip(x.shape, multiples)), x.dtype)
    out = ctx.empty([d * m for d, m in zip(x.shape, multiples)], x.dtype)
    out[...] = ctx.xp.tile(x, multiples) if x.ndim else x
    return out


@Tile.gradient
def _tile_grad(g, grad):
    """The sum of grad's tiles: grad reshaped to [m0, d0, m1, d1, ...], summed over the m's."""
    x, multiples = g.op.inputs
    rank = x.shape.rank
    if rank is None:
        raise UnimplementedError(f"The gradient of Tile '{g.op.name}' needs its input's rank "
                                 f"at build time")
    if rank == 0:
        return [grad, None]
    s = g.scope
    shape = s.shape(x, out_type=multiples.dtype)
    split = s.reshape(s.pack([multiples, shape], axis=1), [-1])
    summed = s.reduce_sum(s.reshape(grad, split), np.arange(0, 2 * rank, 2, dtype=np.int32))
    return [s.reshape(summed, shape), None]


# -- VarIsInitializedOp ----------------------------------------------------------------
VarIsInitializedOp = register_op(
    "VarIsInitializedOp", inputs=["resource: string"], outputs=["is_initialized: bool"],
    stateful=True,
    doc="Whether the variable behind the handle has a value in this Session (a bool "
        "scalar); TF 1.x graphs carry one per variable.")


@VarIsInitializedOp.shape_fn
def _var_is_initialized_shape(ctx):
    """A scalar."""
    return TensorShape([])


@VarIsInitializedOp.kernel("cpu")
def _var_is_initialized(ctx, handle):
    state = _variable_of(ctx, handle)
    with state.lock:
        return np.array(state.value is not None)


VarIsInitializedOp.not_differentiable()


Prod.identity_over_no_axes = True  # dropped by the plan's simplification


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("StridedSlice", "StridedSliceGrad", "GatherV2", Prod, "Transpose", "Tile",
           VarIsInitializedOp)
