"""Element-wise math, comparison and logic ops, broadcasting as TensorFlow does."""
from __future__ import annotations

import math
import operator

import numpy as np

from graphflow.dtypes import ALL_TYPES, COMPLEX_TYPES, FLOAT_TYPES, NON_STRING_TYPES, \
    NUMBER_TYPES, REAL_NUMBER_TYPES, non_string, string
from graphflow.errors import InvalidArgumentError
from graphflow.registry import TypeAttr, register_op, same_as_tf
from graphflow.shapes import TensorShape, debug_string

from . import gpu_math
from .tiering import Tiered
from .shape_rules import same_shape_as

SIGNED_NUMBER_TYPES = tuple(t for t in NUMBER_TYPES if not t.is_unsigned)

#: Outputs of at least this many elements are written into a buffer from the plan's
#: pool (``ctx.empty``); below it a fresh numpy result costs less.
MIN_OUT_ELEMENTS = 1 << 14


def broadcast_shapes(ctx, *names: str) -> TensorShape:
    """The broadcast of the named inputs' shapes; an InvalidArgumentError if impossible.
    Shapes of known rank go first, so that an unknown one cannot hide their conflict."""
    shapes = sorted((ctx.shape(name) for name in names), key=lambda s: s.rank is None)
    result = shapes[0]
    for other in shapes[1:]:
        try:
            result = result.broadcast_with(other)
        except ValueError:
            a, b = _first_conflict(result, other)
            raise ctx.error(f"Dimensions must be equal, but are {a} and {b}: incompatible shapes "
                            f"{result} vs. {other}") from None
    return result


def _first_conflict(x: TensorShape, y: TensorShape) -> tuple[int, int]:
    for a, b in zip(reversed(x.as_list()), reversed(y.as_list())):
        if a is not None and b is not None and a != b and 1 not in (a, b):
            return a, b
    return 0, 0  # pragma: no cover


def _broadcast_xy_shape(ctx):
    """broadcast(x.shape, y.shape)."""
    return broadcast_shapes(ctx, "x", "y")


def _broadcasting_op(name: str, in_type: str, out_type: str, **register_args):
    """A registered op z = x (op) y, with x and y of ``in_type`` and z of ``out_type``, whose
    output shape is broadcast(x.shape, y.shape)."""
    op = register_op(name, inputs=[f"x: {in_type}", f"y: {in_type}"],
                     outputs=[f"z: {out_type}"], **register_args)
    op.shape_fn(_broadcast_xy_shape)
    return op


def _binary(name: str, fn, types, doc: str, out: str = "T", aliases=(), gpu_fn=None):
    """``gpu_fn(xp, x, y)``, when given, replaces ``fn`` on a GPU (ops/gpu_math.py)."""
    op = _broadcasting_op(name, "T", out, attrs={"T": TypeAttr(types)}, doc=doc,
                          aliases=aliases)

    out_dtype = np.dtype(np.bool_) if out == "bool" else None

    @op.kernel("cpu")
    @op.kernel("gpu", T=non_string(types))
    def _kernel(ctx, x, y, _fn=fn):
        if x.shape == y.shape:
            if x.size >= MIN_OUT_ELEMENTS and x.dtype.kind != "O" and ctx.xp is np:
                # into a dead intermediate of the plan when there is one
                return _fn(x, y, out=ctx.empty(x.shape, out_dtype or x.dtype))
        # the output has at most x.size * y.size elements: only a product past the
        # limit needs the exact (slower) check
        elif x.size * y.size * x.itemsize > (ctx.memory_limit or 0):
            check_broadcast(ctx, out_dtype or x.dtype, x, y)
        try:
            if gpu_fn is not None and ctx.xp is not np:
                return gpu_fn(ctx.xp, x, y)
            return _fn(x, y)  # numpy ufuncs dispatch to cupy for device arrays
        except ValueError:  # numpy's (and cupy's) word for shapes that do not broadcast
            raise incompatible_shapes(x, y) from None

    @op.prepare("cpu")
    def _prepare(spec, _fn=fn):
        """Static shapes (which the shape rule found to broadcast): the ufunc alone."""
        a, b, out = spec.shape(0), spec.shape(1), spec.output_shape()
        if a is None or b is None or out is None or spec.dtype(0).kind == "O":
            return None
        rows = _row_broadcast(name, a, b, spec, _fn)
        if rows is not None:
            return rows
        if math.prod(out) < MIN_OUT_ELEMENTS:
            return lambda ctx, x, y: _fn(x, y)
        dtype = out_dtype or spec.dtype(0)  # broadcasting too: a pooled buffer, no fresh pages
        return lambda ctx, x, y: _fn(x, y, out=ctx.empty(out, dtype))
    return op


