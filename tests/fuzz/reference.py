"""The reference side of the differential fuzzer: every op of a fuzzed graph, written
as plain loops from TensorFlow's documented CPU semantics, never with graphflow's
kernels. Scatter and gather come from ``tests/support/ref_scatter.py``, partition and stitch
from ``tests/support/ref_partition.py``; this module adds TensorFlow's input checks (which
inputs are rejected), ``tf.gather_nd``'s ``batch_dims`` and the basic ops.

An op function takes numpy arrays (a list for a list input) and the node's attrs and
returns the list of its outputs, or raises :class:`RefError` when TensorFlow rejects
the input (graphflow must then raise an InvalidArgumentError).

``run_op(..., gpu=True)`` gives TensorFlow's GPU semantics to a node that runs on a
GPU (:func:`runs_on_gpu`): the scatters skip an out-of-bound index tuple and GatherNd
gives zeros for it, unless ``bad_indices_policy="ERROR"``, which reports the first bad
tuple (the CPU reports the last). Partition and stitch raise as on the CPU.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from support import ref_scatter
from support.ref_partition import ref_dynamic_partition, ref_dynamic_stitch


class RefError(Exception):
    """TensorFlow rejects this input with an InvalidArgumentError."""


class Undefined(Exception):
    """C++ leaves the result undefined (Cast of NaN to an integer): no reference value.
    The fuzzer draws values without it; a shuffled feed can bring it back."""


class BadIndexError(RefError):
    """An out-of-bound index tuple, with TensorFlow's message for it."""


def runs_on_gpu(op_type: str, input_dtypes: list[np.dtype]) -> bool:
    """Where TensorFlow (and graphflow, soft placement) runs a node asked for "/gpu:0":
    every op of the fuzzer has GPU kernels except on strings, and GatherNd's take int32
    and int64 indices only."""
    if any(t == object for t in input_dtypes):
        return False
    return not (op_type == "GatherNd" and input_dtypes[1] == np.int16)


def _policy(policy: str, gpu: bool) -> tuple[str, bool]:
    """(policy, report_first) for ref_scatter: on a GPU a bad tuple is skipped unless the
    policy is "ERROR", which reports the first one."""
    if not gpu:
        return policy, False
    return ("ERROR", True) if policy == "ERROR" else ("IGNORE", False)


# -- scatter family and GatherNd ------------------------------------------------------------
def _check_scatter_shapes(shape: tuple, indices: np.ndarray, updates: np.ndarray) -> None:
    """The shape rules every scatter shares: 1 <= depth <= rank, updates.shape ==
    indices.shape[:-1] + shape[depth:], and nothing scattered into an empty output."""
    assert indices.ndim >= 2, "the fuzzer makes no rank-1 indices (a TensorFlow quirk)"
    if len(shape) < 1:
        raise RefError("output must be at least 1-D")
    depth = indices.shape[-1]
    if not 1 <= depth <= len(shape):
        raise RefError(f"index depth {depth} for rank {len(shape)}")
    if updates.shape != indices.shape[:-1] + tuple(shape[depth:]):
        raise RefError(f"updates.shape {updates.shape} for indices {indices.shape}, shape {shape}")
    if math.prod(shape) == 0 and (indices.size or updates.size):
        raise RefError("indices and updates for an empty output")


def _bad_index(fn: Callable[[], np.ndarray]) -> np.ndarray:
    try:
        return fn()
    except ref_scatter.BadIndex as e:
        raise BadIndexError(str(e)) from None


def scatter_nd(indices, updates, shape, *, bad_indices_policy: str = "",
               gpu: bool = False) -> list[np.ndarray]:
    """zeros(shape), then updates added at indices (strings concatenate, bools OR)."""
    if shape.ndim != 1:
        raise RefError("shape must be a vector")
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise RefError(f"negative dimension in {dims}")
    _check_scatter_shapes(dims, indices, updates)
    return [_bad_index(lambda: ref_scatter.scatter_nd(indices, updates, dims,
                                                      *_policy(bad_indices_policy, gpu)))]


