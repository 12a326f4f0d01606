"""Plain Python-loop references for the scatter family and GatherNd."""
from __future__ import annotations

import itertools

import numpy as np


def _tuples(indices):
    batch = indices.shape[:-1]
    for pos in itertools.product(*map(range, batch)):
        yield pos, tuple(int(v) for v in indices[pos])


def scatter(tensor, indices, updates, combine):
    """``tensor`` (copied) with ``updates`` applied at ``indices`` one by one, in order."""
    out = tensor.copy()
    for pos, idx in _tuples(indices):
        if any(i < 0 or i >= d for i, d in zip(idx, out.shape)):
            raise IndexError(pos, idx)
        current = out[idx]
        new = updates[pos]
        if combine == "update":
            out[idx] = new
        elif combine == "add":
            out[idx] = current + new
        elif combine == "sub":
            out[idx] = current - new
        elif combine == "min":
            out[idx] = np.where(new < current, new, current)
        elif combine == "max":
            out[idx] = np.where(new > current, new, current)
    return out


def gather_nd(params, indices):
    out = np.empty(indices.shape[:-1] + params.shape[indices.shape[-1]:], params.dtype)
    for pos, idx in _tuples(indices):
        if any(i < 0 or i >= d for i, d in zip(idx, params.shape)):
            raise IndexError(pos, idx)
        out[pos] = params[idx]
    return out
