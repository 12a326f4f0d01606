"""The scatter family and GatherNd, with TensorFlow's CPU semantics.

Every kernel works the same way: flatten each index tuple to an int64 linear
slice offset, check all offsets in one pass (the first bad one is reported
the way TensorFlow reports it, and nothing is written), then apply the
updates with one bulk numpy operation. Plain reference loop::

    for i in ndindex(indices.shape[:-1]):
        output[indices[i]] (op)= updates[i]      # an index tuple picks a slice
"""
from __future__ import annotations

import math

import numpy as np

from graphflow.dtypes import ALL_TYPES, NUMBER_TYPES, REAL_NUMBER_TYPES, int16, int32, int64, \
    uint16
from graphflow.errors import InvalidArgumentError
from graphflow.registry import IntAttr, StringAttr, TypeAttr, register_op
from graphflow.shapes import TensorShape, debug_string

BAD_INDICES_POLICIES = ("", "DEFAULT", "ERROR", "IGNORE")
KERNEL_INDEX_TYPES = (int32, int64)


# -- shape inference -------------------------------------------------------------------
def scatter_shape(ctx, indices_shape: TensorShape, updates_shape: TensorShape,
                  output_shape: TensorShape, what: str) -> TensorShape:
    """TensorFlow's ScatterNdShapeHelper: updates.shape == indices.shape[:-1] +
    output.shape[indices.shape[-1]:], with indices.shape[-1] <= rank."""
    if indices_shape.rank == 0:
        raise ctx.error("Shape must be at least rank 1 but is rank 0 for indices")
    if output_shape.num_elements() == 0 and (
            (indices_shape.num_elements() or 0) > 0 or (updates_shape.num_elements() or 0) > 0):
        raise ctx.error("Indices and updates specified for empty output")
    if indices_shape.rank is None or updates_shape.rank is None or updates_shape.rank == 0:
        return output_shape
    outer = indices_shape.rank - 1
    depth = indices_shape[-1]
    if depth is None:
        return output_shape
    if output_shape.rank is not None and depth > output_shape.rank:
        raise ctx.error(f"indices.shape[-1] must be <= {what} rank: indices.shape[-1] = {depth} "
                        f"but {what} shape {output_shape} has rank {output_shape.rank}")
    prefix_i, prefix_u = indices_shape[:outer], updates_shape[:outer]
    if not prefix_i.is_compatible_with(prefix_u):
        raise ctx.error(f"Dimensions [0,{outer}) of indices[shape={indices_shape}] = {prefix_i} "
                        f"must match dimensions [0,{outer}) of updates[shape={updates_shape}] = "
                        f"{prefix_u}: updates.shape must be indices.shape[:-1] + "
                        f"{what}.shape[indices.shape[-1]:]")
    if output_shape.rank is None:
        return output_shape
    suffix_o, suffix_u = output_shape[depth:], updates_shape[outer:]
    if not suffix_o.is_compatible_with(suffix_u):
        raise ctx.error(f"Dimensions [{depth},{output_shape.rank}) of {what}[shape={output_shape}] "
                        f"= {suffix_o} must match dimensions [{outer},{updates_shape.rank}) of "
                        f"updates[shape={updates_shape}] = {suffix_u}: updates.shape must be "
                        f"indices.shape[:-1] + {what}.shape[indices.shape[-1]:]")
    return output_shape.merge_with(output_shape[:depth].concatenate(suffix_o.merge_with(suffix_u)))


# -- run-time validation and offsets ----------------------------------------------------
def _position(batch_shape: tuple, flat: int) -> str:
    """TensorFlow's SliceDebugString: ``[1]`` or ``[1,0]`` for a flat position."""
    if len(batch_shape) <= 1:
        return f"[{flat}]"
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(flat, batch_shape)) + "]"


