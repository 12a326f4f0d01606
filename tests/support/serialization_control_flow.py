"""tests/test_serialization.py's round-trip graphs for the control-flow ops: op type ->
fn(scope) -> (fetches, feeds). The functions (branches, cond, body) travel inside the
node's attrs, and the loaded graph runs them alike."""
from __future__ import annotations

import numpy as np

import graphflow as gf

X = np.array([1.0, -2.0, 3.0], np.float32)


def _cond(stateful: bool):
    def build(s):
        x = s.placeholder(gf.float32, [3], name="x")
        p = s.placeholder(gf.bool, [], name="p")
        v = s.variable(np.float32([0.5, 0.5, 0.5]), name="v")
        init = s.with_control_dependencies([v.initializer])
        then = (lambda: s.mul(x, v.read())) if stateful else (lambda: s.mul(x, 2.0))
        y = init.cond(p, then, lambda: s.square(x), name="c")
        return [y], {"x:0": X, "p:0": np.bool_(True)}
    return build


def _while(stateful: bool):
    def build(s):
        x = s.placeholder(gf.float32, [3], name="x")
        v = s.variable(np.float32(1.5), name="v")
        init = s.with_control_dependencies([v.initializer])

        def body(i, a):
            factor = v.read() if stateful else 1.5
            inner = s.cond(i < 2, lambda: a * factor, lambda: a + x)
            return i + 1, inner
        out = init.while_loop(lambda i, a: i < 4, body, [0, x], name="w")
        return list(out), {"x:0": X}
    return build


EXAMPLES = {"If": _cond(True), "StatelessIf": _cond(False),
            "While": _while(True), "StatelessWhile": _while(False)}
