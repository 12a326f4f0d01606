"""Dense math: the element-wise functions models are made of (Exp, Log, Sqrt, the
activations...), Pow and SquaredDifference, MatMul / BatchMatMulV2 and BiasAdd, with
TensorFlow 2.21's dtypes, shapes and gradients.

Kernels are numpy's (cupy's on a GPU: the same functions through ``ctx.xp``); a large
output goes into a dead buffer of the plan (``ctx.empty``). Gradients are TF's
(math_grad.py, nn_grad.py), written with graph ops, so they are differentiable again.
float16 matrix products accumulate in float32 and round once, as TF's kernels do.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from graphflow.dtypes import COMPLEX_TYPES, FLOAT_TYPES, INTEGER_TYPES, NUMBER_TYPES, \
    REAL_NUMBER_TYPES, float32, int8, int16, int32, int64
from graphflow.errors import InvalidArgumentError
from graphflow.registry import BoolAttr, FloatAttr, StringAttr, TypeAttr, register_op, same_as_tf
from graphflow.shapes import TensorShape, debug_string

from .math_ops import MIN_OUT_ELEMENTS, _broadcast_xy_shape, conj, incompatible_shapes, \
    sum_to_shape_of
from .shape_rules import same_shape_as

SIGNED_INTS = tuple(t for t in INTEGER_TYPES if not t.is_unsigned)
FLOAT_OR_COMPLEX = FLOAT_TYPES + COMPLEX_TYPES
SELU_SCALE = 1.0507009873554804934193349852946
SELU_ALPHA = 1.6732632423543772848170429916717


# -- element-wise functions of one input ------------------------------------------------
def _unary(name: str, fn: Callable, types, doc: str, attrs=None, aliases=(),
           io=("x", "y")):
    """An element-wise op ``y = fn(xp, x, attrs)`` on every device; numpy's (or cupy's)
    functions give TF's values (NaN and infinities pass through as IEEE says). ``io``:
    TF's names of the input and the output (the activations' are features and
    activations)."""
    op = register_op(name, inputs=[f"{io[0]}: T"], outputs=[f"{io[1]}: T"],
                     attrs={"T": TypeAttr(types), **(attrs or {})}, aliases=aliases, doc=doc)
    op.shape_fn(same_shape_as(io[0]))

    @op.kernel("cpu")
    @op.kernel("gpu")
    def _kernel(ctx, x, _fn=fn):
        return _fn(ctx.xp, x, ctx.attrs)
    return op


def _sigmoid(xp, x, attrs):
    # 1 / (1 + exp(-x)) overflows to 0 for very negative x: TF's value, computed stably
    return (1 / (1 + xp.exp(-x))).astype(x.dtype, copy=False)


def _softplus(xp, x, attrs):
    """TF's thresholds: x itself where exp(x) + 1 rounds to exp(x), exp(x) where it
    rounds to 1, else log1p(exp(x)) (TF's formula: log(exp(x) + 1) loses the digits of a
    small exp(x))."""
    if x.dtype.kind == "c":
        return xp.log1p(xp.exp(x))
    threshold = np.log(np.finfo(x.dtype).eps) + 2
    e = xp.exp(x)
    return xp.where(x > -threshold, x, xp.where(x < threshold, e, xp.log1p(e))).astype(
        x.dtype, copy=False)


def _relu6(xp, x, attrs):
    return xp.minimum(xp.maximum(x, x.dtype.type(0)), x.dtype.type(6))


def _elu(xp, x, attrs):
    """exp(x) - 1 below 0, as TF's kernel writes it (not expm1: TF's value near 0 is
    exp's rounding minus 1, 0 for a float16 x above -2**-11)."""
    return xp.where(x < 0, xp.exp(x) - 1, x)


def _selu(xp, x, attrs):
    """TF's kernel: scale * alpha * (exp(x) - 1) below 0 (as Elu, not expm1)."""
    t = x.dtype.type
    return xp.where(x < 0, t(SELU_SCALE * SELU_ALPHA) * (xp.exp(x) - 1), t(SELU_SCALE) * x)


def leaky_alpha(alpha: float, dtype) -> np.generic:
    """``alpha`` as TF's kernel uses it: a float (float32) attr cast to T, so a float64
    LeakyRelu multiplies by float32(0.2), not by 0.2."""
    return np.dtype(dtype).type(np.float32(alpha))


