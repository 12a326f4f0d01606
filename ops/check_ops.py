"""Run-time checks that graph builders insert where a rule cannot be checked at build time.

``_AssertEqual(value, x, y)`` passes ``value`` through (no copy) when ``x`` and ``y``
are equal (same shape, same elements) and otherwise fails with its ``message``, in
which ``{x}`` and ``{y}`` stand for the two values. Gradients use it for what static
shapes leave open: a fed ``grad_ys`` of y's shape, IndexedSlices added with one
``dense_shape``. Builders add it only when the static shapes do not already settle the
question, so graphs whose shapes are known hold none.
"""
from __future__ import annotations

import numpy as np

from graphflow.errors import InvalidArgumentError
from graphflow.registry import StringAttr, TypeAttr, register_op
from graphflow.shapes import debug_string

from .shape_rules import same_shape_as

AssertEqual = register_op(
    "_AssertEqual", inputs=["value: T", "x: Tcheck", "y: Tcheck"], outputs=["output: T"],
    attrs={"T": TypeAttr(), "Tcheck": TypeAttr(), "message": StringAttr()},
    fresh_outputs=False,
    doc="`value`, unchanged, when x == y (shape and elements); else InvalidArgumentError "
        "with `message` ({x}, {y}: the values).")


AssertEqual.shape_fn(same_shape_as("value"))


def _text(a: np.ndarray) -> str:
    if a.ndim == 1 and a.dtype.kind in "iu":
        return debug_string(a)
    return np.array2string(a, separator=", ")


@AssertEqual.kernel("cpu")
def _assert_equal(ctx, value, x, y):
    if x.shape != y.shape or not np.array_equal(x, y):
        message = ctx.attrs["message"].replace("{x}", _text(x)).replace("{y}", _text(y))
        raise InvalidArgumentError(message)
    return value


@AssertEqual.gradient
def _assert_equal_grad(g, grad):
    """The check is the identity on `value`."""
    return [grad, None, None]