# -- a row of values times its own scalar -----------------------------------------------
def _row_broadcast(name: str, a: tuple, b: tuple, spec, ufunc):
    """The lean kernel of ``x (op) y`` where y holds one value per row of x (``[n, k]``
    with ``[n, 1]``: edge weights, per-token gates), or of ``y (op) x`` (a gradient's
    column first): one compiled loop, a third of the time numpy's broadcasting takes for
    a stride-0 inner operand, the same bits (one IEEE operation per element, in the
    graph's order). None where the shapes or dtypes are other."""
    dtype = spec.dtype(0)
    column_first = len(a) == len(b) and a[-1:] == (1,)
    rows_shape, column_shape = (b, a) if column_first else (a, b)
    if name not in ("Mul", "Add", "Sub", "RealDiv") \
            or dtype not in (np.float32, np.float64) or spec.dtype(1) != dtype \
            or len(rows_shape) < 2 or len(column_shape) != len(rows_shape) \
            or column_shape[-1] != 1 or rows_shape[-1] == 1 \
            or tuple(rows_shape[:-1]) != tuple(column_shape[:-1]) \
            or math.prod(rows_shape) < MIN_OUT_ELEMENTS:
        return None
    from .row_loops import COLUMN_FIRST_LOOPS, LOOPS
    loop = (COLUMN_FIRST_LOOPS if column_first else LOOPS)[name]
    rows, width = math.prod(rows_shape[:-1]), rows_shape[-1]
    new = spec.allocator(rows_shape, dtype)

    compiled = Tiered(loop)  # compiled away from the call (ops/tiering.py)

    def lean(ctx, x, y):
        out = new()
        if column_first:
            x, y = y, x
        args = (np.ascontiguousarray(x).reshape(rows, width),
                np.ascontiguousarray(y).reshape(rows), out.reshape(rows, width))
        if not compiled.ready(*args):  # numpy's broadcasting: the same bits, slower
            return ufunc(y, x, out=out) if column_first else ufunc(x, y, out=out)
        loop(*args)
        return out
    return lean


def incompatible_shapes(x, y) -> InvalidArgumentError:
    """TensorFlow's error for operands whose shapes do not broadcast."""
    return InvalidArgumentError(f"Incompatible shapes: {debug_string(x.shape)} vs. "
                                f"{debug_string(y.shape)}")


def check_broadcast(ctx, dtype, *arrays) -> None:
    """ResourceExhaustedError before a broadcast allocates more than the memory limit
    (a [n, 1] and a [1, n] input make n * n elements); incompatible shapes are left
    to the kernel, which reports them in its own words."""
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        return
    ctx.check_allocation(math.prod(shape), dtype)


_concat_bytes = np.frompyfunc(operator.add, 2, 1)


def _add(x, y, out=None):
    if x.dtype == object:  # strings concatenate
        return np.asarray(_concat_bytes(x, y), dtype=object)
    return np.add(x, y, out=out)


def _real_div(x, y, out=None):
    return np.true_divide(x, y, dtype=x.dtype, out=out)


Add = _binary("Add", _add, NUMBER_TYPES + (string,), "x + y (strings concatenate).",
              aliases=("add_v2",))
Sub = _binary("Sub", np.subtract, NUMBER_TYPES, "x - y.", aliases=("subtract",))
Mul = _binary("Mul", np.multiply, NUMBER_TYPES, "x * y.", aliases=("multiply",))
RealDiv = _binary("RealDiv", _real_div, FLOAT_TYPES + COMPLEX_TYPES, "x / y for real and complex "
                  "floats.", aliases=("divide", "truediv"), gpu_fn=gpu_math.divide)
Maximum = _binary("Maximum", np.maximum, REAL_NUMBER_TYPES, "max(x, y) element-wise.")
Minimum = _binary("Minimum", np.minimum, REAL_NUMBER_TYPES, "min(x, y) element-wise.")
Equal = _binary("Equal", np.equal, ALL_TYPES, "x == y element-wise.", out="bool")
NotEqual = _binary("NotEqual", np.not_equal, ALL_TYPES, "x != y element-wise.", out="bool")
Less = _binary("Less", np.less, REAL_NUMBER_TYPES, "x < y element-wise.", out="bool")
Greater = _binary("Greater", np.greater, REAL_NUMBER_TYPES, "x > y element-wise.", out="bool")


