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
from .gather_reduce import _first_bad as first_bad
from .intra_op import kernel_threads
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

_FIRST_BAD = Tiered(first_bad)


@GatherPartition.kernel("cpu")
def _gather_partition(ctx, params, ids, axis, partitions):
    k = ctx.attrs["num_partitions"]
    ordered = _partitioned_ids(ids, partitions, params, k)
    if ordered is None or not ctx.fits(ids.size * (params.size // max(params.shape[0], 1)),
                                       params.dtype):
        return run_members(ctx, params, ids, axis, partitions)
    flat, sizes = ordered
    limit = params.shape[0]
    out = ctx.empty((flat.size,) + params.shape[1:], params.dtype)
    width = params.size // limit if limit else 0
    gathered = flat.size == 0 or width == 0 or parallel_gather.gather(
        out.reshape(flat.size, width), np.ascontiguousarray(params).reshape(limit, width),
        flat.reshape(-1, 1), (limit,), kernel_threads(ctx))
    if not gathered:  # the loop not compiled yet: every id is checked, "wrap" moves none
        np.take(params, flat, axis=0, out=out, mode="wrap")
    return np.split(out, np.cumsum(sizes)[:-1].tolist())


def _partitioned_ids(ids, partitions, params, k: int):
    """``(the ids in partition order, the partition sizes)`` where the gather and the
    partition would both succeed, else None."""
    if params.ndim < 1 or params.dtype == object or ids.ndim != 1 or ids.dtype.kind not in "iu" \
            or partitions.shape != ids.shape or partitions.dtype != np.int32:
        return None
    flat_ids = partition_loops.readonly(np.ascontiguousarray(ids))
    if not _FIRST_BAD.ready(flat_ids, params.shape[0], False) \
            or first_bad(flat_ids, params.shape[0], False) >= 0:
        return None  # the gather raises it
    by = partition_loops.readonly(np.ascontiguousarray(partitions))
    if partition_loops.find_bad_id(by, k) >= 0:
        return None  # the partition raises it
    parts = partition_loops.partition(flat_ids, by, k, np.empty)
    return np.concatenate(parts), [p.shape[0] for p in parts]


__all__ = ["GatherPartition"]