def _leaky_relu(xp, x, attrs):
    return xp.where(x > 0, x, x * leaky_alpha(attrs["alpha"], x.dtype))


def _rsqrt(xp, x, attrs):
    return (1 / xp.sqrt(x)).astype(x.dtype, copy=False)


def _round(xp, x, attrs):
    return xp.rint(x) if x.dtype.kind in "fc" else x.copy()  # half to even, as TF


Exp = _unary("Exp", lambda xp, x, a: xp.exp(x), FLOAT_OR_COMPLEX, "e ** x element-wise.")
Log = _unary("Log", lambda xp, x, a: xp.log(x), FLOAT_OR_COMPLEX,
             "The natural logarithm element-wise (-inf at 0, NaN below).")
Log1p = _unary("Log1p", lambda xp, x, a: xp.log1p(x), FLOAT_OR_COMPLEX, "log(1 + x), accurate near 0.")
Expm1 = _unary("Expm1", lambda xp, x, a: xp.expm1(x), FLOAT_OR_COMPLEX, "exp(x) - 1, accurate near 0.")
Sqrt = _unary("Sqrt", lambda xp, x, a: xp.sqrt(x), FLOAT_OR_COMPLEX, "The square root element-wise.")
Rsqrt = _unary("Rsqrt", _rsqrt, FLOAT_OR_COMPLEX, "1 / sqrt(x) element-wise.")
Square = _unary("Square", lambda xp, x, a: xp.multiply(x, x), NUMBER_TYPES,
                "x * x element-wise (integers wrap).")
Reciprocal = _unary("Reciprocal", lambda xp, x, a: xp.reciprocal(x), FLOAT_OR_COMPLEX,
                    "1 / x element-wise.")
Abs = _unary("Abs", lambda xp, x, a: xp.abs(x), FLOAT_TYPES + SIGNED_INTS,
             "|x| element-wise (the most negative integer stays itself, as in TF).")
Sign = _unary("Sign", lambda xp, x, a: xp.sign(x), FLOAT_OR_COMPLEX + SIGNED_INTS,
              "-1, 0 or 1 by the sign of x (NaN for NaN; x / |x| for complex).")
Floor = _unary("Floor", lambda xp, x, a: xp.floor(x), FLOAT_TYPES, "The largest integer <= x.")
Ceil = _unary("Ceil", lambda xp, x, a: xp.ceil(x), FLOAT_TYPES, "The smallest integer >= x.")
Round = _unary("Round", _round, FLOAT_TYPES + SIGNED_INTS,
               "x rounded to the nearest integer, halves to even (banker's rounding).")
Sigmoid = _unary("Sigmoid", _sigmoid, FLOAT_OR_COMPLEX, "1 / (1 + exp(-x)) element-wise.")
Tanh = _unary("Tanh", lambda xp, x, a: xp.tanh(x), FLOAT_OR_COMPLEX, "tanh(x) element-wise.")
ACTIVATION = ("features", "activations")  # TF's names of the nn activations' input, output
Relu = _unary("Relu", lambda xp, x, a: xp.maximum(x, x.dtype.type(0)), REAL_NUMBER_TYPES,
              "max(x, 0) element-wise (NaN stays NaN).", io=ACTIVATION)
Relu6 = _unary("Relu6", _relu6, REAL_NUMBER_TYPES, "min(max(x, 0), 6) element-wise.",
               io=ACTIVATION)
Elu = _unary("Elu", _elu, FLOAT_TYPES, "exp(x) - 1 where x < 0, else x.", io=ACTIVATION)
Selu = _unary("Selu", _selu, FLOAT_TYPES,
              "scale * (alpha * (exp(x) - 1) where x < 0, else x), with the SELU constants.",
              io=ACTIVATION)
Softplus = _unary("Softplus", _softplus, FLOAT_TYPES, "log(exp(x) + 1), stable at both ends.",
                  io=ACTIVATION)
Softsign = _unary("Softsign", lambda xp, x, a: x / (1 + xp.abs(x)), FLOAT_TYPES,
                  "x / (1 + |x|) element-wise.", io=ACTIVATION)
LeakyRelu = _unary("LeakyRelu", _leaky_relu, FLOAT_TYPES,
                   "x where x > 0, else alpha * x.", attrs={"alpha": FloatAttr(0.2)},
                   io=ACTIVATION)


