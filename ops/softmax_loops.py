"""Compiled loops of Softmax and LogSoftmax's lean kernels (ops/nn_ops.py): the
row's maximum subtracted and the row's exp summed in one pass each, where numpy
spends a call per step and reduces a short last axis slowly (a [4096, 2] gate
softmax: 0.23 ms as numpy calls). The exp and the log stay numpy's (its own SIMD
code, whose last bits a compiled libm call need not share); the sums are numpy's
pairwise order for rows of up to ``BLOCK`` elements: the same bits as the numpy
kernel's."""
from __future__ import annotations

import numpy as np

from .jit import kernel

#: The longest row summed here: up to this many numpy sums a row by eight running
#: sums (its pairwise summation's block, ops/product_sum.py), past it by halves.
BLOCK = 128


@kernel
def shift_rows(x, out, finite_peak):
    """out[r] = x[r] - max(x[r]): a NaN in the row makes the maximum NaN (numpy's max);
    ``finite_peak``: a maximum that is not finite counts as 0 (Softmax's rule)."""
    for r in range(x.shape[0]):
        peak = -np.inf
        nan = False
        for j in range(x.shape[1]):
            v = x[r, j]
            if v != v:
                nan = True
            elif v > peak:
                peak = v
        if nan:
            peak = np.nan
        if finite_peak and not np.isfinite(peak):
            peak = 0.0
        p = x.dtype.type(peak)
        for j in range(x.shape[1]):
            out[r, j] = x[r, j] - p


@kernel
def row_sums(e, sums):
    """sums[r] = 0 + e[r] summed as numpy's add.reduce sums a contiguous row of at most
    BLOCK elements: in order from -0.0 below 8 elements, else eight running sums joined
    pairwise and the rest added after."""
    n = e.shape[1]
    whole = n - n % 8
    acc = np.empty(8, e.dtype)
    for r in range(e.shape[0]):
        if n < 8:
            res = e.dtype.type(-0.0)
            for j in range(n):
                res += e[r, j]
        else:
            for j in range(8):
                acc[j] = e[r, j]
            for i in range(8, whole, 8):
                for j in range(8):
                    acc[j] += e[r, i + j]
            res = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
            for i in range(whole, n):
                res += e[r, i]
        sums[r] = 0 + res
