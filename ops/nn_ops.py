"""Softmax, LogSoftmax, the softmax cross-entropy losses and L2Loss: TensorFlow's raw
nn ops, over the last dim, computed stably (the row's maximum subtracted first).

``SoftmaxCrossEntropyWithLogits(features, labels)`` and its sparse form return the
per-row loss and its gradient w.r.t. the logits (``backprop``), as TF's kernels do,
so that the training step's gradient costs nothing more. Labels of the sparse form
outside ``[0, classes)`` are TF's CPU error, naming the bad value. The gradients are
TF's nn_grad.py rules, second order included (a gradient that reaches ``backprop``).
``gf.nn`` (graphflow/nn.py) builds TF's Python functions from these.
"""
from __future__ import annotations

import math

import numpy as np

from graphflow.dtypes import FLOAT_TYPES, int32, int64
from graphflow.errors import InvalidArgumentError
from graphflow.registry import TypeAttr, register_op, same_as_tf
from graphflow.shapes import TensorShape, debug_string

from .math_ops import sum_to_shape_of



# -- Softmax, LogSoftmax ---------------------------------------------------------------------
def _softmax_op(name: str, doc: str):
    op = register_op(name, inputs=["logits: T"], outputs=[f"{name.lower()}: T"],
                     attrs={"T": TypeAttr(FLOAT_TYPES)}, doc=doc)

    @op.shape_fn
    def _shape(ctx):
        """same as `logits`, of rank >= 1."""
        shape = ctx.shape("logits")
        if shape.rank == 0:
            raise ctx.error("logits must have >= 1 dimension, got []")
        return shape
    return op


Softmax = _softmax_op("Softmax", "exp(logits) / sum(exp(logits)) over the last dim.")
LogSoftmax = _softmax_op("LogSoftmax", "logits - log(sum(exp(logits))) over the last dim.")


def _wide(x):
    """float16 is computed in float32 and rounded once, as TF's kernels do."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _check_rank(x, what: str = "logits") -> None:
    if x.ndim < 1:
        raise InvalidArgumentError(f"{what} must have >= 1 dimension, got "
                                   f"{debug_string(x.shape)}")


def _shifted(xp, x, finite_peak: bool = True):
    """``x - max(x)`` over the last dim (an empty row: x). ``finite_peak``: a row's
    infinite maximum counts as 0 (Softmax: TF's oneDNN kernel gives [nan, 0, 0] for
    [inf, 0, 1]); else it is subtracted, as TF's Eigen kernels of LogSoftmax and the
    cross-entropies do: inf - inf makes the row NaN."""
    peak = xp.max(x, axis=-1, keepdims=True, initial=-np.inf) if x.shape[-1] else 0
    if finite_peak and not np.isscalar(peak):
        peak = xp.where(xp.isfinite(peak), peak, 0)
    return x - peak


@Softmax.kernel("cpu")
@Softmax.kernel("gpu")
def _softmax(ctx, logits):
    _check_rank(logits)
    xp = ctx.xp
    e = xp.exp(_shifted(xp, _wide(logits)))
    return (e / xp.sum(e, axis=-1, keepdims=True)).astype(logits.dtype, copy=False)


def log_softmax_values(xp, logits):
    """The log-softmax of ``logits`` over the last dim, in ``logits``' (widened) dtype."""
    shifted, total = _shifted_and_sum(xp, logits)
    return shifted - xp.log(total)


def _shifted_and_sum(xp, logits):
    """TF's two steps: ``logits - max`` and ``sum(exp(logits - max))`` per row."""
    shifted, _, total = _shifted_exp_sum(xp, logits)
    return shifted, total


def _shifted_exp_sum(xp, logits):
    """``logits - max``, its exp and the exp's sum per row (the cross-entropies use all
    three: the exp is computed once)."""
    shifted = _shifted(xp, _wide(logits), finite_peak=False)
    e = xp.exp(shifted)
    return shifted, e, xp.sum(e, axis=-1, keepdims=True)