# -- their gradients (TF's math_grad.py / nn_grad.py) ---------------------------------------
def _output(g):
    return g.op.outputs[0]


def _x(g):
    return g.op.inputs[0]


def _mask(s, condition, like):
    """``condition`` as 0/1 of ``like``'s dtype: TF's ``grad * (y > 0)`` (NaN * 0 is NaN)."""
    return s.cast(condition, like.dtype)


_GRADIENTS = {
    "Exp": lambda s, g, grad: s.mul(grad, conj(s, _output(g))),
    "Log": lambda s, g, grad: s.mul(grad, s.reciprocal(conj(s, _x(g)))),
    "Log1p": lambda s, g, grad: s.mul(grad, s.reciprocal(s.add(conj(s, _x(g)), 1))),
    "Expm1": lambda s, g, grad: s.mul(grad, s.exp(conj(s, _x(g)))),
    "Sqrt": lambda s, g, grad: s.real_div(s.mul(grad, 0.5), conj(s, _output(g))),
    "Rsqrt": lambda s, g, grad: s.mul(s.mul(grad, -0.5), conj(s, s.mul(
        s.square(_output(g)), _output(g)))),
    "Square": lambda s, g, grad: s.mul(grad, s.mul(conj(s, _x(g)), 2)),
    "Reciprocal": lambda s, g, grad: s.mul(s.neg(grad), conj(s, s.square(_output(g)))),
    "Abs": lambda s, g, grad: s.mul(grad, s.sign(_x(g))),
    "Sign": lambda s, g, grad: s.zeros_like(_x(g)),
    "Sigmoid": lambda s, g, grad: s.mul(grad, conj(s, s.mul(_output(g), s.sub(
        s.ones_like(_output(g)), _output(g))))),
    "Tanh": lambda s, g, grad: s.mul(grad, conj(s, s.sub(s.ones_like(_output(g)),
                                                          s.square(_output(g))))),
    "Relu": lambda s, g, grad: s.mul(grad, _mask(s, s.greater(_output(g), 0), grad)),
    "Relu6": lambda s, g, grad: s.mul(grad, _mask(s, s.logical_and(
        s.greater(_x(g), 0), s.less(_x(g), 6)), grad)),
    "Elu": lambda s, g, grad: s.select_v2(s.less(_output(g), 0),
                                          s.mul(grad, s.add(_output(g), 1)), grad),
    "Selu": lambda s, g, grad: s.select_v2(
        s.less(_output(g), 0), s.mul(grad, s.add(_output(g), SELU_SCALE * SELU_ALPHA)),
        s.mul(grad, SELU_SCALE)),
    "Softplus": lambda s, g, grad: s.mul(grad, s.sigmoid(_x(g))),
    "Softsign": lambda s, g, grad: s.real_div(grad, s.square(s.add(s.abs(_x(g)), 1))),
    "LeakyRelu": lambda s, g, grad: s.select_v2(s.greater(_x(g), 0), grad, s.mul(
        grad, float(np.float32(g.attr("alpha"))))),  # TF's LeakyReluGrad: float32 alpha
}

for _name, _rule in _GRADIENTS.items():
    from graphflow.registry import op_def as _op_def
    _op_def(_name).gradient(lambda g, grad, _rule=_rule: [_rule(g.scope, g, grad)])

for _op in (Floor, Ceil, Round):
    _op.gradient(lambda g, grad: [None])  # TF: no gradient flows through a step function


# -- Pow, SquaredDifference ------------------------------------------------------------------
def _binary(name: str, fn: Callable, types, doc: str):
    op = register_op(name, inputs=["x: T", "y: T"], outputs=["z: T"],
                     attrs={"T": TypeAttr(types)}, doc=doc)
    op.shape_fn(_broadcast_xy_shape)

    @op.kernel("cpu")
    @op.kernel("gpu")
    def _kernel(ctx, x, y, _fn=fn):
        try:
            return _fn(ctx.xp, x, y)
        except ValueError as e:
            if "negative integer powers" in str(e):
                raise InvalidArgumentError("Integers to negative integer powers are not "
                                           "allowed") from None
            raise incompatible_shapes(x, y) from None
    return op


