"""ScatterNd, TensorScatterUpdate/Add/Sub/Min/Max and GatherNd, with TensorFlow's CPU semantics.

An index tuple ``indices[i, ..., :]`` of depth ``d`` addresses the slice
``shape[d:]`` of a tensor; scatter writes ``updates[i, ...]`` there, gather
reads it. Plain reference loop::

    for i in ndindex(indices.shape[:-1]):
        output[indices[i]] (op)= updates[i]          # GatherNd: out[i] = params[indices[i]]

Every kernel works the same way: flatten the index tuples to int64 linear
slice offsets, validate them all in one pass (TensorFlow's message for a bad
tuple, or skip it under ``bad_indices_policy="IGNORE"``; nothing is written
before that), then run the reference loop above over the tensor viewed as
``[num_slices, slice_size]``: compiled by numba (``ops/scatter_loops.py``), or
numpy's sequential ``ufunc.at`` for what numba does not compile (strings, and
float16 sums and min/max). Duplicates: ScatterNd and TensorScatterAdd/Sub/
Min/Max apply them in index order (so float sums are bit-exact with
TensorFlow's CPU loop); TensorScatterUpdate keeps the last.

This module holds the op definitions (signatures, shape functions, kernels,
lean ``prepare`` functions, gradients); the run-time checks they share live in
``ops/index_checks.py``, the index primitives per device in ``ops/cpu_index.py``
and ``ops/gpu_index.py``.

The run-time checks, their order and their messages follow TensorFlow 2.21's
CPU kernels (tests/conformance/tf_cases.json), quirks included: a rank-1
``indices`` is rejected unless empty, a bad index reports the last bad tuple
(TensorFlow's CPU loop records each one in turn), and the index depth is 1..7
for scatters and 0..7 for GatherNd. Shape inference follows TensorFlow's
shape functions, plus one deliberate extra: ``indices.shape[-1] <= rank`` is
checked at build time already.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from graphflow.dtypes import ALL_TYPES, FLOAT_TYPES, NON_STRING_TYPES, NUMBER_TYPES, \
    REAL_NUMBER_TYPES, int16, int32, int64, non_string, uint16
from graphflow.errors import InvalidArgumentError
from graphflow.indexed_slices import IndexedSlices
from graphflow.registry import IntAttr, StringAttr, TypeAttr, register_op, same_as_tf
from graphflow.shapes import TensorShape, debug_string

from . import gpu_index, parallel_gather
from .cpu_index import column_adder, gather_rows, locate, locator, lower_gather_nd, \
    lower_tensor_scatter, over_memory_limit, row_writer, \
    scatter_into, static_layout
from .index_checks import MAX_INDEX_DEPTH, bad_index_message, check_depth, check_ranks, \
    check_scatter_nd_dims, check_tensor_scatter_inputs, index_matrix, prepare_and_validate, \
    valid_empty
from .intra_op import kernel_threads

BAD_INDICES_POLICIES = ("", "DEFAULT", "ERROR", "IGNORE")
KERNEL_INDEX_TYPES = (int32, int64)
GPU_TYPES = NON_STRING_TYPES


# -- build-time shape rules (TensorFlow's InferenceContext) ---------------------------------
def _with_rank_at_least(ctx, shape: TensorShape, rank: int, what: str) -> TensorShape:
    if shape.rank is not None and shape.rank < rank:
        raise ctx.error(f"Shape must be at least rank {rank} but is rank {shape.rank} for {what}")
    return shape


def _num_elements(shape: TensorShape) -> int | None:
    """TensorFlow's NumElements: 0 as soon as one dim is 0, else None while any is unknown."""
    if shape.rank is None:
        return None
    dims = shape.as_list()
    if 0 in dims:
        return 0
    return None if None in dims else math.prod(dims)


def _merge_failure(a: TensorShape, b: TensorShape) -> str | None:
    """Why ``a`` and ``b`` do not merge, in TensorFlow's words; None if they do."""
    if a.rank is None or b.rank is None:
        return None
    if a.rank != b.rank:
        return f"Shapes must be equal rank, but are {a.rank} and {b.rank}"
    for i, (x, y) in enumerate(zip(a.as_list(), b.as_list())):
        if x is not None and y is not None and x != y:
            return (f"Dimension {i} in both shapes must be equal, but are {x} and {y}. "
                    f"Shapes are {a} and {b}.")
    return None


def scatter_shape(ctx, indices: TensorShape, updates: TensorShape, output: TensorShape,
                  what: str) -> TensorShape:
    """TensorFlow's ScatterNdShapeHelper: checks what the known dims decide and returns
    ``output`` refined by the slice dims of ``updates``."""
    indices = _with_rank_at_least(ctx, indices, 1, "indices")
    if _num_elements(output) == 0 and ((_num_elements(indices) or 0) > 0
                                       or (_num_elements(updates) or 0) > 0):
        raise ctx.error(f"Indices and updates specified for empty output shape {output}")
    if indices.rank is None or updates.rank is None or updates.rank == 0 or indices[-1] is None:
        return output
    outer, depth = indices.rank - 1, indices[-1]
    if output.rank is not None and depth > output.rank:
        raise ctx.error(f"indices.shape[-1] must be <= {what} rank: indices.shape[-1] = {depth} "
                        f"but {what} shape {output} has rank {output.rank}")
    prefix_i, prefix_u = indices[:outer], updates[:outer]
    why = _merge_failure(prefix_i, prefix_u)
    if why:
        raise ctx.error(f"Dimensions [0,{outer}) of indices[shape={indices}] = {prefix_i} must "
                        f"match dimensions [0,{outer}) of updates[shape={updates}] = {prefix_u}: "
                        f"{why}")
    if output.rank is None:
        return output
    suffix_o, suffix_u = output[depth:], updates[outer:]
    why = _merge_failure(suffix_o, suffix_u)
    if why:
        raise ctx.error(f"Dimensions [{depth},{output.rank}) of {what}[shape={output}] = "
                        f"{suffix_o} must match dimensions [{outer},{updates.rank}) of "
                        f"updates[shape={updates}] = {suffix_u}: {why}")
    return output[:depth].concatenate(suffix_o.merge_with(suffix_u))



