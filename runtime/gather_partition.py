"""A gather partitioned as one node (ops/gather_partition.py's ``_GatherPartition``).

An MoE's dispatch gathers a row per routed copy of a token and partitions the rows by
expert: the [n, F] rows are written, read and written again. Partitioning the ids
instead and gathering straight into partition order writes them once. The pattern,
the gathered rows read by the partition alone, neither fed nor fetched, no control
edges::

    rows  = GatherV2(params, ids, axis=0)        # batch_dims 0, 1-D ids
    parts = DynamicPartition(rows, partitions, K)  # 1-D partitions
"""
from __future__ import annotations

from typing import Collection, Sequence

from graphflow.graph import Operation, Output
from graphflow.inference import constant_value
from graphflow.registry import op_def

from .fusion import on_the_cpu, readers_of


def fuse_gather_partitions(ops: Sequence[Operation], fed: Collection[Output],
                           fetches: Sequence) -> tuple[dict[Output, Output], set[Output]]:
    """Substitutes for the outputs of the partitions of ``ops`` (a plan's) that
    partition a private gather, and the gathers' outputs no longer computed (a plan
    root among them, kept for its errors, is the fused node's to raise)."""
    fetched = {t for t in fetches if isinstance(t, Output)}
    readers = readers_of(ops)
    waited_on = {c for op in ops for c in op.control_inputs}
    subst: dict[Output, Output] = {}
    gone: set[Output] = set()
    for op in ops:
        if op.type != "DynamicPartition" or op.control_inputs or not on_the_cpu(op):
            continue
        rows, partitions = op.inputs
        gather = rows.op
        if gather.type != "GatherV2" or gather.control_inputs or not on_the_cpu(gather) \
                or gather.attrs.get("batch_dims", 0) != 0 or rows in fed or rows in fetched \
                or gather in waited_on or readers.get(rows) != [op] \
                or partitions.shape.rank != 1:
            continue
        params, ids, axis = gather.inputs
        axis_value = constant_value(axis)
        if axis_value is None or int(axis_value) != 0 or ids.shape.rank != 1:
            continue
        k = op.attrs["num_partitions"]
        attrs = {"T": params.dtype, "Tids": ids.dtype, "Taxis": axis.dtype, "num_partitions": k,
                 "members": (gather, op), "externals": (params, ids, axis, partitions),
                 "results": op.outputs, "replaces": (gather.name, op.name)}
        node = Operation.stand_in(op, op_def("_GatherPartition"),
                                  [params, ids, axis, partitions], (1, 1, 1, 1), attrs, [(o.dtype, o.shape) for o in op.outputs])
        subst.update(zip(op.outputs, node.outputs))
        gone.add(rows)
    return subst, gone


__all__ = ["fuse_gather_partitions"]