def check_scatter_args(indices, updates, out_shape: tuple) -> tuple[int, int]:
    """TensorFlow's kernel checks; returns (index depth, number of index tuples)."""
    if indices.ndim < 1:
        raise InvalidArgumentError(f"Indices shape must have rank at least one. Found:"
                                   f"{debug_string(indices.shape)}")
    if updates.ndim < 1:
        raise InvalidArgumentError(f"Updates shape must have rank at least one. Found:"
                                   f"{debug_string(updates.shape)}")
    out_size = math.prod(out_shape)
    if (out_size == 0 and (indices.size or updates.size)) or (indices.size == 0 and updates.size):
        raise InvalidArgumentError("Indices and updates specified for empty output shape")
    depth = indices.shape[-1] if indices.ndim > 1 else 1
    outer = indices.ndim - 1 if indices.ndim > 1 else 1
    rank = len(out_shape)

    def prefix():
        return InvalidArgumentError(
            f"Dimensions [0,{outer}) of indices[shape={debug_string(indices.shape)}] must match "
            f"dimensions [0,{outer}) of updates[shape={debug_string(updates.shape)}]")

    def suffix():
        return InvalidArgumentError(
            f"Dimensions [{depth},{rank}) of input[shape={debug_string(out_shape)}] must match "
            f"dimensions [{outer},{updates.ndim}) of updates[shape={debug_string(updates.shape)}]")
    if updates.ndim < outer:
        raise prefix()
    if depth > rank or updates.ndim != outer + rank - depth:
        raise suffix()
    if updates.shape[:outer] != indices.shape[:outer]:
        raise prefix()
    if updates.shape[outer:] != tuple(out_shape[depth:]):
        raise suffix()
    return depth, math.prod(indices.shape[:outer])


def linear_offsets(indices, depth: int, count: int, dims: tuple, policy: str, what: str,
                   report_last: bool = True):
    """int64 slice offsets of the index tuples into ``dims[:depth]``, and the
    mask of valid tuples (None when all are valid). A bad tuple raises, unless
    ``policy`` is IGNORE; like TensorFlow's CPU kernels, the scatters report the
    last bad tuple and GatherNd the first."""
    tuples = indices.reshape(count, depth)
    bounds = dims[:depth]
    unsigned = np.uint64 if tuples.dtype.itemsize == 8 else \
        (np.uint32 if tuples.dtype.itemsize == 4 else np.uint16)
    as_unsigned = tuples.view(unsigned)  # negatives become huge: one comparison checks both ends
    ok = all(count == 0 or int(as_unsigned[:, c].max()) < bounds[c] for c in range(depth))
    valid = None
    if not ok:
        valid = ~(as_unsigned >= np.array(bounds, dtype=unsigned)).any(axis=1)
        if policy != "IGNORE":
            bad = count - 1 - int(np.argmin(valid[::-1])) if report_last else int(np.argmin(valid))
            batch = indices.shape[:-1] if indices.ndim > 1 else indices.shape
            raise InvalidArgumentError(
                f"indices{_position(batch, bad)} = [{', '.join(str(int(v)) for v in tuples[bad])}] "
                f"does not index into {what} {debug_string(dims)}")
    if depth == 1:
        offsets = tuples[:, 0].astype(np.int64, copy=False)
    elif depth == 0:
        offsets = np.zeros(count, np.int64)
    else:
        strides = np.cumprod((bounds[1:] + (1,))[::-1], dtype=np.int64)[::-1]
        offsets = tuples.astype(np.int64) @ strides
    if valid is not None:
        offsets = offsets[valid]
    return offsets, valid


def _element_offsets(offsets, slice_size: int):
    if slice_size == 1:
        return offsets
    return (offsets[:, None] * slice_size + np.arange(slice_size, dtype=np.int64)).reshape(-1)