# -- the scatter kernels' steps: checked shapes, then one device's locate and update ------------
def _scatter_targets(ctx, out_shape: tuple, indices, updates,
                     check_shapes: Callable[[], None], key: tuple = ()) -> tuple | None:
    """``(index tuples [n, depth], the dims they index, bad-index message, update rows
    [n, slice_size])`` of a scatter into ``out_shape``; None for an empty output.

    The shape checks (``check_shapes``, then TensorFlow's PrepareAndValidateInputs)
    depend on shapes only: they run when the shapes differ from the node's last
    run, and the layout they give is kept in ``ctx.cache``.
    """
    key = (out_shape, indices.shape, indices.dtype, updates.shape) + key
    layout = ctx.cache.get("layout")
    if layout is None or layout[0] != key:
        check_shapes()
        depth, slice_size = prepare_and_validate(out_shape, indices, updates)
        empty = math.prod(out_shape) == 0
        if not empty:
            check_depth(depth, 1)
        layout = ctx.cache["layout"] = (key, depth, slice_size, empty)
    _, depth, slice_size, empty = layout
    if empty:
        return None
    tuples = index_matrix(indices)
    message = bad_index_message(indices, tuples, "shape", out_shape)
    return tuples, out_shape[:depth], message, updates.reshape(len(tuples), slice_size)


def scatter_on_cpu(ctx, out_shape: tuple, indices: np.ndarray, updates: np.ndarray, op: str,
                   make_output: Callable[[], np.ndarray],
                   check_shapes: Callable[[], None], key: tuple = ()) -> np.ndarray:
    """The common tail of the CPU scatter kernels: validate every index, then get the
    output buffer from ``make_output`` and update it (nothing is written before)."""
    targets = _scatter_targets(ctx, out_shape, indices, updates, check_shapes, key)
    if targets is None:
        return make_output()
    tuples, dims, message, rows = targets
    offsets, keep = locate(tuples, dims, ctx.attrs["bad_indices_policy"], message)
    out = make_output()
    scatter_into(out, offsets, rows if keep is None else rows[keep], op)  # overflow to inf
    return out


def _scatter_on_gpu(ctx, out_shape: tuple, indices, updates, op: str,
                    make_output: Callable, check_shapes: Callable[[], None], key: tuple = ()):
    """The common tail of the GPU scatter kernels: a bad index is skipped unless the
    policy is "ERROR" (TensorFlow's GPU semantics)."""
    targets = _scatter_targets(ctx, out_shape, indices, updates, check_shapes, key)
    if targets is None:
        return make_output()
    tuples, dims, message, rows = targets
    offsets = gpu_index.locate(ctx.xp, tuples, dims, ctx.attrs["bad_indices_policy"], message,
                               for_kernels=True)
    out = make_output()
    gpu_index.scatter(ctx.xp, out, offsets, rows, op, ctx.deterministic)
    return out


# -- ScatterNd ------------------------------------------------------------------------------------
ScatterNd = register_op(
    "ScatterNd",
    inputs=["indices: Tindices", "updates: T", "shape: Tindices"],
    outputs=["output: T"],
    attrs={"T": TypeAttr(), "Tindices": TypeAttr((int16, int32, int64)),
           "bad_indices_policy": StringAttr("", BAD_INDICES_POLICIES)},
    doc="zeros(shape) (empty strings for string), then updates added at indices: "
        "output[indices[i, ..., :]] += updates[i, ...]; duplicates accumulate in index order "
        "(strings concatenate, bools OR). The inverse of GatherNd.")


@ScatterNd.shape_fn
def _scatter_nd_shape(ctx) -> TensorShape:
    """the shape held by `shape`; indices.shape[-1] <= rank and updates.shape == indices.shape[:-1] + shape[indices.shape[-1]:] where known."""
    updates = _with_rank_at_least(ctx, ctx.shape("updates"), 1, "updates")
    shape_rank = ctx.shape("shape").rank
    if shape_rank not in (None, 1):
        raise ctx.error(f"Shape must be rank 1 but is rank {shape_rank} for shape")
    return scatter_shape(ctx, ctx.shape("indices"), updates, ctx.shape_value("shape"), "input")


def _shape_dims(shape: np.ndarray) -> tuple:
    return tuple(shape.reshape(-1).tolist())


def _check_scatter_nd(ctx, indices, updates, shape, dims: tuple) -> None:
    """ScatterNd's own checks, before the common ones."""
    check_ranks(indices, updates)
    for d in dims:
        if d < 0:
            raise InvalidArgumentError(f"Dimension {d} must be >= 0")
    if not valid_empty(shape.size, indices.size, updates.size):
        raise InvalidArgumentError("Indices and updates specified for empty output shape")
    check_scatter_nd_dims(indices, updates, dims)
    if shape.ndim != 1:
        raise InvalidArgumentError("Shape must be a vector")
    # before the index offsets are computed in int64, which a huge shape overflows
    ctx.check_allocation(math.prod(dims), updates.dtype)


def _cpu_zeros(ctx, dims: tuple, dtype: np.dtype) -> np.ndarray:
    """ScatterNd's starting output on the CPU: zeros, or empty strings."""
    if dtype == object:
        out = np.empty(dims, object)
        out.fill(b"")
        return out
    # fresh zeros are pages the kernel zeroes on first touch: an update that touches
    # few of them (100k slots of 10M) costs those few, not a fill of all
    return ctx.zeros(dims, dtype)


