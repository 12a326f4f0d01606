"""An Output as a Python value: no bool(), identity equality and hash, numpy functions
refused, and its operators (arithmetic, comparison, truediv's table, getitem) as
TensorFlow's graph-mode Tensor has them.

Every literal expectation below (dtypes, shapes, values, which cases fail and how) was
recorded from TensorFlow 2.21 in graph mode (tf.compat.v1 sessions); where graphflow
deliberately differs, the test says so.
"""
import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.shapes import TensorShape


def test_as_dtype_none_is_a_type_error(scope):
    with pytest.raises(TypeError, match="None"):
        gf.as_dtype(None)
    with pytest.raises(TypeError):
        scope.placeholder(None)  # TF 2.21: "Expected DataType for argument 'dtype' not None."


def test_output_is_no_python_bool(scope):
    x = scope.constant([1, 2])
    with pytest.raises(TypeError, match="Using a graphflow Output as a Python bool is not allowed"):
        bool(x)
    with pytest.raises(TypeError):
        if x:
            pass
    with pytest.raises(TypeError, match="Iterating over a graphflow Output"):
        list(x)


def test_output_equality_and_hash_stay_identity(scope):
    x, y = scope.constant(1), scope.constant(1)
    assert (x == x) is True and (x == y) is False and (x != y) is True  # noqa: PLR0124
    assert {x: 1, y: 2}[x] == 1 and hash(x) == hash(x)


@pytest.mark.parametrize("call", [lambda x: np.sum(x), lambda x: np.add(x, 1),
                                  lambda x: np.exp(x), lambda x: np.maximum(x, 0)],
                         ids=["sum", "add", "exp", "maximum"])
def test_numpy_functions_refuse_an_output(scope, call):
    """np.sum(x) returned x itself (an opaque object to numpy): a wrong value, silently.
    TensorFlow's graph mode refuses it too (a symbolic tensor is no numpy array)."""
    with pytest.raises(TypeError, match="does not support ufuncs"):
        call(scope.constant([1.0, 2.0]))


@pytest.mark.parametrize("expr, expected", [
    (lambda a, x: a * x, [1.5, -4.0]), (lambda a, x: a - x, [-0.5, 4.0]),
    (lambda a, x: a / x, [2 / 3, -1.0]), (lambda a, x: np.float32(1) < x, [True, False]),
    (lambda a, x: a[0] + x, [2.5, -1.0]),
], ids=["array * x", "array - x", "array / x", "scalar < x", "numpy scalar + x"])
def test_numpy_values_on_the_left_still_reach_the_outputs_operators(scope, run, expr,
                                                                    expected):
    x = scope.constant(F)
    out = expr(np.array([1.0, 2.0], np.float32), x)
    assert isinstance(out, gf.Output)
    np.testing.assert_allclose(run(out), expected, rtol=1e-6)


X = np.array([3, 4], np.int32)
F = np.array([1.5, -2.0], np.float32)
B = np.array([True, False])


# (expression, dtype, op type, value): TF 2.21 graph mode
OPERATORS = [
    (lambda x, f, b: x + 1, gf.int32, "Add", [4, 5]),
    (lambda x, f, b: 1 + x, gf.int32, "Add", [4, 5]),
    (lambda x, f, b: x - 2, gf.int32, "Sub", [1, 2]),
    (lambda x, f, b: 10 - x, gf.int32, "Sub", [7, 6]),
    (lambda x, f, b: x * x, gf.int32, "Mul", [9, 16]),
    (lambda x, f, b: 2 * x, gf.int32, "Mul", [6, 8]),
    (lambda x, f, b: -x, gf.int32, "Neg", [-3, -4]),
    (lambda x, f, b: -f, gf.float32, "Neg", [-1.5, 2.0]),
    (lambda x, f, b: x / 2, gf.float64, "RealDiv", [1.5, 2.0]),
    (lambda x, f, b: 7 / x, gf.float64, "RealDiv", [7 / 3, 1.75]),
    (lambda x, f, b: f / 2, gf.float32, "RealDiv", [0.75, -1.0]),
    (lambda x, f, b: x < 4, gf.bool, "Less", [True, False]),
    (lambda x, f, b: 3 < x, gf.bool, "Greater", [False, True]),
    (lambda x, f, b: x > 3, gf.bool, "Greater", [False, True]),
    (lambda x, f, b: b & True, gf.bool, "LogicalAnd", [True, False]),
    (lambda x, f, b: b | b, gf.bool, "LogicalOr", [True, False]),
    (lambda x, f, b: ~b, gf.bool, "LogicalNot", [False, True]),
    (lambda x, f, b: b ^ True, gf.bool, "LogicalAnd", [False, True]),
    (lambda x, f, b: np.array([1, 1], np.int32) + x, gf.int32, "Add", [4, 5]),
    (lambda x, f, b: np.int32(5) + x, gf.int32, "Add", [8, 9]),
]


