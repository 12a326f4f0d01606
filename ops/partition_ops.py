"""DynamicPartition, DynamicStitch and ParallelDynamicStitch, with TensorFlow's semantics.

Partition splits the slices of ``data`` into ``num_partitions`` outputs by an id
per slice; stitch scatters slices back into one tensor by index. Together they
route the rows of a tensor through different computations and reassemble it::

    parts = scope.dynamic_partition(x, p, num_partitions=2)
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), p, num_partitions=2)
    y = scope.dynamic_stitch(rows, [parts[0], scope.add(parts[1], 1.0)])

On the CPU both kernels are compiled loops (ops/partition_loops.py): partition
counts the rows of each partition, checking every id, then places each row;
stitch checks every index, then writes the inputs' rows in order. On a GPU both
need sizes on the host (the output shapes depend on the values): partition
transfers the k partition sizes and stitch the smallest and largest index, one
transfer per node, which also validates them; string tensors stay on the CPU.
"""
from __future__ import annotations

import numpy as np

from graphflow.dtypes import NON_STRING_TYPES
from graphflow.errors import InvalidArgumentError
from graphflow.inference import value_bounds
from graphflow.registry import IntAttr, TypeAttr, register_op, same_as_tf
from graphflow.shapes import TensorShape, debug_string

from . import gpu_index, partition_loops

GPU_TYPES = NON_STRING_TYPES


# -- shared shape rules ----------------------------------------------------------------
def _merge_prefix(ctx, shape: TensorShape, prefix: TensorShape, what: str) -> None:
    """TensorFlow's MergePrefix: ``shape`` starts with ``prefix`` as far as both are known."""
    if shape.rank is None or prefix.rank is None:
        return
    if shape.rank < prefix.rank:
        raise ctx.error(f"Shape must be at least rank {prefix.rank} but is rank {shape.rank}: "
                        f"{what}")
    for a, b in zip(shape.as_list(), prefix.as_list()):
        if a is not None and b is not None and a != b:
            raise ctx.error(f"Dimensions must be equal, but are {a} and {b}: {what}")


def _suffix(shape: TensorShape, start: int) -> TensorShape:
    """``shape[start:]``; unknown rank stays unknown."""
    return TensorShape(None) if shape.rank is None else TensorShape(shape.as_list()[start:])


def _slice_position(shape: tuple, flat: int) -> str:
    """TensorFlow's SliceDebugString: ``""``, ``[4]`` or ``[1,0]`` for a flat position."""
    if not shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


# -- DynamicPartition --------------------------------------------------------------------
DynamicPartition = register_op(
    "DynamicPartition",
    inputs=["data: T", "partitions: int32"],
    outputs=["outputs: num_partitions * T"],
    attrs={"T": TypeAttr(), "num_partitions": IntAttr(minimum=1)},
    doc="Output i holds the slices data[j, ...] with partitions[j] == i, in their original "
        "order; partitions.shape must be a prefix of data.shape and every id in "
        "[0, num_partitions). Reference::\n\n"
        "    outputs = [[] for _ in range(num_partitions)]\n"
        "    for j in np.ndindex(partitions.shape):\n"
        "        outputs[partitions[j]].append(data[j])")


@DynamicPartition.shape_fn
def _dynamic_partition_shape(ctx):
    """each output is [None] + data.shape[rank(partitions):]; data.shape must start with
    partitions.shape. The first dim stays unknown even for constant partitions, as in
    TensorFlow."""
    data, partitions = ctx.shape("data"), ctx.shape("partitions")
    k = ctx.attr("num_partitions")
    if partitions.rank is None:
        return [TensorShape(None)] * k
    _merge_prefix(ctx, data, partitions,
                  f"data.shape must start with partitions.shape, got data.shape = {data}, "
                  f"partitions.shape = {partitions}")
    return [TensorShape([None]).concatenate(_suffix(data, partitions.rank))] * k


def _check_partition_shape(data, partitions) -> None:
    if data.shape[:partitions.ndim] != partitions.shape:
        raise InvalidArgumentError(
            f"data.shape must start with partitions.shape, got data.shape = "
            f"{debug_string(data.shape)}, partitions.shape = {debug_string(partitions.shape)}")


def _partition_rows(ctx, data, partitions):
    """``data`` seen as one row per id, once the memory for the outputs is checked."""
    rows = data.reshape((partitions.size,) + data.shape[partitions.ndim:])
    ctx.check_allocation(rows.size, rows.dtype)
    return rows


