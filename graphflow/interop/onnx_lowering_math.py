"""ONNX lowerings of the dense math, reductions and nn ops (ops/dense_math_ops.py,
ops/reductions.py, ops/nn_ops.py), filed in ``onnx_lowering.LOWERINGS``.

ONNX has most of them under their own names (opset 18: reductions take their axes as
an input); the rest are a few ONNX nodes with TensorFlow's results: Log1p, Expm1,
Rsqrt, Square, Relu6 (Clip), SquaredDifference, the cross-entropy losses (LogSoftmax
and a masked sum), L2Loss.
"""
from __future__ import annotations

import numpy as np

from graphflow.dtypes import bool_, uint8
from graphflow.graph import Operation

from .onnx_lowering import Emitter, check, lowering

#: graphflow op -> the ONNX op of the same meaning, one node
SAME_MEANING = {"Exp": "Exp", "Log": "Log", "Sqrt": "Sqrt", "Abs": "Abs", "Sign": "Sign",
                "Floor": "Floor", "Ceil": "Ceil", "Round": "Round", "Sigmoid": "Sigmoid",
                "Tanh": "Tanh", "Relu": "Relu", "Softplus": "Softplus", "Softsign": "Softsign",
                "Reciprocal": "Reciprocal", "Pow": "Pow", "Selu": "Selu"}


@lowering(*SAME_MEANING)
def _same_meaning(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node(SAME_MEANING[op.type], ins)]


@check(*SAME_MEANING, "Log1p", "Expm1", "Rsqrt", "Elu", "LeakyRelu", "Relu6", "MatMul",
       "BatchMatMulV2", "Softmax", "LogSoftmax")
def _check_real(op: Operation, opset: int) -> str | None:
    if op.inputs[0].dtype.is_complex:
        return "on complex numbers (ONNX's math ops are real)"
    return None


@lowering("Elu")
def _elu(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Elu", ins, alpha=1.0)]


@lowering("LeakyRelu")
def _leaky_relu(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("LeakyRelu", ins, alpha=float(op.attrs["alpha"]))]


def _scalar(em: Emitter, op: Operation, value) -> str:
    return em.scalar(op.inputs[0].dtype, value)


@lowering("Log1p")
def _log1p(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Log", [em.node("Add", [ins[0], _scalar(em, op, 1)])])]


@lowering("Expm1")
def _expm1(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Sub", [em.node("Exp", ins), _scalar(em, op, 1)])]


@lowering("Rsqrt")
def _rsqrt(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Reciprocal", [em.node("Sqrt", ins)])]


@lowering("Square")
def _square(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Mul", [ins[0], ins[0]])]


@lowering("Relu6")
def _relu6(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Clip", [ins[0], _scalar(em, op, 0), _scalar(em, op, 6)])]


@lowering("SquaredDifference")
def _squared_difference(em: Emitter, op: Operation, ins: list) -> list:
    d = em.node("Sub", ins)
    return [em.node("Mul", [d, d])]


def _transposed(em: Emitter, value: str, rank: int | None) -> str:
    """``value`` with its last two dims swapped (rank known at build time)."""
    if rank is None:
        raise ValueError("a transposed matrix product needs its operand's rank")
    perm = list(range(rank))
    perm[-2:] = perm[-1], perm[-2]
    return em.node("Transpose", [value], perm=perm)


@lowering("MatMul", "BatchMatMulV2")
def _matmul(em: Emitter, op: Operation, ins: list) -> list:
    flips = (op.attrs["transpose_a"], op.attrs["transpose_b"]) if op.type == "MatMul" \
        else (op.attrs["adj_x"], op.attrs["adj_y"])
    ins = [_transposed(em, v, t.shape.rank) if flip else v
           for v, t, flip in zip(ins, op.inputs, flips)]
    return [em.node("MatMul", ins)]


@lowering("BiasAdd")
def _bias_add(em: Emitter, op: Operation, ins: list) -> list:
    rank = op.inputs[0].shape.rank
    if op.attrs["data_format"] == "NCHW" and rank is not None and rank >= 3:
        bias = em.node("Reshape", [ins[1], em.const([-1] + [1] * (rank - 2), np.int64)])
        return [em.node("Add", [ins[0], bias])]
    return [em.node("Add", ins)]


@lowering("Mean", "Max", "Min")
def _reduce(em: Emitter, op: Operation, ins: list) -> list:
    onnx_op = {"Mean": "ReduceMean", "Max": "ReduceMax", "Min": "ReduceMin"}[op.type]
    axes = em.node("Reshape", [em.i64(ins[1], op.inputs[1].dtype), em.const([-1], np.int64)])
    return [em.typed(onnx_op, [ins[0], axes], op.outputs[0].dtype, [0],
                     keepdims=int(op.attrs["keep_dims"]), noop_with_empty_axes=1)]


@check("Mean")
def _check_mean(op: Operation, opset: int) -> str | None:
    if op.inputs[0].dtype.is_integer:
        return "on integers (ONNX's ReduceMean does not truncate as TensorFlow's)"
    return None


@lowering("Any", "All")
def _any_all(em: Emitter, op: Operation, ins: list) -> list:
    """ReduceMax / ReduceMin of the booleans as uint8 (ONNX has no boolean reductions)."""
    onnx_op = "ReduceMax" if op.type == "Any" else "ReduceMin"
    axes = em.node("Reshape", [em.i64(ins[1], op.inputs[1].dtype), em.const([-1], np.int64)])
    out = em.node(onnx_op, [em.cast(ins[0], uint8), axes], keepdims=int(op.attrs["keep_dims"]),
                  noop_with_empty_axes=1)
    return [em.cast(out, bool_)]


@lowering("Softmax")
def _softmax(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Softmax", ins, axis=-1)]


@lowering("LogSoftmax")
def _log_softmax(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("LogSoftmax", ins, axis=-1)]


def _loss_and_backprop(em: Emitter, logits: str, targets: str) -> list:
    log_p = em.node("LogSoftmax", [logits], axis=-1)
    loss = em.node("Neg", [em.node("ReduceSum", [em.node("Mul", [targets, log_p]),
                                                 em.const([-1], np.int64)], keepdims=0)])
    return [loss, em.node("Sub", [em.node("Exp", [log_p]), targets])]


@lowering("SoftmaxCrossEntropyWithLogits")
def _softmax_xent(em: Emitter, op: Operation, ins: list) -> list:
    return _loss_and_backprop(em, ins[0], ins[1])


@lowering("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_softmax_xent(em: Emitter, op: Operation, ins: list) -> list:
    depth = em.node("Squeeze", [em.node("Shape", [ins[0]], start=-1)])  # a scalar
    values = em.const(np.array([0, 1]).astype(op.inputs[0].dtype.as_numpy_dtype))
    targets = em.node("OneHot", [ins[1], depth, values], axis=-1)
    return _loss_and_backprop(em, ins[0], targets)


@lowering("L2Loss")
def _l2_loss(em: Emitter, op: Operation, ins: list) -> list:
    total = em.node("ReduceSumSquare", [ins[0]], keepdims=0)
    return [em.node("Div", [total, _scalar(em, op, 2)])]