def _scatter_into(out, indices, updates, policy: str, combine: str,
                  checked: tuple[int, int] | None = None) -> None:
    """Apply ``updates`` to ``out`` (modified in place) at ``indices``."""
    depth, count = checked or check_scatter_args(indices, updates, out.shape)
    offsets, valid = linear_offsets(indices, depth, count, out.shape, policy, "shape")
    slice_size = math.prod(out.shape[depth:])
    values = updates.reshape(count, slice_size)
    if valid is not None:
        values = values[valid]
    flat = out.reshape(-1)
    if combine == "update":  # numpy fancy assignment: the last of duplicates wins
        if slice_size == 1:
            flat[offsets] = values.reshape(-1)
        else:
            flat.reshape(-1, slice_size)[offsets] = values
        return
    elements = _element_offsets(offsets, slice_size)
    values = values.reshape(-1)
    if combine == "add":
        with np.errstate(all="ignore"):
            np.add.at(flat, elements, values)  # in index order: bit-exact with TensorFlow
    elif combine == "sub":
        with np.errstate(all="ignore"):
            np.subtract.at(flat, elements, values)
    else:  # min / max: a NaN update is ignored, a NaN already there stays (as Eigen's min/max)
        floating = flat.dtype.kind == "f"
        if floating:
            was_nan = elements[np.isnan(flat[elements])]
        ufunc = {"min": np.fmin if floating else np.minimum,
                 "max": np.fmax if floating else np.maximum}[combine]
        ufunc.at(flat, elements, values)
        if floating and was_nan.size:
            flat[was_nan] = np.nan


# -- ScatterNd ----------------------------------------------------------------------------------
ScatterNd = register_op(
    "ScatterNd", inputs=["indices: Tindices", "updates: T", "shape: Tindices"],
    outputs=["output: T"],
    attrs={"T": TypeAttr(), "Tindices": TypeAttr((int16, int32, int64)),
           "bad_indices_policy": StringAttr("", BAD_INDICES_POLICIES)},
    doc="zeros(shape) (empty strings for string), then updates added at indices; duplicates "
        "accumulate in index order (strings concatenate, bools OR).")


@ScatterNd.shape_fn
def _scatter_nd_shape(ctx):
    """shape from the `shape` input; updates.shape == indices.shape[:-1] + shape[indices.shape[-1]:]."""
    if ctx.shape("updates").rank == 0:
        raise ctx.error("Shape must be at least rank 1 but is rank 0 for updates")
    if ctx.shape("shape").rank not in (None, 1):
        raise ctx.error(f"Shape must be a vector, got shape {ctx.shape('shape')}")
    return scatter_shape(ctx, ctx.shape("indices"), ctx.shape("updates"), ctx.shape_value("shape"),
                         "input")


@ScatterNd.kernel("cpu", Tindices=KERNEL_INDEX_TYPES)
def _scatter_nd(ctx, indices, updates, shape):
    if shape.ndim != 1:
        raise InvalidArgumentError("Shape must be a vector")
    dims = tuple(int(d) for d in shape.tolist())
    for d in dims:
        if d < 0:
            raise InvalidArgumentError(f"Dimension {d} must be >= 0")
    dtype = ctx.attrs["T"]
    ctx.check_allocation(math.prod(dims), dtype.as_numpy_dtype)
    if dtype.is_string:
        out = np.empty(dims, dtype=object)
        out.fill(b"")
    else:
        out = np.zeros(dims, dtype=dtype.as_numpy_dtype)
    _scatter_into(out, indices, updates, ctx.attrs["bad_indices_policy"], "add")
    return out