def _pow(xp, x, y):
    """numpy's power; complex as TF's std::pow (glibc's cpow): exp(y * log(x)), so
    0 ** 0 is NaN and 1j ** 2 is -1 + 1.2e-16j, as in TF."""
    if x.dtype.kind in "iu" and np.any(y < 0):
        raise ValueError("Integers to negative integer powers are not allowed")
    if x.dtype.kind == "c":
        with np.errstate(all="ignore"):
            return xp.exp(y * xp.log(x)).astype(x.dtype, copy=False)
    return xp.power(x, y)


def _squared_difference(xp, x, y):
    d = xp.subtract(x, y)
    return d * xp.conj(d) if d.dtype.kind == "c" else d * d


Pow = _binary("Pow", _pow, FLOAT_OR_COMPLEX + (int8, int16, int32, int64),
              "x ** y element-wise, broadcasting (integers to negative powers: an error).")
SquaredDifference = _binary("SquaredDifference", _squared_difference,
                            FLOAT_OR_COMPLEX + (int32, int64),
                            "(x - y) * conj(x - y) element-wise, broadcasting.")


@Pow.gradient
def _pow_grad(g, grad):
    """TF's: dx = grad * y * x ** (y - 1); dy = grad * z * log(x), 0 where x <= 0 (real)."""
    s = g.scope
    x, y = g.op.inputs
    z = g.op.outputs[0]
    x_c, y_c, z_c = conj(s, x), conj(s, y), conj(s, z)
    dx = s.mul(grad, s.mul(y_c, s.pow(x_c, s.sub(y_c, s.ones_like(y_c)))))
    if x.dtype.is_complex:
        log_x = s.select_v2(s.not_equal(x, s.zeros_like(x)), s.log(x_c), s.zeros_like(x))
    else:
        log_x = s.select_v2(s.greater(x, 0), s.log(s.select_v2(s.greater(x, 0), x,
                                                               s.ones_like(x))), s.zeros_like(x))
    dy = s.mul(grad, s.mul(z_c, log_x))
    return [sum_to_shape_of(s, dx, x), sum_to_shape_of(s, dy, y)]


@SquaredDifference.gradient
def _squared_difference_grad(g, grad):
    s = g.scope
    x, y = g.op.inputs
    d = s.mul(s.mul(grad, 2), conj(s, s.sub(x, y)))
    return [sum_to_shape_of(s, d, x), sum_to_shape_of(s, s.neg(d), y)]


# -- MatMul, BatchMatMulV2 -------------------------------------------------------------------
MATMUL_TYPES = FLOAT_OR_COMPLEX + (int32, int64)

MatMul = register_op(
    "MatMul", inputs=["a: T", "b: T"], outputs=["product: T"],
    attrs={"T": TypeAttr(MATMUL_TYPES), "transpose_a": BoolAttr(False),
           "transpose_b": BoolAttr(False)},
    doc="The matrix product of two rank-2 tensors, each transposed first if asked "
        "(BLAS through numpy; float16 accumulates in float32, integers wrap).")

BatchMatMulV2 = register_op(
    "BatchMatMulV2", inputs=["x: T", "y: T"], outputs=["output: T"],
    attrs={"T": TypeAttr(MATMUL_TYPES + (int16,)), "adj_x": BoolAttr(False), "adj_y": BoolAttr(False)},
    doc="Matrix products over the last two dims, the batch dims broadcast; adj_x / adj_y "
        "take the conjugate transpose of an operand first.")
MatMul.uses_blas = BatchMatMulV2.uses_blas = True


def _matrix_dims(ctx, name: str, transposed: bool, batched: bool) -> tuple[list, object, object]:
    """(batch dims, rows, cols) of an operand as the product reads it."""
    shape = ctx.shape(name)
    if shape.rank is None:
        return None, None, None
    if (shape.rank != 2 and not batched) or shape.rank < 2:
        want = "rank >= 2" if batched else "rank 2"
        raise ctx.error(f"Shape must be {want} but is rank {shape.rank}")
    dims = shape.as_list()
    rows, cols = dims[-2:]
    return dims[:-2], (cols if transposed else rows), (rows if transposed else cols)


