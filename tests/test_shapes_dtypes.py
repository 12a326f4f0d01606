"""TensorShape and DType: partial shapes, merging, broadcasting, numpy mapping."""
import numpy as np
import pytest

import graphflow as gf
from graphflow.shapes import TensorShape


def test_known_partial_and_unknown_rank():
    s = TensorShape([2, None, 3])
    assert s.rank == 3 and s.dims == [2, None, 3] and s.as_list() == [2, None, 3]
    assert not s.is_fully_defined() and s.num_elements() is None
    assert TensorShape([2, 3]).is_fully_defined() and TensorShape([2, 3]).num_elements() == 6
    u = TensorShape(None)
    assert u.rank is None and u.dims is None and not u.is_fully_defined()
    with pytest.raises(ValueError):
        u.as_list()
    assert str(s) == "[2,?,3]" and str(u) == "<unknown>"


@pytest.mark.parametrize("a, b, merged", [
    ([2, None], [None, 3], [2, 3]),
    (None, [1, 2], [1, 2]),
    ([None], None, [None]),
    ([], [], []),
])
def test_merge_and_compatibility(a, b, merged):
    a, b = TensorShape(a), TensorShape(b)
    assert a.is_compatible_with(b) and b.is_compatible_with(a)
    assert a.merge_with(b) == TensorShape(merged) == b.merge_with(a)


@pytest.mark.parametrize("a, b", [([2], [3]), ([2, None], [2]), ([1, 2], [1, 3])])
def test_incompatible_shapes(a, b):
    assert not TensorShape(a).is_compatible_with(b)
    with pytest.raises(ValueError):
        TensorShape(a).merge_with(b)


@pytest.mark.parametrize("a, b, expected", [
    ([2, 1], [3], [2, 3]),
    ([None, 3], [1], [None, 3]),
    ([None], [4], [4]),
    ([5, 1, 2], [7, 1], [5, 7, 2]),
    (None, [2], None),
    ([], [2, 2], [2, 2]),
])
def test_broadcast(a, b, expected):
    assert TensorShape(a).broadcast_with(b) == TensorShape(expected)
    # numpy agrees wherever every dim is known
    if expected is not None and None not in (a or [None]) + (b or [None]):
        assert list(np.broadcast_shapes(tuple(a), tuple(b))) == expected


def test_broadcast_impossible():
    with pytest.raises(ValueError):
        TensorShape([2, 3]).broadcast_with([4])


def test_concatenate_slice_and_rank_helpers():
    assert TensorShape([1, 2]).concatenate([None]) == TensorShape([1, 2, None])
    assert TensorShape([1, 2]).concatenate(None) == TensorShape(None)
    assert TensorShape([1, 2, 3])[1:] == TensorShape([2, 3])
    assert TensorShape(None)[0:2] == TensorShape([None, None])
    assert TensorShape([None, 2]).with_rank(2) == TensorShape([None, 2])
    with pytest.raises(ValueError):
        TensorShape([1]).with_rank(2)


def test_negative_dim_rejected():
    with pytest.raises(ValueError):
        TensorShape([-3])


@pytest.mark.parametrize("dtype", [gf.float16, gf.float32, gf.float64, gf.int8, gf.int16, gf.int32,
                                   gf.int64, gf.uint8, gf.uint16, gf.uint32, gf.uint64, gf.bool,
                                   gf.complex64, gf.complex128])
def test_dtype_numpy_round_trip(dtype):
    assert gf.as_dtype(dtype.as_numpy_dtype) is dtype
    assert gf.as_dtype(dtype.name) is dtype
    assert gf.as_dtype(dtype) is dtype


def test_string_dtype():
    assert gf.as_dtype(object) is gf.string and gf.as_dtype(np.dtype("S3")) is gf.string
    assert gf.string.is_string and not gf.string.is_numeric
    assert gf.as_dtype(int) is gf.int32 and gf.as_dtype(float) is gf.float32
    with pytest.raises(TypeError):
        gf.as_dtype("float128x")


def test_rank_of_a_partially_known_shape_folds():
    """Rank folds as soon as the rank is known (the dims may not be): the Fill is [2]."""
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[None, 3])
    assert scope.fill(scope.reshape(scope.rank(x), [1]), 1.0).shape.as_list() == [2]
