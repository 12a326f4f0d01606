"""Constant folding: a node whose inputs are all constants is computed once, when
the plan is made, and its outputs become constants of the plan (TensorFlow's
grappler and XLA do the same). The user's graph is not changed: folded outputs
are substitutes, as the rewrites' are.

Folding runs a node's CPU kernel, so it happens only in sessions whose devices
are all CPUs: a node placed on a GPU keeps the GPU's semantics (an out-of-bound
index skipped, duplicates in any order). Not folded: stateful ops, fed outputs, and
outputs past ``MAX_FOLDED_BYTES`` (a constant is kept for the plan's life) or past the
session's memory limit (they fail at run time). A node whose kernel fails is left to
fail at run time, with the error it always had. A folded node's control inputs are
kept by the pipeline (runtime/pipeline.py: the constant waits on them instead).

Shape-only ops (Shape, Size, Rank, ZerosLike, OnesLike) fold as soon as their
input's static shape is fully known (grappler's MaterializeShapes): a
shape-specialized plan knows most shapes. Their input is still computed (a *root*
of the plan), so its errors and effects stay.
"""
from __future__ import annotations

from typing import Collection, Sequence

import numpy as np

from graphflow.graph import Operation, Output
from graphflow.host_eval import evaluate_on_host
from graphflow.registry import op_def

from ..ops.background import pace
from .device import Device

#: Outputs larger than this stay computed at run time.
MAX_FOLDED_BYTES = 1 << 20


def fold_constants(ops: list[Operation], fed: Collection[Output], devices: Sequence[Device], config,
                   roots: list | None = None) -> dict[Output, Output]:
    """Substitutes (Output -> Output of a new Const) for the outputs of ``ops`` that depend
    on constants only, or on static shapes only. What the inputs of folded shape-only ops
    involve that may fail (:func:`what_may_fail`) is appended to ``roots``."""
    if any(d.device_type != "cpu" for d in devices):
        return {}
    host = devices[0]
    values: dict[Output, np.ndarray] = {}
    folded: dict[Output, Output] = {}
    for op in ops:
        if op.type == "Const":
            for o in op.outputs:
                if o not in fed:
                    values[o] = op.attrs["value"]
            continue
        if op.op_def.stateful or not op.inputs \
                or any(o in fed for o in op.outputs):
            continue
        inputs = op.inputs
        if op.op_def.shape_only and inputs[0] not in values:
            args = _shape_stand_in(inputs[0])
            if args is None:
                continue
            if roots is not None:
                roots.extend(what_may_fail(inputs[0], fed, values))
        elif not all(i in values for i in inputs):
            continue
        else:
            args = [values[i] for i in inputs]
        pace()  # built in the background: the caller's share of the GIL
        results = _evaluate(op, args, host, config)
        if results is None:
            continue
        for o, value in zip(op.outputs, results):
            values[o] = value
            folded[o] = _constant(op, o, value)
    return folded


def what_may_fail(x: Output, fed: Collection[Output],
                  constants: Collection[Output] = ()) -> list[Output]:
    """The values computing ``x`` involves that might raise or act, which a folded Shape
    of ``x`` must still have computed: ``x`` itself, unless its op is a floating-point
    element-wise op of static shapes (they broadcast, checked at build time; inf and
    NaN come silently), whose inputs are then looked at in its place, or an op whose
    errors its shape function raised already (:func:`checked_by_shapes`: a gradient's
    BroadcastTo), whose first input is; ``constants``: values known to be constants
    (folded). So a product whose shape was folded may still be fused away
    (runtime/product_sum.py)."""
    found: list[Output] = []
    pending, seen = [x], set()
    while pending:
        value = pending.pop()
        if value in seen or value in fed or value.op.type == "Const":
            continue
        seen.add(value)
        op = value.op
        if checked_by_shapes(op, constants):
            pending.append(op.inputs[0])
        elif op.op_def.elementwise is None or op.op_def.stateful or op.control_inputs \
                or not all(i.dtype.is_floating and i.shape.is_fully_defined() for i in op.inputs) \
                or not all(o.dtype.is_floating for o in op.outputs):
            found.append(value)
        else:
            pending.extend(op.inputs)
    return found


def checked_by_shapes(op: Operation, constants: Collection[Output] = ()) -> bool:
    """Whether ``op`` cannot fail at run time: its kernel fails only where its shape
    function does (``fails_by_shape_only``), and that ran on everything it reads, its
    inputs' and outputs' shapes all known and its inputs after the first constants
    (Consts, or among ``constants``)."""
    return op.op_def.fails_by_shape_only and not op.op_def.stateful and not op.control_inputs \
        and all(i.shape.is_fully_defined() for i in op.inputs) \
        and all(o.shape.is_fully_defined() for o in op.outputs) \
        and all(i.op.type == "Const" or i in constants for i in op.inputs[1:])


def _shape_stand_in(x: Output) -> list | None:
    """An array of ``x``'s static shape and dtype (zeros: a broadcast view, no memory),
    standing in for ``x`` in a shape-only op; None when the shape is not fully known."""
    if not x.shape.is_fully_defined() or x.dtype.name == "string":
        return None
    dtype = np.dtype(x.dtype.as_numpy_dtype)
    return [np.broadcast_to(np.zeros((), dtype), tuple(x.shape.as_list()))]


def _evaluate(op: Operation, args: list, host: Device, config) -> list[np.ndarray] | None:
    """The op's outputs computed by its CPU kernel, or None when it should not be folded."""
    # an output past the session's memory limit is not folded: it fails at run time
    limit = MAX_FOLDED_BYTES if config.memory_limit_bytes is None else min(
        MAX_FOLDED_BYTES, config.memory_limit_bytes)
    return evaluate_on_host(op, args, limit, device=host, config=config)


def _constant(op: Operation, output: Output, value: np.ndarray) -> Output:
    """A Const node, outside the graph's registry of names, standing for ``output``."""
    name = op.name if len(op.outputs) == 1 else f"{op.name}:{output.index}"
    const = Operation.stand_in(op, op_def("Const"), [], (), {"value": value, "dtype": output.dtype},
                               [(output.dtype, output.shape)], name=name)
    return const.outputs[0]