def _product_shape(ctx, a: str, b: str, ta: bool, tb: bool, batched: bool) -> TensorShape:
    batch_a, m, k_a = _matrix_dims(ctx, a, ta, batched)
    batch_b, k_b, n = _matrix_dims(ctx, b, tb, batched)
    if k_a is not None and k_b is not None and k_a != k_b:
        raise ctx.error(f"Dimensions must be equal, but are {k_a} and {k_b}")
    if not batched:
        return TensorShape([m, n])
    if batch_a is None or batch_b is None:
        return TensorShape(None)
    try:
        batch = TensorShape(batch_a).broadcast_with(TensorShape(batch_b))
    except ValueError:
        raise ctx.error(f"Incompatible batch dimensions: {TensorShape(batch_a)} vs. "
                        f"{TensorShape(batch_b)}") from None
    return TensorShape(batch.as_list() + [m, n])


@MatMul.shape_fn
def _matmul_shape(ctx):
    """[rows of op(a), cols of op(b)]; op(a)'s cols must equal op(b)'s rows."""
    return _product_shape(ctx, "a", "b", ctx.attr("transpose_a"), ctx.attr("transpose_b"),
                          batched=False)


@BatchMatMulV2.shape_fn
def _batch_matmul_shape(ctx):
    """broadcast(batch dims) + [rows of op(x), cols of op(y)]."""
    return _product_shape(ctx, "x", "y", ctx.attr("adj_x"), ctx.attr("adj_y"), batched=True)


def _oriented(xp, m, flip: bool, conjugate: bool):
    if not flip:
        return m
    m = xp.swapaxes(m, -1, -2)
    return xp.conj(m) if conjugate and m.dtype.kind == "c" else m


def size_incompatible(given: tuple, flip_a: bool, flip_b: bool, node: str):
    """TF's error: the operands' shapes as given (before any transpose); BatchMatMul's
    adds its adj_x and adj_y as 0 / 1."""
    tail = f" {int(flip_a)} {int(flip_b)}" if node == "BatchMatMulV2" else ""
    return InvalidArgumentError(f"Matrix size-incompatible: In[0]: {given[0]}, In[1]: "
                                f"{given[1]}{tail}")


def matrix_product(ctx, a, b, flip_a: bool, flip_b: bool, conjugate: bool, node: str):
    """op(a) @ op(b) into a new buffer; TF's run-time error for mismatched sizes."""
    xp = ctx.xp
    given = a.shape, b.shape
    a, b = _oriented(xp, a, flip_a, conjugate), _oriented(xp, b, flip_b, conjugate)
    if a.shape[-1] != b.shape[-2] or (node == "MatMul" and (a.ndim, b.ndim) != (2, 2)):
        raise size_incompatible(tuple(map(debug_string, given)), flip_a, flip_b, node)
    if a.dtype == np.float16:  # accumulate in float32, round once (TF's kernels)
        return xp.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    if a.ndim == b.ndim == 2:  # MatMul: no batch dims (a call's few microseconds count)
        shape = (a.shape[0], b.shape[1])
    else:
        try:
            shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        except ValueError:
            raise InvalidArgumentError(
                f"In[0] and In[1] must have compatible batch dimensions: "
                f"{debug_string(a.shape)} vs. {debug_string(b.shape)}") from None
    if xp is np and math.prod(shape) >= MIN_OUT_ELEMENTS:
        return np.matmul(a, b, out=ctx.empty(shape, a.dtype))
    return xp.matmul(a, b)


@MatMul.kernel("cpu")
@MatMul.kernel("gpu")
def _matmul(ctx, a, b):
    return matrix_product(ctx, a, b, ctx.attrs["transpose_a"], ctx.attrs["transpose_b"],
                          conjugate=False, node="MatMul")


@BatchMatMulV2.kernel("cpu")
@BatchMatMulV2.kernel("gpu")
def _batch_matmul(ctx, x, y):
    return matrix_product(ctx, x, y, ctx.attrs["adj_x"], ctx.attrs["adj_y"], conjugate=True,
                          node="BatchMatMulV2")


@MatMul.prepare("cpu")
def _prepare_matmul(spec):
    """With both shapes static (and checked by the shape rule): the transposes as views
    and one ``np.matmul``, the kernel's own call (float16's widening stays the kernel's)."""
    a, b, out = spec.shape(0), spec.shape(1), spec.output_shape()
    dtype = spec.dtype(0)
    if a is None or b is None or out is None or dtype in (np.float16, object):
        return None
    ta, tb = spec.attrs["transpose_a"], spec.attrs["transpose_b"]
    matmul = np.matmul
    if math.prod(out) >= MIN_OUT_ELEMENTS:
        new = spec.allocator(out, dtype)
        return lambda ctx, x, y: matmul(x.T if ta else x, y.T if tb else y, out=new())
    return lambda ctx, x, y: matmul(x.T if ta else x, y.T if tb else y)


