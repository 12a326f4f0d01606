"""The dense math of issue #35 (ops/dense_math_ops.py): element-wise functions, Pow,
SquaredDifference, MatMul, BatchMatMulV2 and BiasAdd against independent references
(Python's math module, float64 numpy), over dtypes and special values; gradients
against central differences; TensorFlow's errors; and the 3rd+ call of a compiled plan.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError

SPECIAL = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 3.5, 20.0, -20.0, 100.0, -100.0,
           np.inf, -np.inf, np.nan, 1e-8, -1e-8]


def _m(f):
    """An element-wise reference from a Python function of one float (NaN where it
    raises, as IEEE gives)."""
    def apply(x):
        def one(v):
            if math.isnan(v):
                return v  # NaN in, NaN out, for every function here
            try:
                return f(float(v))
            except (ValueError, OverflowError, ZeroDivisionError):
                return _ieee(f, float(v))
        with np.errstate(all="ignore"):
            return np.vectorize(one, otypes=[np.float64])(x)
    return apply


def _ieee(f, v):
    if f is math.log:
        return -math.inf if v == 0 else math.nan
    if f is math.sqrt or f is math.log1p:
        return -math.inf if (f is math.log1p and v == -1) else math.nan
    return math.nan


def _sigmoid(v):
    return 1 / (1 + math.exp(-v)) if v > -700 else 0.0


def _softplus(v):
    return v if v > 30 else math.log1p(math.exp(v))


SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
REFERENCES = {
    "exp": _m(lambda v: math.exp(v) if v < 709 else math.inf),
    "log": _m(math.log), "log1p": _m(math.log1p),
    "expm1": _m(lambda v: math.expm1(v) if v < 709 else math.inf),
    "sqrt": _m(math.sqrt),
    "rsqrt": _m(lambda v: 1 / math.sqrt(v) if v != 0 else math.copysign(math.inf, v)),
    "square": _m(lambda v: v * v),
    "reciprocal": _m(lambda v: 1 / v if v != 0 else math.copysign(math.inf, v)),
    "abs": _m(abs), "sign": _m(lambda v: v if math.isnan(v) else float((v > 0) - (v < 0))),
    "floor": _m(math.floor), "ceil": _m(math.ceil), "round": _m(round),
    "sigmoid": _m(_sigmoid), "tanh": _m(math.tanh), "relu": _m(lambda v: v if v != v else max(v, 0.0)),
    "relu6": _m(lambda v: v if v != v else min(max(v, 0.0), 6.0)),
    "elu": _m(lambda v: math.expm1(v) if v < 0 else v),
    "selu": _m(lambda v: SELU_SCALE * (SELU_ALPHA * math.expm1(v) if v < 0 else v)),
    "softplus": _m(_softplus), "softsign": _m(lambda v: v / (1 + abs(v))),
    # alpha is a float attr (32 bits), as TF's: float64 features see float32(0.2)
    "leaky_relu": _m(lambda v: v if v > 0 or v != v else float(np.float32(0.2)) * v),
}
INFINITE_IN = {"floor", "ceil", "round"}  # math.floor(inf) raises: references skip infinities


def _close(got, want, dtype):
    """Equal, or within a few ulps of the reference rounded to ``dtype``."""
    tol = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-13}[dtype]
    with np.errstate(all="ignore"):
        got = got.astype(np.float64)
        want = np.asarray(want, np.float64).astype(dtype).astype(np.float64)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        near = np.abs(got - want) <= tol * np.maximum(1, np.abs(want))
    assert np.all(same | near), (got, want)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_elementwise_functions_match_the_reference(name, dtype):
    values = np.array([v for v in SPECIAL if not (name in INFINITE_IN and not np.isfinite(v))],
                      dtype)
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.as_dtype(dtype), shape=[None])
    y = getattr(s, name)(x)
    assert y.dtype == gf.as_dtype(dtype) and y.shape.as_list() == [None]
    with gf.Session(s.graph) as sess:
        f = sess.make_callable(y, [x])
        for _ in range(3):  # the 3rd call runs the compiled plan
            got = f(values)
    _close(got, REFERENCES[name](values.astype(np.float64)), dtype)


@pytest.mark.parametrize("name, dtype", [("abs", np.int32), ("sign", np.int64),
                                         ("square", np.int8), ("relu", np.int16),
                                         ("round", np.int32)])
def test_integer_functions(name, dtype):
    values = np.array([-128, -3, 0, 2, 100], dtype) if dtype == np.int8 else \
        np.array([np.iinfo(dtype).min, -3, 0, 2, 100], dtype)
    s = gf.Scope(gf.Graph())
    got = gf.Session(s.graph).run(getattr(s, name)(s.constant(values)))
    want = {"abs": np.abs, "sign": np.sign, "square": lambda v: v * v,
            "relu": lambda v: np.maximum(v, 0), "round": lambda v: v}[name](values)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == dtype


def test_complex_functions_follow_numpy():
    v = np.array([1 + 2j, -0.5 + 0.1j, 3j], np.complex128)
    s = gf.Scope(gf.Graph())
    for name, ref in [("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("tanh", np.tanh),
                      ("reciprocal", lambda a: 1 / a), ("sign", lambda a: a / np.abs(a))]:
        np.testing.assert_allclose(gf.Session(s.graph).run(getattr(s, name)(s.constant(v))),
                                   ref(v), rtol=1e-14)


def test_dtypes_tensorflow_refuses():
    s = gf.Scope(gf.Graph())
    with pytest.raises(TypeError):
        s.exp(s.constant(np.array([1, 2], np.int32)))
    with pytest.raises(TypeError):
        s.abs(s.constant(np.array([1, 2], np.uint8)))


# -- gradients --------------------------------------------------------------------------------
GRAD_DOMAIN = {"log": (0.2, 3), "sqrt": (0.2, 3), "rsqrt": (0.2, 3), "log1p": (-0.5, 3),
               "reciprocal": (0.3, 3)}
SMOOTH = ["exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "square", "reciprocal", "sigmoid",
          "tanh", "softplus", "softsign", "elu", "selu", "leaky_relu", "relu", "relu6", "abs"]


@pytest.mark.parametrize("name", SMOOTH)
def test_gradients_match_central_differences(name):
    lo, hi = GRAD_DOMAIN.get(name, (-2.5, 2.5))
    rng = np.random.default_rng(7)
    value = rng.uniform(lo, hi, (2, 3))
    value[np.abs(value) < 0.05] = 0.3  # kinks of relu/abs/leaky_relu at 0
    if name == "relu6":
        value[np.abs(value - 6) < 0.05] = 5.5
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, shape=[2, 3])
    loss = s.reduce_sum(s.mul(getattr(s, name)(x), np.arange(1.0, 7.0).reshape(2, 3)))
    (check,) = gf.gradient_check(loss, [x], [value])
    assert check.max_error < 1e-6, (name, check)


def test_step_functions_pass_no_gradient():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[3])
    for name in ("floor", "ceil", "round"):
        assert gf.gradients(s.reduce_sum(getattr(s, name)(x)), [x]) == [None]
    (g,) = gf.gradients(s.reduce_sum(s.sign(x)), [x])
    np.testing.assert_array_equal(gf.Session(s.graph).run(g, {x: np.ones(3, np.float32)}), 0)


# -- Pow, SquaredDifference -------------------------------------------------------------------
def test_pow_and_squared_difference_broadcast():
    s = gf.Scope(gf.Graph())
    a = np.array([[0.5, 2.0, 3.0]])
    b = np.array([[2.0], [-1.0]])
    with gf.Session(s.graph) as sess:
        got = sess.run([s.pow(a, b), s.squared_difference(a, b)])
    np.testing.assert_allclose(got[0], a ** b)
    np.testing.assert_allclose(got[1], (a - b) ** 2)
    ints = sess_run = gf.Session(s.graph).run(s.pow(np.array([2, 3], np.int32),
                                                    np.array([10, 3], np.int32)))
    np.testing.assert_array_equal(ints, [1024, 27])
    del sess_run
    with pytest.raises(InvalidArgumentError, match="negative integer powers"):
        gf.Session(s.graph).run(s.pow(np.array([2], np.int32), np.array([-1], np.int32)))
    with pytest.raises(InvalidArgumentError, match="Dimensions must be equal"):
        s.pow(np.ones((2, 3)), np.ones((4,)))


def test_pow_and_squared_difference_gradients():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, shape=[2, 3])
    y = s.placeholder(gf.float64, shape=[3])
    loss = s.reduce_sum(s.add(s.pow(x, y), s.squared_difference(x, y)))
    xv = np.random.default_rng(1).uniform(0.5, 2, (2, 3))
    yv = np.array([0.5, 2.0, -1.5])
    for check in gf.gradient_check(loss, [x, y], [xv, yv]):
        assert check.max_error < 1e-6


# -- MatMul, BatchMatMulV2, BiasAdd -----------------------------------------------------------
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.complex64])
def test_matmul_with_transposes(ta, tb, dtype):
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (3, 2) if ta else (2, 3)).astype(dtype)
    b = rng.integers(-3, 4, (4, 3) if tb else (3, 4)).astype(dtype)
    if dtype == np.complex64:
        a = a + 1j * a[::-1]
        b = b - 2j * b
    s = gf.Scope(gf.Graph())
    out = s.matmul(a, b, transpose_a=ta, transpose_b=tb)
    assert out.op.type == "MatMul" and out.shape.as_list() == [2, 4]
    want = (a.T if ta else a).astype(np.complex128 if dtype == np.complex64 else np.float64) \
        @ (b.T if tb else b)
    np.testing.assert_allclose(gf.Session(s.graph).run(out), want, rtol=1e-6)


def test_matmul_adjoint_float16_and_integer_wrap():
    s = gf.Scope(gf.Graph())
    a = np.array([[1 + 1j, 2], [0, 1j]], np.complex128)
    got = gf.Session(s.graph).run(s.matmul(a, a, adjoint_a=True))
    np.testing.assert_allclose(got, a.conj().T @ a)
    h = np.full((1, 4096), 0.25, np.float16)  # a float16 running sum would stall at 512
    got = gf.Session(s.graph).run(s.matmul(h, np.ones((4096, 1), np.float16)))
    assert got.dtype == np.float16 and got[0, 0] == 1024
    big = np.array([[2 ** 30, 2 ** 30]], np.int32)
    got = gf.Session(s.graph).run(s.matmul(big, np.ones((2, 1), np.int32)))
    assert got[0, 0] == np.int32(-2 ** 31)  # wraps, as TF's


def test_matmul_errors_at_build_and_run_time():
    s = gf.Scope(gf.Graph())
    with pytest.raises(InvalidArgumentError, match="Dimensions must be equal, but are 3 and 4"):
        s.matmul(np.ones((2, 3)), np.ones((4, 5)))
    p = s.placeholder(gf.float64, shape=[None, None])
    out = s.matmul(p, np.ones((4, 5)))
    with pytest.raises(InvalidArgumentError, match="Matrix size-incompatible") as e:
        gf.Session(s.graph).run(out, {p: np.ones((2, 3))})
    assert e.value.node_name == out.op.name


def test_batch_matmul_broadcasts_batch_dims():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 1, 3, 4))
    y = rng.normal(size=(5, 4, 2))
    s = gf.Scope(gf.Graph())
    out = s.matmul(x, y)
    assert out.op.type == "BatchMatMulV2" and out.shape.as_list() == [2, 5, 3, 2]
    np.testing.assert_allclose(gf.Session(s.graph).run(out), x @ y, rtol=1e-12)
    out = s.matmul(x, np.swapaxes(y, -1, -2), transpose_b=True)
    np.testing.assert_allclose(gf.Session(s.graph).run(out), x @ y, rtol=1e-12)


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_gradients(ta, tb):
    s = gf.Scope(gf.Graph())
    a = s.placeholder(gf.float64, shape=[3, 2] if ta else [2, 3])
    b = s.placeholder(gf.float64, shape=[4, 3] if tb else [3, 4])
    loss = s.reduce_sum(s.square(s.matmul(a, b, transpose_a=ta, transpose_b=tb)))
    rng = np.random.default_rng(5)
    for check in gf.gradient_check(loss, [a, b], [rng.normal(size=a.shape.as_list()),
                                                  rng.normal(size=b.shape.as_list())]):
        assert check.max_error < 1e-6


def test_batch_matmul_gradients_sum_over_broadcast_dims():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, shape=[2, 3, 4])
    y = s.placeholder(gf.float64, shape=[4, 2])
    loss = s.reduce_sum(s.square(s.matmul(x, y)))
    rng = np.random.default_rng(6)
    for check in gf.gradient_check(loss, [x, y], [rng.normal(size=(2, 3, 4)),
                                                  rng.normal(size=(4, 2))]):
        assert check.max_error < 1e-6


def test_bias_add_formats_errors_and_gradient():
    s = gf.Scope(gf.Graph())
    v = np.arange(24.0).reshape(2, 3, 4)
    with gf.Session(s.graph) as sess:
        np.testing.assert_array_equal(sess.run(s.bias_add(v, np.arange(4.0))), v + np.arange(4.0))
        np.testing.assert_array_equal(sess.run(s.bias_add(v, np.arange(3.0), "NCHW")),
                                      v + np.arange(3.0)[:, None])
    with pytest.raises(InvalidArgumentError, match="Dimensions must be equal"):
        s.bias_add(v, np.arange(3.0))
    x = s.placeholder(gf.float64, shape=[2, 3])
    b = s.placeholder(gf.float64, shape=[3])
    loss = s.reduce_sum(s.square(gf.nn.bias_add(x, b)))
    for check in gf.gradient_check(loss, [x, b], [np.ones((2, 3)), np.arange(3.0)]):
        assert check.max_error < 1e-6


@settings(max_examples=25, deadline=None)
@given(m=st.integers(0, 4), k=st.integers(0, 4), n=st.integers(0, 4),
       batch=st.lists(st.integers(1, 3), max_size=2))
def test_property_matmul_equals_numpy_on_any_shape(m, k, n, batch):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rng.normal(size=(*batch, m, k))
    b = rng.normal(size=(k, n))
    s = gf.Scope(gf.Graph())
    p = s.placeholder(gf.float64, shape=[None] * a.ndim)
    out = s.matmul(p, b)
    with gf.Session(s.graph) as sess:
        f = sess.make_callable(out, [p])
        for _ in range(3):
            got = f(a)
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)


# -- a missing op says so -------------------------------------------------------------------
def test_a_missing_builder_says_graphflow_has_no_such_op_and_suggests_close_names():
    s = gf.Scope(gf.Graph())
    with pytest.raises(AttributeError, match="graphflow has no op or builder named 'einsum'"):
        s.einsum
    with pytest.raises(AttributeError, match=r"Did you mean scope\.reduce_mean"):
        s.reduce_meen
    with pytest.raises(AttributeError, match=r"Did you mean scope\.softmax"):
        s.sofmax
    assert not hasattr(s, "_private_thing")
    assert s.mat_mul is not None and s.matmul is not None  # the raw op's and TF's names


# -- BLAS threads ---------------------------------------------------------------------------------
def test_the_blas_pool_is_held_to_the_intra_op_thread_count():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    s = gf.Scope(gf.Graph())
    product = s.matmul(np.ones((64, 64)), np.ones((64, 64)))

    def blas_threads():  # numpy's own BLAS (a peer imported in the process brings its own)
        return {i["num_threads"] for i in threadpoolctl.threadpool_info()
                if i["user_api"] == "blas" and "numpy" in i["filepath"]}
    try:
        with gf.Session(s.graph, gf.SessionConfig(intra_op_threads=1)) as sess:
            assert blas_threads() <= {1}
            assert sess.run(product)[0, 0] == 64
        config = gf.SessionConfig(inter_op_threads=1)
        assert config.intra_op_threads == (__import__("os").cpu_count() or 1)
    finally:
        gf.Session(s.graph).close()  # the default again, for the tests after this one
    with pytest.raises(InvalidArgumentError, match="intra_op_threads must be >= 1"):
        gf.SessionConfig(intra_op_threads=0)


@pytest.mark.parametrize("op", ["mul", "add", "sub", "real_div"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(300, 64), (3, 100, 64)])
def test_a_row_times_its_scalar_is_a_compiled_loop_with_numpys_bits(op, dtype, shape):
    """[n, k] (op) [n, 1] (edge weights, gates): the lean kernel's loop gives the bits of
    numpy's broadcasting, on every call of a compiled plan, specials included."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=shape).astype(dtype)
    column = rng.normal(size=shape[:-1] + (1,)).astype(dtype)
    x.flat[:4] = [np.nan, -0.0, np.inf, 1e-30]
    column.flat[:3] = [0.0, -0.0, np.inf]
    s = gf.Scope(gf.Graph())
    p = s.placeholder(gf.as_dtype(dtype), shape=list(shape))
    q = s.placeholder(gf.as_dtype(dtype), shape=list(column.shape))
    out = getattr(s, op)(p, q)
    with np.errstate(all="ignore"):
        want = {"mul": np.multiply, "add": np.add, "sub": np.subtract,
                "real_div": np.divide}[op](x, column)
    for optimize in (True, False):
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            f = sess.make_callable(out, [p, q])
            for _ in range(3):
                got = f(x, column)
            assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_the_lean_matmul_gives_the_kernels_bits(ta, tb, dtype):
    rng = np.random.default_rng(4)
    a = rng.integers(-9, 9, (70, 40) if ta else (40, 70)).astype(dtype)
    if dtype == np.float32:
        a /= 3
    b = rng.integers(-9, 9, (500, 70) if tb else (70, 500)).astype(dtype)
    got = []
    for optimize in (True, False):
        s = gf.Scope(gf.Graph())
        x = s.placeholder(gf.as_dtype(a.dtype), shape=list(a.shape))
        y = s.placeholder(gf.as_dtype(b.dtype), shape=list(b.shape))
        out = s.matmul(x, y, transpose_a=ta, transpose_b=tb)
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            f = sess.make_callable(out, [x, y])
            got.append([f(a, b) for _ in range(3)][-1])
    assert got[0].dtype == got[1].dtype and got[0].tobytes() == got[1].tobytes()


def test_a_serial_run_gives_blas_every_core_unless_the_config_set_it():
    """A parallel run's kernels share the cores (cores // inter_op_threads); a serial run
    runs one kernel at a time, and its MatMuls get every core unless intra_op_threads
    was given."""
    import os
    from graphflow.runtime.blas_threads import run_blas_threads
    cores = os.cpu_count() or 1
    default = gf.SessionConfig(inter_op_threads=2)
    assert run_blas_threads(default, parallel=True) == max(1, cores // 2)
    assert run_blas_threads(default, parallel=False) == cores
    given = gf.SessionConfig(inter_op_threads=2, intra_op_threads=1)
    assert run_blas_threads(given, parallel=False) == 1
