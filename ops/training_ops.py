"""Optimizer steps: TensorFlow's training ops, updating a variable and its slots in place.

Each op takes the handles of a variable and of its optimizer slots (``var``,
``accum``, ``m``, ``v``, ``ms``, ``mom``, ``mg``), scalar hyperparameters of the
variable's dtype ``T`` and the gradient, with TensorFlow's input names, order and
attrs (``use_locking``, ``use_nesterov``), and updates every handle's value in place
with the expressions of TensorFlow's CPU functors (training_ops.cc), evaluated in
``T`` in TensorFlow's order of operations:

======================================  ==================================================
ResourceApplyMomentum                   accum = accum * momentum + grad;
                                        var -= accum * lr, or with use_nesterov
                                        var -= grad * lr + accum * momentum * lr
ResourceApplyAdam                       alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power);
                                        m += (grad - m) * (1 - beta1);
                                        v += (grad * grad - v) * (1 - beta2);
                                        var -= m * alpha / (sqrt(v) + epsilon), or with
                                        use_nesterov (grad * (1 - beta1) + beta1 * m) * alpha
                                        in place of m * alpha
ResourceApplyRMSProp                    ms += (grad * grad - ms) * (1 - rho);
                                        mom = mom * momentum + grad * lr / sqrt(ms + epsilon);
                                        var -= mom
ResourceApplyCenteredRMSProp            as RMSProp, with mg += (grad - mg) * (1 - rho) and
                                        sqrt((ms - mg * mg) + epsilon) as the denominator
======================================  ==================================================

The sparse ops (``ResourceSparseApplyMomentum``, ``ResourceSparseApplyRMSProp``,
``ResourceSparseApplyCenteredRMSProp``) are TensorFlow's sparse kernels: the update of
the rows ``indices`` only, one index after another, so a duplicate row is updated
twice (computed a batch of distinct rows at a time). The optimizers sum duplicates
first (Unique + UnsortedSegmentSum, TF's ``_deduplicate_indexed_slices``), as TF's
do; ResourceSparseApplyAdagrad (variable_ops.py) instead sums them in its kernel.
``_ResourceSparseApplyAdam`` is graphflow's fused form of TF 1.x
``AdamOptimizer._apply_sparse_shared``, which TF builds from ops: m and v decay on
EVERY row (m *= beta1, v *= beta2), the summed rows are added (m[i] += g * (1 - beta1),
v[i] += g * g * (1 - beta2)) and every row of var moves by lr * m / (sqrt(v) + epsilon).
It is internal: AdamOptimizer builds it, TF graphs never hold it.

Every kernel holds the locks of all its variables (taken in name order, whatever
``use_locking`` says), checks everything (initialized, dtypes, scalars, shapes,
indices in range) before it writes anything, and saves what it overwrites in the
run's undo journal when the run keeps one (a cluster's). Variables live in host
memory, so, as ResourceApplyAdagrad, these ops have CPU kernels only (a variable
asked for on a GPU is placed on the CPU).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from graphflow.dtypes import NUMBER_TYPES, int32, int64
from graphflow.errors import InvalidArgumentError
from graphflow.registry import BoolAttr, OpDef, TypeAttr, register_op, same_as_tf
from graphflow.shapes import TensorShape, debug_string

from .variable_ops import _locked, _variable_of, handle_attrs

#: the dtypes of TensorFlow's CPU kernels of these ops (TF_CALL_FLOAT_TYPES, complex)
UPDATE_TYPES = tuple(t for t in NUMBER_TYPES if t.is_floating or t.is_complex)
#: the inputs that are handles of a variable or of a slot; the others but grad and
#: indices are scalar hyperparameters
SLOT_INPUTS = ("var", "accum", "m", "v", "mg", "ms", "mom")


def _roles(inputs: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the handle inputs, the scalar inputs) of an input list, in its order."""
    handles = tuple(n for n in inputs if n in SLOT_INPUTS)
    scalars = tuple(n for n in inputs if n not in SLOT_INPUTS and n not in ("grad", "indices"))
    return handles, scalars