@DynamicPartition.kernel("cpu")
def _dynamic_partition(ctx, data, partitions):
    """Compiled counting sort (ops/partition_loops.py); the outputs are views of one
    buffer, in partition order."""
    k = ctx.attrs["num_partitions"]
    data, partitions = np.asarray(data), np.asarray(partitions)
    _check_partition_shape(data, partitions)
    ids = partition_loops.readonly(np.ascontiguousarray(partitions).reshape(-1))
    _check_partition_ids(ids, partitions.shape, k)
    ctx.check_allocation(data.size, data.dtype)  # the outputs, before a contiguous copy
    rows = np.ascontiguousarray(data).reshape((ids.size,) + data.shape[partitions.ndim:])
    return partition_loops.partition(rows, ids, k, ctx.empty)


@DynamicPartition.kernel("gpu", T=GPU_TYPES)
def _dynamic_partition_gpu(ctx, data, partitions):
    """Partition sizes by one bincount (a bad id counts in an extra bin), one transfer of
    the sizes, then a stable sort of the ids, one gather and views of the result. Two
    partitions: one running count of the ones gives the sizes and places every row
    (gpu_index.two_way_partition)."""
    k, xp = ctx.attrs["num_partitions"], ctx.xp
    _check_partition_shape(data, partitions)
    ids = partitions.reshape(-1)
    if k == 2 and ids.size:  # a mask: one running count of the ones, no bincount, no sort
        ones = xp.cumsum(ids == 1, dtype=np.int64)
        largest, count = (int(v) for v in gpu_index.to_host(
            xp.stack([ids.view(np.uint32).max().astype(np.int64), ones[-1]])))
        if largest >= k:
            j = int(xp.argmax(ids.view(np.uint32) >= k))
            raise _bad_id_error(partitions.shape, int(ids[j]), j, k)
        rows = _partition_rows(ctx, data, partitions)
        zeros = ids.size - count
        return xp.split(gpu_index.two_way_partition(xp, rows, ones, zeros), [zeros])
    valid = ids.view(np.uint32) < k
    sizes = gpu_index.to_host(xp.bincount(xp.where(valid, ids, k), minlength=k + 1)) \
        if ids.size else np.zeros(k + 1, np.int64)  # cupy's bincount rejects an empty input
    if sizes[k]:
        j = int(xp.argmin(valid))
        raise _bad_id_error(partitions.shape, int(ids[j]), j, k)
    rows = _partition_rows(ctx, data, partitions)
    if k == 1:
        return [rows.copy()]
    ordered = rows[gpu_index.stable_argsort(xp, ids)]
    return xp.split(ordered, np.cumsum(sizes[:k - 1]).tolist())


def _check_partition_ids(ids: np.ndarray, shape: tuple, k: int) -> None:
    """Raise TensorFlow's error for the first of the int32 ``ids`` outside [0, k)."""
    j = partition_loops.find_bad_id(ids, k)
    if j >= 0:
        raise _bad_id_error(shape, int(ids[j]), j, k)


def _bad_id_error(shape: tuple, value: int, j: int, k: int) -> InvalidArgumentError:
    """TensorFlow's error for the id ``value`` at flat position ``j`` of partitions."""
    return InvalidArgumentError(
        f"partitions{_slice_position(shape, j)} = {value} is not in [0, {k})")


# -- DynamicStitch, ParallelDynamicStitch -------------------------------------------------
_STITCH_DOC = (
    "merged[indices[m][i, ..., j], ...] = data[m][i, ..., j, ...]; data[m].shape must be "
    "indices[m].shape + a shape common to all m, and merged.shape = [max(indices) + 1] + "
    "that shape (first dim 0 when every indices input is empty). Rows that no index names "
    "are zero (False, empty string), as on TensorFlow's CPU; a negative index is an error. "
    "{order} Reference::\n\n"
    "    for m in range(N):\n"
    "        for pos in np.ndindex(indices[m].shape):\n"
    "            merged[indices[m][pos]] = data[m][pos]")


def _stitch_op(name: str, order: str):
    """Declare one stitch op: the shared signature, with its duplicate order in the doc."""
    return register_op(name, inputs=["indices: N * int32", "data: N * T"],
                       outputs=["merged: T"], attrs={"N": IntAttr(minimum=1), "T": TypeAttr()},
                       doc=_STITCH_DOC.format(order=order))


DynamicStitch = _stitch_op(
    "DynamicStitch", "Values merge in order: for duplicate indices the later (m, i) wins.")
ParallelDynamicStitch = _stitch_op(
    "ParallelDynamicStitch", "For duplicate indices any one of the values may win (here the "
    "later one, as DynamicStitch).")
DynamicPartition.checks_allocations = DynamicStitch.checks_allocations = \
    ParallelDynamicStitch.checks_allocations = True  # ctx.empty / check_allocation