@LogSoftmax.kernel("cpu")
@LogSoftmax.kernel("gpu")
def _log_softmax(ctx, logits):
    _check_rank(logits)
    return log_softmax_values(ctx.xp, logits).astype(logits.dtype, copy=False)


@Softmax.gradient
def _softmax_grad(g, grad):
    """(grad - sum(grad * y)) * y over the last dim."""
    s = g.scope
    y = g.op.outputs[0]
    return [s.mul(s.sub(grad, s.reduce_sum(s.mul(grad, y), -1, keep_dims=True)), y)]


@LogSoftmax.gradient
def _log_softmax_grad(g, grad):
    """grad - sum(grad) * softmax over the last dim."""
    s = g.scope
    y = g.op.outputs[0]
    return [s.sub(grad, s.mul(s.reduce_sum(grad, -1, keep_dims=True), s.exp(y)))]


# -- the cross-entropy losses ------------------------------------------------------------------
SoftmaxCrossEntropyWithLogits = register_op(
    "SoftmaxCrossEntropyWithLogits", inputs=["features: T", "labels: T"],
    outputs=["loss: T", "backprop: T"], attrs={"T": TypeAttr(FLOAT_TYPES)},
    doc="Per row of [batch, classes] logits: -sum(labels * log_softmax(features)), and its "
        "gradient w.r.t. the features, softmax(features) - labels. features and labels "
        "broadcast against each other (rank 2 after broadcasting).")

SparseSoftmaxCrossEntropyWithLogits = register_op(
    "SparseSoftmaxCrossEntropyWithLogits", inputs=["features: T", "labels: Tlabels"],
    outputs=["loss: T", "backprop: T"],
    attrs={"T": TypeAttr(FLOAT_TYPES), "Tlabels": TypeAttr((int32, int64), int64)},
    doc="Per row of [batch, classes] logits and a class id per row in [0, classes): "
        "-log_softmax(features)[label], and its gradient softmax(features) - one_hot(label).")


@SoftmaxCrossEntropyWithLogits.shape_fn
def _softmax_xent_shape(ctx):
    """[batch] and [batch, classes] from the broadcast of features and labels (rank 2)."""
    features, labels = ctx.shape("features"), ctx.shape("labels")
    for name, shape in (("features", features), ("labels", labels)):
        if shape.rank is not None and shape.rank != 2:
            raise ctx.error(f"{name} must be 2-dimensional, got {shape}")
    if features.rank is None and labels.rank is None:
        return [TensorShape([None]), TensorShape([None, None])]
    try:
        both = features.broadcast_with(labels) if features.rank is not None and \
            labels.rank is not None else (features if features.rank is not None else labels)
    except ValueError:
        raise ctx.error(f"logits and labels must be broadcastable: logits_size={features} "
                        f"labels_size={labels}") from None
    return [TensorShape([both[0]]), both]


@SparseSoftmaxCrossEntropyWithLogits.shape_fn
def _sparse_softmax_xent_shape(ctx):
    """[batch] and [batch, classes]; labels is a vector of batch ids."""
    features, labels = ctx.shape("features"), ctx.shape("labels")
    if features.rank is not None and features.rank != 2:
        raise ctx.error(f"logits must be 2-D, but got shape {features}")
    if labels.rank is not None and labels.rank != 1:
        raise ctx.error(f"labels must be 1-D, but got shape {labels}")
    batch = features[0] if features.rank is not None else None
    if labels.rank is not None:
        if None not in (batch, labels[0]) and batch != labels[0]:
            raise ctx.error(f"logits and labels must have the same first dimension, got "
                            f"logits shape {features} and labels shape {labels}")
        batch = batch if batch is not None else labels[0]
    classes = features[1] if features.rank is not None else None
    return [TensorShape([batch]), TensorShape([batch, classes])]


def _loss_and_backprop(xp, logits, targets, dtype):
    """TF's kernel: sum(targets * (log(sum) - shifted)) per row, and exp(shifted) / sum -
    targets. A zero target times an infinite term is NaN there, as in TF."""
    shifted, e, total = _shifted_exp_sum(xp, logits)
    with np.errstate(invalid="ignore"):
        loss = xp.sum(targets * (xp.log(total) - shifted), axis=-1)
    e /= total
    e -= targets
    return [loss.astype(dtype, copy=False), e.astype(dtype, copy=False)]


