"""Issue #15 (items 1, 2, 4, 5, 6): values, dtypes and shapes as TensorFlow has them.

Every literal expectation below (dtypes, shapes, values, which cases fail and how)
was recorded from TensorFlow 2.21 in graph mode (tf.compat.v1 sessions); where
graphflow deliberately differs, the test says so.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError, ResourceExhaustedError, UnimplementedError
from graphflow.shapes import TensorShape

from support.gpu_devices import GPU_KINDS, gpu_session_devices

ALL_DTYPES = [gf.float16, gf.float32, gf.float64, gf.int8, gf.int16, gf.int32, gf.int64,
              gf.uint8, gf.uint16, gf.uint32, gf.uint64, gf.bool, gf.complex64, gf.complex128,
              gf.string]


# -- 1. Empty values convert to any dtype -----------------------------------------------
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("value, shape", [([], [0]), ([[], []], [2, 0]), (np.array([]), [0]),
                                          (np.zeros((0, 2)), [0, 2]), ((), [0])])
def test_empty_values_convert_to_every_dtype(scope, run, dtype, value, shape):
    c = scope.constant(value, dtype=dtype)
    assert c.dtype is dtype and c.shape == TensorShape(shape)
    got = run(c)
    assert got.shape == tuple(shape)
    assert got.dtype == (object if dtype.is_string else dtype.as_numpy_dtype)


def test_empty_builder_inputs_take_the_inputs_dtype(scope, run):
    # TF 2.21: fill([], 5) -> int32 scalar 5; reshape([7], []) -> 7; dynamic_stitch([[]],
    # [[]]) -> float32 [0]; feeding [] to an int32 placeholder -> int32 [].
    filled = scope.fill([], 5)
    assert filled.dtype is gf.int32 and filled.shape == TensorShape([])
    assert filled.op.inputs[0].dtype is gf.int32
    reshaped = scope.reshape(scope.constant([7]), [])
    assert reshaped.shape == TensorShape([]) and reshaped.op.inputs[1].dtype is gf.int32
    stitched = scope.dynamic_stitch([[]], [[]])
    assert stitched.dtype is gf.float32 and stitched.shape == TensorShape([0])
    p = scope.placeholder(gf.int32)
    assert run(filled) == 5 and run(reshaped) == 7
    assert run(stitched).shape == (0,) and run(stitched).dtype == np.float32
    fed = run(p, {p: []})
    assert fed.dtype == np.int32 and fed.shape == (0,)


def test_empty_values_that_tensorflow_rejects_stay_rejected(scope):
    with pytest.raises(InvalidArgumentError):  # TF: fails at run time; graphflow at build
        scope.scatter_nd([[0]], [1], [])
    with pytest.raises(TypeError, match="float32 not in list of allowed values"):  # TF's words
        scope.gather_nd(scope.constant([1, 2]), [])


# -- 2. Python and numpy scalars ---------------------------------------------------------
@pytest.mark.parametrize("value, dtype", [
    (2 ** 31 - 1, gf.int32), (2 ** 31, gf.int64), (-2 ** 31 - 1, gf.int64),
    (2 ** 63 - 1, gf.int64), (-2 ** 63, gf.int64), (2 ** 63, gf.uint64), (2 ** 64 - 1, gf.uint64),
    ([1, 2 ** 63], gf.float32), ([-1, 2 ** 63], gf.float32),
    ([np.int8(1)], gf.int8), ([np.uint8(1)], gf.uint8), ([np.float16(1)], gf.float16),
    ([np.uint32(1)], gf.uint32), ([np.uint64(1)], gf.uint64), ([np.int64(1)], gf.int32),
    ([np.float64(1)], gf.float32), (np.float64(1), gf.float64), (np.int64(1), gf.int64),
    ([np.int8(1), 2], gf.int32), ([np.int8(1), np.int16(2)], gf.int16),
    ([np.uint8(1), np.int8(2)], gf.int16), ([np.int8(1), 1.5], gf.float32),
    ([True, 1], gf.int32), ([True, 1.5], gf.float32), ([1 + 2j], gf.complex128), (1.5, gf.float32),
    (["a", b"b", np.str_("c")], gf.string),
])
def test_python_and_numpy_values_take_tensorflows_dtype(scope, run, value, dtype):
    c = scope.constant(value)
    assert c.dtype is dtype
    got = run(c)
    if dtype.is_string:
        assert got.tolist() == [b"a", b"b", b"c"]
    elif dtype.is_integer:  # the true value, compared as Python ints: nothing wraps
        assert np.asarray(got).tolist() == value
    else:
        np.testing.assert_array_equal(got, np.asarray(value).astype(dtype.as_numpy_dtype))


@pytest.mark.parametrize("value", [2 ** 64, -2 ** 63 - 1, [1, "b"], [1.5, "a"], [["a"], [1]],
                                   [None], [b"a", 1]])
def test_unconvertible_python_values_are_type_errors(scope, value):
    with pytest.raises(TypeError, match="Failed to convert elements"):
        scope.constant(value)


def test_none_is_not_a_value(scope):
    with pytest.raises(ValueError, match="None values not supported"):
        scope.constant(None)


@pytest.mark.parametrize("value, dtype", [
    (1.5, gf.int32), (1.0, gf.int32), ([1.0], gf.int32), ([2.0], gf.int64), (1, gf.bool),
    ("a", gf.int32), (1, gf.string), (1 + 2j, gf.float32), (np.float64(1.5), gf.int32),
    ([np.float64(1.0)], gf.int32),
])
def test_inexact_conversion_to_a_dtype_is_a_type_error(scope, value, dtype):
    # TF 2.21 raises TypeError for each ("Expected int32, but got 1.0 of type 'float'"),
    # except np.float64(1.5) as int32, which it truncates: graphflow converts exactly.
    with pytest.raises(TypeError):
        scope.constant(value, dtype=dtype)
    with pytest.raises(InvalidArgumentError):  # InvalidDTypeError is both
        scope.constant(value, dtype=dtype)


@pytest.mark.parametrize("value, dtype, expected", [
    (True, gf.int32, 1), (1, gf.float32, 1.0), (2 ** 63, gf.uint64, 2 ** 63), (3, gf.complex64, 3),
])
def test_exact_conversion_to_a_dtype(scope, run, value, dtype, expected):
    c = scope.constant(value, dtype=dtype)
    assert c.dtype is dtype and run(c).item() == expected


@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if not d.is_string and not d.is_bool
                                   and d.as_numpy_dtype.itemsize > 1], ids=str)
def test_non_native_byte_order_arrays_convert_as_their_dtype(scope, run, dtype):
    """TensorFlow reads np.array(..., '>i4') as int32; graphflow refused it as a dtype
    with no equivalent (as a constant or an op input), while feeding accepted it."""
    native = np.array([1, 2, 3]).astype(dtype.as_numpy_dtype)
    swapped = native.astype(native.dtype.newbyteorder())
    assert gf.as_dtype(swapped.dtype) is dtype
    for c in (scope.constant(swapped), scope.identity(swapped), scope.constant(swapped[0])):
        got = run(c)
        assert c.dtype is dtype and got.dtype == native.dtype and got.dtype.isnative
        np.testing.assert_array_equal(got, native if got.ndim else native[0])


def test_nested_list_holding_an_output_is_packed(scope, run):
    c = scope.constant(1)
    out = scope.scatter_nd([[c]], [5], [3])
    indices = out.op.inputs[0]
    assert indices.op.type == "Pack" and indices.dtype is gf.int32
    assert indices.op.inputs[0].op.type == "Pack"  # one Pack per level holding an Output
    np.testing.assert_array_equal(run(out), [0, 5, 0])  # TF 2.21: [0 5 0]


def test_nested_pack_converts_raw_items_to_the_outputs_dtype(scope, run):
    c = scope.constant(1)
    packed = scope.identity([[c], [2]])  # TF: Pack(Pack(c), Const([2])) of shape [2, 1]
    assert packed.shape == TensorShape([2, 1]) and packed.dtype is gf.int32
    assert [i.op.type for i in packed.op.inputs[0].op.inputs] == ["Pack", "Const"]
    np.testing.assert_array_equal(run(packed), [[1], [2]])
    c64 = scope.constant(2, dtype=gf.int64)
    mixed = scope.identity([c64, np.int32(3)])  # a numpy int32 converts exactly to int64
    assert mixed.dtype is gf.int64 and run(mixed).tolist() == [2, 3]


@pytest.mark.parametrize("make", [
    lambda s, c: [c, 2.5],                                  # TF: Expected int32, got 2.5
    lambda s, c: [c, s.constant(1, dtype=gf.int64)],        # TF: list with int64 to int32
])
def test_nested_pack_rejects_what_does_not_convert(scope, make):
    c = scope.constant(1)
    with pytest.raises(TypeError):
        scope.identity(make(scope, c))


def _nested(depth, leaf):
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def _holding_itself(c):
    loop = [1.0]
    loop.append(loop)
    return [c, loop]


@pytest.mark.parametrize("make", [
    lambda c: _nested(5000, 1.0), lambda c: [c, _nested(5000, 1.0)],
    lambda c: [_nested(5000, 1.0), c], lambda c: _nested(65, c), _holding_itself,
    lambda c: _holding_itself(c)[::-1],
], ids=["deep", "output, then deep", "deep, then output", "output 65 deep", "cycle",
        "cycle first"])
def test_lists_too_deep_to_be_a_tensor_are_a_clean_error(scope, make):
    """The search for Outputs in nested lists recursed: a RecursionError (or, for a
    list holding itself, one after a long walk)."""
    with pytest.raises(InvalidArgumentError, match="nested more than 64 levels|dimension of 64"):
        scope.add(make(scope.constant(1.0)), 1.0)


def test_a_list_shared_by_several_rows_still_packs(scope, run):
    c = scope.constant(2.0)
    row = [1.0, c]
    np.testing.assert_array_equal(run(scope.identity([row] * 3)), [[1.0, 2.0]] * 3)
    assert run(scope.identity(_nested(64, c))).shape == (1,) * 64


def test_nested_pack_casts_to_a_dtype_bound_elsewhere(scope, run):
    # TF 2.21: tf.add(tf.constant([1.5]), [c]) casts c to float32 before packing: [2.5]
    c = scope.constant(1)
    out = scope.add(scope.constant([1.5]), [c])
    assert out.dtype is gf.float32
    assert out.op.inputs[1].op.inputs[0].op.type == "Cast"
    np.testing.assert_array_equal(run(out), np.array([2.5], np.float32))


def test_nested_pack_of_mismatched_shapes_names_the_pack(scope):
    c = scope.constant(1)
    with pytest.raises(InvalidArgumentError, match="Shapes of all inputs must match"):
        scope.identity([c, [2]])  # TF: "Shapes must be equal rank" for the packed node


def test_constant_does_not_pack_outputs(scope):
    with pytest.raises(TypeError, match="Expected any non-tensor type"):  # TF's words
        scope.constant([[scope.constant(1)]])


@pytest.mark.parametrize("values, types", [
    (lambda s: [s.constant([1]), s.constant(np.array([2], np.int64))], "int32, int64"),
    (lambda s: [[1], np.array([2], np.int64)], "int32, int64"),
    (lambda s: [np.array([2], np.int64), [1]], "int64, int32"),
    (lambda s: [[1], [2 ** 40]], "int32, int64"),
    (lambda s: [[1], [2.0]], "int32, float32"),
    (lambda s: [[2.0], s.constant([1])], "float32, int32"),
])
def test_concat_of_mixed_dtypes_is_a_type_error(scope, values, types):
    # TF 2.21's words for each: "Tensors in list passed to 'values' of 'ConcatV2' Op have
    # types [int32, int64] that don't all match."
    with pytest.raises(TypeError, match=rf"have types \[{types}\] that don't all match"):
        scope.concat(values(scope), 0)


def test_fixed_dtype_list_names_every_type(scope):
    # TF 2.21: "... 'indices' of 'DynamicStitch' Op have types [int32, int64] that do not
    # match expected type int32."
    with pytest.raises(TypeError, match=r"have types \[int32, int64\] that do not match "
                                        r"expected type int32"):
        scope.dynamic_stitch([[0], scope.constant([1], dtype=gf.int64)], [[1], [2]])


def test_concat_converts_raw_items_to_an_outputs_dtype(scope, run):
    out = scope.concat([scope.constant([1]), np.array([2], np.int64)], 0)  # TF: int32 [1 2]
    assert out.dtype is gf.int32 and run(out).tolist() == [1, 2]


@pytest.mark.parametrize("value, shape, expected", [
    (5, [2, 3], [[5, 5, 5], [5, 5, 5]]),
    ([1, 2, 3, 4, 5, 6], [2, 3], [[1, 2, 3], [4, 5, 6]]),
    ([7], [2, 3], [[7, 7, 7], [7, 7, 7]]),
    (np.array(7), [2, 2], [[7, 7], [7, 7]]),
    ([[1, 2], [3, 4]], [4], [1, 2, 3, 4]),
    (5, [], 5), ([5], [], 5), ([], [0], []),
    ("a", [2], [b"a", b"a"]),
])
def test_constant_with_shape_broadcasts_or_reshapes(scope, run, value, shape, expected):
    c = scope.constant(value, shape=shape)
    assert c.shape == TensorShape(shape)
    assert run(c).tolist() == expected


@pytest.mark.parametrize("value, shape, message", [
    ([1, 2], [2, 3], r"Expected Tensor's shape: \(2, 3\), but got \(2,\)"),
    ([[7]], [2, 3], r"Expected Tensor's shape: \(2, 3\), but got \(1, 1\)"),
    ([[1, 2, 3]], [2, 3], r"Expected Tensor's shape: \(2, 3\), but got \(1, 3\)"),
    ([1, 2], [], r"Expected Tensor's shape: \(\), but got \(2,\)"),
    ([], [2], r"Expected Tensor's shape: \(2,\), but got \(0,\)"),
    ([1, 2, 3, 4], [2, -1], "fully defined"),
])
def test_constant_with_a_shape_it_cannot_fill_is_a_type_error(scope, value, shape, message):
    with pytest.raises(TypeError, match=message):
        scope.constant(value, shape=shape)


@pytest.mark.parametrize("value, shape", [(1, [10 ** 11]), (1.0, [2 ** 40, 2 ** 20]),
                                          ("a", [2 ** 40]), ([7], [2 ** 62])])
def test_a_constant_broadcast_past_the_machine_memory_is_refused_first(scope, value, shape):
    """numpy's bare MemoryError before (or the process killed, for a size the kernel
    overcommits): checked before anything is allocated."""
    with pytest.raises(ResourceExhaustedError, match="OOM when allocating a constant"):
        scope.constant(value, shape=shape)


def test_constant_dtype_and_shape_together(scope, run):
    c = scope.constant(3, gf.float64, [2])  # tf.constant's positional order
    assert c.dtype is gf.float64 and run(c).tolist() == [3.0, 3.0]


# -- 4. Cast's Truncate, Reshape of zero-size tensors ------------------------------------
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


# -- 5. Shapes never overflow ---------------------------------------------------------------
def test_num_elements_is_exact():
    assert TensorShape([2 ** 40, 2 ** 40]).num_elements() == 2 ** 80  # TF: 1208925819614629174706176
    assert TensorShape([2 ** 62, None, 4]).num_elements() is None
    assert TensorShape([]).num_elements() == 1


# TF 2.21 placeholders: too large when the dims, multiplied in order up to the first
# unknown one, pass int64
@pytest.mark.parametrize("shape, too_large", [
    ([2 ** 40, 2 ** 40], True), ([2 ** 62, 2], True), ([2 ** 62, 4, 0], True),
    ([2 ** 62, 1], False), ([0, 2 ** 62, 4], False), ([2 ** 62, None, 4], False),
    ([2 ** 63 - 1], False),
])
def test_too_large_shapes_are_rejected_at_build_time(scope, shape, too_large):
    if too_large:
        with pytest.raises(InvalidArgumentError, match="is too large"):
            scope.placeholder(gf.int32, shape=shape)
    else:
        assert scope.placeholder(gf.int32, shape=shape).shape == TensorShape(shape)


def test_any_op_whose_output_is_too_large_is_rejected(scope):
    with pytest.raises(InvalidArgumentError, match=r"Shape \[1099511627776,1099511627776\] is "
                                                   r"too large .* \[node Fill\]"):
        scope.fill([2 ** 40, 2 ** 40], 1)  # TF 2.21 builds it and fails when it runs
    with pytest.raises(InvalidArgumentError, match="is too large"):
        scope.reshape(scope.placeholder(gf.int8), [2 ** 62, 4])


@pytest.mark.parametrize("make", [
    lambda s, dims: s.placeholder(gf.float32, shape=dims),
    lambda s, dims: s.placeholder(gf.float32, shape=[None] * len(dims)),
    lambda s, dims: s.constant(1.0, shape=dims),
    lambda s, dims: s.fill(dims, 1.0),
    lambda s, dims: gf.import_graph_def(_placeholder_def(dims), s),
], ids=["placeholder", "unknown dims", "constant", "fill", "GraphDef"])
def test_shapes_of_more_than_254_dims_are_rejected_at_build_time(scope, make):
    """TensorFlow's TensorShape::MaxDimensions; a placeholder of 10**5 dims was built
    (while Fill and Reshape already refused 255)."""
    assert make(scope, [1] * 64) is not None  # (numpy's most; a placeholder may have 254)
    for rank in (255, 10 ** 5):
        with pytest.raises(InvalidArgumentError, match=f"rank {rank} has too many dimensions|"
                                                       f"at most 254 dims"):
            make(scope, [1] * rank)


def _placeholder_def(dims):
    g = gf.Graph()
    gf.Scope(g).placeholder(gf.float32, shape=[1], name="p")
    graph_def = g.as_graph_def()
    graph_def["nodes"][0]["attrs"]["shape"]["shape"] = list(dims)
    return graph_def


@pytest.mark.parametrize("start, limit, delta, message", [
    (0.0, np.inf, 1.0, r"Requires \(\(limit - start\) / delta\) <= 9223372036854775807"),
    (0.0, 1e30, 1.0, r"Requires \(\(limit - start\) / delta\) <= 9223372036854775807"),
    (0.0, 1.0, 1e-30, r"Requires \(\(limit - start\) / delta\) <= 9223372036854775807"),
    (np.int64(-2 ** 63), np.int64(2 ** 63 - 1), np.int64(1),
     r"Requires \(\(limit - start\) / delta\) <= 9223372036854775807"),
    (0.0, np.nan, 1.0, "Requires start <= limit when delta > 0"),  # TF: at run time
    (0.0, 10.0, np.nan, "Requires start >= limit when delta < 0"),
    (0, 10, 0, r"Requires delta != 0"),
])
def test_absurd_ranges_fail_at_build_time(scope, start, limit, delta, message):
    with pytest.raises(InvalidArgumentError, match=message):
        scope.range(start, limit, delta)


def test_long_but_valid_range_builds(scope):
    out = scope.range(np.int64(0), np.int64(2 ** 62), np.int64(1))  # TF 2.21: [4611686018427387904]
    assert out.shape == TensorShape([2 ** 62]) and out.dtype is gf.int64
    with pytest.raises(TypeError, match="Cannot convert 4611686018427387904"):
        scope.range(0, 2 ** 62, 1)  # start binds int32 first, as in TF's raw Range op


@pytest.mark.parametrize("value, dtype", [
    ([], gf.int32), (np.array([]), gf.int32), ([2, 3], gf.int32), ([2 ** 40], gf.int64),
    (np.array([2, 3], np.int64), gf.int64), (np.array([2], np.int16), None),
])
def test_raw_values_prefer_the_attrs_default_dtype(scope, value, dtype):
    """A value with no dtype of its own (Python values, empty arrays) takes the attr's
    default (Fill's index_type: int32) when it converts exactly, else its own dtype; a
    numpy value with elements keeps its dtype (TF 2.21 would cast it to int32)."""
    if dtype is None:  # int16 is not an index type
        with pytest.raises(TypeError, match="int16 not in list of allowed values"):
            scope.fill(value, 1)
        return
    assert scope.fill(value, 1).op.inputs[0].dtype is dtype


def test_float32_range_length_in_float32(scope, run):
    # TF 2.21: 402 elements, the last -0x1.a9227cp+1 (float64 arithmetic gives 403)
    start, limit, delta = (np.float32(v) for v in (-7.331364631652832, -3.3113646507263184,
                                                   0.009999999776482582))
    out = scope.range(start, limit, delta)
    assert out.shape == TensorShape([402])
    assert float(run(out)[-1]).hex() == "-0x1.a9227c0000000p+1"


def _huge_int8_vector():
    """2**31 elements that take one byte of memory (a broadcast view, fed read-only)."""
    return np.broadcast_to(np.zeros(1, np.int8), (2 ** 31,))


@pytest.mark.parametrize("op, out_type, message, expected", [
    ("size", gf.int32, "Number of elements was larger than representable by 32-bit output type",
     None),
    ("shape", gf.int32, "Shape output type is 32-bit but dim 0 is 2147483648", None),
    ("size", gf.int64, None, 2 ** 31),
    ("shape", gf.int64, None, [2 ** 31]),
])
def test_size_and_shape_that_overflow_int32(scope, run, op, out_type, message, expected):
    p = scope.placeholder(gf.int8, shape=[None])
    out = getattr(scope, op)(p, out_type)
    if message is None:
        assert np.asarray(run(out, {p: _huge_int8_vector()})).tolist() == expected
    else:
        with pytest.raises(InvalidArgumentError, match=message):  # TF 2.21's words
            run(out, {p: _huge_int8_vector()})


# -- 6. dtypes, bool(), operators ------------------------------------------------------------
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
    (slice(None, None, 2), UnimplementedError, "step 2"),
], ids=repr)
def test_getitem_errors(scope, key, error, message):
    with pytest.raises(error, match=message):
        scope.constant(np.zeros((2, 3, 4)))[key]


def test_getitem_needs_what_slice_cannot_compute_later(scope):
    p = scope.placeholder(gf.int32, [None, 3])
    with pytest.raises(UnimplementedError, match="unknown at build time"):
        p[-1]
    with pytest.raises(UnimplementedError, match="unknown at build time"):
        p[0:2]
    with pytest.raises(UnimplementedError, match="rank"):
        scope.placeholder(gf.int32)[0]


def test_floor_division_and_modulo_operators_follow_python():
    scope = gf.Scope(gf.Graph())
    x = scope.constant(np.array([7, -7, 5, -5], np.int64))
    with gf.Session(scope.graph) as sess:
        got = sess.run([x // 2, x % 3, 20 // x, 20 % x])
    a = np.array([7, -7, 5, -5])
    for g, want in zip(got, [a // 2, a % 3, 20 // a, 20 % a]):
        np.testing.assert_array_equal(g, want)
        assert g.dtype == np.int64