# -- TensorScatterUpdate / Add / Sub / Min / Max -----------------------------------------------------
def _tensor_scatter(name: str, combine: str, kernel_types, index_types, doc: str, alias: str):
    op = register_op(
        name, inputs=["tensor: T", "indices: Tindices", "updates: T"], outputs=["output: T"],
        attrs={"T": TypeAttr(), "Tindices": TypeAttr(index_types),
               "bad_indices_policy": StringAttr("", BAD_INDICES_POLICIES)},
        aliases=(alias,), doc=doc)

    @op.shape_fn
    def _shape(ctx):
        """tensor.shape; updates.shape == indices.shape[:-1] + tensor.shape[indices.shape[-1]:]."""
        return scatter_shape(ctx, ctx.shape("indices"), ctx.shape("updates"), ctx.shape("tensor"),
                             "tensor")

    @op.kernel("cpu", T=kernel_types, Tindices=KERNEL_INDEX_TYPES)
    def _kernel(ctx, tensor, indices, updates):
        if tensor.ndim == 0 and indices.size:
            raise InvalidArgumentError("Indices and updates specified for empty output shape")
        checked = check_scatter_args(indices, updates, tensor.shape)  # before touching any buffer
        out = ctx.forward_or_copy(0, tensor)
        _scatter_into(out, indices, updates, ctx.attrs["bad_indices_policy"], combine, checked)
        return out
    return op


TensorScatterUpdate = _tensor_scatter(
    "TensorScatterUpdate", "update", ALL_TYPES, (int16, int32, int64, uint16),
    "tensor with updates assigned at indices; with duplicate indices the last update wins. "
    "The input buffer is reused when no one else can see it, else copied.",
    "tensor_scatter_nd_update")
TensorScatterAdd = _tensor_scatter(
    "TensorScatterAdd", "add", NUMBER_TYPES, KERNEL_INDEX_TYPES,
    "tensor with updates added at indices (duplicates accumulate).", "tensor_scatter_nd_add")
TensorScatterSub = _tensor_scatter(
    "TensorScatterSub", "sub", NUMBER_TYPES, KERNEL_INDEX_TYPES,
    "tensor with updates subtracted at indices.", "tensor_scatter_nd_sub")
TensorScatterMin = _tensor_scatter(
    "TensorScatterMin", "min", REAL_NUMBER_TYPES, KERNEL_INDEX_TYPES,
    "tensor with min(tensor, update) at indices.", "tensor_scatter_nd_min")
TensorScatterMax = _tensor_scatter(
    "TensorScatterMax", "max", REAL_NUMBER_TYPES, KERNEL_INDEX_TYPES,
    "tensor with max(tensor, update) at indices.", "tensor_scatter_nd_max")


# -- GatherNd ------------------------------------------------------------------------------------------
GatherNd = register_op(
    "GatherNd", inputs=["params: Tparams", "indices: Tindices"], outputs=["output: Tparams"],
    attrs={"Tparams": TypeAttr(), "Tindices": TypeAttr((int16, int32, int64)),
           "batch_dims": IntAttr(0), "bad_indices_policy": StringAttr("")},
    doc="The slices of params at indices: output[i] = params[indices[i]]; the first "
        "batch_dims dims of params and indices are batch dims. The inverse of ScatterNd.")


@GatherNd.shape_fn
def _gather_nd_shape(ctx):
    """indices.shape[:-1] + params.shape[batch_dims + indices.shape[-1]:]."""
    params, indices, b = ctx.shape("params"), ctx.shape("indices"), ctx.attr("batch_dims")
    if b < 0:
        raise ctx.error("tf.gather_nd does not allow negative batch_dims.")
    if indices.rank is not None:
        if indices.rank == 0:
            raise ctx.error("Shape must be at least rank 1 but is rank 0 for indices")
        if b and b >= indices.rank:
            raise ctx.error(f"Argument `batch_dims` = {b} must be less than rank(`indices`) = "
                            f"{indices.rank}")
    if params.rank is not None and b and b > params.rank:
        raise ctx.error(f"Argument `batch_dims` = {b} must be less than or equal to "
                        f"rank(`params`) = {params.rank}")
    if indices.rank is None or indices[-1] is None or params.rank is None:
        return TensorShape(None)
    depth = indices[-1]
    if b + depth > params.rank:
        raise ctx.error(f"indices.shape[-1] must be <= params.rank, but saw indices shape: "
                        f"{indices} and params shape: {params}")
    batch = indices[:b]
    try:
        batch = batch.merge_with(params[:b])
    except ValueError:
        raise ctx.error(f"batch dims of params {params[:b]} and indices {indices[:b]} "
                        f"must match") from None
    return batch.concatenate(indices[b:-1]).concatenate(params[b + depth:])


