"""``_GatherPartition``: the rows of ``params`` at ``ids``, partitioned, in one gather.

Made by the plan-time rewrite of runtime/gather_partition.py, never by users. A
mixture of experts dispatches its tokens so::

    routed = GatherV2(x, token_of, axis=0)                  # [n, F]: a row per routed copy
    parts  = DynamicPartition(routed, expert_of, K)         # K [n_e, F] parts

which writes the [n, F] rows, reads them back and writes them again, in partition
order. Partitioning the ids instead (n integers) and gathering the rows straight into
partition order writes them once: ``parts[e] = x[ids where expert_of == e]``, the same
rows in the same order, views of one buffer as DynamicPartition's are. An id out of
range for the gather or the partition, a shape the pattern does not cover, or an
object dtype runs the two nodes (the attr ``members``), so errors are theirs.
"""
from __future__ import annotations

import numpy as np

from graphflow.registry import IntAttr, TypeAttr, register_op

from . import parallel_gather, partition_loops
from .fused_elementwise import run_members
from .gather_reduce import first_bad
from .intra_op import kernel_threads
from .jit import kernel
from .tiering import Tiered

GatherPartition = register_op(
    "_GatherPartition",
    inputs=["params: T", "ids: Tids", "axis: Taxis", "partitions: int32"],
    outputs=["outputs: num_partitions * T"],
    attrs={"T": TypeAttr(), "Tids": TypeAttr(), "Taxis": TypeAttr(),
           "num_partitions": IntAttr(minimum=1)},
    doc="DynamicPartition(GatherV2(params, ids, axis), partitions, num_partitions) (axis 0) for 1-D "
        "ids and partitions, the gathered rows written once. The attrs 'members', "
        "'externals' and 'results' hold the two nodes, which run instead when a call is "
        "not covered.")

# -- the compiled loop ---------------------------------------------------------------------
@kernel
def gather_into_partitions(params, ids, by, k, out, sizes) -> int:
    """out = the rows params[ids[i]] in partition order (stable), sizes[e] = the rows
    of partition e; 1 (nothing written) when an id is outside [0, len(params)), else 2
    when a partition id is outside [0, k) (the gather's error first, as the graph
    runs), else 0."""
    n = ids.shape[0]
    bound = params.shape[0]
    for i in range(n):
        if ids[i] < 0 or ids[i] >= bound:
            return 1
    for e in range(k):
        sizes[e] = 0
    for i in range(n):
        e = by[i]
        if e < 0 or e >= k:
            return 2
        sizes[e] += 1
    cursor = np.empty(k, np.int64)
    start = 0
    for e in range(k):
        cursor[e] = start
        start += sizes[e]
    width = params.shape[1]
    for i in range(n):
        r = cursor[by[i]]
        cursor[by[i]] = r + 1
        src = ids[i]
        for c in range(width):
            out[r, c] = params[src, c]
    return 0


_FIRST_BAD, _GATHER = Tiered(first_bad), Tiered(gather_into_partitions)


# -- the kernel --------------------------------------------------------------------------------
@GatherPartition.kernel("cpu")
def _gather_partition(ctx, params, ids, axis, partitions):
    k = ctx.attrs["num_partitions"]
    if params.ndim < 1 or params.dtype == object or ids.ndim != 1 or ids.dtype.kind not in "iu" \
            or partitions.shape != ids.shape or partitions.dtype != np.int32 \
            or not ctx.fits(ids.size * (params.size // max(params.shape[0], 1)), params.dtype):
        return run_members(ctx, params, ids, axis, partitions)
    limit = params.shape[0]
    width = params.size // limit if limit else 0
    out = ctx.empty((ids.size,) + params.shape[1:], params.dtype)
    rows = np.ascontiguousarray(params).reshape(limit, width)
    flat_ids = partition_loops.readonly(np.ascontiguousarray(ids))
    by = partition_loops.readonly(np.ascontiguousarray(partitions))
    sizes = np.empty(k, np.int64)
    args = (rows, flat_ids, by, k, out.reshape(ids.size, width), sizes)
    if _GATHER.ready(*args):
        if gather_into_partitions(*args) != 0:
            return run_members(ctx, params, ids, axis, partitions)  # they raise it
    elif not _gathered_meanwhile(ctx, rows, flat_ids, by, k, out, sizes):
        return run_members(ctx, params, ids, axis, partitions)
    return np.split(out, np.cumsum(sizes)[:-1].tolist())


def _gathered_meanwhile(ctx, rows, ids, by, k: int, out, sizes) -> bool:
    """The partition's loops and a gather while :func:`gather_into_partitions` compiles;
    False (nothing to use) where an id of either is bad."""
    if not _FIRST_BAD.ready(ids, rows.shape[0], False) \
            or first_bad(ids, rows.shape[0], False) >= 0 \
            or partition_loops.find_bad_id(by, k) >= 0:
        return False
    parts = partition_loops.partition(ids, by, k, np.empty)
    flat = np.concatenate(parts)
    sizes[:] = [p.shape[0] for p in parts]
    n, width = out.shape[0], rows.shape[1]
    target = out.reshape(n, width)
    if n and width and not parallel_gather.gather(target, rows, flat.reshape(-1, 1),
                                                   (rows.shape[0],), kernel_threads(ctx)):
        np.take(rows, flat, axis=0, out=target, mode="wrap")  # every id checked
    return True


__all__ = ["GatherPartition"]