def _sparse_loss_and_backprop(xp, logits, labels, dtype):
    """TF's sparse kernel: log(sum) - shifted[label] per row (only the label's logit
    counts), and exp(shifted) / sum - one_hot(label)."""
    shifted, backprop, total = _shifted_exp_sum(xp, logits)
    rows = xp.arange(labels.shape[0])
    loss = xp.log(total[:, 0]) - shifted[rows, labels]
    backprop /= total
    backprop[rows, labels] -= 1
    return [loss.astype(dtype, copy=False), backprop.astype(dtype, copy=False)]


@SoftmaxCrossEntropyWithLogits.kernel("cpu")
@SoftmaxCrossEntropyWithLogits.kernel("gpu")
def _softmax_xent(ctx, features, labels):
    xp = ctx.xp
    try:
        shape = np.broadcast_shapes(features.shape, labels.shape)
    except ValueError:
        shape = None
    if shape is None or len(shape) != 2:
        raise InvalidArgumentError(f"logits and labels must be broadcastable: logits_size="
                                   f"{debug_string(features.shape)} labels_size="
                                   f"{debug_string(labels.shape)}")
    logits = xp.broadcast_to(_wide(features), shape)
    return _loss_and_backprop(xp, logits, xp.broadcast_to(_wide(labels), shape),
                              features.dtype)


def _check_labels(xp, labels, classes: int) -> None:
    """TF's error for a label outside [0, classes), naming the first bad one (TF's
    CheckInvalidLabelIndex names the smallest if negative, else the largest: not yet
    followed, tests/test_nn_and_reductions.py holds the first)."""
    bad = (labels < 0) | (labels >= classes)
    if bool(xp.any(bad)):
        # TF names the smallest label when it is negative, else the largest
        low, high = int(labels.min()), int(labels.max())
        first = low if low < 0 else high
        listed = " ".join(str(v) for v in labels.tolist())
        raise InvalidArgumentError(f"Received a label value of {first} which is outside the "
                                   f"valid range of [0, {classes}).  Label values: {listed}")


@SparseSoftmaxCrossEntropyWithLogits.kernel("cpu")
@SparseSoftmaxCrossEntropyWithLogits.kernel("gpu")
def _sparse_softmax_xent(ctx, features, labels):
    xp = ctx.xp
    if features.ndim != 2 or labels.ndim != 1 or features.shape[0] != labels.shape[0]:
        raise InvalidArgumentError(
            f"logits and labels must have the same first dimension, got logits shape "
            f"{debug_string(features.shape)} and labels shape {debug_string(labels.shape)}")
    classes = features.shape[1]
    if labels.size:
        _check_labels(xp, labels, classes)
    if classes == 0:
        raise InvalidArgumentError("Must have at least one class, but got logits shape "
                                   f"{debug_string(features.shape)}")
    return _sparse_loss_and_backprop(xp, features, labels, features.dtype)


# -- lean kernels: a static shape, rows that are not empty, float32 or float64 ----------------
def _lean_shape(spec, rank: int | None = None):
    """The logits' static shape when a lean kernel serves it, else None."""
    shape, dtype = spec.shape(0), spec.dtype(0)
    if shape is None or not shape or 0 in shape or dtype not in (np.float32, np.float64) \
            or (rank is not None and len(shape) != rank):
        return None
    return shape


@Softmax.prepare("cpu")
def _prepare_softmax(spec):
    """The kernel's steps into one buffer; a row with an infinite peak (the kernel's
    special case) runs the kernel. Rows of up to BLOCK elements: compiled loops."""
    shape = _lean_shape(spec)
    if shape is None:
        return None
    new = spec.allocator(shape, spec.dtype(0))
    rows = _compiled_rows(shape, log=False)

    def lean(ctx, logits):
        out = new()
        if rows is not None and rows(logits, out):
            return out
        peak = logits.max(axis=-1, keepdims=True)
        if not np.isfinite(peak).all():
            return _softmax(ctx, logits)
        e = np.subtract(logits, peak, out=out)
        np.exp(e, out=e)
        e /= e.sum(axis=-1, keepdims=True)
        return e
    return lean


