"""Python and numpy values as TensorFlow converts them: empty values to any dtype, scalars
to TensorFlow's default dtypes, exact conversion or a TypeError, nested lists holding
Outputs packed, and constants with a shape broadcast or reshaped.

Every literal expectation below (dtypes, shapes, values, which cases fail and how) was
recorded from TensorFlow 2.21 in graph mode (tf.compat.v1 sessions); where graphflow
deliberately differs, the test says so.
"""
import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError, ResourceExhaustedError
from graphflow.shapes import TensorShape

ALL_DTYPES = [gf.float16, gf.float32, gf.float64, gf.int8, gf.int16, gf.int32, gf.int64,
              gf.uint8, gf.uint16, gf.uint32, gf.uint64, gf.bool, gf.complex64, gf.complex128,
              gf.string]


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


