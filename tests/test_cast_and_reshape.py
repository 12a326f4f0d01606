"""Cast's Truncate (round toward zero, as TensorFlow; the same on a GPU) and Reshape of
zero-size tensors (the missing dim inferred, the count checked).

Every literal expectation below (dtypes, shapes, values, which cases fail and how) was
recorded from TensorFlow 2.21 in graph mode (tf.compat.v1 sessions); where graphflow
deliberately differs, the test says so.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.shapes import TensorShape

from support.gpu_devices import GPU_KINDS, gpu_session_devices

CAST_VALUES = np.array([1 / 3, -2 / 3, 0.1, 1e-3, 65519.0, 1 + 2 ** -11 + 2 ** -40, np.nan, np.inf])
# TF 2.21, float.hex() of each result
F32_NEAREST = ["0x1.5555560000000p-2", "-0x1.5555560000000p-1", "0x1.99999a0000000p-4",
               "0x1.0624de0000000p-10", "0x1.ffde000000000p+15", "0x1.0020000000000p+0", "nan", "inf"]
F32_TRUNC = ["0x1.5555540000000p-2", "-0x1.5555540000000p-1", "0x1.9999980000000p-4",
             "0x1.0624dc0000000p-10", "0x1.ffde000000000p+15", "0x1.0020000000000p+0", "nan", "inf"]
F16_NEAREST = ["0x1.5540000000000p-2", "-0x1.5540000000000p-1", "0x1.9980000000000p-4",
               "0x1.0640000000000p-10", "0x1.ffc0000000000p+15", "0x1.0000000000000p+0", "nan", "inf"]
F16_TRUNC = ["0x1.5540000000000p-2", "-0x1.5540000000000p-1", "0x1.9980000000000p-4",
             "0x1.0600000000000p-10", "0x1.ffc0000000000p+15", "0x1.0000000000000p+0", "nan", "inf"]


def _complex_values():
    x = np.empty(len(CAST_VALUES), np.complex128)
    x.real, x.imag = CAST_VALUES, CAST_VALUES[::-1]
    return x


@pytest.mark.parametrize("src, dst, truncate, expected", [
    (np.float64, gf.float32, False, F32_NEAREST), (np.float64, gf.float32, True, F32_TRUNC),
    # float64 -> float16 rounds through float32 (1 + 2**-11 + 2**-40 becomes 1.0, not the
    # 1 + 2**-10 that one direct rounding gives)
    (np.float64, gf.float16, False, F16_NEAREST), (np.float64, gf.float16, True, F16_TRUNC),
    (np.float32, gf.float16, False, F16_NEAREST), (np.float32, gf.float16, True, F16_TRUNC),
    (np.complex128, gf.float32, False, F32_NEAREST), (np.complex128, gf.float32, True, F32_TRUNC),
])
@pytest.mark.parametrize("optimize", [True, False])
def test_cast_truncate_as_tensorflow(scope, run, src, dst, truncate, expected, optimize):
    x = _complex_values() if src is np.complex128 else CAST_VALUES.astype(src)
    p = scope.placeholder(gf.as_dtype(src), shape=[None])  # not folded: the kernel runs
    got = run(scope.cast(p, dst, Truncate=truncate), {p: x}, optimize=optimize)
    assert got.dtype == dst.as_numpy_dtype
    assert [float(v).hex() for v in got] == expected


@pytest.mark.parametrize("truncate, expected", [(False, F32_NEAREST), (True, F32_TRUNC)])
def test_cast_truncate_complex_cuts_both_parts(scope, run, truncate, expected):
    got = run(scope.cast(_complex_values(), gf.complex64, Truncate=truncate))
    assert [float(v).hex() for v in got.real] == expected
    assert [float(v).hex() for v in got.imag] == expected[::-1]


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_cast_truncate_on_a_gpu_equals_the_cpu(kind):
    """The GPU kernel (cupy's bit operations; a simulated and an emulated GPU where no
    CUDA device is) gives the CPU's bits, complex scalars included, but for NaN payloads:
    an H200 casts a NaN to float16 as 0x7fff (CUDA's __float2half, as TensorFlow's GPU
    kernel), numpy as 0x7e00 (the quieted payload)."""
    scope = gf.Scope(gf.Graph())
    gpu = scope.with_device("/gpu:0")
    p = scope.placeholder(gf.float64, [None])
    c = scope.placeholder(gf.complex128, [None])
    c0 = scope.placeholder(gf.complex128, [])
    fetches = [gpu.cast(p, gf.float32, Truncate=True), gpu.cast(p, gf.float16, Truncate=True),
               gpu.cast(p, gf.float16), gpu.cast(c, gf.complex64, Truncate=True),
               gpu.cast(c, gf.float32, Truncate=True), gpu.cast(c0, gf.complex64, Truncate=True)]
    feeds = {p: CAST_VALUES, c: _complex_values(), c0: np.complex128(1 / 3 + 2j / 3)}
    with gf.Session(scope.graph, devices=gpu_session_devices(kind)) as sess:
        on_gpu = sess.run(fetches, feeds)
    with gf.Session(scope.graph, devices=gpu_session_devices(kind)[:1]) as sess:
        on_cpu = sess.run(fetches, feeds)
    assert [a.dtype for a in on_gpu] == [b.dtype for b in on_cpu]
    assert [_bits_but_nans(a) for a in on_gpu] == [_bits_but_nans(b) for b in on_cpu]
    assert [float(v).hex() for v in on_cpu[0]] == F32_TRUNC


def _bits_but_nans(a: np.ndarray) -> tuple[bytes, bytes]:
    """The bits of ``a`` with every NaN as 0, and where its NaNs are."""
    parts = a.reshape(-1).view(a.real.dtype) if a.dtype.kind == "c" else a.reshape(-1)
    nan = np.isnan(parts)
    return np.where(nan, 0, parts).astype(parts.dtype).tobytes(), nan.tobytes()


def test_nan_payloads_alone_are_ignored_by_the_gpu_comparison():
    """Found on an H200: the GPU's float16 NaN is 0x7fff, the CPU's 0x7e00."""
    gpu_nan, cpu_nan = (np.array([1.0, b], np.float16) for b in (np.nan, np.nan))
    gpu_nan.view(np.uint16)[1], cpu_nan.view(np.uint16)[1] = 0x7fff, 0x7e00
    assert _bits_but_nans(gpu_nan) == _bits_but_nans(cpu_nan)
    assert _bits_but_nans(gpu_nan) != _bits_but_nans(np.array([1.0, 0.0], np.float16))
    assert _bits_but_nans(np.array([-0.0], np.float16)) != \
        _bits_but_nans(np.array([0.0], np.float16))


@given(st.floats(min_value=2 ** -125, max_value=3e38), st.booleans())
def test_cast_truncate_rounds_toward_zero(value, negative):
    """Truncate=True gives the float32 next to x toward zero (x in float32's normal range):
    the round-to-nearest result, stepped back toward zero when it overshot."""
    x = np.array([-value if negative else value])
    scope = gf.Scope(gf.Graph())
    with gf.Session(scope.graph) as sess:
        got = sess.run(scope.cast(x, gf.float32, Truncate=True))
    nearest = x.astype(np.float32)
    expected = np.where(np.abs(nearest.astype(np.float64)) > np.abs(x),
                        np.nextafter(nearest, np.float32(0)), nearest)
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dst", [gf.int32, gf.float64, gf.bool])
def test_cast_truncate_changes_nothing_where_nothing_narrows(scope, run, dst):
    x = np.array([1.7, -2.5, 0.0, 3.0], np.float32)
    assert run(scope.cast(x, dst, Truncate=True)).tobytes() == run(scope.cast(x, dst)).tobytes()


# TF 2.21: tf.reshape(tf.zeros(shape), sizes), static and run-time shapes
ZERO_SIZE_RESHAPES = [
    ((0, 3), [-1, 0], (3, 0)), ((0, 3), [0, -1], (0, 3)), ((0, 3), [2, 0, -1], (2, 0, 1)),
    ((0, 4), [3, 0, -1], (3, 0, 1)), ((0, 0), [-1, 0], (1, 0)), ((0, 3), [-1, 3], (0, 3)),
    ((0, 3), [-1], (0,)), ((2, 0, 5), [-1, 0], (10, 0)), ((2, 0, 5), [0, -1, 2], (0, 5, 2)),
    ((0, 3), [-1, 0, 0], (3, 0, 0)), ((0, 6), [4, 0, -1], (4, 0, 1)),
]


@pytest.mark.parametrize("shape, sizes, expected", ZERO_SIZE_RESHAPES)
def test_reshape_of_zero_size_infers_the_missing_dim(scope, run, shape, sizes, expected):
    static = scope.reshape(np.zeros(shape, np.float32), sizes)
    # graphflow's static shape is the run-time one (TF 2.21's shape function stops at ?)
    assert static.shape == TensorShape(expected)
    p = scope.placeholder(gf.float32)
    dynamic = scope.reshape(p, sizes)
    assert run(static).shape == expected
    assert run(dynamic, {p: np.zeros(shape, np.float32)}).shape == expected


def test_reshape_to_a_zero_size_shape_checks_the_count(scope, run):
    with pytest.raises(InvalidArgumentError, match="Cannot reshape a tensor with 3 elements"):
        scope.reshape(np.zeros(3, np.float32), [0, -1])  # TF: [0,?] (0 elements)
    p = scope.placeholder(gf.float32)
    out = scope.reshape(p, [0, -1])
    with pytest.raises(InvalidArgumentError, match="tensor with 3 values, but the requested "
                                                   "shape has 0"):
        run(out, {p: np.zeros(3, np.float32)})


@given(st.lists(st.integers(0, 3), min_size=0, max_size=3),
       st.lists(st.integers(-1, 4), min_size=1, max_size=3))
def test_reshape_static_shape_is_the_run_time_shape(shape, sizes):
    """Wherever the build-time shape function answers, the kernel agrees with it: the
    same dims, or the same refusal."""
    if sizes.count(-1) > 1:
        return
    scope = gf.Scope(gf.Graph())
    value = np.zeros(shape, np.int8)
    p = scope.placeholder(gf.int8)
    dynamic = scope.reshape(p, sizes)
    with gf.Session(scope.graph) as sess:
        try:
            got = sess.run(dynamic, {p: value}).shape
        except InvalidArgumentError:
            got = None
    try:
        static = scope.reshape(value, sizes).shape
    except InvalidArgumentError:
        static = None
    assert got == (None if static is None else tuple(static.as_list()))


