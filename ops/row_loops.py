"""Compiled loops for ``x (op) y`` where y holds one value per row of x ([n, k] with
[n, 1]: edge weights, per-token gates), which numpy's broadcasting runs at a third of
the speed of a plain element-wise op (its inner operand has stride 0). One IEEE
operation per element, as numpy's: the same bits. Imported by the lean kernels of
ops/math_ops.py when a plan has such a step (a dispatcher costs milliseconds)."""
from __future__ import annotations

from .jit import kernel


@kernel
def rows_mul(x, column, out):
    for i in range(x.shape[0]):
        c = column[i]
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * c


@kernel
def rows_add(x, column, out):
    for i in range(x.shape[0]):
        c = column[i]
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] + c


@kernel
def rows_sub(x, column, out):
    for i in range(x.shape[0]):
        c = column[i]
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] - c


@kernel
def rows_div(x, column, out):
    for i in range(x.shape[0]):
        c = column[i]
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] / c


LOOPS = {"Mul": rows_mul, "Add": rows_add, "Sub": rows_sub, "RealDiv": rows_div}
