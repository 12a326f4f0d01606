"""TensorFlow's run-time checks of scatter and gather inputs, shared by every device.

Shapes, index depth and index-type limits are checked in TensorFlow 2.21's
order and words (tests/conformance/tf_cases.json); a bad index tuple is
reported by :func:`bad_index_message`, called with the position that
``cpu_index.locate`` or ``gpu_index.locate`` found. Nothing here looks at index
values or touches a device.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from graphflow.errors import InvalidArgumentError
from graphflow.shapes import debug_string

#: Largest index depth TensorFlow's CPU kernels instantiate.
MAX_INDEX_DEPTH = 7


# -- index tuples and their messages ------------------------------------------------------
def _slice_position(outer_shape: Sequence[int], flat: int) -> str:
    """TensorFlow's SliceDebugString: ``""``, ``[4]`` or ``[1,0]`` for a flat position."""
    if not outer_shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(flat, tuple(outer_shape))) + "]"


def index_matrix(indices: np.ndarray) -> np.ndarray:
    """TensorFlow's flat_inner_dims: ``[num_tuples, depth]`` (``[1, n]`` for a vector)."""
    return indices.reshape(math.prod(indices.shape[:-1]), indices.shape[-1])


def bad_index_message(indices: np.ndarray, tuples: np.ndarray, what: str,
                      shape: Sequence[int], suffix: str = "") -> Callable[[int], str]:
    """``indices[1] = [9] does not index into shape [8]``, for a position found later."""
    def message(position: int) -> str:
        values = ", ".join(str(int(v)) for v in tuples[position])
        return (f"indices{_slice_position(indices.shape[:-1], position)} = [{values}] does not "
                f"index into {what} {debug_string(shape)}{suffix}")
    return message


def check_depth(depth: int, low: int) -> None:
    """The index depth a kernel instantiates: 1..7 for scatters, 0..7 for GatherNd."""
    if not low <= depth <= MAX_INDEX_DEPTH:
        raise InvalidArgumentError(
            f"Only indices.shape[-1] values between {low} and {MAX_INDEX_DEPTH} are currently "
            f"supported.  Requested rank: {depth}")


# -- run-time shape checks (TensorFlow's kernels, in their order) -----------------------------
def valid_empty(num_output: int, num_indices: int, num_updates: int) -> bool:
    """TensorFlow's ValidEmptyOutputShape: no indices and no updates, or all three non-empty."""
    if num_indices == 0 and num_updates == 0:
        return True
    return num_output != 0 and num_indices != 0 and num_updates != 0


def check_ranks(indices: np.ndarray, updates: np.ndarray) -> None:
    """Indices and updates are at least vectors."""
    for name, value in (("Indices", indices), ("Updates", updates)):
        if value.ndim < 1:
            raise InvalidArgumentError(f"{name} shape must have rank at least one. "
                                       f"Found:{debug_string(value.shape)}")


def _update_mismatch(indices: np.ndarray, updates: np.ndarray,
                     shape: Sequence[int]) -> tuple[bool, bool, bool]:
    """How ``updates.shape`` fails ``indices.shape[:-1] + shape[depth:]``: (outer dims
    differ, inner rank differs, inner dims differ)."""
    outer, depth = indices.ndim - 1, indices.shape[-1]
    return (updates.shape[:outer] != indices.shape[:outer],
            updates.ndim - outer != len(shape) - depth,
            tuple(updates.shape[outer:]) != tuple(shape[depth:]))


def check_scatter_nd_dims(indices: np.ndarray, updates: np.ndarray,
                          shape: Sequence[int]) -> None:
    """ScatterNd's check that updates.shape == indices.shape[:-1] + shape[depth:]."""
    outer_differs, _, inner_differs = _update_mismatch(indices, updates, shape)
    if not (outer_differs or inner_differs):
        return
    outer, depth = indices.ndim - 1, indices.shape[-1]
    i_s, u_s, s_s = (debug_string(s) for s in (indices.shape, updates.shape, shape))
    if outer_differs:
        raise InvalidArgumentError(f"Dimensions [0,{outer}) of indices[shape={i_s}] must match "
                                   f"dimensions [0,{outer}) of updates[shape={u_s}]")
    raise InvalidArgumentError(
        f"Dimensions [{depth},{len(shape)}) of input[shape={s_s}] must match dimensions "
        f"[{outer},{updates.ndim}) of updates[shape={u_s}]")


