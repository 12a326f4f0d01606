"""Compiled loops for ``x (op) y`` where y holds one value per row of x ([n, k] with
[n, 1]: edge weights, per-token gates), or ``y (op) x`` (a gradient's column times its
rows), which numpy's broadcasting runs at a third of the speed of a plain element-wise
op (its inner operand has stride 0). One IEEE operation per element in the graph's
operand order, as numpy's: the same bits (but for the product or sum of two NaNs of
different payloads, which may carry either one: LLVM is free to swap the operands of a
commutative operation, as in every compiled loop). Imported by the lean kernels of
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


@kernel
def column_mul(x, column, out):
    for i in range(x.shape[0]):
        c = column[i]
        for j in range(x.shape[1]):
            out[i, j] = c * x[i, j]


@kernel
def column_add(x, column, out):
    for i in range(x.shape[0]):
        c = column[i]
        for j in range(x.shape[1]):
            out[i, j] = c + x[i, j]


@kernel
def column_sub(x, column, out):
    for i in range(x.shape[0]):
        c = column[i]
        for j in range(x.shape[1]):
            out[i, j] = c - x[i, j]


@kernel
def column_div(x, column, out):
    for i in range(x.shape[0]):
        c = column[i]
        for j in range(x.shape[1]):
            out[i, j] = c / x[i, j]


#: x (op) column, by op type
LOOPS = {"Mul": rows_mul, "Add": rows_add, "Sub": rows_sub, "RealDiv": rows_div}
#: column (op) x, by op type
COLUMN_FIRST_LOOPS = {"Mul": column_mul, "Add": column_add, "Sub": column_sub,
                      "RealDiv": column_div}
