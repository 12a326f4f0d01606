"""Gather -> combine -> segment-reduce as one node (ops/gather_reduce.py's ``_GatherReduce``).

A graph neural network's layer gathers a row per edge, combines it with the edge's
data (a weight, an edge feature) and reduces the rows by target node; a summing
layer's gradient does the same with the ids swapped, ending in the ScatterNd that
densifies GatherV2's IndexedSlices gradient. Unfused, each call writes and reads
[E, F] tensors (a 110k-edge, 64-feature GCN step spent 40 of its 51 ms there); fused,
only the [N, F] result is written.

The pattern, with every intermediate read by the next node only (the gathered rows
may have other readers: they are still computed for them) and neither fed nor
fetched::

    m = GatherV2(params, ids, axis=0)                 # batch_dims 0, 1-D ids
    v = Mul(m, edge)  or  Mul(edge, m)                # optional: Mul, Add, Sub, RealDiv
    v = Relu(v)                                       # optional
    y = UnsortedSegmentSum(v, segment_ids, n)         # or Max / Min; 1-D segment ids
      | ScatterNd(indices, v, shape)                  # indices [E, 1]
"""
from __future__ import annotations

from typing import Collection, Sequence

from graphflow.graph import Operation, Output
from graphflow.inference import constant_value
from graphflow.registry import op_def

from ..ops.gather_reduce import COMBINES, REDUCES
from .fusion import on_the_cpu, readers_of

_DTYPES = ("float32", "float64")


def fuse_gather_reduce(ops: Sequence[Operation], fed: Collection[Output],
                       targets: Sequence) -> dict[Output, Output]:
    """Substitutes for the segment reductions of ``ops`` (a plan's, every op the
    ``targets`` need) that end a gather -> combine -> reduce."""
    fetched = {t for t in targets if isinstance(t, Output)}
    readers = readers_of(ops)
    found: dict[Output, Output] = {}
    for op in ops:
        if op.type in REDUCES:
            node = _fused(op, fed, fetched, readers)
            if node is not None:
                found[op.outputs[0]] = node.outputs[0]
    return found


def _fused(reduce: Operation, fed, fetched, readers) -> Operation | None:
    out = reduce.outputs[0]
    if out.dtype.name not in _DTYPES or reduce.control_inputs or not on_the_cpu(reduce):
        return None
    segments = _segments(reduce)
    if segments is None:
        return None
    segment_ids, size = segments
    rows = reduce.inputs[REDUCES[reduce.type][1]]
    activation = _private_producer(rows, ("Relu",), reduce, fed, fetched, readers)
    if activation is not None:
        rows = activation.inputs[0]
    combine = _private_producer(rows, tuple(COMBINES), activation or reduce, fed, fetched,
                                readers)
    gathered, edge, scale_first = rows, [], False
    if combine is not None:
        a, b = combine.inputs
        if a.op.type == "GatherV2":
            gathered, edge = a, [b]
        elif b.op.type == "GatherV2":
            gathered, edge, scale_first = b, [a], True
        else:
            return None
    elif not _private(rows, activation or reduce, fed, fetched, readers):
        return None
    gather = gathered.op
    if not _plain_gather(gather, gathered, fed, out.dtype):
        return None
    params, ids, _ = gather.inputs
    chain = (combine, activation, reduce)
    first = next(op for op in chain if op is not None)
    replaced = [op for op in chain if op is not None]
    if readers.get(gathered) == [first]:
        replaced.insert(0, gather)
    attrs = {"T": out.dtype, "Tgather": ids.dtype, "Tsegment": segment_ids.dtype,
             "Tsize": size.dtype, "S": len(edge), "reduce": reduce.type,
             "combine": combine.type if combine is not None else "",
             "activation": activation.type if activation is not None else "",
             "members": (gather, *chain), "scale_first": scale_first,
             "constant_gather": constant_value(ids) is not None,
             "constant_segments": constant_value(segment_ids) is not None,
             "replaces": tuple(op.name for op in replaced)}
    return Operation.stand_in(reduce, op_def("_GatherReduce"),
                              [params, ids, *edge, segment_ids, size],
                              (1, 1, len(edge), 1, 1), attrs, [(out.dtype, out.shape)])


def _segments(reduce: Operation) -> tuple[Output, Output] | None:
    """(segment ids, size) of a reduction whose ids the pass covers: 1-D, or ScatterNd's
    [E, 1] indices."""
    if reduce.type == "ScatterNd":
        segment_ids, size = reduce.inputs[0], reduce.inputs[2]
        ok = segment_ids.shape.rank == 2 and segment_ids.shape[1] == 1
    else:
        segment_ids, size = reduce.inputs[1], reduce.inputs[2]
        ok = segment_ids.shape.rank == 1
    return (segment_ids, size) if ok else None


def _private_producer(value: Output, types: tuple, reader: Operation, fed, fetched,
                      readers) -> Operation | None:
    """``value``'s op when it is one of ``types``, on the CPU without control inputs,
    and ``value`` is computed for ``reader`` alone."""
    op = value.op
    if op.type not in types or op.control_inputs or not on_the_cpu(op) \
            or not _private(value, reader, fed, fetched, readers):
        return None
    return op


def _plain_gather(gather: Operation, gathered: Output, fed, dtype) -> bool:
    """A GatherV2 of rows along axis 0 by 1-D ids, of the reduction's dtype."""
    if gather.type != "GatherV2" or gathered in fed or gather.control_inputs \
            or gather.attrs.get("batch_dims", 0) != 0 or not on_the_cpu(gather):
        return False
    params, ids, axis = gather.inputs
    axis_value = constant_value(axis)
    return axis_value is not None and int(axis_value) == 0 and ids.shape.rank == 1 \
        and params.dtype == dtype


def _private(value: Output, reader: Operation, fed, fetched, readers) -> bool:
    """Whether ``value`` is computed for ``reader`` alone (not fed, fetched or read
    elsewhere)."""
    return value not in fed and value not in fetched and readers.get(value) == [reader]
