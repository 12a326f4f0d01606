"""Algebraic and shape simplification (grappler's arithmetic and shape rewrites) that
change no result bit: a node that computes a value it is given is replaced by that
value.

- ``Identity(x)``, ``AddN([x])``, ``Cast(x)`` to x's own dtype;
- ``Reshape``/``BroadcastTo``/``Squeeze``/``ExpandDims`` whose output has x's (fully
  known) shape;
- ``Sum``/``Prod``/``Max``/``Min`` over no axes;
- ``x * 1``, ``1 * x``, ``x / 1``, with a constant of ones that does not broadcast x
  (real and integer dtypes only: complex products mix the parts, ``(inf+0j) * 1`` is
  ``inf+nanj``);
- ``x + 0``, ``0 + x``, ``x - 0`` where exact: for floats ``x + (+0.0)`` turns ``-0.0``
  into ``+0.0``, so only ``x + (-0.0)`` and ``x - (+0.0)`` go (any zero for integers);
- ``Neg(Neg(x))``;
- ``AddN([a, b])`` of two inputs of one fully known shape becomes ``Add(a, b)`` (the
  kernel adds them the same way): an Add joins fused regions, an AddN does not, and
  gradients are full of two-input AddNs (a value read twice);
- ``Mul(BroadcastTo(g, shape), x)`` (any broadcasting binary op, either order) where x
  already has the result's shape becomes ``Mul(g, x)``: the op broadcasts g itself, to
  the same values. A Sum's gradient is such a BroadcastTo, and its product was a
  written [n, k] copy of an [n, 1] column (word2vec: 5120 x 64 a step).

Shapes and constants come from the plan (a shape-specialized plan knows more of
them; folded values are constants). A node with control inputs, or whose output is
fed, is left alone.
"""
from __future__ import annotations

from typing import Callable, Collection

import numpy as np

from graphflow.graph import Operation, Output
from graphflow.inference import constant_value
from graphflow.registry import op_def



def simplified(op: Operation, resolve: Callable[[Output], Output],
               fed: Collection[Output] = ()) -> Output | None:
    """The existing value ``op``'s single output equals, or None (never looking through
    a fed value: a feed replaces what its op would compute)."""
    if len(op.outputs) != 1:
        return None
    out = op.outputs[0]
    inputs = [resolve(i) for i in op.inputs]
    kind = op.type
    if kind == "Identity" or (kind == "AddN" and len(inputs) == 1):
        return _same(inputs[0], out)
    if kind == "Cast":
        return _same(inputs[0], out)
    if kind == "AddN" and len(inputs) == 2:
        return _as_add(op, inputs, out)
    if op.op_def.identity_when_same_shape:
        x = inputs[0]
        if x.shape.is_fully_defined() and out.shape.is_fully_defined() \
                and x.shape.as_list() == out.shape.as_list():
            return _same(x, out)
        return None
    if op.op_def.identity_over_no_axes:
        axes = constant_value(inputs[1])
        return _same(inputs[0], out) if axes is not None and axes.size == 0 else None
    if kind == "Neg":
        inner = inputs[0].op
        if inner.type == "Neg" and not inner.control_inputs and inputs[0] not in fed:
            return _same(resolve(inner.inputs[0]), out)
        return None
    if kind in ("Mul", "Add", "Sub", "RealDiv", "Div"):
        a, b = inputs
        for x, c, constant_first in ((a, b, False), (b, a, True)):
            if constant_first and kind in ("Sub", "RealDiv", "Div"):
                break
            if _identity_element(kind, c, x):
                return _same(x, out)
    if kind in BROADCASTING_BINARY:
        return _without_broadcast_to(op, inputs, out, fed, resolve)
    return None


#: Binary element-wise ops that broadcast their operands as numpy does.
BROADCASTING_BINARY = frozenset(("Mul", "Add", "Sub", "RealDiv", "Div", "Maximum", "Minimum",
                                 "SquaredDifference", "Pow"))


