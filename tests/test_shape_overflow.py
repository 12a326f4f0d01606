"""Shapes never overflow: exact element counts, shapes too large for int64 and ranks past
254 rejected at build time, absurd ranges refused, Size and Shape past int32 checked.

Every literal expectation below (dtypes, shapes, values, which cases fail and how) was
recorded from TensorFlow 2.21 in graph mode (tf.compat.v1 sessions); where graphflow
deliberately differs, the test says so.
"""
import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.shapes import TensorShape


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