@DynamicStitch.shape_fn
@ParallelDynamicStitch.shape_fn
def _dynamic_stitch_shape(ctx):
    """[max(indices) + 1] + S where data[m].shape = indices[m].shape + S for every m; the
    first dim is known when the largest index of every indices input is known at build
    time (a constant, a Range or Fill of constants, never computed when large)."""
    index_shapes, data_shapes = ctx.shape("indices"), ctx.shape("data")
    bounds = ctx.value_bounds("indices")  # a large index range is never computed
    extra = TensorShape(None)
    for m, (ishape, dshape) in enumerate(zip(index_shapes, data_shapes)):
        if ishape.rank is None:
            continue
        _merge_prefix(ctx, dshape, ishape,
                      f"data[{m}].shape = {dshape} does not start with indices[{m}].shape = "
                      f"{ishape}")
        extra = _merge_extra(ctx, extra, _suffix(dshape, ishape.rank), m, dshape, ishape)
    first = None
    if all(b is not None for b in bounds):
        first = int(max([-1] + [high for _, high in bounds])) + 1
    else:
        first = _stitch_of_every_part(ctx.input("indices"))
    return TensorShape([first]).concatenate(extra)


def _stitch_of_every_part(indices: list) -> int | None:
    """max(indices) + 1 when the indices are every output of one DynamicPartition (the
    positions of a mixture of experts' tokens: ``DynamicPartition(Range(0, n), p, K)``)
    and the largest element of what it partitions is known: the partitions together
    hold each of its elements, so their largest is that one (n - 1 for the Range)."""
    split = indices[0].op if indices else None
    if split is None or split.type != "DynamicPartition" \
            or {i.op for i in indices} != {split} \
            or {i.index for i in indices} != set(range(split.attrs["num_partitions"])):
        return None
    bounds = value_bounds(split.inputs[0])
    return None if bounds is None else int(max(-1, bounds[1])) + 1


def _merge_extra(ctx, extra: TensorShape, rest: TensorShape, m: int, dshape: TensorShape,
                 ishape: TensorShape) -> TensorShape:
    """TensorFlow's Merge of the common slice shape with data[m].shape[rank(indices[m]):]."""
    where = (f"need data[{m}].shape[{ishape.rank}:] to match the other data inputs, got "
             f"data[{m}].shape = {dshape}, indices[{m}].shape = {ishape}")
    if extra.rank is None or rest.rank is None:
        return extra.merge_with(rest)
    if extra.rank != rest.rank:
        raise ctx.error(f"Shapes must be equal rank, but are {extra.rank} and {rest.rank}: "
                        f"{where}")
    for d, (a, b) in enumerate(zip(extra.as_list(), rest.as_list())):
        if a is not None and b is not None and a != b:
            raise ctx.error(f"Dimension {d} in both shapes must be equal, but are {a} and {b}. "
                            f"Shapes are {extra} and {rest}: {where}")
    return extra.merge_with(rest)


@DynamicStitch.kernel("cpu")
@ParallelDynamicStitch.kernel("cpu")
def _dynamic_stitch(ctx, indices, data):
    """Every index checked, then one compiled loop over the inputs in order
    (ops/partition_loops.py): the later of duplicate indices wins."""
    indices = [np.asarray(i) for i in indices]
    data = [np.asarray(d) for d in data]
    extra = _check_stitch_shapes(indices, data)
    flats = [partition_loops.readonly(np.ascontiguousarray(i).reshape(-1)) for i in indices]
    bounds = [partition_loops.bounds_of(f) for f in flats if f.size]
    if any(low < 0 for low, _ in bounds):
        raise _negative_index_error(indices, np.concatenate(flats))
    first = max([-1] + [int(high) for _, high in bounds]) + 1
    merged = ctx.empty((first,) + extra, data[0].dtype)
    return partition_loops.stitch(flats, [np.ascontiguousarray(d) for d in data], merged)


@DynamicStitch.kernel("gpu", T=GPU_TYPES)
@ParallelDynamicStitch.kernel("gpu", T=GPU_TYPES)
def _dynamic_stitch_gpu(ctx, indices, data):
    """One transfer of (min, max) of all indices sizes and validates the output; then
    one scatter, where the later of duplicates wins: DynamicStitch by the sorted path,
    ParallelDynamicStitch (unless deterministic=True) by the last-writer stores
    (gpu_index.scatter), so its gradient knows which value won."""
    xp = ctx.xp
    extra = _check_stitch_shapes(indices, data)
    flat = xp.concatenate([i.reshape(-1) for i in indices])
    first = 0
    if flat.size:
        low, high = (int(v) for v in gpu_index.to_host(xp.stack([flat.min(), flat.max()])))
        if low < 0:
            raise _negative_index_error(indices, flat)
        first = high + 1
    slice_size = int(np.prod(extra, dtype=np.int64))
    dtype = data[0].dtype
    ctx.check_allocation(first * slice_size, dtype)
    merged = xp.zeros((first,) + extra, dtype=dtype)
    if len(data) > 1:
        ctx.check_allocation(flat.size * slice_size, dtype)
    rows = xp.concatenate([d.reshape(i.size, slice_size) for i, d in zip(indices, data)])
    in_order = ctx.op_type == "DynamicStitch" or ctx.deterministic
    gpu_index.scatter(xp, merged, flat.astype(np.int64), rows, "update", in_order)
    return merged