# -- build-time checks -----------------------------------------------------------------------
def _check_static(ctx, handles: Sequence[str], scalars: Sequence[str]) -> TensorShape:
    """What the handles and shapes tell at build time: each hyperparameter is a scalar,
    each handle's variable holds T and has var's shape. Returns var's shape."""
    for name in scalars:
        if not ctx.shape(name).is_compatible_with(TensorShape([])):
            raise ctx.error(f"{name} is not a scalar: {ctx.shape(name)}")
    shapes = {}
    for name in handles:
        known = handle_attrs(ctx.input(name))
        if known is None:
            shapes[name] = TensorShape(None)
            continue
        if known[0] != ctx.attr("T"):
            raise ctx.error(f"{name} '{known[2]}' has dtype {known[0].name}, the update "
                            f"is {ctx.attr('T').name}")
        shapes[name] = known[1]
    var = shapes["var"]
    for name in handles[1:]:
        if not var.is_compatible_with(shapes[name]):
            raise ctx.error(f"var and {name} do not have the same shape: {var} {shapes[name]}")
        var = var.merge_with(shapes[name])
    return var


def _check_static_sparse(ctx, var: TensorShape) -> None:
    """var has rank >= 1, indices is a vector, grad is [len(indices)] + var.shape[1:]."""
    if var.rank == 0:
        raise ctx.error("var must be at least 1 dimensional")
    indices, grad = ctx.shape("indices"), ctx.shape("grad")
    if not indices.is_compatible_with(TensorShape([None])):
        raise ctx.error(f"indices must be one-dimensional, got {indices}")
    if var.rank is None or grad.rank is None:
        return
    if grad.rank != var.rank:
        raise ctx.error(f"grad must be [len(indices)] + var.shape[1:] = "
                        f"{TensorShape([None]).concatenate(var[1:])}, got {grad}")
    for d in range(1, var.rank):
        if not TensorShape([var[d]]).is_compatible_with(TensorShape([grad[d]])):
            raise ctx.error(f"var and grad must match in dimension {d}: {var} {grad}")
    if indices.rank == 1 and not TensorShape([grad[0]]).is_compatible_with(
            TensorShape([indices[0]])):
        raise ctx.error(f"grad must be the same size as indices in the first dimension: "
                        f"{grad} {indices}")


# -- run-time checks --------------------------------------------------------------------------
def _check_values(states, values, scalars: dict, grad: np.ndarray) -> None:
    """The same checks on the values (handles from anywhere, fed hyperparameters):
    every scalar is one, every stored value has grad's dtype and var's shape."""
    for name, value in scalars.items():
        if np.ndim(value) != 0:
            raise InvalidArgumentError(f"{name} is not a scalar: {debug_string(np.shape(value))}")
    for (name, state), value in zip(states, values):
        state.check_dtype(grad.dtype, "update")
        if value.shape != values[0].shape:
            raise InvalidArgumentError(
                f"var and {name} do not have the same shape: {debug_string(values[0].shape)} "
                f"{debug_string(value.shape)}")


def _check_dense_grad(var: np.ndarray, grad: np.ndarray) -> None:
    if var.shape != grad.shape:
        raise InvalidArgumentError(f"var and grad do not have the same shape: "
                                   f"{debug_string(var.shape)} {debug_string(grad.shape)}")


def _check_sparse_grad(var: np.ndarray, grad: np.ndarray, indices: np.ndarray) -> None:
    """TensorFlow's sparse kernels' checks, all made before anything is written."""
    if var.ndim < 1:
        raise InvalidArgumentError("var must be at least 1 dimensional")
    if indices.ndim != 1:
        raise InvalidArgumentError(f"indices must be one-dimensional, got "
                                   f"{debug_string(indices.shape)}")
    if grad.shape != indices.shape + var.shape[1:]:
        raise InvalidArgumentError(
            f"grad must be [len(indices)] + var.shape[1:] = "
            f"{debug_string(indices.shape + var.shape[1:])}, got {debug_string(grad.shape)}")
    bad = (indices < 0) | (indices >= var.shape[0])
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidArgumentError(f"Index {int(indices[i])} at offset {i} in indices is out "
                                   f"of range [0, {var.shape[0]})")


def _summed_rows(var: np.ndarray, grad: np.ndarray, indices: np.ndarray):
    """(the distinct rows, their gradients summed in index order): TensorFlow's
    ``_deduplicate_indexed_slices`` (Unique + UnsortedSegmentSum)."""
    rows, position = np.unique(indices, return_inverse=True)
    summed = np.zeros((len(rows),) + var.shape[1:], var.dtype)
    np.add.at(summed, position.reshape(-1), grad)
    return rows, summed


