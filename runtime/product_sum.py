"""``Sum(Mul(x, y), last axis)`` as one node (ops/product_sum.py's ``_ProductSum``).

A row-wise dot product (word2vec's scores, an MoE gate's gradient) writes the [n, k]
product and reads it back to sum it; fused, the product is summed as it is made. The
pattern, with the product read by the Sum alone and neither fed nor fetched::

    p = Mul(x, y)                        # x and y of one static shape, float32/float64
    s = Sum(p, axis)                     # axis a constant naming the last dim only
"""
from __future__ import annotations

from typing import Collection, Sequence

from graphflow.graph import Operation, Output
from graphflow.inference import constant_value
from graphflow.registry import op_def

from .fusion import on_the_cpu, readers_of

_DTYPES = ("float32", "float64")


def fuse_product_sums(ops: Sequence[Operation], fed: Collection[Output],
                      targets: Sequence) -> dict[Output, Output]:
    """Substitutes for the Sums of ``ops`` (a plan's) that sum a private product over
    its last axis."""
    fetched = {t for t in targets if isinstance(t, Output)}
    readers = readers_of(ops)
    found: dict[Output, Output] = {}
    for op in ops:
        if op.type == "Sum":
            node = _fused(op, fed, fetched, readers)
            if node is not None:
                found[op.outputs[0]] = node.outputs[0]
    return found


def _fused(reduce: Operation, fed, fetched, readers) -> Operation | None:
    product, axis = reduce.inputs
    mul = product.op
    if mul.type != "Mul" or product in fed or product in fetched \
            or readers.get(product) != [reduce] or reduce.control_inputs or mul.control_inputs \
            or not on_the_cpu(reduce) or not on_the_cpu(mul):
        return None
    x, y = mul.inputs
    shape = x.shape
    if product.dtype.name not in _DTYPES or not shape.is_fully_defined() or shape.rank < 1 \
            or y.shape != shape or not y.shape.is_fully_defined():
        return None
    axes = constant_value(axis)
    if axes is None or axes.size != 1 or int(axes.reshape(-1)[0]) not in (-1, shape.rank - 1):
        return None
    attrs = {"T": product.dtype, "keep_dims": reduce.attrs["keep_dims"],
             "members": (mul, reduce), "axis": axes, "replaces": (mul.name, reduce.name)}
    out = reduce.outputs[0]
    return Operation.stand_in(reduce, op_def("_ProductSum"), [x, y], (1, 1), attrs,
                              [(out.dtype, out.shape)])


__all__ = ["fuse_product_sums"]
