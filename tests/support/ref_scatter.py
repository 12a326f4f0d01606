"""Plain Python-loop references for the scatter family and GatherNd (TensorFlow's CPU
semantics, one index tuple at a time), used by the property-based tests."""
from __future__ import annotations

import numpy as np


class BadIndex(Exception):
    """The message TensorFlow gives for the bad index tuple it reports."""


def _position(outer_shape: tuple, pos: tuple) -> str:
    return "" if not outer_shape else "[" + ",".join(map(str, pos)) + "]"


def _in_bounds(idx: tuple, shape: tuple) -> bool:
    return all(0 <= i < d for i, d in zip(idx, shape))


def _combine(op: str, current, new):
    if op == "update":
        return new
    if op == "add":
        return current + new
    if op == "sub":
        return current - new
    if op == "min":  # Eigen's min(current, new): a NaN update never wins
        return np.where(new < current, new, current)
    if op == "max":
        return np.where(current < new, new, current)
    raise ValueError(op)


def scatter(tensor: np.ndarray, indices: np.ndarray, updates: np.ndarray, op: str,
            policy: str = "", report_first: bool = False) -> np.ndarray:
    """``tensor`` (copied) with ``updates[i]`` combined into ``out[indices[i]]``, in order.

    A bad tuple is skipped; unless ``policy`` is IGNORE, the last bad one is
    reported afterwards (TensorFlow's CPU loop records each bad one in turn), or
    the first one with ``report_first`` (TensorFlow's GPU kernels under "ERROR").
    """
    out = tensor.copy()
    outer = indices.shape[:-1]
    bad = None
    with np.errstate(all="ignore"):
        for pos in np.ndindex(*outer):
            idx = tuple(int(v) for v in indices[pos])
            if not _in_bounds(idx, out.shape):
                bad = bad if report_first and bad is not None else (pos, idx)
                continue
            out[idx] = _combine(op, out[idx], updates[pos])
    if bad is not None and policy != "IGNORE":
        pos, idx = bad
        raise BadIndex(f"indices{_position(outer, pos)} = [{', '.join(map(str, idx))}] does not "
                       f"index into shape [{','.join(map(str, tensor.shape))}]")
    return out


def scatter_nd(indices: np.ndarray, updates: np.ndarray, shape: tuple,
               policy: str = "", report_first: bool = False) -> np.ndarray:
    """zeros(shape) (empty strings for object) plus ``updates`` at ``indices``."""
    if updates.dtype == object:
        zeros = np.empty(shape, dtype=object)
        zeros.fill(b"")
    else:
        zeros = np.zeros(shape, dtype=updates.dtype)
    return scatter(zeros, indices, updates, "add", policy, report_first)


def gather_nd(params: np.ndarray, indices: np.ndarray, batch_dims: int = 0,
              policy: str = "", report_first: bool = False) -> np.ndarray:
    """``out[i] = params[i[:batch_dims] + indices[i]]``; zeros for bad tuples under IGNORE.

    Bad tuples are reported as tf.gather_nd does: the last one (the first with
    ``report_first``, as TensorFlow's GPU kernel under "ERROR"), at its position
    in the indices reshaped to ``[prod(batch), *indices.shape[batch_dims:-1]]``,
    with the batch coordinates prepended to the tuple.
    """
    b = batch_dims
    depth = indices.shape[-1]
    outer = indices.shape[:-1]
    out = np.zeros(outer + params.shape[b + depth:], dtype=params.dtype)
    if params.dtype == object:
        out.fill(b"")
    bad = None
    for pos in np.ndindex(*outer):
        idx = tuple(pos[:b]) + tuple(int(v) for v in indices[pos])
        if not _in_bounds(idx, params.shape):
            bad = bad if report_first and bad is not None else (pos, idx)
            continue
        out[pos] = params[idx]
    if bad is not None and policy != "IGNORE":
        pos, idx = bad
        flat_outer = (int(np.prod(outer[:b], dtype=np.int64)),) + outer[b:] if b else outer
        flat_pos = ((int(np.ravel_multi_index(pos[:b], outer[:b])),) + pos[b:]) if b else pos
        raise BadIndex(f"indices{_position(flat_outer, flat_pos)} = [{', '.join(map(str, idx))}] "
                       f"does not index into param shape [{','.join(map(str, params.shape))}]")
    return out