def _check_stitch_shapes(indices: list, data: list) -> tuple:
    """TensorFlow's run-time checks; returns the common slice shape."""
    data0, indices0 = data[0], indices[0]
    extra = data0.shape[indices0.ndim:]
    for m, (i, d) in enumerate(zip(indices, data)):
        if d.shape[:i.ndim] != i.shape:
            raise InvalidArgumentError(
                f"data[{m}].shape = {debug_string(d.shape)} does not start with "
                f"indices[{m}].shape = {debug_string(i.shape)}")
        if d.shape[i.ndim:] != extra:
            raise InvalidArgumentError(
                f"Need data[0].shape[{indices0.ndim}:] = data[{m}].shape[{i.ndim}:], got "
                f"data[0].shape = {debug_string(data0.shape)}, data[{m}].shape = "
                f"{debug_string(d.shape)}, indices[0].shape = {debug_string(indices0.shape)}, "
                f"indices[{m}].shape = {debug_string(i.shape)}")
    return extra


def _negative_index_error(indices: list, flat: np.ndarray) -> InvalidArgumentError:
    """TensorFlow names the flat position inside the input; the input and value follow."""
    j = int(np.argmax(flat < 0))
    starts = np.cumsum([0] + [i.size for i in indices])
    m = int(np.searchsorted(starts, j, side="right")) - 1
    pos = j - int(starts[m])
    return InvalidArgumentError(
        f"indices[{pos}] is out of range (indices input {m} holds {int(flat[j])} at flat "
        f"position {pos})")


# -- gradients -------------------------------------------------------------------------------
@DynamicPartition.gradient
def _dynamic_partition_grad(g, *grads):
    """Each row's gradient comes back from where it went: the positions 0..n-1 are
    partitioned as the data was, and stitch the outputs' gradients back into place."""
    s = g.scope
    data, partitions = g.op.inputs
    positions = s.reshape(s.range(0, s.size(partitions), 1), s.shape(partitions))
    rows = s.dynamic_partition(positions, partitions, num_partitions=g.attr("num_partitions"))
    merged = s.dynamic_stitch(list(rows), list(grads))
    return [s.reshape(merged, s.shape(data)), None]


def _stitch_grad(g, grad):
    """data[m][j] gets grad[indices[m][j]] if it is the value the forward kept there (the
    later of duplicates, on every device), else zero: TensorFlow gives every duplicate
    the gradient."""
    s = g.scope
    n = g.attr("N")
    winners = s.create_op(StitchWinners, list(g.op.inputs[:n]))
    return [None] * n + [s.gather_nd(grad, s.expand_dims(w, -1), bad_indices_policy="IGNORE")
                         for w in winners]


DynamicStitch.gradient(_stitch_grad)
ParallelDynamicStitch.gradient(_stitch_grad)

StitchWinners = register_op(
    "_StitchWinners",
    inputs=["indices: N * int32"], outputs=["winners: N * int32"],
    attrs={"N": IntAttr(minimum=1)},
    doc="indices[m][j] where (m, j) is the last of the positions naming its row, in the "
        "order the stitches apply them (the value they keep), and -1 elsewhere.")


@StitchWinners.shape_fn
def _stitch_winners_shape(ctx):
    """same as `indices`."""
    return list(ctx.shape("indices"))


@StitchWinners.kernel("cpu")
@StitchWinners.kernel("gpu")
def _stitch_winners(ctx, indices):
    """The stitches' index check (one transfer of (min, max) on a GPU), then the last
    writers of the rows (gpu_index.last_writers)."""
    xp = ctx.xp
    flat = xp.concatenate([i.reshape(-1) for i in indices]).astype(np.int64)
    rows = 0
    if flat.size:
        low, high = (int(v) for v in gpu_index.to_host(xp.stack([flat.min(), flat.max()])))
        if low < 0:
            raise _negative_index_error(indices, flat)
        rows = high + 1
    kept = xp.where(gpu_index.last_writers(xp, flat, rows), flat, -1).astype(np.int32)
    ends = np.cumsum([i.size for i in indices]).tolist()
    return [kept[start:end].reshape(i.shape)
            for start, end, i in zip([0] + ends[:-1], ends, indices)]


StitchWinners.not_differentiable()


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("DynamicPartition", "DynamicStitch", "ParallelDynamicStitch")