@MatMul.gradient
def _matmul_grad(g, grad):
    """TF's _MatMulGrad: the four cases of (transpose_a, transpose_b); conjugates for
    complex operands."""
    s = g.scope
    a, b = (conj(s, t) for t in g.op.inputs)
    ta, tb = g.attr("transpose_a"), g.attr("transpose_b")
    if not ta and not tb:
        return [s.mat_mul(grad, b, transpose_b=True), s.mat_mul(a, grad, transpose_a=True)]
    if not ta and tb:
        return [s.mat_mul(grad, b), s.mat_mul(grad, a, transpose_a=True)]
    if ta and not tb:
        return [s.mat_mul(b, grad, transpose_b=True), s.mat_mul(a, grad)]
    return [s.mat_mul(b, grad, transpose_a=True, transpose_b=True),
            s.mat_mul(grad, a, transpose_a=True, transpose_b=True)]


@BatchMatMulV2.gradient
def _batch_matmul_grad(g, grad):
    """TF's _BatchMatMulV2: as MatMul's with adjoints, then summed over the batch dims
    each operand was broadcast along."""
    s = g.scope
    x, y = g.op.inputs
    ax, ay = g.attr("adj_x"), g.attr("adj_y")
    bmm = s.batch_mat_mul_v2
    if not ax and not ay:
        gx, gy = bmm(grad, y, adj_y=True), bmm(x, grad, adj_x=True)
    elif not ax and ay:
        gx, gy = bmm(grad, y), bmm(grad, x, adj_x=True)
    elif ax and not ay:
        gx, gy = bmm(y, grad, adj_y=True), bmm(x, grad)
    else:
        gx, gy = bmm(y, grad, adj_x=True, adj_y=True), bmm(grad, x, adj_x=True, adj_y=True)
    return [sum_to_shape_of(s, gx, x), sum_to_shape_of(s, gy, y)]


# -- BiasAdd --------------------------------------------------------------------------------
BiasAdd = register_op(
    "BiasAdd", inputs=["value: T", "bias: T"], outputs=["output: T"],
    attrs={"T": TypeAttr(NUMBER_TYPES), "data_format": StringAttr("NHWC", ("NHWC", "NCHW"))},
    doc="value + bias along the channel dim: the last (NHWC) or dim 1 of a tensor of rank "
        ">= 3 (NCHW); bias is a vector of the channel count.")


def _channel_axis(rank: int, data_format: str) -> int:
    return 1 if data_format == "NCHW" and rank >= 3 else rank - 1


@BiasAdd.shape_fn
def _bias_add_shape(ctx):
    """value's shape, its channel dim known from bias when value's is not; bias is a
    vector as long as value's channel dim."""
    value, bias = ctx.shape("value"), ctx.shape("bias")
    if bias.rank is not None and bias.rank != 1:
        raise ctx.error(f"Shape must be rank 1 but is rank {bias.rank}")
    if value.rank is None:
        return value
    if value.rank < 2:
        raise ctx.error(f"Shape must be at least rank 2 but is rank {value.rank}")
    axis = _channel_axis(value.rank, ctx.attr("data_format"))
    channels = value[axis]
    if bias.rank is None or bias[0] is None:
        return value
    if channels is not None and channels != bias[0]:
        raise ctx.error(f"Dimensions must be equal, but are {channels} and {bias[0]}")
    dims = value.as_list()
    dims[axis] = bias[0]  # TF merges the two: the bias's length names the channel dim
    return TensorShape(dims)


@BiasAdd.kernel("cpu")
@BiasAdd.kernel("gpu")
def _bias_add(ctx, value, bias):
    if value.ndim < 2:
        raise InvalidArgumentError(f"Input tensor must be at least 2D: "
                                   f"{debug_string(value.shape)}")
    if bias.ndim != 1:
        raise InvalidArgumentError(f"Biases must be 1D: {debug_string(bias.shape)}")
    axis = _channel_axis(value.ndim, ctx.attrs["data_format"])
    if value.shape[axis] != bias.shape[0]:
        raise InvalidArgumentError(
            f"Must provide as many biases as the last dimension of the input tensor: "
            f"{debug_string(bias.shape)} vs. {debug_string(value.shape)}")
    shape = [1] * value.ndim
    shape[axis] = bias.shape[0]
    return ctx.xp.add(value, bias.reshape(shape))


