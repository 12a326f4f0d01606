"""Shape functions that many ops share, declared once.

An op whose output has the shape of one of its inputs (element-wise unary
ops, casts, identities, ``*Like``) attaches ``same_shape_as("x")``; its
docstring ("same as `x`.") is what the op docs show.
"""
from __future__ import annotations

import sys
from typing import Callable

from graphflow.shapes import TensorShape


def same_shape_as(input_name: str) -> Callable:
    """The shape function ``ctx -> ctx.shape(input_name)``: the output has that input's
    (possibly partial) shape. The function counts as the calling module's, as a
    hand-written one would (``graphflow ops`` names an op's family by it)."""
    def shape(ctx) -> TensorShape:
        return ctx.shape(input_name)
    shape.__doc__ = f"same as `{input_name}`."
    shape.__name__ = shape.__qualname__ = f"same_shape_as_{input_name}"
    shape.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)
    return shape


__all__ = ["same_shape_as"]
