"""One loop for a While and its recorded twin.

A while loop's gradient re-runs the loop as ``_WhileRecorded`` (ops/control_flow_ops.py),
which also keeps every iteration's loop variables. A plan that fetches both the
loop's results and its gradient (a training step: the loss and the update) would run
the loop twice; the twin's first outputs are the While's, so the While's readers read
them instead and the loop runs once. Only a loop whose gradient exists has a twin,
and that is a loop without effects (a gradient refuses to replay effects).
"""
from __future__ import annotations

from typing import Collection, Sequence

from graphflow.graph import Operation, Output

_LOOPS = ("While", "StatelessWhile")


def _key(op: Operation) -> tuple:
    return (op.attrs["cond"], op.attrs["body"], tuple(op.inputs))


def share_recorded_loops(ops: Sequence[Operation], fed: Collection[Output]) -> dict[Output, Output]:
    """Substitutes: a While's outputs and its recorded twin's by those of one recorded
    loop, a plan node standing where the While stands (the twin, made later by the
    gradient, comes after the While's readers in the creation order)."""
    twins = {_key(op): op for op in ops if op.type == "_WhileRecorded"}
    found: dict[Output, Output] = {}
    for op in ops:
        twin = twins.pop(_key(op), None) if op.type in _LOOPS else None
        if twin is None:
            continue
        loop = Operation.stand_in(
            op, twin.op_def, twin.inputs, twin.arg_lengths,
            twin.attrs, [(o.dtype, o.shape) for o in twin.outputs], name=twin.name)
        for source in (op, twin):
            found.update((o, t) for o, t in zip(source.outputs, loop.outputs) if o not in fed)
    return found