def tensor_scatter(op: str) -> Callable:
    """TensorScatterUpdate/Add/Sub/Min/Max: ``tensor`` combined with updates at indices."""
    def run(tensor, indices, updates, *, bad_indices_policy: str = "",
            gpu: bool = False) -> list[np.ndarray]:
        _check_scatter_shapes(tensor.shape, indices, updates)
        return [_bad_index(lambda: ref_scatter.scatter(tensor, indices, updates, op,
                                                       *_policy(bad_indices_policy, gpu)))]
    return run


def gather_nd(params, indices, *, batch_dims: int = 0, bad_indices_policy: str = "",
              gpu: bool = False) -> list[np.ndarray]:
    """tf.gather_nd. With batch_dims b > 0, TensorFlow's Python wrapper reshapes indices to
    ``[prod(params.shape[:b])] + indices.shape[b:]`` (only the element counts must
    agree), prepends each batch position to its tuples and gathers with depth b + d."""
    b = batch_dims
    if params.ndim < 1 or indices.ndim < 1:
        raise RefError("params and indices must be at least vectors")
    if b and (b >= indices.ndim or b >= params.ndim):
        raise RefError(f"batch_dims {b} for ranks {params.ndim}, {indices.ndim}")
    depth = indices.shape[-1]
    if b + depth > params.ndim:
        raise RefError(f"index depth {depth} + batch_dims {b} > params rank {params.ndim}")
    batch = math.prod(params.shape[:b])
    inner = indices.shape[b:]
    if indices.size != batch * math.prod(inner):
        raise RefError(f"cannot reshape indices {indices.shape} to [{batch}] + {inner}")
    tuples = indices
    if b:
        flat = indices.reshape((batch,) + inner)
        tuples = np.empty((batch,) + inner[:-1] + (b + depth,), np.int64)
        for k in range(batch):
            tuples[k, ..., :b] = np.unravel_index(k, params.shape[:b])
            tuples[k, ..., b:] = flat[k]
    if math.prod(tuples.shape[:-1]) > 0 and params.size == 0:
        raise RefError("requested more than 0 entries, but params is empty")
    out = _bad_index(lambda: ref_scatter.gather_nd(params, tuples, 0,
                                                   *_policy(bad_indices_policy, gpu)))
    return [out.reshape(params.shape[:b] + inner[:-1] + params.shape[b + depth:])]


# -- partition and stitch ---------------------------------------------------------------------
def dynamic_partition(data, partitions, *, num_partitions: int) -> list[np.ndarray]:
    """Output i = the slices data[j] with partitions[j] == i, in order."""
    if data.shape[:partitions.ndim] != partitions.shape:
        raise RefError(f"data.shape {data.shape} does not start with {partitions.shape}")
    try:
        return ref_dynamic_partition(data, partitions, num_partitions)
    except ValueError as e:
        raise RefError(str(e)) from None


def dynamic_stitch(indices: list, data: list) -> list[np.ndarray]:
    """merged[indices[m][pos]] = data[m][pos], later (m, pos) wins; graphflow documents the
    same order for ParallelDynamicStitch."""
    extra = data[0].shape[indices[0].ndim:]
    for i, d in zip(indices, data):
        if d.shape[:i.ndim] != i.shape or d.shape[i.ndim:] != extra:
            raise RefError(f"data shape {d.shape} for indices {i.shape}, slice {extra}")
    try:
        return [ref_dynamic_stitch(indices, data)]
    except ValueError as e:
        raise RefError(str(e)) from None


# -- basic ops ----------------------------------------------------------------------------------
def _broadcast_shape(*shapes: tuple) -> tuple:
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise RefError(f"incompatible shapes {shapes}") from None