@ScatterNd.kernel("cpu", Tindices=KERNEL_INDEX_TYPES)
def _scatter_nd(ctx, indices: np.ndarray, updates: np.ndarray, shape: np.ndarray) -> np.ndarray:
    dims = _shape_dims(shape)
    return scatter_on_cpu(ctx, dims, indices, updates, "add",
                          lambda: _cpu_zeros(ctx, dims, updates.dtype),  # size checked
                          lambda: _check_scatter_nd(ctx, indices, updates, shape, dims),
                          (shape.shape,))


@ScatterNd.kernel("gpu", T=GPU_TYPES, Tindices=KERNEL_INDEX_TYPES)
def _scatter_nd_gpu(ctx, indices, updates, shape):
    dims = _shape_dims(shape)
    return _scatter_on_gpu(ctx, dims, indices, updates, "add",
                           lambda: ctx.xp.zeros(dims, updates.dtype),
                           lambda: _check_scatter_nd(ctx, indices, updates, shape, dims),
                           (shape.shape,))


#: Below this, an output is a plain new array (the plan's buffer pool is for big ones).
_SMALL_BYTES = 1 << 16


@ScatterNd.prepare("cpu")
def _prepare_scatter_nd(spec):
    shape = spec.value(2)
    if shape is None or shape.ndim != 1:
        return None
    dims = tuple(int(d) for d in shape.tolist())
    dtype = spec.dtype(1)
    layout = static_layout(dims, spec.shape(0), spec.shape(1), dtype, "add")
    locate_indices = layout and locator(spec, 0, dims[:layout[0]], spec.attrs)
    if locate_indices is None or dtype == object or over_memory_limit(spec.ctx, dims, dtype):
        return None
    rows_shape, slice_size = layout[1:]
    write = row_writer("add", dtype, rows_shape, slice_size)
    small = math.prod(dims) * dtype.itemsize < _SMALL_BYTES
    column = column_adder(spec, 0, dims, layout, "add", dtype)
    if column is not None:
        def lean_column(ctx, indices, updates, shape_):
            out = np.zeros(dims, dtype) if small else ctx.zeros(dims, dtype)
            if column(out, indices, updates):
                return out
            return _scatter_nd(ctx, indices, updates, shape_)  # a bad index: its error
        return lean_column

    def lean(ctx, indices, updates, shape_):
        offsets = locate_indices(indices)
        if offsets is None:
            return _scatter_nd(ctx, indices, updates, shape_)
        out = np.zeros(dims, dtype) if small else ctx.zeros(dims, dtype)
        write(out, offsets, updates)
        return out
    return lean


