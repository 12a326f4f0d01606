"""A mixture of experts' combine and its gradient as three nodes (ops/stitch_reduce.py).

A top-k MoE layer stitches its experts' rows back into [n, F] and sums them by token;
its gradient gathers the output's gradient into [n, F] rows, scales them for the
experts and dots them with the stitched rows for the gate. Each [n, F] tensor is
written once and read once or twice. The patterns (rank-2 float32/float64 rows on the
CPU, no control edges)::

    merged = DynamicStitch(indices, data)           # 1-D indices, [n_e, F] parts
    rows   = GatherNd(g, ids [n, 1]) | GatherV2(g, ids, axis=0)

    UnsortedSegmentSum(merged (* scale), segment_ids, num_segments) -> _StitchSegmentSum
    _ProductSum(merged, rows), either order                         -> _StitchProductSum
    GatherNd(rows * scale, picks[m] [k, 1], IGNORE), for every reader of the product
                                                                    -> _ScaledGatherRows

They are decided together: the merged rows, the gathered rows and the products go
only when every node that reads them is one the rewrites replace (the MoE's merged
rows feed both the combine and the gate's gradient); a rewrite that would leave one
computed anyway is not made. Whether a stitch places each row exactly once is
checked by the fused nodes when they run (their members run where it does not).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection, Sequence

from graphflow.graph import Operation, Output
from graphflow.inference import constant_value
from graphflow.registry import op_def

from .fusion import on_the_cpu, readers_of
from .partition_stitch import is_row_range

_DTYPES = ("float32", "float64")
_STITCHES = ("DynamicStitch", "ParallelDynamicStitch")


@dataclass(frozen=True)
class _Candidate:
    """A rewrite found: the nodes it stands for, the values it reads through (which
    must not be needed by anything else) and the substitutes it makes."""
    members: tuple[Operation, ...]
    through: tuple[Output, ...]
    build: Callable[[], dict[Output, Output]]


def fuse_stitch_reduce(ops: Sequence[Operation], fed: Collection[Output],
                       fetches: Sequence) -> tuple[dict[Output, Output], set[Output]]:
    """Substitutes for the segment sums, product sums and picking gathers of ``ops``
    (a plan's) that read stitched or gathered rows only the rewrites need, and the
    values no longer computed. A plan root among them (kept for its errors, after a
    Shape of it folded) is one too: the fused nodes raise its errors, running the
    nodes they stand for where a call is not one they cover."""
    fetched = {t for t in fetches if isinstance(t, Output)}
    readers = readers_of(ops)
    waited_on = {c for op in ops for c in op.control_inputs}
    found = [c for op in ops for c in (_candidate(op, readers),) if c is not None]
    while True:  # drop the rewrites that would leave a value they read through needed
        inside = {op for c in found for op in c.members}
        kept = [c for c in found
                if all(v not in fed and v not in fetched and v.op not in waited_on
                       and all(r in inside for r in readers.get(v, ())) for v in c.through)]
        if len(kept) == len(found):
            break
        found = kept
    subst = _distinct_winners(ops, fed)
    for c in found:
        subst.update(c.build())
    return subst, {v for c in found for v in c.through}


def _distinct_winners(ops: Sequence[Operation], fed: Collection[Output]) -> dict[Output, Output]:
    """A stitch gradient's last writers where the stitch's indices are a partition of
    the rows 0..n-1 (an MoE's routing): every index is distinct, so each winner is its
    index (_StitchWinners sorts them to find out)."""
    subst: dict[Output, Output] = {}
    for op in ops:
        if op.type != "_StitchWinners" or op.control_inputs:
            continue
        rows = op.inputs[0].op
        if rows.type != "DynamicPartition" or rows.control_inputs \
                or sorted(i.index for i in op.inputs if i.op is rows) != \
                list(range(len(rows.outputs))) \
                or any(o in fed for o in (*rows.outputs, rows.inputs[0])) \
                or not is_row_range(rows.inputs[0], rows.inputs[1]):
            continue
        subst.update(zip(op.outputs, op.inputs))
    return subst


def _candidate(op: Operation, readers) -> _Candidate | None:
    if not op.outputs or op.outputs[0].dtype.name not in _DTYPES or op.control_inputs \
            or not on_the_cpu(op):
        return None
    if op.type == "UnsortedSegmentSum":
        return _segment_sum(op)
    if op.type == "_ProductSum":
        return _product_sum(op)
    if op.type == "Mul":
        return _scaled_gather(op, readers)
    return None


# -- the patterns ----------------------------------------------------------------------------
def _stitch(value: Output) -> Operation | None:
    """The stitch making ``value``: 1-D indices, rank-2 rows of ``value``'s dtype."""
    op = value.op
    if op.type not in _STITCHES or op.control_inputs or not on_the_cpu(op) \
            or value.shape.rank != 2:
        return None
    indices, data = op.grouped_inputs()
    if any(i.shape.rank != 1 for i in indices) or any(d.dtype != value.dtype for d in data):
        return None
    return op


def _row_gather(value: Output) -> tuple[Operation, Output, Output, bool] | None:
    """``(gather, params, row ids, bad ids give zeros)`` for ``value`` = rows of a rank-2
    ``params`` picked by one id each: GatherNd with [n, 1] indices or GatherV2 on
    axis 0."""
    op = value.op
    if op.control_inputs or not on_the_cpu(op) or value.shape.rank != 2:
        return None
    if op.type == "GatherNd" and op.attrs.get("batch_dims", 0) == 0:
        params, ids = op.inputs
        if ids.shape.rank == 2 and ids.shape[1] == 1 and params.shape.rank == 2:
            return op, params, ids, op.attrs.get("bad_indices_policy", "") == "IGNORE"
    if op.type == "GatherV2" and op.attrs.get("batch_dims", 0) == 0:
        params, ids, axis = op.inputs
        axis_value = constant_value(axis)
        if axis_value is not None and int(axis_value) == 0 and ids.shape.rank == 1 \
                and params.shape.rank == 2:
            return op, params, ids, False
    return None


def _segment_sum(reduce: Operation) -> _Candidate | None:
    """UnsortedSegmentSum(merged (* scale), segment_ids, num_segments)."""
    rows, segment_ids, size = reduce.inputs
    if segment_ids.shape.rank != 1:
        return None
    mul, scale, scale_first = None, [], False
    if rows.op.type == "Mul" and not rows.op.control_inputs and on_the_cpu(rows.op):
        mul = rows.op
        a, b = mul.inputs
        merged, other, scale_first = (b, a, True) if _stitch(a) is None else (a, b, False)
        if other is merged or other.dtype != merged.dtype or other.shape.rank is None \
                or other.shape.rank > 2:
            return None
        scale = [other]
    else:
        merged = rows
    stitch = _stitch(merged)
    if stitch is None:
        return None
    indices, data = stitch.grouped_inputs()
    out = reduce.outputs[0]
    members = _in_order(stitch, mul, reduce)
    externals = (*indices, *data, *scale, segment_ids, size)

    def build():
        attrs = {"T": out.dtype, "N": len(indices), "S": len(scale),
                 "Tsegment": segment_ids.dtype, "Tsize": size.dtype,
                 "scale_first": scale_first, **_member_attrs(members, externals, [out])}
        node = Operation.stand_in(reduce, op_def("_StitchSegmentSum"), externals,
                                  (len(indices), len(data), len(scale), 1, 1), attrs,
                                  [(out.dtype, out.shape)])
        return {out: node.outputs[0]}
    through = (merged,) if mul is None else (merged, rows)
    return _Candidate(members, through, build)


def _product_sum(fused: Operation) -> _Candidate | None:
    """_ProductSum(merged, rows) or (rows, merged) over the rows' last axis."""
    x, y = fused.inputs
    for merged, rows, stitch_first in ((x, y, True), (y, x, False)):
        stitch, gather = _stitch(merged), _row_gather(rows)
        if stitch is not None and gather is not None:
            break
    else:
        return None
    gather_op, params, ids, ignore_bad = gather
    indices, data = stitch.grouped_inputs()
    out = fused.outputs[0]
    members = _in_order(stitch, gather_op, fused)
    externals = (*indices, *data, params, ids)

    def build():
        attrs = {"T": out.dtype, "N": len(indices), "Tids": ids.dtype,
                 "keep_dims": fused.attrs["keep_dims"], "stitch_first": stitch_first,
                 "ignore_bad": ignore_bad, **_member_attrs(members, externals, [out])}
        node = Operation.stand_in(fused, op_def("_StitchProductSum"), externals,
                                  (len(indices), len(data), 1, 1), attrs,
                                  [(out.dtype, out.shape)])
        return {out: node.outputs[0]}
    return _Candidate(members, (merged, rows), build)


def _scaled_gather(mul: Operation, readers) -> _Candidate | None:
    """GatherNd(rows * scale, picks, IGNORE) for every reader of the product."""
    a, b = mul.inputs
    product = mul.outputs[0]
    for rows, scale, scale_first in ((a, b, False), (b, a, True)):
        gather = _row_gather(rows)
        if gather is not None and scale is not rows:
            break
    else:
        return None
    if scale.dtype != rows.dtype or scale.shape.rank is None or scale.shape.rank > 2 \
            or product.shape.rank != 2:
        return None
    pickers = readers.get(product, [])
    if not pickers or any(not _picks(op, product) for op in pickers):
        return None
    pickers = sorted(set(pickers), key=lambda op: op.position)
    last = pickers[-1]
    if any(r.position <= last.position for p in pickers for r in readers.get(p.outputs[0], ())):
        return None  # a stand-in for the last one would run after a reader of an earlier one
    gather_op, params, ids, ignore_bad = gather
    picks = [op.inputs[1] for op in pickers]
    if len({p.dtype for p in picks}) != 1:
        return None
    outs = [op.outputs[0] for op in pickers]
    members = _in_order(gather_op, mul, *pickers)
    externals = (params, ids, scale, *picks)

    def build():
        attrs = {"T": product.dtype, "N": len(picks), "Tids": ids.dtype,
                 "Tpicks": picks[0].dtype, "scale_first": scale_first,
                 "ignore_bad": ignore_bad, **_member_attrs(members, externals, outs)}
        node = Operation.stand_in(last, op_def("_ScaledGatherRows"), externals,
                                  (1, 1, 1, len(picks)), attrs,
                                  [(o.dtype, o.shape) for o in outs])
        return dict(zip(outs, node.outputs))
    return _Candidate(members, (rows, product), build)


def _picks(op: Operation, product: Output) -> bool:
    """Whether ``op`` picks rows of ``product`` by [k, 1] indices, bad ones giving zeros."""
    return op.type == "GatherNd" and op.inputs[0] is product and op.inputs[1] is not product \
        and not op.control_inputs and on_the_cpu(op) and op.attrs.get("batch_dims", 0) == 0 \
        and op.attrs.get("bad_indices_policy", "") == "IGNORE" \
        and op.inputs[1].shape.rank == 2 and op.inputs[1].shape[1] == 1


def _in_order(*ops: Operation | None) -> tuple[Operation, ...]:
    return tuple(sorted((op for op in ops if op is not None), key=lambda op: op.position))


def _member_attrs(members, externals, results) -> dict:
    """What a fused node needs to run the nodes it stands for instead."""
    return {"members": members, "externals": tuple(externals), "results": tuple(results),
            "replaces": tuple(op.name for op in members)}


__all__ = ["fuse_stitch_reduce"]
