"""Plan-time graph rewrites. They never change the user's graph: a rewrite
returns substitutes (Output -> Output of a new, unregistered node) that the
plan wires in instead. Switch them off with ``SessionConfig(optimize=False)``.

Partition -> element-wise -> stitch. The seed pipeline

    parts = DynamicPartition(x, p, K)
    rows  = DynamicPartition(Range(0, Size(x), 1), p, K)
    y     = DynamicStitch(rows, [f_0(parts[0]), ..., f_{K-1}(parts[K-1])])

with element-wise f_k (chains of arithmetic ops, as ops/elementwise_table.py
declares them: unary, binary with a scalar or of the value with itself, and a
final Cast from an integer to an integer) and
1-D x equals ``y[i] = f_{p[i]}(x[i])``: one pass (a compiled loop on the CPU,
ops/fused_ops.py) instead of a partition, K compactions and a scatter. With
p = Cast(mask), the mask is used directly; with mask = x compared with a scalar
(the seed's ``x != -1``), the pass compares x itself and the mask is never made.
"""
from __future__ import annotations

from typing import Collection

import numpy as np

from graphflow.dtypes import bool_
from graphflow.graph import Operation, Output
from graphflow.inference import constant_value
from graphflow.registry import op_def


_STITCHES = {"DynamicStitch", "ParallelDynamicStitch"}
SELF = -2  # the scalar index of a step whose operands are both the chain value (x * x)


def fuse_partition_stitch(ops: list[Operation],
                          fed: Collection[Output] = ()) -> dict[Output, Output]:
    """Substitutes for the stitches of ``ops`` that end a partition -> stitch pattern."""
    subst: dict[Output, Output] = {}
    for op in ops:
        if op.type in _STITCHES:
            fused = _fuse_partition_stitch(op, fed)
            if fused is not None:
                subst[op.outputs[0]] = fused.outputs[0]
    return subst


def _fuse_partition_stitch(stitch: Operation, fed: Collection[Output]) -> Operation | None:
    indices, data = stitch.grouped_inputs()
    rows = indices[0].op
    if rows.type != "DynamicPartition" or stitch.control_inputs or rows.control_inputs:
        return None
    k = rows.attrs["num_partitions"]
    if len(indices) != k or any(i.op is not rows for i in indices):
        return None
    order = [i.index for i in indices]
    if sorted(order) != list(range(k)):
        return None
    partitions = rows.inputs[1]
    programs: list = [None] * k
    scalars: list[Output] = []
    parts = None
    inner: list[Output] = list(indices)  # what the fused op does not compute
    for j, value in enumerate(data):
        chain = []
        while value.op.type != "DynamicPartition":
            if value in fed:  # its op does not run: the feed is the value
                return None
            step = _elementwise_step(value, scalars, last=not chain)
            if step is None:
                return None
            chain.append(step[:3])
            inner.append(value)
            value = step[3]
        inner.append(value)
        if (parts is not None and value.op is not parts) or value.index != order[j]:
            return None
        parts = value.op
        programs[order[j]] = tuple(reversed(chain))
    x = parts.inputs[0]
    if parts.inputs[1] is not partitions or parts.attrs["num_partitions"] != k \
            or parts.control_inputs or x.shape.rank != 1 or partitions.shape.rank != 1 \
            or any(s.dtype != x.dtype for s in scalars) or not is_row_range(rows.inputs[0], x):
        return None
    if any(o in fed for o in (*inner, rows.inputs[0], *rows.inputs[0].op.inputs)):
        return None
    selector, compare = _selector(partitions, x, k, scalars, fed)
    origin = min(parts, rows, key=lambda op: op.position)  # the one that fails first as written
    replaced = {stitch, rows, *(o.op for o in inner), *_range_ops(rows.inputs[0])}
    if selector is not partitions:  # the Cast to ids, and the comparison if folded
        replaced |= {partitions.op} | ({partitions.op.inputs[0].op} if compare else set())
    definition = op_def("_PartitionedSelect")
    attrs = {"T": x.dtype, "Tout": stitch.outputs[0].dtype,
             "Tsel": selector.dtype if selector is not None else bool_,
             "S": int(selector is not None), "M": len(scalars), "num_partitions": k,
             "program": tuple(programs), "compare": compare,
             "origin": (origin.name, origin.type, origin.site),
             "replaces": tuple(op.name for op in sorted(replaced, key=lambda op: op.position))}
    selectors = [] if selector is None else [selector]
    out = stitch.outputs[0]
    return Operation.stand_in(stitch, definition, [x, *selectors, *scalars],
                              (1, len(selectors), len(scalars)), attrs, [(out.dtype, out.shape)])