def check_tensor_scatter_dims(indices: np.ndarray, updates: np.ndarray,
                              shape: Sequence[int]) -> None:
    """TensorScatter*'s check that updates.shape == indices.shape[:-1] + shape[depth:]."""
    outer_differs, rank_differs, inner_differs = _update_mismatch(indices, updates, shape)
    if not (outer_differs or rank_differs or inner_differs):
        return
    outer, depth = indices.ndim - 1, indices.shape[-1]
    i_s, u_s, s_s = (debug_string(s) for s in (indices.shape, updates.shape, shape))
    if outer_differs:
        raise InvalidArgumentError(f"Outer dimensions of indices and update must match. "
                                   f"Indices shape: {i_s}, updates shape:{u_s}")
    if rank_differs:
        raise InvalidArgumentError(f"Inner dimensions of output shape must match inner "
                                   f"dimensions of updates shape. Output: {s_s} updates: {u_s}")
    if inner_differs:
        raise InvalidArgumentError(
            f"The inner {len(shape) - depth} dimensions of output.shape={s_s} must match the "
            f"inner {updates.ndim - outer} dimensions of updates.shape={u_s}")


def check_tensor_scatter_inputs(tensor: np.ndarray, indices: np.ndarray,
                                updates: np.ndarray) -> None:
    """TensorScatter*'s (and ResourceScatterNd*'s) own checks, before the common ones."""
    check_ranks(indices, updates)
    if not valid_empty(tensor.size, indices.size, updates.size):
        raise InvalidArgumentError("Indices and updates specified for empty output shape")
    check_tensor_scatter_dims(indices, updates, tensor.shape)


def _check_update_shape(shape: Sequence[int], indices: tuple, updates: tuple) -> None:
    """TensorFlow's ValidateScatterNdUpdateShape (a rank-1 ``indices`` counts as ``[n, 1]``)."""
    slice_dim = indices[-1] if len(indices) > 1 else 1
    batch_dim = len(indices) - 1 if len(indices) > 1 else 1
    if updates[:batch_dim] == indices[:batch_dim] and len(updates) >= batch_dim and \
            len(updates) == batch_dim + len(shape) - slice_dim and \
            tuple(updates[batch_dim:]) == tuple(shape[slice_dim:]):
        return
    i_s, u_s, s_s = (debug_string(s) for s in (indices, updates, shape))
    if updates[:batch_dim] != indices[:batch_dim] or len(updates) < batch_dim:
        raise InvalidArgumentError(f"Dimensions [0,{batch_dim}) of indices[shape={i_s}] must "
                                   f"match dimensions [0,{batch_dim}) of updates[shape={u_s}]")
    if len(updates) != batch_dim + len(shape) - slice_dim or \
            tuple(updates[batch_dim:]) != tuple(shape[slice_dim:]):
        raise InvalidArgumentError(
            f"Dimensions [{slice_dim},{len(shape)}) of input[shape={s_s}] must match dimensions "
            f"[{slice_dim},{len(updates)}) of updates[shape={u_s}]")


_INDEX_MAX = {np.dtype(t): int(np.iinfo(t).max) for t in (np.int16, np.int32, np.int64, np.uint16)}


def prepare_and_validate(shape: Sequence[int], indices: np.ndarray,
                         updates: np.ndarray) -> tuple[int, int]:
    """TensorFlow's PrepareAndValidateInputs; returns (index depth, slice size)."""
    if len(shape) < 1:
        raise InvalidArgumentError(f"Output must be at least 1-D, got shape: {debug_string(shape)}")
    if not valid_empty(math.prod(shape), indices.size, updates.size):
        raise InvalidArgumentError(f"Indices and updates specified for empty output.  indices "
                                   f"shape: {debug_string(indices.shape)}")
    if updates.shape[0] != indices.shape[0]:
        raise InvalidArgumentError(
            f"Dimensions [0,1) of indices[shape={debug_string(indices.shape)}] = "
            f"{indices.shape[0]} must match dimensions [0,1) of updates[shape="
            f"{debug_string(updates.shape)}] = {updates.shape[0]}")
    _check_update_shape(shape, indices.shape, updates.shape)
    index_max = _INDEX_MAX[indices.dtype]
    if indices.size > index_max:
        raise InvalidArgumentError(f"indices has too many elements for {indices.dtype.name} "
                                   f"indexing: {indices.size} > {index_max}")
    if shape[0] > index_max:
        raise InvalidArgumentError(f"params_shape[0] too large for {indices.dtype.name} "
                                   f"indexing: {shape[0]} > {index_max}")
    depth = indices.shape[-1] if indices.ndim > 1 else 1
    slice_size = math.prod(shape[depth:])
    if slice_size > index_max:
        raise InvalidArgumentError(f"slice size is too large for indexing: {slice_size} > "
                                   f"{index_max}")
    return depth, slice_size

