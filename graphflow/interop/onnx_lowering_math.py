"""ONNX lowerings of the dense math, reductions and nn ops (ops/dense_math_ops.py,
ops/reductions.py, ops/nn_ops.py), filed on each op's OpDef (``exporters["onnx"]``).

ONNX has most of them under their own names (opset 18: reductions take their axes as
an input); the rest are a few ONNX nodes with TensorFlow's results: Log1p, Expm1,
Rsqrt, Square, Relu6 (Clip), SquaredDifference, the cross-entropy losses (LogSoftmax
and a masked sum), L2Loss.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from graphflow.dtypes import bool_, int8, int64, uint8
from graphflow.graph import Operation

from .onnx_lowering import Emitter, check, lowering

def _same_meaning(onnx_op: str) -> Callable:
    """The lowering of an op that is ``onnx_op``, one node."""
    def lower(em: Emitter, op: Operation, ins: list) -> list:
        return [em.node(onnx_op, ins)]
    lower.__name__ = lower.__qualname__ = f"_same_meaning_{onnx_op}"
    return lower


#: the graphflow ops of the same meaning as the ONNX op of their name, one node
SAME_MEANING = ("Exp", "Log", "Sqrt", "Abs", "Sign", "Floor", "Ceil", "Round", "Sigmoid", "Tanh",
                "Relu", "Softplus", "Softsign", "Reciprocal", "Pow", "Selu")
for _op in SAME_MEANING:
    lowering(_op)(_same_meaning(_op))


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


# -- segment reductions (ops/segment_ops.py) ---------------------------------------------------
_SEGMENT_REDUCTION = {"Sum": "add", "Max": "max", "Min": "min", "Prod": "mul"}


def _identity(dtype, kind: str):
    """What an empty segment holds (TensorFlow's): 0, 1, the dtype's lowest or highest."""
    np_type = np.dtype(dtype.as_numpy_dtype)
    info = np.finfo(np_type) if np_type.kind == "f" else np.iinfo(np_type)
    return {"Sum": 0, "Mean": 0, "Prod": 1, "Max": info.min, "Min": info.max}[kind]


def _segments(em: Emitter, op: Operation, data: str, ids: str, num: str, kind: str,
              empty_zero: bool = False) -> str:
    """data's rows (ids.shape flattened) combined into ``num`` segments by ``kind``; a
    negative id drops its row (the unsorted ops' rule), an id >= num fails the run.
    ``empty_zero``: an empty segment holds 0 (the sorted Max/Min), not the identity."""
    dtype = op.outputs[0].dtype
    ids, rows = em.flat_rows(data, em.i64(ids, op.inputs[1].dtype))
    keep = em.node("GreaterOrEqual", [ids, em.const(0, np.int64)])
    ids, rows = em.node("Compress", [ids, keep], axis=0), em.node("Compress", [rows, keep], axis=0)
    shape = em.node("Concat", [em.node("Reshape", [num, em.const([1], np.int64)]),
                               em.slice1(em.node("Shape", [rows]), 1)], axis=0)
    start = em.node("Expand", [em.scalar(dtype, _identity(dtype, kind)), shape])
    slots = em.node("Unsqueeze", [ids, em.const([1], np.int64)])
    total = em.node("ScatterND", [start, slots, rows],
                    reduction=_SEGMENT_REDUCTION["Sum" if kind == "Mean" else kind])
    if kind != "Mean" and not empty_zero:
        return total
    ones = em.node("Expand", [em.scalar(dtype, 1), em.node("Shape", [rows])])
    count = em.node("ScatterND", [em.node("Expand", [em.scalar(dtype, 0), shape]), slots, ones],
                    reduction="add")
    if kind != "Mean":
        empty = em.node("Equal", [count, em.scalar(dtype, 0)])
        return em.node("Where", [empty, em.scalar(dtype, 0), total])
    return em.node("Div", [total, em.node("Max", [count, em.scalar(dtype, 1)])])


@lowering("UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd")
def _unsorted_segment(em: Emitter, op: Operation, ins: list) -> list:
    num = em.i64(ins[2], op.inputs[2].dtype)
    return [_segments(em, op, ins[0], ins[1], num, op.type[len("UnsortedSegment"):])]


@lowering("SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin", "SegmentProd")
def _sorted_segment(em: Emitter, op: Operation, ins: list) -> list:
    """As the unsorted op with last id + 1 segments (ids in order is graphflow's check,
    which ONNX cannot make: a model fed unsorted ids computes their segments anyway)."""
    ids = em.node("Reshape", [em.i64(ins[1], op.inputs[1].dtype), em.const([-1], np.int64)])
    last = em.node("ReduceMax", [em.node("Concat", [ids, em.const([-1], np.int64)], axis=0)],
                   keepdims=0)
    num = em.node("Add", [last, em.const(1, np.int64)])
    kind = op.type[len("Segment"):]
    return [_segments(em, op, ins[0], ins[1], num, kind, empty_zero=kind in ("Max", "Min"))]


@check("UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentSum", "UnsortedSegmentProd",
       "SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin", "SegmentProd")
def _check_segment(op: Operation, opset: int) -> str | None:
    dtype = op.inputs[0].dtype
    if dtype.is_complex or dtype.is_bool or dtype.is_string:
        return f"on {dtype.name} (ONNX's ScatterND reductions take real numbers)"
    if op.type == "SegmentMean" and dtype.is_integer:
        return "on integers (its division truncates as C's, which ONNX does not promise)"
    return None


# -- selection (ops/selection_ops.py) -----------------------------------------------------------
def _constant_axis(op: Operation, index: int, rank: int | None) -> int | None:
    from graphflow.inference import constant_value
    value = constant_value(op.inputs[index])
    if value is None or np.size(value) != 1:
        return None
    axis = int(np.ravel(value)[0])
    return axis % rank if rank is not None and axis < 0 else axis


@check("ArgMax", "ArgMin")
def _check_arg(op: Operation, opset: int) -> str | None:
    if _constant_axis(op, 1, op.inputs[0].shape.rank) is None:
        return "with an axis not known at export time"
    return None


@lowering("ArgMax", "ArgMin")
def _arg_max_min(em: Emitter, op: Operation, ins: list) -> list:
    axis = _constant_axis(op, 1, op.inputs[0].shape.rank)
    found = em.node(op.type, [ins[0]], axis=axis, keepdims=0, select_last_index=0)
    return [found if op.outputs[0].dtype == int64 else em.cast(found, op.outputs[0].dtype)]


@lowering("TopKV2")
def _top_k(em: Emitter, op: Operation, ins: list) -> list:
    """ONNX's TopK breaks ties by the lower index, as TensorFlow's."""
    k = em.node("Reshape", [em.i64(ins[1], op.inputs[1].dtype), em.const([1], np.int64)])
    values, indices = em.node("TopK", [ins[0], k], n_out=2, axis=-1, largest=1, sorted=1)
    return [values, em.cast(indices, op.outputs[1].dtype)]


@lowering("OneHot")
def _one_hot(em: Emitter, op: Operation, ins: list) -> list:
    """A negative index gives a row of off values in TensorFlow; ONNX would count it from
    the end, so it is moved past the depth."""
    indices, depth, on, off = ins
    depth = em.i64(depth, op.inputs[1].dtype)
    ids = em.i64(indices, op.inputs[0].dtype)
    ids = em.node("Where", [em.node("Less", [ids, em.const(0, np.int64)]), depth, ids])
    values = em.node("Concat", [em.node("Reshape", [off, em.const([1], np.int64)]),
                                em.node("Reshape", [on, em.const([1], np.int64)])], axis=0)
    return [em.node("OneHot", [ids, depth, values], axis=int(op.attrs["axis"]))]


@lowering("Where")
def _where(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Transpose", [em.node("NonZero", ins)], perm=[1, 0])]


@check("Split")
def _check_split(op: Operation, opset: int) -> str | None:
    if _constant_axis(op, 0, op.inputs[1].shape.rank) is None:
        return "with a split axis not known at export time"
    return None


@lowering("Split")
def _split(em: Emitter, op: Operation, ins: list) -> list:
    axis = _constant_axis(op, 0, op.inputs[1].shape.rank)
    n = int(op.attrs["num_split"])
    parts = em.node("Split", [ins[1]], n_out=n, axis=axis, num_outputs=n)
    return parts if n != 1 else [parts]


@check("SplitV")
def _check_split_v(op: Operation, opset: int) -> str | None:
    from graphflow.inference import constant_value
    sizes = constant_value(op.inputs[1])
    axis = _constant_axis(op, 2, op.inputs[0].shape.rank)
    if sizes is None or axis is None:
        return "with sizes or an axis not known at export time"
    if -1 in np.ravel(sizes).tolist() and op.inputs[0].shape[axis] is None:
        return "with a size of -1 on a dim unknown at export time"
    return None


@lowering("SplitV")
def _split_v(em: Emitter, op: Operation, ins: list) -> list:
    from graphflow.inference import constant_value
    axis = _constant_axis(op, 2, op.inputs[0].shape.rank)
    sizes = [int(v) for v in np.ravel(constant_value(op.inputs[1]))]
    if -1 in sizes:
        sizes[sizes.index(-1)] = op.inputs[0].shape[axis] - (sum(sizes) + 1)
    parts = em.node("Split", [ins[0], em.const(sizes, np.int64)], n_out=len(sizes), axis=axis)
    return parts if len(sizes) != 1 else [parts]


@lowering("Unique")
def _unique(em: Emitter, op: Operation, ins: list) -> list:
    """ONNX's Unique unsorted keeps first-occurrence order, as TensorFlow's (integers go
    through int64: onnxruntime has Unique for float, int64, int8 and strings only)."""
    dtype = op.inputs[0].dtype
    wide = dtype.is_integer and dtype not in (int64, int8)
    x = em.cast(ins[0], int64) if wide else ins[0]
    y, _, inverse, _ = em.node("Unique", [x], n_out=4, sorted=0)
    return [em.cast(y, dtype) if wide else y, em.cast(inverse, op.outputs[1].dtype)]