@LogSoftmax.prepare("cpu")
def _prepare_log_softmax(spec):
    shape = _lean_shape(spec)
    if shape is None:
        return None
    new = spec.allocator(shape, spec.dtype(0))
    rows = _compiled_rows(shape, log=True)

    def lean(ctx, logits):
        out = new()
        if rows is not None and rows(logits, out):
            return out
        shifted = np.subtract(logits, logits.max(axis=-1, keepdims=True), out=out)
        shifted -= np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        return shifted
    return lean


def _compiled_rows(shape: tuple, log: bool):
    """``rows(logits, out) -> bool``: (log-)softmax of rows of 1 to BLOCK elements into
    ``out``, the row's shift and sum as compiled loops around numpy's exp and log (the
    kernel's bits: ops/softmax_loops.py); False while the loops are not compiled yet.
    None for longer rows (numpy's sum of them is fast, and pairwise by halves)."""
    from .row_loops import rows_div, rows_sub
    from .softmax_loops import BLOCK, row_sums, shift_rows
    from .tiering import Tiered
    n = shape[-1]
    if n > BLOCK:
        return None
    count = math.prod(shape[:-1])
    loops = [Tiered(shift_rows), Tiered(row_sums), Tiered(rows_sub if log else rows_div)]

    def rows(logits, out):
        x = np.ascontiguousarray(logits).reshape(count, n)
        shifted, sums = out.reshape(count, n), np.empty(count, out.dtype)
        if not all(loop.ready(*args) for loop, args in zip(loops, (
                (x, shifted, True), (shifted, sums), (shifted, sums, shifted)))):
            return False
        shift_rows(x, shifted, not log)  # LogSoftmax subtracts an infinite maximum
        if log:
            row_sums(np.exp(shifted), sums)
            rows_sub(shifted, np.log(sums, out=sums), shifted)
        else:
            np.exp(shifted, out=shifted)
            row_sums(shifted, sums)
            rows_div(shifted, sums, shifted)
        return True
    return rows


@SparseSoftmaxCrossEntropyWithLogits.prepare("cpu")
def _prepare_sparse_softmax_xent(spec):
    """Static [batch, classes] logits and [batch] labels: the labels' bounds in two
    reductions, then the kernel's arithmetic; a bad label runs the kernel (its error)."""
    shape, labels = _lean_shape(spec, rank=2), spec.shape(1)
    if shape is None or labels != shape[:1]:
        return None
    batch, classes = shape
    rows = np.arange(batch)

    def lean(ctx, features, labels):
        if labels.min() < 0 or labels.max() >= classes:
            return _sparse_softmax_xent(ctx, features, labels)
        shifted = features - features.max(axis=-1, keepdims=True)
        backprop = np.exp(shifted)
        total = backprop.sum(axis=-1, keepdims=True)
        loss = np.log(total[:, 0]) - shifted[rows, labels]
        backprop /= total
        backprop[rows, labels] -= 1
        return [loss, backprop]
    return lean


def _row_times(s, per_row, matrix):
    """``per_row[:, None] * matrix``."""
    return s.mul(s.expand_dims(per_row, -1), matrix)


def _second_order(s, logits, grad_backprop):
    """The part of the logits' gradient that comes through ``backprop`` (TF's
    ``grad_grad`` term): (g - sum(g * softmax)) * softmax, where g reaches backprop."""
    if grad_backprop.op.type in ("ZerosLike", "Fill", "Const"):
        return None  # TF skips a gradient of zeros: nothing reaches backprop
    softmax = s.create_op(Softmax, logits)
    inner = s.reduce_sum(s.mul(grad_backprop, softmax), -1, keep_dims=True)
    return s.mul(s.sub(grad_backprop, inner), softmax)