@pytest.mark.parametrize("expr, dtype, op_type, expected", OPERATORS)
def test_output_operators(scope, run, expr, dtype, op_type, expected):
    x = scope.placeholder(gf.int32, [2])
    f = scope.placeholder(gf.float32, [2])
    b = scope.placeholder(gf.bool, [2])
    out = expr(x, f, b)
    assert isinstance(out, gf.Output) and out.graph is scope.graph
    assert out.dtype is dtype and out.op.type == op_type and out.shape == TensorShape([2])
    assert run(out, {x: X, f: F, b: B}).tolist() == expected


@pytest.mark.parametrize("dtype, float_type", [
    (gf.int8, gf.float32), (gf.uint8, gf.float32), (gf.int16, gf.float32),
    (gf.uint16, gf.float32), (gf.int32, gf.float64), (gf.uint32, gf.float64),
    (gf.int64, gf.float64), (gf.uint64, gf.float64), (gf.float16, gf.float16),
    (gf.float64, gf.float64), (gf.complex64, gf.complex64),
])
def test_truediv_follows_tensorflows_table(scope, run, dtype, float_type):
    x = np.array([7, 3], dtype.as_numpy_dtype)
    out = scope.constant(x) / scope.constant(np.array([2, 4], dtype.as_numpy_dtype))
    assert out.dtype is float_type
    expected = x.astype(float_type.as_numpy_dtype) / np.array([2, 4], float_type.as_numpy_dtype)
    np.testing.assert_array_equal(run(out), expected)


@pytest.mark.parametrize("expr, message", [
    (lambda x, f, b: x + 1.5, "Cannot convert 1.5"),
    (lambda x, f, b: 1.5 / x, "Cannot convert 1.5"),
    (lambda x, f, b: x / f, "must have the same dtype"),
    (lambda x, f, b: x / 2.5, "must have the same dtype"),
    (lambda x, f, b: b / b, "Invalid dtype gf.bool in __truediv__"),
    (lambda x, f, b: x <= 1, "not supported"),  # no LessEqual op yet
    (lambda x, f, b: -scope_cast(x, gf.uint8), "not in list of allowed values"),
    (lambda x, f, b: x & x, "bool"),
])
def test_output_operators_refuse_what_tensorflow_refuses(scope, expr, message):
    x = scope.placeholder(gf.int32, [2])
    f = scope.placeholder(gf.float32, [2])
    b = scope.placeholder(gf.bool, [2])
    with pytest.raises(TypeError, match=message):
        expr(x, f, b)


def scope_cast(x, dtype):
    return gf.Scope(x.graph).cast(x, dtype)


def test_operators_build_on_the_outputs_device_without_the_scope(scope):
    x = scope.with_sub_scope("layer").with_device("/cpu:0").constant([1, 2])
    controlled = scope.with_control_dependencies([x]).constant(3)
    y = x + controlled
    assert y.op.device == x.op.device == "/device:CPU:0"
    assert y.op.name == "Add" and not y.op.control_inputs


