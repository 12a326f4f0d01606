"""The compiled loop of TopKV2's lean kernel for a small k (ops/selection_ops.py):
each row scanned once, its k best kept in order by insertion, where the registered
kernel sorts every row whole in numpy calls (an MoE's top-2 of 8 gates over 4096
tokens: 0.43 ms). The order is the registered kernel's, TF's comparator: larger
first, NaN above +inf, ties (-0.0 and 0.0 among them) the lower index first."""
from __future__ import annotations

import numpy as np

from .jit import kernel

#: The largest k the loop serves: it moves up to k kept entries per better element.
MAX_K = 16


@kernel
def top_k_rows(x, k, values, indices):
    """values[r], indices[r] = the k best of x[r], best first. An element that does not
    beat the k-th best kept (most, once k are kept) costs one comparison."""
    best = np.empty(k, x.dtype)
    where = np.empty(k, np.int64)
    for r in range(x.shape[0]):
        kept = 0
        for j in range(x.shape[1]):
            v = x[r, j]
            if kept == k:
                w = best[k - 1]
                if not (v > w or (v != v and w == w)):
                    continue
                p = k - 1
            else:
                p = kept
                kept += 1
            while p > 0:  # after every kept entry v does not beat (equal ones came first)
                w = best[p - 1]
                if not (v > w or (v != v and w == w)):
                    break
                best[p] = w
                where[p] = where[p - 1]
                p -= 1
            best[p] = v
            where[p] = j
        for q in range(k):
            values[r, q] = best[q]
            indices[r, q] = where[q]