def _in_turn(indices: np.ndarray, grad: np.ndarray):
    """(rows, gradients) batches that apply TensorFlow's sparse loop (one index after
    another) a batch at a time: each batch holds a row at most once, and the k-th
    occurrence of a row comes in batch k. Distinct indices are one batch."""
    if len(np.unique(indices)) == len(indices):
        return [(indices, grad)]
    order = np.argsort(indices, kind="stable")
    ranked = indices[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    rank = np.arange(len(ranked)) - np.repeat(starts, np.diff(np.r_[starts, len(ranked)]))
    occurrence = np.empty_like(rank)
    occurrence[order] = rank
    batches = []
    for k in range(int(rank.max()) + 1):
        sel = np.flatnonzero(occurrence == k)
        batches.append((indices[sel], grad[sel]))
    return batches


# -- the op factory -------------------------------------------------------------------------
def _update_op(name: str, inputs: Sequence[str], update: Callable, doc: str, *,
               sparse: bool = False, nesterov: bool = False, every_row: bool = False) -> OpDef:
    """Register one training op: ``inputs`` in TensorFlow's order (handles, scalars,
    ``grad``, ``indices``), its shape function and its CPU kernel, which runs
    ``update(values, scalars, grad, attrs)`` (``values``: the stored arrays, var
    first, updated in place; for a sparse op, ``grad`` is ``(rows, summed)``) after
    every check, with the variables locked and journaled. A sparse op's ``grad`` is
    ``(indices, grad)``, or with ``every_row`` (it writes every row: Adam's)
    ``(distinct rows, their summed gradients)``."""
    handles, scalars = _roles(inputs)
    attrs = {"T": TypeAttr(UPDATE_TYPES), "use_locking": BoolAttr(False)}
    if sparse:
        attrs["Tindices"] = TypeAttr((int32, int64))
    if nesterov:
        attrs["use_nesterov"] = BoolAttr(False)
    specs = [f"{n}: string" if n in handles else
             (f"{n}: Tindices" if n == "indices" else f"{n}: T") for n in inputs]
    op = register_op(name, inputs=specs, attrs=attrs, stateful=True, doc=doc)

    @op.shape_fn
    def _shape(ctx):
        """no outputs; scalars are scalars, the variables hold T and have one shape, grad
        is var's shape (dense) or [len(indices)] + var.shape[1:] (sparse)."""
        var = _check_static(ctx, handles, scalars)
        if sparse:
            _check_static_sparse(ctx, var)
        elif not var.is_compatible_with(ctx.shape("grad")):
            raise ctx.error(f"var and grad do not have the same shape: {var} "
                            f"{ctx.shape('grad')}")
        return []

    @op.kernel("cpu")
    def _kernel(ctx, *args):
        named = dict(zip(inputs, args))
        states = [(n, _variable_of(ctx, named[n])) for n in handles]
        with _locked(*(s for _, s in states)):
            values = [s.initialized_value() for _, s in states]
            hyper = {n: named[n] for n in scalars}
            grad = named["grad"]
            _check_values(states, values, hyper, grad)
            rows = None
            if sparse:
                _check_sparse_grad(values[0], grad, named["indices"])
                if every_row:
                    grad = _summed_rows(values[0], grad, named["indices"])
                else:
                    grad, rows = (named["indices"], grad), np.unique(named["indices"])
            else:
                _check_dense_grad(values[0], grad)
            _journal(states, values, rows)
            update(values, hyper, grad, ctx.attrs)

    op.not_differentiable()
    return op


def _journal(states, values, rows: np.ndarray | None) -> None:
    """Save what the update overwrites in the run's undo journal (if it keeps one): the
    ``rows`` a sparse update touches, else every value."""
    for (_, state), value in zip(states, values):
        if rows is None:
            state.journal_all()
        else:
            state.journal_rows(rows, math.prod(value.shape[1:]))


def _one(value: np.ndarray):
    """T(1), so that ``1 - x`` stays in T."""
    return np.ones((), value.dtype)


# -- Momentum -------------------------------------------------------------------------------------
def _momentum(values, h, grad, attrs) -> None:
    """ApplyMomentum's functor."""
    var, accum = values
    lr, momentum = h["lr"], h["momentum"]
    accum *= momentum
    accum += grad
    if attrs["use_nesterov"]:
        var -= grad * lr + accum * momentum * lr
    else:
        var -= accum * lr


def _sparse_momentum(values, h, grad, attrs) -> None:
    """SparseApplyMomentum's loop, a batch of distinct rows at a time."""
    var, accum = values
    lr, momentum = h["lr"], h["momentum"]
    for rows, g in _in_turn(*grad):
        a = accum[rows] * momentum + g
        accum[rows] = a
        if attrs["use_nesterov"]:
            var[rows] -= lr * g + lr * momentum * a
        else:
            var[rows] -= lr * a


ResourceApplyMomentum = _update_op(
    "ResourceApplyMomentum", ["var", "accum", "lr", "grad", "momentum"], _momentum,
    "accum = accum * momentum + grad; var -= lr * accum (use_nesterov: var -= grad * lr + "
    "accum * momentum * lr), in place (TensorFlow's Momentum).", nesterov=True)
ResourceSparseApplyMomentum = _update_op(
    "ResourceSparseApplyMomentum", ["var", "accum", "lr", "grad", "indices", "momentum"],
    _sparse_momentum,
    "Momentum on the rows `indices` only, one index after another (a duplicate row is "
    "updated twice; MomentumOptimizer sums duplicates first): accum[i] = accum[i] * momentum "
    "+ g, var[i] -= lr * accum[i] (use_nesterov: var[i] -= lr * g + lr * momentum * "
    "accum[i]).",
    sparse=True, nesterov=True)


# -- Adam ------------------------------------------------------------------------------------------
def _adam_alpha(h, dtype_of: np.ndarray):
    """lr * sqrt(1 - beta2_power) / (1 - beta1_power), in T."""
    one = _one(dtype_of)
    return h["lr"] * np.sqrt(one - h["beta2_power"]) / (one - h["beta1_power"])


def _adam(values, h, grad, attrs) -> None:
    """ApplyAdamNonCuda's shard."""
    var, m, v = values
    one = _one(var)
    beta1, beta2, epsilon = h["beta1"], h["beta2"], h["epsilon"]
    alpha = _adam_alpha(h, var)
    m += (grad - m) * (one - beta1)
    v += (grad * grad - v) * (one - beta2)
    if attrs["use_nesterov"]:
        var -= ((grad * (one - beta1) + beta1 * m) * alpha) / (np.sqrt(v) + epsilon)
    else:
        var -= (m * alpha) / (np.sqrt(v) + epsilon)


def _sparse_adam(values, h, grad, attrs) -> None:
    """TF 1.x AdamOptimizer._apply_sparse_shared: every row of m and v decays, the
    distinct rows' gradients are added, every row of var moves."""
    var, m, v = values
    rows, g = grad
    one = _one(var)
    beta1, beta2, epsilon = h["beta1"], h["beta2"], h["epsilon"]
    lr = _adam_alpha(h, var)
    m *= beta1
    m[rows] += g * (one - beta1)
    v *= beta2
    v[rows] += (g * g) * (one - beta2)
    var -= lr * m / (np.sqrt(v) + epsilon)


ResourceApplyAdam = _update_op(
    "ResourceApplyAdam",
    ["var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"],
    _adam,
    "alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power); m += (grad - m) * (1 - beta1); "
    "v += (grad^2 - v) * (1 - beta2); var -= m * alpha / (sqrt(v) + epsilon), in place "
    "(TensorFlow's Adam; use_nesterov: (grad * (1 - beta1) + beta1 * m) * alpha).",
    nesterov=True)
SparseApplyAdam = _update_op(
    "_ResourceSparseApplyAdam",
    ["var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad",
     "indices"],
    _sparse_adam,
    "internal: TF 1.x AdamOptimizer's sparse update in one op: duplicate rows summed, "
    "m *= beta1 and v *= beta2 on every row, m[i] += g * (1 - beta1), v[i] += g^2 * "
    "(1 - beta2), var -= lr * sqrt(1 - beta2_power) / (1 - beta1_power) * m / (sqrt(v) + "
    "epsilon) on every row.", sparse=True, every_row=True)


# -- RMSProp ---------------------------------------------------------------------------------------
def _rmsprop(values, h, grad, attrs) -> None:
    """ApplyRMSProp's functor."""
    var, ms, mom = values
    lr, rho, momentum, epsilon = h["lr"], h["rho"], h["momentum"], h["epsilon"]
    ms += (grad * grad - ms) * (_one(var) - rho)
    mom *= momentum
    mom += (grad * lr) / np.sqrt(ms + epsilon)
    var -= mom


def _centered_rmsprop(values, h, grad, attrs) -> None:
    """ApplyCenteredRMSProp's functor."""
    var, mg, ms, mom = values
    lr, rho, momentum, epsilon = h["lr"], h["rho"], h["momentum"], h["epsilon"]
    one = _one(var)
    ms += (grad * grad - ms) * (one - rho)
    mg += (grad - mg) * (one - rho)
    denom = (ms - mg * mg) + epsilon
    mom *= momentum
    mom += (grad * lr) / np.sqrt(denom)
    var -= mom


def _sparse_rmsprop(values, h, grad, attrs) -> None:
    """SparseApplyRMSProp's loop, a batch of distinct rows at a time."""
    var, ms, mom = values
    lr, rho, momentum, epsilon = h["lr"], h["rho"], h["momentum"], h["epsilon"]
    one = _one(var)
    for rows, g in _in_turn(*grad):
        s = ms[rows] * rho + (g * g) * (one - rho)
        ms[rows] = s
        u = mom[rows] * momentum + (one / np.sqrt(s + epsilon)) * lr * g
        mom[rows] = u
        var[rows] -= u


def _sparse_centered_rmsprop(values, h, grad, attrs) -> None:
    """SparseApplyCenteredRMSProp's loop, a batch of distinct rows at a time."""
    var, mg, ms, mom = values
    lr, rho, momentum, epsilon = h["lr"], h["rho"], h["momentum"], h["epsilon"]
    one = _one(var)
    for rows, g in _in_turn(*grad):
        s = ms[rows] * rho + (g * g) * (one - rho)
        ms[rows] = s
        a = mg[rows] * rho + g * (one - rho)
        mg[rows] = a
        denom = (s + epsilon) - a * a
        u = mom[rows] * momentum + (one / np.sqrt(denom)) * lr * g
        mom[rows] = u
        var[rows] -= u


_RMS_INPUTS = ["var", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad"]
_CENTERED_INPUTS = ["var", "mg", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad"]

ResourceApplyRMSProp = _update_op(
    "ResourceApplyRMSProp", _RMS_INPUTS, _rmsprop,
    "ms += (grad^2 - ms) * (1 - rho); mom = mom * momentum + grad * lr / sqrt(ms + epsilon); "
    "var -= mom, in place (TensorFlow's RMSProp).")
ResourceApplyCenteredRMSProp = _update_op(
    "ResourceApplyCenteredRMSProp", _CENTERED_INPUTS, _centered_rmsprop,
    "ms += (grad^2 - ms) * (1 - rho); mg += (grad - mg) * (1 - rho); mom = mom * momentum + "
    "grad * lr / sqrt(ms - mg^2 + epsilon); var -= mom, in place (TensorFlow's centered "
    "RMSProp).")
ResourceSparseApplyRMSProp = _update_op(
    "ResourceSparseApplyRMSProp", _RMS_INPUTS + ["indices"], _sparse_rmsprop,
    "RMSProp on the rows `indices` only, one index after another (RMSPropOptimizer sums "
    "duplicates first): ms[i] = ms[i] * rho + g^2 * (1 - rho), mom[i] = "
    "mom[i] * momentum + rsqrt(ms[i] + epsilon) * lr * g, var[i] -= mom[i].", sparse=True)
ResourceSparseApplyCenteredRMSProp = _update_op(
    "ResourceSparseApplyCenteredRMSProp", _CENTERED_INPUTS + ["indices"],
    _sparse_centered_rmsprop,
    "Centered RMSProp on the rows `indices` only, one index after another (RMSPropOptimizer "
    "sums duplicates first): ms[i] = ms[i] * rho + g^2 * (1 - rho), mg[i] = mg[i] * rho + "
    "g * (1 - rho), "
    "mom[i] = mom[i] * momentum + rsqrt(ms[i] + epsilon - mg[i]^2) * lr * g, var[i] -= mom[i].",
    sparse=True)


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("ResourceApplyMomentum", "ResourceSparseApplyMomentum", "ResourceApplyAdam",
           "ResourceApplyRMSProp", "ResourceApplyCenteredRMSProp", "ResourceSparseApplyRMSProp",
           "ResourceSparseApplyCenteredRMSProp")