@BiasAdd.gradient
def _bias_add_grad(g, grad):
    """grad for value; grad summed over every dim but the channel's for bias (TF's
    BiasAddGrad)."""
    s = g.scope
    rank = g.op.inputs[0].shape.rank
    if rank is None:
        raise InvalidArgumentError(f"The gradient of {g.op.name} needs its input's rank")
    axis = _channel_axis(rank, g.attr("data_format"))
    return [grad, s.reduce_sum(grad, [d for d in range(rank) if d != axis])]


# -- builders with TensorFlow's Python signatures --------------------------------------------
def matmul(self, a, b, transpose_a: bool = False, transpose_b: bool = False,
           adjoint_a: bool = False, adjoint_b: bool = False, a_is_sparse: bool = False,
           b_is_sparse: bool = False, output_type=None, *, name: str | None = None):
    """``tf.matmul``: MatMul for two rank-2 operands, BatchMatMulV2 otherwise (a rank
    unknown at build time: BatchMatMulV2). ``adjoint_*`` conjugates and transposes."""
    from graphflow.builder import as_operand
    if (transpose_a and adjoint_a) or (transpose_b and adjoint_b):
        raise ValueError("Only one of transpose and adjoint may be True for an operand")
    if output_type is not None:
        raise InvalidArgumentError("matmul: output_type is for int8 products, which "
                                   "graphflow does not have")
    operands = [as_operand(t) if as_operand(t) is not None else self.constant(t)
                for t in (a, b)]
    if all(t.shape.rank == 2 for t in operands):
        a, b = operands
        if adjoint_a:
            a, transpose_a = conj(self, a), True
        if adjoint_b:
            b, transpose_b = conj(self, b), True
        return self.create_op(MatMul, a, b, transpose_a=transpose_a, transpose_b=transpose_b,
                              name=name)
    if transpose_a or transpose_b:
        # a transpose of a real operand is its adjoint; a complex one is conjugated back
        operands = [conj(self, t) if flip and t.dtype.is_complex else t
                    for t, flip in zip(operands, (transpose_a, transpose_b))]
    return self.create_op(BatchMatMulV2, *operands, adj_x=adjoint_a or transpose_a,
                          adj_y=adjoint_b or transpose_b, name=name)


def bias_add(self, value, bias, data_format: str | None = None, *, name: str | None = None):
    """``tf.nn.bias_add``; ``data_format`` None is NHWC."""
    return self.create_op(BiasAdd, value, bias, data_format=data_format or "NHWC", name=name)


def leaky_relu(self, features, alpha: float = 0.2, *, name: str | None = None):
    """``tf.nn.leaky_relu(features, alpha=0.2)``."""
    return self.create_op(LeakyRelu, features, alpha=float(alpha), name=name)


def _install() -> None:
    from graphflow.scope import Scope
    for method in (matmul, bias_add, leaky_relu):
        setattr(Scope, method.__name__, method)
    Scope.pow = lambda self, x, y, *, name=None: self.create_op(Pow, x, y, name=name)
    Scope.pow.__doc__ = "``tf.pow(x, y)``: x ** y element-wise (Pow)."


_install()


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("Exp", "Log", "Log1p", "Expm1", "Sqrt", "Rsqrt", "Square", "Reciprocal", "Abs",
           "Sign", "Floor", "Ceil", "Round", "Sigmoid", "Tanh", "Relu", "Relu6", "Elu", "Selu",
           "Softplus", "Softsign", "LeakyRelu", "BiasAdd", Pow, SquaredDifference)
same_as_tf(MatMul, defaults={"grad_a": ("bool", False), "grad_b": ("bool", False)},
           hints=("grad_a", "grad_b"))  # how TF's kernel computes, never what
same_as_tf(BatchMatMulV2, defaults={"grad_x": ("bool", False), "grad_y": ("bool", False)},
           hints=("grad_x", "grad_y"))
