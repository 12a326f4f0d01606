"""Shape specialization: the IR of a signature re-inferred for the shapes its feeds
have in a run, as ``jax.jit`` traces per input shapes.

A placeholder declared ``[None, 64]`` and fed ``[32, 64]`` makes every shape
downstream known; then Shape/Size/BroadcastGradientArgs fold and the
simplifications apply (runtime/pipeline.py). Each op whose shapes get more precise
is cloned (the same name, attrs and inputs; a node of the plan only, never of the
graph) with the refined shapes, reading the clones of its inputs.

The policy (runtime/executor.py, ``Plan.run``): a plan whose feeds all have fully
known static shapes is never specialized. Otherwise a shape signature seen a
second time (while among the last ``MAX_SIGHTINGS`` seen once) gets its own plan,
up to ``MAX_SPECIALIZED`` signatures per plan;
after that, new signatures run the general plan (shapes that keep changing would
only pay for compiling). With tiered compilation on (the default) the plan is built
on a background thread while the general plan runs the calls (docs/runtime.md). A
signature whose re-inference fails (a shape rule refuses the fed shapes) runs the
general plan, which reports the error as it always did.
"""
from __future__ import annotations

from typing import Sequence

from graphflow.builder import infer_shapes
from graphflow.errors import OpError
from graphflow.graph import Operation, Output
from graphflow.shapes import TensorShape

from ..ops.background import pace
from .passes import prune
from .plan_ir import PlanIR

#: Shape signatures a plan specializes for before it sticks to its general plan.
MAX_SPECIALIZED = 8

#: Signatures seen once that a plan remembers (the oldest forgotten first): a feed whose
#: shape changes on every call must not grow the plan without bound.
MAX_SIGHTINGS = 64


class NotSpecializable(Exception):
    """A shape rule refuses the fed shapes: the general plan runs (and reports it)."""


def needs_specializing(feeds: Sequence[Output]) -> bool:
    """Whether some feed's static shape leaves dims (or the rank) unknown."""
    return any(not f.shape.is_fully_defined() for f in feeds)


def specialize(ir: PlanIR, shapes: Sequence[tuple]) -> PlanIR | None:
    """``ir`` with the feeds' shapes fixed to ``shapes``, or None when a shape rule
    refuses them (the general plan then reports the error when it runs)."""
    refined = _fed_shapes(ir, shapes)  # a fed op -> its outputs' shapes
    if refined is None:
        return None
    needed = set(ir.ops)
    clone_of = {op: _clone(op, op.inputs, op.control_inputs, op_shapes)
                for op, op_shapes in refined.items() if op not in needed}

    def value(o: Output) -> Output:
        clone = clone_of.get(o.op)
        return o if clone is None else clone.outputs[o.index]

    fed = set(ir.feeds)
    for op in ir.ops:  # in order: each op's inputs are cloned before it
        pace()  # built in the background: the caller's share of the GIL
        inputs = [value(i) for i in op.inputs]
        controls = [clone_of.get(c, c) for c in op.control_inputs]
        if op not in refined and all(a is b for a, b in zip(inputs, op.inputs)) and \
                all(a is b for a, b in zip(controls, op.control_inputs)):
            continue
        probe = _clone(op, inputs, controls, [o.shape for o in op.outputs])
        try:
            inferred = infer_shapes(op.op_def, op.name, probe.grouped_inputs(),
                                     dict(op.attrs), len(op.outputs))
            fixed = refined.get(op) or [o.shape for o in op.outputs]
            known = [fixed[k] if o in fed else new.merge_with(o.shape)
                     for k, (o, new) in enumerate(zip(op.outputs, inferred))]
        except (OpError, ValueError, TypeError):
            return None
        clone_of[op] = _clone(op, inputs, controls, known)
    # the clones read clones: the IR is rewired as it is cloned; a fetched Operation is
    # its clone too (else it runs twice: fetched, and as a control)
    fetches = tuple(value(f) if isinstance(f, Output) else clone_of.get(f, f) for f in ir.fetches)
    feeds = tuple(value(f) for f in ir.feeds)
    roots = tuple(value(r) for r in ir.roots)
    replaced = {source: value(target) for source, target in ir.replaced.items()}
    return PlanIR(fetches, feeds, tuple(prune(fetches + roots, set(feeds))), replaced, roots)


def _fed_shapes(ir: PlanIR, shapes: Sequence[tuple]) -> dict | None:
    """Per op with a fed output of a shape not fully known: its outputs' shapes, the
    fed ones fixed to ``shapes``; None where a fed shape contradicts the static one."""
    refined: dict[Operation, list[TensorShape]] = {}
    for feed, shape in zip(ir.feeds, shapes):
        if feed.shape.is_fully_defined():
            continue
        try:
            known = TensorShape(list(shape)).merge_with(feed.shape)
        except ValueError:
            return None
        refined.setdefault(feed.op, [o.shape for o in feed.op.outputs])[feed.index] = known
    return refined


def _clone(op: Operation, inputs, controls, shapes) -> Operation:
    """A plan-only copy of ``op`` with other inputs and output shapes."""
    return Operation.stand_in(op, op.op_def, inputs, op.arg_lengths, op.attrs,
                              [(o.dtype, s) for o, s in zip(op.outputs, shapes)],
                              control_inputs=controls)