GETITEM_KEYS = [0, -1, (1, 2), (slice(None), 1), (Ellipsis, 2), (None, 0), slice(1, None),
                (slice(0, 1), slice(-2, None), slice(1, 3)), (0, None, slice(None), None, 3),
                slice(5, 9), (1, slice(2, 1)), Ellipsis, (Ellipsis, None), (0, 0, 0),
                np.int64(1)]


@pytest.mark.parametrize("key", GETITEM_KEYS, ids=repr)
def test_getitem_as_numpy_and_tensorflow(scope, run, key):
    # TF 2.21's x[key] equals numpy's a[key] for each of these, static shape included
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    out = scope.constant(a)[key]
    assert out.shape == TensorShape(a[key].shape)
    np.testing.assert_array_equal(run(out), a[key])


@pytest.mark.parametrize("key", [0, (slice(None), 1), slice(1, None), (Ellipsis, 2), 5],
                         ids=repr)
def test_getitem_on_an_unknown_first_dim(scope, run, key):
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    p = scope.placeholder(gf.int32, [None, 3, 4])
    out = p[key]
    if key == 5:  # out of range only at run time
        with pytest.raises(InvalidArgumentError):
            run(out, {p: a})
        return
    assert out.shape.is_compatible_with(a[key].shape)
    np.testing.assert_array_equal(run(out, {p: a}), a[key])


@pytest.mark.parametrize("key, error, message", [
    (5, InvalidArgumentError, "slice index 5 of dimension 0 out of bounds"),  # TF's words
    ((0, 7), InvalidArgumentError, "slice index 7 of dimension 1 out of bounds"),
    ((0, 0, 0, 0), InvalidArgumentError, "4 indices"),
    ((Ellipsis, Ellipsis), InvalidArgumentError, "single ellipsis"),
    (1.5, TypeError, "valid indices"),
    (slice(None, None, 0), InvalidArgumentError, "stride"),
], ids=repr)
def test_getitem_errors(scope, key, error, message):
    with pytest.raises(error, match=message):
        scope.constant(np.zeros((2, 3, 4)))[key]


STRIDED_KEYS = [slice(None, None, 2), slice(None, None, -1), (slice(1, None), slice(None, None, -2)),
                (Ellipsis, slice(3, 0, -1)), (-1, None, slice(None, None, 3)), slice(-1, None),
                (slice(0, 2), 1), (slice(-3, -1), Ellipsis, 0)]


@pytest.mark.parametrize("key", STRIDED_KEYS, ids=repr)
@pytest.mark.parametrize("static", [True, False], ids=["known", "unknown"])
def test_getitem_beyond_a_slice_is_a_strided_slice(scope, run, key, static):
    # what a Slice cannot serve (a step, an end or a negative index on an unknown dim)
    # is one StridedSlice, as in TF; numpy's a[key] is the reference
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    p = scope.placeholder(gf.int32, [2, 3, 4] if static else [None, 3, 4])
    out = p[key]
    assert out.shape.is_compatible_with(a[key].shape)
    np.testing.assert_array_equal(run(out, {p: a}), a[key])


def test_getitem_on_an_unknown_rank_is_a_strided_slice(scope, run):
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    p = scope.placeholder(gf.int32)
    out = p[0, ::-1, None]
    assert out.op.type == "StridedSlice"
    np.testing.assert_array_equal(run(out, {p: a}), a[0, ::-1, None])


def test_floor_division_and_modulo_operators_follow_python():
    scope = gf.Scope(gf.Graph())
    x = scope.constant(np.array([7, -7, 5, -5], np.int64))
    with gf.Session(scope.graph) as sess:
        got = sess.run([x // 2, x % 3, 20 // x, 20 % x])
    a = np.array([7, -7, 5, -5])
    for g, want in zip(got, [a // 2, a % 3, 20 // a, 20 % a]):
        np.testing.assert_array_equal(g, want)
        assert g.dtype == np.int64