# -- TensorScatterUpdate / Add / Sub / Min / Max ---------------------------------------------------
def _tensor_scatter_op(name: str, op: str, kernel_types: tuple, index_types: tuple, doc: str):
    """Declare one TensorScatter* op: the shared signature, shape rule, kernels and lean
    kernel."""
    definition = register_op(
        name,
        inputs=["tensor: T", "indices: Tindices", "updates: T"],
        outputs=["output: T"],
        attrs={"T": TypeAttr(), "Tindices": TypeAttr(index_types),
               "bad_indices_policy": StringAttr("", BAD_INDICES_POLICIES)},
        doc=doc + " Writes into `tensor`'s buffer when no one else can see it, else copies.",
        aliases=("tensor_scatter_nd_" + op,))
    definition.shape_fn(_tensor_scatter_shape)

    @definition.kernel("cpu", T=kernel_types, Tindices=KERNEL_INDEX_TYPES)
    def _kernel(ctx, tensor: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
        return scatter_on_cpu(ctx, tensor.shape, indices, updates, op,
                              lambda: _own_buffer(ctx, tensor),
                              lambda: check_tensor_scatter_inputs(tensor, indices, updates))

    @definition.kernel("gpu", T=non_string(kernel_types),
                       Tindices=KERNEL_INDEX_TYPES)
    def _gpu_kernel(ctx, tensor, indices, updates):
        return _scatter_on_gpu(ctx, tensor.shape, indices, updates, op,
                               lambda: _own_buffer(ctx, tensor),
                               lambda: check_tensor_scatter_inputs(tensor, indices, updates))

    @definition.prepare("cpu")
    def _prepare(spec):
        return _prepare_tensor_scatter(spec, op, _kernel)

    @definition.lower("cpu")
    def _lower(spec):
        return lower_tensor_scatter(spec, op)
    return definition


def _tensor_scatter_shape(ctx) -> TensorShape:
    """tensor.shape; indices.shape[-1] <= rank and updates.shape == indices.shape[:-1] + tensor.shape[indices.shape[-1]:] where known."""
    tensor = _with_rank_at_least(ctx, ctx.shape("tensor"), 1, "tensor")
    return scatter_shape(ctx, ctx.shape("indices"), ctx.shape("updates"), tensor, "tensor")


def _own_buffer(ctx, tensor):
    """``tensor``'s buffer when no one else can see it, else a copy; C-contiguous."""
    out = ctx.forward_or_copy(0, tensor)
    return out if out.flags.c_contiguous else ctx.xp.ascontiguousarray(out)


def _prepare_tensor_scatter(spec, op: str, full_kernel: Callable) -> Callable | None:
    """Static shapes that pass the checks: the lean kernel only locates and writes."""
    dims, index_shape, update_shape = spec.shape(0), spec.shape(1), spec.shape(2)
    layout = static_layout(dims, index_shape, update_shape, spec.dtype(0), op)
    locate_indices = layout and locator(spec, 1, dims[:layout[0]], spec.attrs)
    if locate_indices is None:
        return None
    rows_shape, slice_size = layout[1:]
    write = row_writer(op, spec.dtype(0), rows_shape, slice_size)
    column = column_adder(spec, 1, dims, layout, op, spec.dtype(0))
    if column is not None:
        def lean_column(ctx, tensor, indices, updates):
            out = ctx.forward_or_copy(0, tensor)
            if column(out, indices, updates):  # checks every index, then writes
                return out
            return full_kernel(ctx, tensor, indices, updates)  # nothing written: its error
        return lean_column

    def lean(ctx, tensor, indices, updates):
        offsets = locate_indices(indices)
        if offsets is None:  # a bad index: the full kernel reports (or skips) it
            return full_kernel(ctx, tensor, indices, updates)
        out = ctx.forward_or_copy(0, tensor)
        if not out.flags.c_contiguous:
            out = np.ascontiguousarray(out)
        write(out, offsets, updates)
        return out
    return lean


TensorScatterUpdate = _tensor_scatter_op(
    "TensorScatterUpdate", "update", ALL_TYPES, (int16, int32, int64, uint16),
    "`tensor` with output[indices[i, ..., :]] = updates[i, ...]; the last duplicate wins.")
TensorScatterAdd = _tensor_scatter_op(
    "TensorScatterAdd", "add", NUMBER_TYPES, KERNEL_INDEX_TYPES,
    "`tensor` with updates added at indices, duplicates in index order.")
TensorScatterSub = _tensor_scatter_op(
    "TensorScatterSub", "sub", NUMBER_TYPES, KERNEL_INDEX_TYPES,
    "`tensor` with updates subtracted at indices, duplicates in index order.")
TensorScatterMin = _tensor_scatter_op(
    "TensorScatterMin", "min", REAL_NUMBER_TYPES, KERNEL_INDEX_TYPES,
    "`tensor` with output[index] = min(output[index], update); a NaN update never wins, a NaN "
    "already there stays.")
TensorScatterMax = _tensor_scatter_op(
    "TensorScatterMax", "max", REAL_NUMBER_TYPES, KERNEL_INDEX_TYPES,
    "`tensor` with output[index] = max(output[index], update); a NaN update never wins, a NaN "
    "already there stays.")


# -- GatherNd ----------------------------------------------------------------------------------------
GatherNd = register_op(
    "GatherNd",
    inputs=["params: Tparams", "indices: Tindices"],
    outputs=["output: Tparams"],
    attrs={"Tparams": TypeAttr(), "Tindices": TypeAttr((int16, int32, int64)),
           "batch_dims": IntAttr(0), "bad_indices_policy": StringAttr("")},
    doc="The slices of params at index tuples: output[i, ..., :] = params[indices[i, ..., :]]; "
        "the first batch_dims dims of params and indices are batch dims (tf.gather_nd). Under "
        "bad_indices_policy='IGNORE' a bad index gives zeros. The inverse of ScatterNd.")


def _check_batch_dims(error: Callable[[str], Exception], batch_dims: int,
                      params_rank: int | None, indices_rank: int | None) -> None:
    """tf.gather_nd's checks of batch_dims against the ranks, where known."""
    if batch_dims < 0:
        raise error("tf.gather_nd does not allow negative batch_dims.")
    if batch_dims == 0:
        return
    if indices_rank is not None and batch_dims >= indices_rank:
        raise error(f"Argument `batch_dims` = {batch_dims} must be less than rank(`indices`) = "
                    f"{indices_rank}")
    if params_rank is not None and batch_dims >= params_rank:
        raise error(f"Argument `batch_dims` = {batch_dims} must be less than rank(`params`) = "
                    f"{params_rank}")


@GatherNd.shape_fn
def _gather_nd_shape(ctx) -> TensorShape:
    """params.shape[:b] + indices.shape[b:-1] + params.shape[b + indices.shape[-1]:] with b = batch_dims; indices.shape[-1] <= rank(params) - b."""
    params, indices, b = ctx.shape("params"), ctx.shape("indices"), ctx.attr("batch_dims")
    _check_batch_dims(ctx.error, b, params.rank, indices.rank)
    _with_rank_at_least(ctx, indices, 1, "indices")
    if params.rank is None or indices.rank is None or indices[-1] is None:
        return TensorShape(None)
    depth = indices[-1]
    if b + depth > params.rank:
        raise ctx.error(f"indices.shape[-1] must be <= params.rank, but saw indices shape: "
                        f"{indices} and params shape: {params}")
    if b:
        batch, size, inner = (_num_elements(s) for s in (params[:b], indices, indices[b:]))
        if None not in (batch, size, inner) and size != batch * inner:
            raise ctx.error(f"Cannot reshape a tensor with {size} elements to shape "
                            f"{debug_string([batch] + indices.as_list()[b:])} "
                            f"({batch * inner} elements)")
    return params[:b].concatenate(indices[b:-1]).concatenate(params[b + depth:])


def _gather_layout(ctx, params, indices) -> tuple[int, int, int, tuple]:
    """TensorFlow's DoGatherNd checks of the shapes: ``(index depth, number of tuples,
    slice size, result shape)``, once the result's memory is checked."""
    if params.ndim < 1:
        raise InvalidArgumentError("params must be at least a vector")
    if indices.ndim < 1:
        raise InvalidArgumentError("indices must be at least a vector")
    depth = indices.shape[-1]
    if depth > params.ndim:
        raise InvalidArgumentError(f"index innermost dimension length must be <= params rank; "
                                   f"saw: {depth} vs. {params.ndim}")
    num_tuples = math.prod(indices.shape[:-1])
    int_max, index_max = int(np.iinfo(np.int32).max), int(np.iinfo(indices.dtype).max)
    if num_tuples > int_max:
        raise InvalidArgumentError(f"indices has too many elements for int indexing: "
                                   f"{num_tuples} > {int_max}")
    if params.size > index_max:
        raise InvalidArgumentError(f"params.NumElements() too large for {indices.dtype.name} "
                                   f"indexing: {params.size} > {index_max}")
    slice_size = math.prod(params.shape[depth:])
    if slice_size > index_max:
        raise InvalidArgumentError(f"slice size is too large for indexing: {slice_size} > "
                                   f"{index_max}")
    result_shape = tuple(indices.shape[:-1]) + tuple(params.shape[depth:])
    ctx.check_allocation(math.prod(result_shape), params.dtype)
    return depth, num_tuples, slice_size, result_shape


def _gather_tuples(ctx, params, indices, depth: int) -> tuple:
    """The index tuples ``[n, depth]`` of a gather that reads something, and the message
    for a bad one."""
    if params.size == 0:
        raise InvalidArgumentError(f"Requested more than 0 entries, but params is empty.  "
                                   f"Params shape: {debug_string(params.shape)}")
    check_depth(depth, 0)
    tuples = index_matrix(indices)
    return tuples, bad_index_message(indices, tuples, "param shape", params.shape,
                                     f", node name: {ctx.node_name}")


def _cpu_empty(ctx, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """A CPU gather's output: from the plan's pool (strings: a fresh object array)."""
    return np.empty(shape, object) if dtype == object else ctx.empty(shape, dtype)


def gather_nd(ctx, params: np.ndarray, indices: np.ndarray, policy: str,
              out_shape: tuple | None = None) -> np.ndarray:
    """TensorFlow's DoGatherNd on the CPU: the slices of ``params`` at the index tuples of
    ``indices``.

    ``out_shape`` (same number of elements) shapes the result; it is always a
    fresh array that owns its memory, so later kernels may write into it. Every
    index is validated before the output is taken from the plan's pool.
    """
    depth, num_tuples, slice_size, shape = _gather_layout(ctx, params, indices)
    shape = shape if out_shape is None else out_shape
    if num_tuples == 0:
        return _cpu_empty(ctx, shape, params.dtype)
    tuples, message = _gather_tuples(ctx, params, indices, depth)
    if params.dtype != object and parallel_gather.splits(
            num_tuples, num_tuples * slice_size * params.dtype.itemsize):
        # big: each intra-op thread (one, if so configured) checks, locates and copies its
        # own rows in one pass (ops/parallel_gather.py); a bad index (False) is reported
        # below, in its words
        out = ctx.empty(shape, params.dtype)
        if parallel_gather.gather(out.reshape(num_tuples, slice_size),
                                  params.reshape(-1, slice_size), tuples, params.shape[:depth],
                                  kernel_threads(ctx), policy == "IGNORE"):
            return out
    offsets, keep = locate(tuples, params.shape[:depth], policy, message)
    out = _cpu_empty(ctx, shape, params.dtype)
    gather_rows(out.reshape(num_tuples, slice_size), params.reshape(-1, slice_size), offsets,
                keep)
    return out


def _gather_nd_on_gpu(ctx, params, indices, policy: str, out_shape: tuple | None = None):
    """:func:`gather_nd` on a GPU: a bad index gives zeros unless the policy is "ERROR"."""
    depth, num_tuples, slice_size, shape = _gather_layout(ctx, params, indices)
    shape = shape if out_shape is None else out_shape
    if num_tuples == 0:
        return ctx.xp.empty(shape, dtype=params.dtype)
    tuples, message = _gather_tuples(ctx, params, indices, depth)
    offsets = gpu_index.locate(ctx.xp, tuples, params.shape[:depth], policy, message,
                               for_kernels=True)
    out = ctx.xp.empty(shape, dtype=params.dtype)
    gpu_index.gather(ctx.xp, params.reshape(-1, slice_size), offsets,
                     out.reshape(num_tuples, slice_size))
    return out


def _batch_index_tuples(xp, batch_shape: tuple, indices: np.ndarray,
                        batch_dims: int) -> np.ndarray:
    """tf.gather_nd's batch_dims rewrite: prepend each batch position (in ``batch_shape``,
    params.shape[:b]) to its index tuples, giving ``[prod(batch_shape),
    *indices.shape[b:-1], b + depth]``."""
    batch = math.prod(batch_shape)
    inner = indices.shape[batch_dims:]
    if indices.size != batch * math.prod(inner):
        raise InvalidArgumentError(f"Input to reshape is a tensor with {indices.size} values, "
                                   f"but the requested shape has {batch * math.prod(inner)}")
    flat = indices.reshape((batch,) + inner).astype(np.int64)
    grid = xp.indices(batch_shape, dtype=np.int64).reshape(batch_dims, batch).T
    grid = xp.broadcast_to(grid.reshape((batch,) + (1,) * (len(inner) - 1) + (batch_dims,)),
                           (batch,) + inner[:-1] + (batch_dims,))
    return xp.concatenate([grid, flat], axis=-1)


def _with_batch_positions(xp, ctx, params, indices) -> tuple:
    """GatherNd's index tuples and output shape (None: the gather's own) once batch_dims
    are checked: under batch_dims b > 0, the tuples with their batch position prepended."""
    b = ctx.attrs["batch_dims"]
    _check_batch_dims(InvalidArgumentError, b, params.ndim, indices.ndim)
    if b == 0:
        return indices, None
    tuples = _batch_index_tuples(xp, params.shape[:b], indices, b)
    depth = tuples.shape[-1]
    out_shape = params.shape[:b] + tuples.shape[1:-1] + params.shape[depth:] \
        if depth <= params.ndim else None
    return tuples, out_shape


@GatherNd.kernel("cpu", bad_indices_policy=BAD_INDICES_POLICIES)
def _gather_nd(ctx, params: np.ndarray, indices: np.ndarray) -> np.ndarray:
    tuples, out_shape = _with_batch_positions(np, ctx, params, indices)
    return gather_nd(ctx, params, tuples, ctx.attrs["bad_indices_policy"], out_shape)


@GatherNd.kernel("gpu", Tparams=GPU_TYPES, Tindices=KERNEL_INDEX_TYPES,
                 bad_indices_policy=BAD_INDICES_POLICIES)
def _gather_nd_gpu(ctx, params, indices):
    tuples, out_shape = _with_batch_positions(ctx.xp, ctx, params, indices)
    return _gather_nd_on_gpu(ctx, params, tuples, ctx.attrs["bad_indices_policy"], out_shape)


@GatherNd.prepare("cpu")
def _prepare_gather_nd(spec):
    """Static shapes (batch_dims 0): the lean kernel locates and takes, nothing else."""
    params_shape, index_shape = spec.shape(0), spec.shape(1)
    dtype = spec.dtype(0)
    if spec.attrs["batch_dims"] or params_shape is None or index_shape is None \
            or not index_shape or dtype == object:
        return None
    depth = index_shape[-1]
    num_tuples, size = math.prod(index_shape[:-1]), math.prod(params_shape)
    if not 1 <= depth <= min(len(params_shape), MAX_INDEX_DEPTH) or num_tuples == 0 \
            or size == 0 or size > np.iinfo(spec.dtype(1)).max \
            or num_tuples > np.iinfo(np.int32).max:
        return None
    out_shape = tuple(index_shape[:-1]) + tuple(params_shape[depth:])
    locate_indices = locator(spec, 1, tuple(params_shape[:depth]), spec.attrs)
    if locate_indices is None or over_memory_limit(spec.ctx, out_shape, dtype):
        return None
    slice_size = math.prod(params_shape[depth:])
    rows = (num_tuples, slice_size) if slice_size > 1 else (num_tuples,)
    source_shape = (-1, slice_size) if slice_size > 1 else (-1,)
    new = spec.allocator(out_shape, dtype)
    if parallel_gather.splits(num_tuples, num_tuples * slice_size * dtype.itemsize):
        constant = spec.value(1)  # constant indices: their offsets, located once
        dims = tuple(params_shape[:depth]) if constant is None \
            else (math.prod(params_shape[:depth]),)

        def big(ctx, params, indices):
            # each intra-op thread checks, locates and copies its rows (ops/parallel_gather.py)
            tuples = indices.reshape(num_tuples, depth) if constant is None \
                else locate_indices(indices).reshape(num_tuples, 1)
            out = new()
            if parallel_gather.gather(out.reshape(num_tuples, slice_size),
                                      params.reshape(-1, slice_size), tuples, dims,
                                      kernel_threads(ctx)):
                return out
            return _gather_nd(ctx, params, indices)  # a bad index, in its words
        return big

    def lean(ctx, params, indices):
        offsets = locate_indices(indices)
        if offsets is None:
            return _gather_nd(ctx, params, indices)
        out = new()
        # every offset is valid: "clip" skips numpy's own check
        np.take(params.reshape(source_shape), offsets, axis=0, out=out.reshape(rows),
                mode="clip")
        return out
    return lean


GatherNd.lower("cpu")(lower_gather_nd)


# -- gradients -----------------------------------------------------------------------------------
# Each rule keeps the forward's bad_indices_policy: an update that IGNORE (or a GPU by
# default) skipped gets zero, a read it skipped contributes nothing, and what the CPU
# rejects in the forward is rejected in the gradient too. Indices and shapes get None.
def _kernel_indices(scope, indices):
    """``indices`` as int32 or int64, which every scatter and gather has kernels for
    (int16 and uint16 widen to int32, values unchanged)."""
    return indices if indices.dtype in KERNEL_INDEX_TYPES else scope.cast(indices, int32)


def _shape_of(scope, t, dtype):
    """``t``'s shape as a 1-D tensor of ``dtype``: a constant when static."""
    if t.shape.is_fully_defined():
        return scope.constant(np.array(t.shape.as_list(), dtype.as_numpy_dtype))
    return scope.shape(t, out_type=dtype)


@ScatterNd.gradient
def _scatter_nd_grad(g, grad):
    """updates[i] was added at output[indices[i]]: its gradient is read back there."""
    s, policy = g.scope, g.attr("bad_indices_policy")
    indices = _kernel_indices(s, g.op.inputs[0])
    return [None, s.gather_nd(grad, indices, bad_indices_policy=policy), None]


def _scatter_add_grad(g, grad, sign: int):
    s, policy = g.scope, g.attr("bad_indices_policy")
    indices = _kernel_indices(s, g.op.inputs[1])
    read = s.gather_nd(grad, indices, bad_indices_policy=policy)
    return [grad, None, read if sign > 0 else s.neg(read)]


@TensorScatterAdd.gradient
def _tensor_scatter_add_grad(g, grad):
    return _scatter_add_grad(g, grad, +1)


@TensorScatterSub.gradient
def _tensor_scatter_sub_grad(g, grad):
    return _scatter_add_grad(g, grad, -1)


@TensorScatterUpdate.gradient
def _tensor_scatter_update_grad(g, grad):
    """The tensor's gradient is zero where any update landed; of the updates that land on
    one slot, only the forward's winner (the last in index order, on every device) gets
    it: TensorFlow gives every duplicate the gradient."""
    s, policy = g.scope, g.attr("bad_indices_policy")
    tensor, indices, updates = g.op.inputs
    indices = _kernel_indices(s, indices)
    cleared = s.tensor_scatter_update(grad, indices, s.zeros_like(updates),
                                      bad_indices_policy=policy)
    winners = s.create_op(ScatterWinners, indices, _shape_of(s, tensor, indices.dtype),
                          bad_indices_policy=policy)
    return [cleared, None, s.gather_nd(grad, winners, bad_indices_policy="IGNORE")]


def _scatter_min_max_grad(g, grad):
    """An indicator of the winners, ties split evenly: the k participants that equal the
    result (the tensor's element and the updates landing on it) get grad / k each. A NaN
    already in the tensor stays, so it gets all of it; TensorFlow gives it NaN."""
    s, policy = g.scope, g.attr("bad_indices_policy")
    tensor, indices, updates = g.op.inputs
    indices = _kernel_indices(s, indices)
    tensor_share, update_share = s.create_op(
        MinMaxShares, tensor, indices, updates, g.op.outputs[0], bad_indices_policy=policy)
    read = s.gather_nd(grad, indices, bad_indices_policy="IGNORE")
    return [s.mul(grad, tensor_share), None, s.mul(read, update_share)]


TensorScatterMin.gradient(_scatter_min_max_grad)
TensorScatterMax.gradient(_scatter_min_max_grad)


@GatherNd.gradient
def _gather_nd_grad(g, grad):
    """A scatter-add of grad into zeros of params' shape (duplicate reads sum); the rows of
    a depth-1 gather as a gf.IndexedSlices."""
    s, policy, b = g.scope, g.attr("bad_indices_policy"), g.attr("batch_dims")
    params, indices = g.op.inputs
    indices = _kernel_indices(s, indices)
    depth = indices.shape[-1] if indices.shape.rank else None
    # Under IGNORE an out-of-range read gave zeros and must contribute nothing. Rows
    # holding its index would carry it into every consumer (densifying on the CPU and
    # a sparse optimizer update reject it), and masking them needs a valid row to
    # point at, which an empty params lacks: IGNORE gets the dense scatter below, which
    # skips exactly those reads.
    if isinstance(grad, IndexedSlices):  # a gather of this gather: compose or densify
        if b == 0 and depth == 1 and policy != "IGNORE" and indices.shape.rank == 2:
            return [_composed_rows(s, grad, params, indices), None]
        grad = grad.as_output()
    if b == 0 and depth == 1 and policy != "IGNORE":
        return [_gathered_rows(s, grad, params, indices), None]
    shape = _shape_of(s, params, indices.dtype)
    if b == 0 and depth == 0:  # every tuple read all of params
        return [s.reduce_sum(s.reshape(grad, s.concat([s.constant([-1], indices.dtype), shape],
                                                      0)), [0]), None]
    if b:
        indices = s.create_op(BatchIndexTuples, shape, indices, batch_dims=b)
        shape = _shape_of(s, params, int64)
    elif indices.shape.rank == 1:  # one tuple: ScatterNd wants it as a batch of one
        indices, grad = s.expand_dims(indices, 0), s.expand_dims(grad, 0)
    return [s.scatter_nd(indices, grad, shape, bad_indices_policy=policy), None]


_gather_nd_grad.takes_indexed_slices = True  # graphflow/gradients.py densifies for others


def _composed_rows(s, grad: IndexedSlices, params, indices):
    """Rows of this gather's output (an IndexedSlices gradient) as rows of params: output
    row k is params row indices[k, 0], so the slices' row numbers map through indices."""
    flat = s.reshape(indices, [-1])
    rows = s.gather_nd(flat, s.expand_dims(grad.indices, -1))
    return IndexedSlices(grad.values, rows, _shape_of(s, params, flat.dtype))


def _gathered_rows(s, grad, params, indices):
    """grad as rows of params: values [n] + params.shape[1:], indices [n]."""
    dense_shape = _shape_of(s, params, indices.dtype)
    values = grad
    if indices.shape.rank != 2:
        tail = params.shape[1:]
        rows = [-1] + tail.as_list() if tail.is_fully_defined() else s.concat(
            [s.constant([-1], indices.dtype), s.slice(dense_shape, [1], [-1])], 0)
        values = s.reshape(grad, rows)
    return IndexedSlices(values, s.reshape(indices, [-1]), dense_shape)


# -- the gradients' internal ops -------------------------------------------------------------
ScatterWinners = register_op(
    "_ScatterWinners",
    inputs=["indices: Tindices", "shape: Tindices"],
    outputs=["winners: Tindices"],
    attrs={"Tindices": TypeAttr(KERNEL_INDEX_TYPES),
           "bad_indices_policy": StringAttr("", BAD_INDICES_POLICIES)},
    doc="`indices` where an index tuple is the last (in index order) of the valid tuples "
        "naming its slice of `shape`, the update an 'update' scatter leaves in place, and "
        "-1s elsewhere: gather_nd(grad, winners, 'IGNORE') is the updates' gradient. Bad "
        "tuples are checked as the forward scatter checks them on the device.")


@ScatterWinners.shape_fn
def _scatter_winners_shape(ctx) -> TensorShape:
    """same as `indices`."""
    return _with_rank_at_least(ctx, ctx.shape("indices"), 1, "indices")


def _gradient_tuples(ctx, indices, dims: tuple) -> tuple:
    """``[n, depth]`` index tuples into ``dims``, checked as the forward scatter checks
    their shapes, and the message for a bad one."""
    if indices.ndim < 1:
        raise InvalidArgumentError(f"Indices shape must have rank at least one. "
                                   f"Found:{debug_string(indices.shape)}")
    depth = indices.shape[-1]
    if depth > len(dims):
        raise InvalidArgumentError(f"indices.shape[-1] must be <= shape rank: indices.shape[-1] "
                                   f"= {depth} but shape {debug_string(dims)} has rank "
                                   f"{len(dims)}")
    tuples = index_matrix(indices)
    return tuples, bad_index_message(indices, tuples, "shape", dims)


def _located_on_cpu(ctx, indices, dims: tuple) -> tuple:
    """``[n, depth]`` index tuples and their offsets into ``dims`` (-1: skipped), checked
    as the forward CPU scatter checks them."""
    tuples, message = _gradient_tuples(ctx, indices, dims)
    offsets, keep = locate(tuples, dims[:tuples.shape[1]], ctx.attrs["bad_indices_policy"],
                           message)
    if keep is not None:
        kept, offsets = offsets, np.full(len(tuples), -1, np.int64)
        offsets[keep] = kept
    return tuples, offsets


def _located_on_gpu(ctx, indices, dims: tuple) -> tuple:
    """:func:`_located_on_cpu` as the forward GPU scatter checks them."""
    tuples, message = _gradient_tuples(ctx, indices, dims)
    return tuples, gpu_index.locate(ctx.xp, tuples, dims[:tuples.shape[1]],
                                    ctx.attrs["bad_indices_policy"], message)


def _winners(xp, indices, tuples, offsets, dims: tuple):
    """``indices`` where a tuple is its slot's last writer, -1s elsewhere."""
    wins = gpu_index.last_writers(xp, offsets, math.prod(dims[:tuples.shape[1]]))
    return xp.where(wins[:, None], tuples, indices.dtype.type(-1)).reshape(indices.shape)


@ScatterWinners.kernel("cpu")
def _scatter_winners(ctx, indices, shape):
    dims = _shape_dims(shape)
    tuples, offsets = _located_on_cpu(ctx, indices, dims)
    return _winners(np, indices, tuples, offsets, dims)


@ScatterWinners.kernel("gpu")
def _scatter_winners_gpu(ctx, indices, shape):
    dims = _shape_dims(shape)
    tuples, offsets = _located_on_gpu(ctx, indices, dims)
    return _winners(ctx.xp, indices, tuples, offsets, dims)


ScatterWinners.not_differentiable()

MinMaxShares = register_op(
    "_ScatterMinMaxShares",
    inputs=["tensor: T", "indices: Tindices", "updates: T", "output: T"],
    outputs=["tensor_share: T", "update_share: T"],
    attrs={"T": TypeAttr(FLOAT_TYPES), "Tindices": TypeAttr(KERNEL_INDEX_TYPES),
           "bad_indices_policy": StringAttr("", BAD_INDICES_POLICIES)},
    doc="The share of TensorScatterMin/Max's `output` each participant owns: of the k "
        "that equal it (the tensor's element, and the valid updates landing on it), 1/k "
        "each, 0 for the others; a NaN in `tensor` (which stays) owns its element.")


@MinMaxShares.shape_fn
def _min_max_shares_shape(ctx) -> list:
    """[tensor.shape, updates.shape]."""
    return [ctx.shape("tensor").merge_with(ctx.shape("output")), ctx.shape("updates")]


@MinMaxShares.kernel("cpu")
def _min_max_shares(ctx, tensor, indices, updates, output):
    tuples, offsets = _located_on_cpu(ctx, indices, tensor.shape)
    return _shares(np, tensor, tuples, offsets, updates, output)


@MinMaxShares.kernel("gpu")
def _min_max_shares_gpu(ctx, tensor, indices, updates, output):
    tuples, offsets = _located_on_gpu(ctx, indices, tensor.shape)
    return _shares(ctx.xp, tensor, tuples, offsets, updates, output)


def _shares(xp, tensor, tuples, offsets, updates, output) -> tuple:
    """(tensor's share, updates' share) of ``output``, given the located updates."""
    slice_size = math.prod(tensor.shape[tuples.shape[1]:])
    current, result = tensor.reshape(-1), output.reshape(-1)
    rows = updates.reshape(len(tuples), slice_size)
    tensor_wins = (current == result) | xp.isnan(current)
    hit = offsets >= 0
    # element offsets [n, slice_size] of every update (skipped ones point at 0, unused)
    targets = xp.where(hit, offsets, 0)[:, None] * slice_size + xp.arange(slice_size)
    update_wins = hit[:, None] & (rows == result[targets]) if result.size else \
        xp.zeros(rows.shape, bool)
    counts = tensor_wins.astype(np.int64)
    won = targets[update_wins]
    if won.size:
        counts = counts + xp.bincount(won, minlength=result.size)
    share = 1.0 / xp.maximum(counts, 1)
    dtype = tensor.dtype
    return (xp.where(tensor_wins, share, 0.0).astype(dtype).reshape(tensor.shape),
            xp.where(update_wins, share[targets] if result.size else 0.0, 0.0)
            .astype(dtype).reshape(updates.shape))


MinMaxShares.not_differentiable()

BatchIndexTuples = register_op(
    "_BatchIndexTuples",
    inputs=["params_shape: Tindices", "indices: Tindices"],
    outputs=["tuples: int64"],
    attrs={"Tindices": TypeAttr(KERNEL_INDEX_TYPES), "batch_dims": IntAttr(minimum=1)},
    doc="GatherNd's index tuples with their batch position prepended: tuples[i..., :] = "
        "(batch position of i) + indices[i..., :], shaped params_shape[:batch_dims] + "
        "indices.shape[batch_dims:-1] + [batch_dims + depth]: what a batch_dims GatherNd "
        "reads, as full index tuples into params (its gradient scatters along them).")


@BatchIndexTuples.shape_fn
def _batch_index_tuples_shape(ctx) -> TensorShape:
    """params_shape[:b] + indices.shape[b:-1] + [b + indices.shape[-1]]."""
    b, indices = ctx.attr("batch_dims"), ctx.shape("indices")
    batch = ctx.shape_value("params_shape")
    batch = batch[:b] if batch.rank is not None else TensorShape([None] * b)
    if indices.rank is None:
        return TensorShape(None)
    depth = indices[-1]
    return batch.concatenate(indices[b:-1]).concatenate(
        TensorShape([None if depth is None else b + depth]))


@BatchIndexTuples.kernel("cpu")
@BatchIndexTuples.kernel("gpu")
def _batch_index_tuples_kernel(ctx, params_shape, indices):
    b = ctx.attrs["batch_dims"]
    batch_shape = tuple(int(d) for d in params_shape.reshape(-1).tolist()[:b])
    _check_batch_dims(InvalidArgumentError, b, len(params_shape.reshape(-1)), indices.ndim)
    tuples = _batch_index_tuples(ctx.xp, batch_shape, indices, b)
    return tuples.reshape(batch_shape + tuple(indices.shape[b:-1]) + (tuples.shape[-1],))


BatchIndexTuples.not_differentiable()


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("ScatterNd", "TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub",
           "TensorScatterMin", "TensorScatterMax")
same_as_tf("GatherNd", dropped=("batch_dims",))  # TF's has none: its export lowers it first


__all__ = ["ScatterNd", "TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub",
           "TensorScatterMin", "TensorScatterMax", "GatherNd", "gather_nd", "scatter_on_cpu",
           "scatter_shape", "BAD_INDICES_POLICIES"]