def _unary(name: str, fn, doc: str, dtype: str = "T", attrs=None, aliases=()):
    """Declare an element-wise op of one input, ``y = fn(x)``, on every device."""
    op = register_op(name, inputs=[f"x: {dtype}"], outputs=[f"y: {dtype}"], attrs=attrs,
                     aliases=aliases, doc=doc)
    op.shape_fn(same_shape_as("x"))

    @op.kernel("cpu")
    @op.kernel("gpu")
    def _kernel(ctx, x, _fn=fn):
        return _fn(x)
    return op


Neg = _unary("Neg", np.negative, "-x.", attrs={"T": TypeAttr(SIGNED_NUMBER_TYPES)},
             aliases=("negative",))


def _logical(name: str, fn, doc: str):
    op = _broadcasting_op(name, "bool", "bool", doc=doc)

    @op.kernel("cpu")
    @op.kernel("gpu")
    def _kernel(ctx, x, y, _fn=fn):
        try:
            return _fn(x, y)
        except ValueError:
            raise incompatible_shapes(x, y) from None
    return op


LogicalAnd = _logical("LogicalAnd", np.logical_and, "x AND y element-wise.")
LogicalOr = _logical("LogicalOr", np.logical_or, "x OR y element-wise.")
LogicalNot = _unary("LogicalNot", np.logical_not, "NOT x.", dtype="bool")


SelectV2 = register_op("SelectV2", inputs=["condition: bool", "t: T", "e: T"],
                       outputs=["output: T"], attrs={"T": TypeAttr()}, aliases=("select",),
                       doc="t where condition is true, else e; all three broadcast.")


@SelectV2.shape_fn
def _select_shape(ctx):
    """broadcast(condition.shape, t.shape, e.shape)."""
    return broadcast_shapes(ctx, "condition", "t", "e")


@SelectV2.kernel("cpu")
@SelectV2.kernel("gpu", T=NON_STRING_TYPES)
def _select(ctx, condition, t, e):
    if not condition.shape == t.shape == e.shape and \
            condition.size * t.size * e.size * t.itemsize > (ctx.memory_limit or 0):
        check_broadcast(ctx, t.dtype, condition, t, e)
    try:
        return ctx.xp.where(condition, t, e)
    except ValueError:  # shapes that do not broadcast
        raise InvalidArgumentError(
            f"condition {debug_string(condition.shape)}, then {debug_string(t.shape)}, and "
            f"else {debug_string(e.shape)} must be broadcastable") from None


# -- gradients -------------------------------------------------------------------------
def sum_to_shape_of(scope, grad, operand):
    """``grad`` (of the broadcast shape) summed over the dims ``operand`` was broadcast
    along, and reshaped to ``operand``'s shape: statically when both shapes are
    known, else with BroadcastGradientArgs on the run-time shapes."""
    target, have = operand.shape, grad.shape
    if target.is_fully_defined() and have.is_fully_defined():
        dims, out = target.as_list(), have.as_list()
        if dims == out:
            return grad
        lead = len(out) - len(dims)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(dims)
                                    if d == 1 and out[lead + i] != 1]
        summed = scope.reduce_sum(grad, axes) if axes else grad
        return scope.reshape(summed, dims)
    axes, _ = scope.broadcast_gradient_args(scope.shape(operand), scope.shape(grad))
    return scope.reshape(scope.reduce_sum(grad, axes), scope.shape(operand))


def conj(scope, x):
    """``conj(x)`` for complex ``x``; real ``x`` itself (no op)."""
    return scope.conj(x) if x.dtype.is_complex else x


@Add.gradient
def _add_grad(g, grad):
    x, y = g.op.inputs
    return [sum_to_shape_of(g.scope, grad, x), sum_to_shape_of(g.scope, grad, y)]


@Sub.gradient
def _sub_grad(g, grad):
    x, y = g.op.inputs
    return [sum_to_shape_of(g.scope, grad, x),
            sum_to_shape_of(g.scope, g.scope.neg(grad), y)]


@Mul.gradient
def _mul_grad(g, grad):
    """d(x*y) = grad * conj(y), grad * conj(x): TensorFlow's complex convention."""
    s = g.scope
    x, y = g.op.inputs
    return [sum_to_shape_of(s, s.mul(grad, conj(s, y)), x),
            sum_to_shape_of(s, s.mul(conj(s, x), grad), y)]


@RealDiv.gradient
def _real_div_grad(g, grad):
    """d(x/y) = grad / conj(y), grad * conj(-x / y / y)."""
    s = g.scope
    x, y = g.op.inputs
    dy = s.mul(grad, conj(s, s.real_div(s.real_div(s.neg(x), y), y)))
    return [sum_to_shape_of(s, s.real_div(grad, conj(s, y)), x), sum_to_shape_of(s, dy, y)]