@SoftmaxCrossEntropyWithLogits.gradient
def _softmax_xent_grad(g, grad_loss, grad_backprop):
    """features: grad_loss * backprop (+ the second-order term); labels: grad_loss *
    -log_softmax(features) (TF 2 differentiates the labels too)."""
    s = g.scope
    features, labels = g.op.inputs
    grad = _row_times(s, grad_loss, g.op.outputs[1])
    extra = _second_order(s, features, grad_backprop)
    if extra is not None:
        grad = s.add(grad, extra)
    labels_grad = _row_times(s, grad_loss, s.neg(s.create_op(LogSoftmax, features)))
    return [sum_to_shape_of(s, grad, features), sum_to_shape_of(s, labels_grad, labels)]


@SparseSoftmaxCrossEntropyWithLogits.gradient
def _sparse_softmax_xent_grad(g, grad_loss, grad_backprop):
    s = g.scope
    features = g.op.inputs[0]
    grad = _row_times(s, grad_loss, g.op.outputs[1])
    extra = _second_order(s, features, grad_backprop)
    return [grad if extra is None else s.add(grad, extra), None]


# -- L2Loss ----------------------------------------------------------------------------------
L2Loss = register_op("L2Loss", inputs=["t: T"], outputs=["output: T"],
                     attrs={"T": TypeAttr(FLOAT_TYPES)},
                     doc="sum(t ** 2) / 2, a scalar (float16 summed in float32).")


@L2Loss.shape_fn
def _l2_loss_shape(ctx):
    """a scalar."""
    return TensorShape([])


@L2Loss.kernel("cpu")
@L2Loss.kernel("gpu")
def _l2_loss(ctx, t):
    wide = _wide(t)
    return (ctx.xp.sum(wide * wide) / 2).astype(t.dtype)


@L2Loss.gradient
def _l2_loss_grad(g, grad):
    return [g.scope.mul(g.op.inputs[0], grad)]


__all__ = ["Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits",
           "SparseSoftmaxCrossEntropyWithLogits", "L2Loss"]


# -- builders with TensorFlow's Python signatures (also gf.nn) ---------------------------------
def _operand(scope, value):
    from graphflow.builder import as_operand
    out = as_operand(value)
    return out if out is not None else scope.constant(value)


def _last_axis_op(scope, op, logits, axis: int, name):
    """``op`` over ``axis``: the op itself for the last dim, else between two transposes
    that swap ``axis`` with the last dim (as TF's ``_wrap_2d_function``)."""
    rank = logits.shape.rank
    if rank is None:
        if axis != -1:
            raise InvalidArgumentError(f"{op.name} over axis {axis} needs the rank of "
                                       f"{logits.name}, unknown at build time")
        return scope.create_op(op, logits, name=name)
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"`axis` must be in the range [{-rank}, {rank}) where "
                                   f"{rank} is the number of dimensions in the input. "
                                   f"Received: axis={axis}")
    axis %= rank
    if axis == rank - 1:
        return scope.create_op(op, logits, name=name)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    swapped = scope.create_op(op, scope.transpose(logits, perm))
    return scope.transpose(swapped, perm, name=name)


def softmax(self, logits, axis: int = -1, *, name: str | None = None):
    """``tf.nn.softmax(logits, axis=-1)``."""
    return _last_axis_op(self, Softmax, _operand(self, logits), int(axis), name)


def log_softmax(self, logits, axis: int = -1, *, name: str | None = None):
    """``tf.nn.log_softmax(logits, axis=-1)``."""
    return _last_axis_op(self, LogSoftmax, _operand(self, logits), int(axis), name)


def _rows(scope, t, keep: int):
    """``t`` as a matrix (``keep`` = 1: [-1, last dim]) or a vector (0), and a function
    that gives a per-row result ``t``'s leading shape back."""
    rank = t.shape.rank
    if rank is not None and rank == 1 + keep:
        return t, lambda r: r
    lead = scope.slice(scope.shape(t), [0], [scope.rank(t) - keep]) \
        if not t.shape.is_fully_defined() else t.shape.as_list()[:len(t.shape) - keep]
    if keep:
        last = t.shape[-1] if rank is not None and t.shape[-1] is not None else \
            scope.reshape(scope.slice(scope.shape(t), [scope.rank(t) - 1], [1]), [])
        flat = scope.reshape(t, [-1, last] if isinstance(last, int) else
                             scope.pack([np.int32(-1), last]))
    else:
        flat = scope.reshape(t, [-1])
    return flat, lambda r: scope.reshape(r, lead)