def _selector(partitions: Output, x: Output, k: int, scalars: list[Output],
              fed: Collection[Output]):
    """What the fused op selects by: ``(partitions, None)``; for partitions =
    Cast(mask) the mask, as ids 0 and 1; and for mask = Compare(x, scalar) nothing but
    the comparison ``(op_type, position, scalar index)``, which the fused pass
    computes itself (appending the scalar to ``scalars``)."""
    cast = partitions.op
    if cast.type != "Cast" or cast.inputs[0].dtype != bool_ or k < 2 or partitions in fed \
            or cast.control_inputs:
        return partitions, None
    mask = cast.inputs[0]
    compare = mask.op
    if _kind(compare) != "comparison" or mask in fed or compare.control_inputs:
        return mask, None
    a, b = compare.inputs
    for position, (data, scalar) in enumerate(((a, b), (b, a))):
        if data is x and scalar.shape.rank == 0 and scalar.dtype == x.dtype:
            scalars.append(scalar)
            return None, (compare.type, position, len(scalars) - 1)
    return mask, None


def _elementwise_step(value: Output, scalars: list[Output], last: bool):
    """``(op_type, chain position, scalar index, chain input)`` if ``value`` is an
    element-wise op of one rank-1 chain value (and a scalar, or the chain value again:
    scalar index SELF), else None. A Cast from an integer or bool to an integer (exact,
    wrapping as numpy's) may be the ``last`` step of a chain."""
    op = value.op
    if op.control_inputs or not op.inputs:  # (a constant: a part that was folded)
        return None
    if op.type == "Cast":
        source = op.inputs[0].dtype
        if last and (source.is_integer or source.is_bool) and value.dtype.is_integer:
            return op.type, 0, -1, op.inputs[0]
        return None
    if value.dtype != op.inputs[0].dtype:
        return None
    if _kind(op) != "arithmetic":
        return None
    if op.op_def.elementwise.arity == 1:
        return op.type, 0, -1, op.inputs[0]
    if op.op_def.elementwise.arity == 2:
        a, b = op.inputs
        if a is b and a.shape.rank == 1:
            return op.type, 0, SELF, a
        if b.shape.rank == 0 and a.shape.rank == 1:
            scalars.append(b)
            return op.type, 0, len(scalars) - 1, a
        if a.shape.rank == 0 and b.shape.rank == 1:
            scalars.append(a)
            return op.type, 1, len(scalars) - 1, b
    return None


def _kind(op: Operation) -> str | None:
    """The kind of element-wise op ``op`` is (ops/elementwise_table.py), or None."""
    rule = op.op_def.elementwise
    return None if rule is None else rule.kind


def _range_ops(r: Output) -> list[Operation]:
    """The Range of row positions (or the constant folding made of it), and the Size of
    x that may give its limit."""
    if r.op.type != "Range":
        return [r.op]
    limit = r.op.inputs[1]
    return [r.op] + ([limit.op] if limit.op.type == "Size" else [])


def is_row_range(r: Output, x: Output) -> bool:
    """Whether ``r`` is Range(0, n, 1) with n the length of the 1-D ``x`` (or the
    constant [0, 1, ..., n - 1] that folding made of it)."""
    if r.op.type == "Const":
        v = constant_value(r)
        return v is not None and v.ndim == 1 and v.dtype.kind in "iu" \
            and x.shape[0] == v.size and bool(np.array_equal(v, np.arange(v.size)))
    if r.op.type != "Range":
        return False
    start, limit, delta = r.op.inputs
    if _scalar(start) != 0 or _scalar(delta) != 1:
        return False
    if limit.op.type == "Size" and limit.op.inputs[0] is x:
        return True
    n = _scalar(limit)
    return n is not None and x.shape[0] is not None and n == x.shape[0]


def _scalar(o: Output):
    v = constant_value(o)
    return None if v is None or v.size != 1 else v.reshape(-1)[0].item()