@GatherNd.kernel("cpu", bad_indices_policy=BAD_INDICES_POLICIES)  # others: no kernel
def _gather_nd(ctx, params, indices):
    b = ctx.attrs["batch_dims"]
    policy = ctx.attrs["bad_indices_policy"]
    if indices.ndim < 1:
        raise InvalidArgumentError(f"indices must be at least a vector, got shape "
                                   f"{debug_string(indices.shape)}")
    if b:
        return _gather_nd_batched(ctx, params, indices, b, policy)
    return _gather(ctx, params, indices, policy)


def _gather(ctx, params, indices, policy: str):
    """GatherNd without batch dims."""
    depth = indices.shape[-1]
    if depth > params.ndim:
        raise InvalidArgumentError(f"index innermost dimension length must be <= params rank; saw: "
                                   f"{depth} vs. {params.ndim}")
    if params.ndim == 0:
        raise InvalidArgumentError(f"params must be at least a vector, got shape "
                                   f"{debug_string(params.shape)}")
    count = int(np.prod(indices.shape[:-1], dtype=np.int64))
    out_shape = indices.shape[:-1] + params.shape[depth:]
    if params.size == 0 and count and int(np.prod(params.shape[depth:], dtype=np.int64)) \
            or (params.shape[:depth] and 0 in params.shape[:depth] and count):
        raise InvalidArgumentError("Requested more than 0 entries, but params is empty.  Params "
                                   f"shape: {debug_string(params.shape)}")
    offsets, valid = linear_offsets(indices, depth, count, params.shape, policy, "param shape",
                                    report_last=False)
    slice_size = int(np.prod(params.shape[depth:], dtype=np.int64))
    table = params.reshape(-1, slice_size)
    if valid is None:
        ctx.check_allocation(count * slice_size, params.dtype)
        return np.take(table, offsets, axis=0).reshape(out_shape)
    out = np.zeros((count, slice_size), dtype=params.dtype)
    if params.dtype == object:
        out.fill(b"")
    out[valid] = np.take(table, offsets, axis=0)  # IGNORE: bad indices give zeros
    return out.reshape(out_shape)


def _gather_nd_batched(ctx, params, indices, b: int, policy: str):
    """batch_dims > 0: prepend each row's flat batch position as an extra coordinate."""
    if b >= indices.ndim or b > params.ndim:
        raise InvalidArgumentError(f"batch_dims = {b} is too large for indices shape "
                                   f"{debug_string(indices.shape)} / params shape "
                                   f"{debug_string(params.shape)}")
    if params.shape[:b] != indices.shape[:b]:
        raise InvalidArgumentError(f"batch dimensions of params {debug_string(params.shape[:b])} "
                                   f"and indices {debug_string(indices.shape[:b])} must match")
    batch = int(np.prod(params.shape[:b], dtype=np.int64))
    flat_params = params.reshape((batch,) + params.shape[b:])
    per_batch = int(np.prod(indices.shape[b:-1], dtype=np.int64))
    inner = indices.reshape((batch, per_batch, indices.shape[-1]))
    rows = np.broadcast_to(np.arange(batch, dtype=inner.dtype)[:, None, None],
                           inner.shape[:2] + (1,))
    joined = np.concatenate([rows, inner], axis=-1).reshape(-1, inner.shape[-1] + 1)
    out = _gather(ctx, flat_params, joined, policy)
    return out.reshape(indices.shape[:-1] + params.shape[b + indices.shape[-1]:])