def _elementwise(ufunc: np.ufunc) -> Callable:
    """A binary op after broadcasting: numpy's ufunc for numbers (bit-exact, as TensorFlow's
    element-wise kernels), a loop over the elements for bytes."""
    def run(x, y) -> list[np.ndarray]:
        shape = _broadcast_shape(x.shape, y.shape)
        if x.dtype != object:
            with np.errstate(all="ignore"):
                return [np.asarray(ufunc(x, y))]
        xs, ys = np.broadcast_to(x, shape), np.broadcast_to(y, shape)
        out = np.empty(shape, object)
        for pos in np.ndindex(*shape):
            out[pos] = xs[pos] + ys[pos]
        return [out]
    return run


def neg(x) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [np.negative(x)]


def cast(x, *, DstT) -> list[np.ndarray]:
    """TensorFlow's Cast: static_cast element-wise; complex to real keeps the real part.
    The fuzzer only casts values whose conversion C++ defines (no NaN to int, ...)."""
    dst = DstT.as_numpy_dtype
    if x.dtype.kind == "c" and np.dtype(dst).kind != "c":
        x = x.real
    out = np.empty(x.shape, dst)
    with np.errstate(all="ignore"):
        for pos in np.ndindex(*x.shape):
            v = x[pos]
            if np.dtype(dst).kind in "iu" and x.dtype.kind == "f":
                if not math.isfinite(float(v)) or not \
                        np.iinfo(dst).min <= math.trunc(float(v)) <= np.iinfo(dst).max:
                    raise Undefined(f"Cast of {v} to {np.dtype(dst).name}")
                v = math.trunc(float(v))
            elif np.dtype(dst).kind in "iu" and x.dtype.kind in "iub":
                v = int(v) % (1 << (8 * np.dtype(dst).itemsize))  # two's complement wrap
                v = np.array(v, np.uint64).astype(dst)
            out[pos] = v
    return [out]


def size(x) -> list[np.ndarray]:
    return [np.array(x.size, np.int32)]


def range_(start, limit, delta) -> list[np.ndarray]:
    s, l, d = int(start), int(limit), int(delta)
    if d == 0 or (d > 0 and s > l) or (d < 0 and s < l):
        raise RefError(f"bad range {s}, {l}, {d}")
    return [np.array(list(range(s, l, d)), start.dtype)]


OPS: dict[str, Callable] = {
    "ScatterNd": scatter_nd,
    "TensorScatterUpdate": tensor_scatter("update"),
    "TensorScatterAdd": tensor_scatter("add"),
    "TensorScatterSub": tensor_scatter("sub"),
    "TensorScatterMin": tensor_scatter("min"),
    "TensorScatterMax": tensor_scatter("max"),
    "GatherNd": gather_nd,
    "DynamicPartition": dynamic_partition,
    "DynamicStitch": dynamic_stitch,
    "ParallelDynamicStitch": dynamic_stitch,
    "Identity": lambda x: [x],
    "Add": _elementwise(np.add),
    "Sub": _elementwise(np.subtract),
    "Mul": _elementwise(np.multiply),
    "Neg": neg,
    "Cast": cast,
    "Size": size,
    "Range": range_,
}


#: The ops whose semantics differ on a GPU (their functions take ``gpu``).
GPU_SEMANTICS = {"ScatterNd", "TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub",
                 "TensorScatterMin", "TensorScatterMax", "GatherNd"}


def run_op(op_type: str, inputs: list, attrs: dict, gpu: bool = False) -> list[np.ndarray]:
    """The outputs of one node from its input values; RefError if TensorFlow rejects them.
    With ``gpu``, a node that runs on a GPU (:func:`runs_on_gpu`) has GPU semantics."""
    if gpu and op_type in GPU_SEMANTICS and runs_on_gpu(op_type, [i.dtype for i in inputs]):
        attrs = dict(attrs, gpu=True)
    return OPS[op_type](*inputs, **attrs)
