"""tests/test_every_op.py's input generators for the control-flow ops: op -> fn(op_def,
inputs) building the op over a loop variable (or branch result) of the dtype under test."""
from __future__ import annotations

import numpy as np

import graphflow as gf


def _cond(stateful: bool):
    def build(d, inputs):
        s = inputs.scope
        x = inputs.tensor()
        pred = inputs.tensor((), gf.bool)
        if stateful:
            v = inputs.variable()
            return s.cond(pred, lambda: s.identity(v.read()), lambda: s.identity(x))
        return s.cond(pred, lambda: s.identity(x), lambda: s.identity(x))
    return build


def _while(stateful: bool):
    def build(d, inputs):
        s = inputs.scope
        x = inputs.tensor()
        v = inputs.variable() if stateful else None

        def body(i, y):
            return i + 1, s.identity(v.read()) if stateful else s.identity(y)
        _, out = s.while_loop(lambda i, y: i < 2, body, [np.int32(0), x])
        return out
    return build


INPUTS = {"If": _cond(True), "StatelessIf": _cond(False),
          "While": _while(True), "StatelessWhile": _while(False)}