def softmax_cross_entropy_with_logits(self, labels, logits, axis: int = -1, *,
                                      name: str | None = None):
    """``tf.nn.softmax_cross_entropy_with_logits(labels, logits, axis=-1)``: the loss per
    row (logits' shape without ``axis``); gradients flow to the labels too (TF 2)."""
    logits, labels = _operand(self, logits), _operand(self, labels)
    if axis != -1:
        rank = logits.shape.rank
        if rank is None:
            raise InvalidArgumentError("softmax_cross_entropy_with_logits over an axis "
                                       "other than -1 needs the logits' rank")
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis % rank]
        logits, labels = self.transpose(logits, perm), self.transpose(labels, perm)
    labels = labels if labels.dtype == logits.dtype else self.cast(labels, logits.dtype)
    flat_logits, back = _rows(self, logits, 1)
    flat_labels, _ = _rows(self, labels, 1)
    loss, _ = self.create_op(SoftmaxCrossEntropyWithLogits, flat_logits, flat_labels,
                             name=name if logits.shape.rank == 2 else None)
    return back(loss)


def sparse_softmax_cross_entropy_with_logits(self, labels, logits, *, name: str | None = None):
    """``tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)``: labels of
    logits' shape without the last dim, each a class id."""
    logits, labels = _operand(self, logits), _operand(self, labels)
    lr, gr = labels.shape.rank, logits.shape.rank
    if lr is not None and gr is not None and lr != gr - 1:
        raise InvalidArgumentError(f"Rank mismatch: Rank of labels (received {lr}) should "
                                   f"equal rank of logits minus 1 (received {gr}).")
    if gr == 0:
        raise InvalidArgumentError(f"Logits cannot be scalars - received shape {logits.shape}.")
    flat_logits, back = _rows(self, logits, 1)
    flat_labels, _ = _rows(self, labels, 0)
    loss, _ = self.create_op(SparseSoftmaxCrossEntropyWithLogits, flat_logits, flat_labels,
                             name=name if gr == 2 else None)
    return back(loss)


def sigmoid_cross_entropy_with_logits(self, labels=None, logits=None, *,
                                      name: str | None = None):
    """``tf.nn.sigmoid_cross_entropy_with_logits(labels, logits)``, stable as TF's:
    max(x, 0) - x * z + log(1 + exp(-|x|))."""
    logits, labels = _operand(self, logits), _operand(self, labels)
    if not logits.shape.is_compatible_with(labels.shape):
        raise InvalidArgumentError(f"logits and labels must have the same shape "
                                   f"({logits.shape} vs {labels.shape})")
    labels = labels if labels.dtype == logits.dtype else self.cast(labels, logits.dtype)
    zeros = self.zeros_like(logits)
    positive = self.logical_not(self.less(logits, zeros))  # logits >= 0
    relu_logits = self.select_v2(positive, logits, zeros)
    neg_abs = self.select_v2(positive, self.neg(logits), logits)
    return self.add(self.sub(relu_logits, self.mul(logits, labels)),
                    self.log1p(self.exp(neg_abs)), name=name)


def l2_loss(self, t, *, name: str | None = None):
    """``tf.nn.l2_loss(t)``: sum(t ** 2) / 2."""
    return self.create_op(L2Loss, t, name=name)


def _install() -> None:
    from graphflow.scope import Scope
    for method in (softmax, log_softmax, softmax_cross_entropy_with_logits,
                   sparse_softmax_cross_entropy_with_logits, sigmoid_cross_entropy_with_logits,
                   l2_loss):
        setattr(Scope, method.__name__, method)


_install()


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits",
           "SparseSoftmaxCrossEntropyWithLogits", "L2Loss")
