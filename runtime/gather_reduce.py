"""Gather -> scale -> segment-sum as one node (ops/gather_reduce.py's ``_GatherScaleSum``).

A graph neural network's layer gathers a row per edge, scales it by the edge's
weight and sums the rows by target node; its gradient does the same with the ids
swapped, ending in the ScatterNd that densifies GatherV2's IndexedSlices gradient.
Unfused, each call writes and reads two [E, F] tensors (a 110k-edge, 64-feature
GCN step spent 40 of its 51 ms there); fused, only the [N, F] sum is written.

The pattern, with every intermediate read by the next node only (the gathered rows
may have other readers: they are still computed for them) and neither fed nor
fetched::

    m = GatherV2(params, ids, axis=0)                 # batch_dims 0, 1-D ids
    v = Mul(m, scale)  or  Mul(scale, m)              # optional
    y = UnsortedSegmentSum(v, segment_ids, n)         # 1-D segment ids
      | ScatterNd(indices, v, shape)                  # indices [E, 1]
"""
from __future__ import annotations

from typing import Collection, Sequence

from graphflow.graph import Operation, Output
from graphflow.inference import constant_value
from graphflow.registry import op_def

from .fusion import on_the_cpu

_REDUCES = {"UnsortedSegmentSum": 0, "ScatterNd": 1}  # op type -> input index of the rows
_DTYPES = ("float32", "float64")


def fuse_gather_reduce(ops: Sequence[Operation], fed: Collection[Output],
                       targets: Sequence) -> dict[Output, Output]:
    """Substitutes for the segment sums of ``ops`` (a plan's, every op the ``targets``
    need) that end a gather -> scale -> sum."""
    fetched = {t for t in targets if isinstance(t, Output)}
    readers: dict[Output, list[Operation]] = {}
    for op in ops:
        for i in op.inputs:
            readers.setdefault(i, []).append(op)
    found: dict[Output, Output] = {}
    for op in ops:
        if op.type in _REDUCES:
            node = _fused(op, fed, fetched, readers)
            if node is not None:
                found[op.outputs[0]] = node.outputs[0]
    return found


def _fused(reduce: Operation, fed, fetched, readers) -> Operation | None:
    out = reduce.outputs[0]
    if out.dtype.name not in _DTYPES or reduce.control_inputs or not on_the_cpu(reduce):
        return None
    rows = reduce.inputs[_REDUCES[reduce.type]]
    if reduce.type == "ScatterNd":
        segment_ids, size = reduce.inputs[0], reduce.inputs[2]
        if segment_ids.shape.rank != 2 or segment_ids.shape[1] != 1:
            return None
    else:
        segment_ids, size = reduce.inputs[1], reduce.inputs[2]
        if segment_ids.shape.rank != 1:
            return None
    if not _private(rows, reduce, fed, fetched, readers):
        return None
    members: list[Operation] = [reduce]
    scale: list[Output] = []
    scale_first = False
    if rows.op.type == "Mul":
        mul = rows.op
        if mul.control_inputs or not on_the_cpu(mul):
            return None
        a, b = mul.inputs
        if a.op.type == "GatherV2":
            gathered, scale = a, [b]
        elif b.op.type == "GatherV2":
            gathered, scale, scale_first = b, [a], True
        else:
            return None
        members.insert(0, mul)
    else:
        mul, gathered = None, rows
    gather = gathered.op
    if gather.type != "GatherV2" or gathered in fed or gather.control_inputs \
            or gather.attrs.get("batch_dims", 0) != 0 or not on_the_cpu(gather):
        return None
    params, ids, axis = gather.inputs
    axis_value = constant_value(axis)
    if axis_value is None or int(axis_value) != 0 or ids.shape.rank != 1 \
            or params.dtype != out.dtype:
        return None
    replaced = [gather, *members] if readers.get(gathered) == [mul or reduce] else members
    attrs = {"T": out.dtype, "Tgather": ids.dtype, "Tsegment": segment_ids.dtype,
             "Tsize": size.dtype, "S": len(scale), "reduce": reduce.type,
             "members": (gather, mul, reduce), "scale_first": scale_first,
             "constant_gather": constant_value(ids) is not None,
             "constant_segments": constant_value(segment_ids) is not None,
             "replaces": tuple(op.name for op in replaced)}
    return Operation.stand_in(reduce, op_def("_GatherScaleSum"),
                              [params, ids, *scale, segment_ids, size],
                              (1, 1, len(scale), 1, 1), attrs, [(out.dtype, out.shape)])


def _private(value: Output, reader: Operation, fed, fetched, readers) -> bool:
    """Whether ``value`` is computed for ``reader`` alone (not fed, fetched or read
    elsewhere)."""
    return value not in fed and value not in fetched and readers.get(value) == [reader]