def _extremum_grad(g, grad, wins_x):
    """Maximum/Minimum: the winner gets the gradient; at a tie each side gets half
    (as JAX, PyTorch and the central difference; TensorFlow gives x all of it)."""
    s = g.scope
    x, y = g.op.inputs
    zeros = s.zeros_like(grad)
    half = s.mul(grad, s.constant(0.5, dtype=grad.dtype))
    tie = s.equal(x, y)
    dx = s.select_v2(wins_x(s, x, y), grad, s.select_v2(tie, half, zeros))
    dy = s.select_v2(wins_x(s, y, x), grad, s.select_v2(tie, half, zeros))
    return [sum_to_shape_of(s, dx, x), sum_to_shape_of(s, dy, y)]


@Maximum.gradient
def _maximum_grad(g, grad):
    return _extremum_grad(g, grad, lambda s, a, b: s.greater(a, b))


@Minimum.gradient
def _minimum_grad(g, grad):
    return _extremum_grad(g, grad, lambda s, a, b: s.less(a, b))


@Neg.gradient
def _neg_grad(g, grad):
    return [g.scope.neg(grad)]


@SelectV2.gradient
def _select_grad(g, grad):
    s = g.scope
    condition, t, e = g.op.inputs
    zeros = s.zeros_like(grad)
    return [None, sum_to_shape_of(s, s.select_v2(condition, grad, zeros), t),
            sum_to_shape_of(s, s.select_v2(condition, zeros, grad), e)]


for _op in (Equal, NotEqual, Less, Greater, LogicalAnd, LogicalOr, LogicalNot):
    _op.not_differentiable()


# -- Conj ------------------------------------------------------------------------------
Conj = register_op(
    "Conj", inputs=["input: T"], outputs=["output: T"], attrs={"T": TypeAttr(NUMBER_TYPES)},
    fresh_outputs=False,
    doc="The complex conjugate of `input`; a real input unchanged, without a copy. "
        "TensorFlow's op takes complex types only and tf.math.conj passes real ones through; "
        "this op takes every number type, so that gradient rules may call it on any.")


Conj.shape_fn(same_shape_as("input"))


@Conj.kernel("cpu")
@Conj.kernel("gpu")
def _conj(ctx, x):
    if x.dtype.kind != "c":
        return x  # the op declares that its output may alias its input
    return ctx.xp.conjugate(x, out=ctx.empty(x.shape, x.dtype))


@Conj.gradient
def _conj_grad(g, grad):
    return [conj(g.scope, grad)]


# -- integer division (FloorDiv, FloorMod) ------------------------------------------------
INTEGER_TYPES = tuple(t for t in REAL_NUMBER_TYPES if t.is_integer)


def _integer_division(name: str, fn, doc: str, aliases=()):
    """An integer op x (op) y, broadcasting; a zero divisor is TensorFlow's run-time error
    (only where an output element needs it: an empty result divides nothing)."""
    op = _broadcasting_op(name, "T", "T", attrs={"T": TypeAttr(INTEGER_TYPES)}, doc=doc,
                          aliases=aliases)

    @op.kernel("cpu")
    @op.kernel("gpu")
    def _kernel(ctx, x, y, _fn=fn):
        try:
            shape = np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            raise incompatible_shapes(x, y) from None
        if math.prod(shape) == 0:
            return ctx.xp.zeros(shape, x.dtype)
        ctx.check_allocation(math.prod(shape), x.dtype)
        if not bool(y.all()):
            raise InvalidArgumentError("Integer division by zero")
        with np.errstate(over="ignore"):  # MIN // -1 wraps to MIN, as TensorFlow's
            return _fn(x, y)

    op.not_differentiable()
    return op


FloorDiv = _integer_division(
    "FloorDiv", np.floor_divide, "x // y for integers, rounded toward -infinity (Python's //); "
    "a zero divisor is an error.", aliases=("floordiv",))
FloorMod = _integer_division(
    "FloorMod", np.mod, "x - y * (x // y) for integers: the remainder has the sign of y "
    "(Python's %); a zero divisor is an error.", aliases=("floormod", "mod"))


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf(Add, aliases=("AddV2",))  # AddV2: what TF 2 writes for +, the same semantics
same_as_tf(Sub, Mul, RealDiv, "Maximum", "Minimum", "Less", "Greater", "Neg", "LogicalAnd",
           "LogicalOr", "LogicalNot", "SelectV2", "Conj", FloorDiv, FloorMod)
same_as_tf("Equal", "NotEqual", defaults={"incompatible_shape_error": ("bool", True)})