def _without_broadcast_to(op: Operation, inputs: list[Output], out: Output,
                          fed: Collection[Output], resolve) -> Output | None:
    """``op`` with a BroadcastTo operand replaced by what it broadcasts, when the other
    operand has the result's (fully known) shape: the op broadcasts it to the same
    values."""
    if not out.shape.is_fully_defined():
        return None
    shape = out.shape.as_list()
    for k, operand in enumerate(inputs):
        other = inputs[1 - k]
        inner = operand.op
        if inner.type != "BroadcastTo" or inner.control_inputs or operand in fed \
                or not other.shape.is_fully_defined() or other.shape.as_list() != shape:
            continue
        source = resolve(inner.inputs[0])
        if source.dtype != operand.dtype or source.shape.rank is None \
                or source.shape.rank > len(shape) or any(
                    d is None or d not in (1, full)
                    for d, full in zip(source.shape.as_list()[::-1], shape[::-1])):
            continue
        operands = [source, other] if k == 0 else [other, source]
        return Operation.stand_in(op, op.op_def, operands, (1, 1), dict(op.attrs),
                                  [(out.dtype, out.shape)]).outputs[0]
    return None


def _same(x: Output, out: Output) -> Output | None:
    """``x`` if it can stand for ``out``: the same dtype, a shape at least as known."""
    if x.dtype != out.dtype:
        return None
    if out.shape.rank is not None and (x.shape.rank != out.shape.rank or any(
            d_out is not None and d_x != d_out for d_x, d_out in zip(x.shape.dims, out.shape.dims))):
        return None
    return x


def _as_add(op: Operation, inputs: list[Output], out: Output) -> Output | None:
    """A plan-only ``Add(a, b)`` standing for the two-input AddN ``op``, when no input
    broadcasts (AddN refuses what Add would broadcast) and Add takes the dtype."""
    add = op_def("Add")
    allowed = add.attrs["T"].allowed
    if (allowed is not None and out.dtype not in allowed) or not out.shape.is_fully_defined() or any(
            x.shape.as_list() != out.shape.as_list() for x in inputs):
        return None
    return Operation.stand_in(op, add, inputs, (1, 1), {"T": out.dtype},
                              [(out.dtype, out.shape)]).outputs[0]


def _identity_element(kind: str, c: Output, x: Output) -> bool:
    """Whether ``x <kind> c`` equals x bit for bit, for every x."""
    value = constant_value(c)
    if value is None or value.dtype == object or c.dtype != x.dtype:
        return False
    # c must not broadcast x to a larger shape: its rank and dims fit inside x's
    if not x.shape.is_fully_defined() or value.ndim > x.shape.rank or any(
            d not in (1, dx) for d, dx in zip(value.shape[::-1], x.shape.as_list()[::-1])):
        return False
    if kind in ("Mul", "RealDiv", "Div"):
        # not for complex: (inf+0j) * (1+0j) is inf+nanj, and x / 1 may flip a -0.0
        return value.dtype.kind in "iuf" and bool(np.all(value == 1))
    if value.dtype.kind in "iub":
        return bool(np.all(value == 0))
    if value.dtype.kind != "f":
        return False
    zero = value == 0
    if kind == "Add":  # only -0.0 leaves every x (-0.0 included) as it is
        return bool(np.all(zero & np.signbit(value)))
    return bool(np.all(zero & ~np.signbit(value)))  # x - (+0.0)


def simplify(ops: list[Operation], fed: Collection[Output]) -> dict[Output, Output]:
    """Substitutes ``output -> existing value`` for every simplifiable op of ``ops``."""
    found: dict[Output, Output] = {}

    def resolve(o: Output) -> Output:
        return found.get(o, o)

    for op in ops:
        if op.control_inputs or op.op_def.stateful or any(o in fed for o in op.outputs):
            continue
        target = simplified(op, resolve, fed)
        if target is not None and target is not op.outputs[0]:
            found[op.outputs[0]] = target
    return found
