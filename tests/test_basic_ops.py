"""The basic ops: shape inference and values against numpy."""
import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError

BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
    "minimum": np.minimum, "equal": np.equal, "not_equal": np.not_equal, "less": np.less,
    "greater": np.greater,
}
REAL_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
               np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((4, 1), (1, 5)), ((), (2,)), ((0, 2), (2,))])
def test_binary_ops_broadcast_like_numpy(scope, run, name, dtype, shapes):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 20, size=shapes[0]).astype(dtype)
    y = rng.integers(1, 20, size=shapes[1]).astype(dtype)
    out = getattr(scope, name)(x, y)
    expected = BINARY[name](x, y)
    assert out.shape == gf.TensorShape(expected.shape)
    got = run(out)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_real_div_and_neg(scope, run):
    x = np.array([1.0, -2.0, 0.0], np.float32)
    y = np.array([2.0, 0.0, 0.0], np.float32)
    got = run(scope.real_div(x, y))
    np.testing.assert_array_equal(got, [0.5, -np.inf, np.nan])
    np.testing.assert_array_equal(run(scope.neg(x)), -x)
    with pytest.raises(gf.errors.InvalidDTypeError):
        scope.neg(np.array([1], np.uint8))
    with pytest.raises(gf.errors.InvalidDTypeError):
        scope.real_div(np.array([1]), np.array([2]))


def test_logic_and_select(scope, run):
    a = np.array([True, False, True])
    b = np.array([[True], [False]])
    np.testing.assert_array_equal(run(scope.logical_and(a, b)), a & b)
    np.testing.assert_array_equal(run(scope.logical_or(a, b)), a | b)
    np.testing.assert_array_equal(run(scope.logical_not(a)), ~a)
    t = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = scope.select_v2(a, t, 0.0)
    assert out.shape == gf.TensorShape([2, 3])
    np.testing.assert_array_equal(run(out), np.where(a, t, 0))
    with pytest.raises(gf.errors.InvalidDTypeError):
        scope.logical_and(np.array([1]), a)


def test_string_ops(scope, run):
    a = scope.constant(["ab", "c"])
    assert run(scope.add(a, "!")).tolist() == [b"ab!", b"c!"]
    assert run(scope.equal(a, "c")).tolist() == [False, True]


@pytest.mark.parametrize("a, b", [([2], [3]), ([2, 3], [2]), ([4, 2, 3], [3, 1])])
def test_impossible_broadcast_fails_at_build_time(scope, a, b):
    x = scope.placeholder(gf.float32, shape=a)
    y = scope.placeholder(gf.float32, shape=b)
    with pytest.raises(InvalidArgumentError, match="Dimensions must be equal") as info:
        scope.add(x, y)
    assert info.value.node_name == "Add" and "input shapes" in str(info.value)


def test_select_shapes_that_do_not_broadcast(scope, run):
    """A condition of unknown rank does not hide t and e's conflict at build time; at
    run time the error is SelectV2's own."""
    cond = scope.placeholder(gf.bool)
    with pytest.raises(InvalidArgumentError, match="but are 2 and 3") as info:
        scope.select_v2(cond, np.zeros(2, np.float32), np.zeros(3, np.float32))
    assert info.value.node_name == "SelectV2"
    t = scope.placeholder(gf.float32)
    out = scope.select_v2(cond, t, np.zeros(3, np.float32))
    with pytest.raises(InvalidArgumentError, match=r"condition \[2\], then \[2\], and else "
                                                   r"\[3\] must be broadcastable \[node SelectV2_1\]"):
        run(out, {cond: np.ones(2, bool), t: np.ones(2, np.float32)})


def test_partial_and_unknown_shapes_broadcast(scope):
    x = scope.placeholder(gf.float32, shape=[None, 3])
    assert scope.add(x, np.ones((2, 1, 1), np.float32)).shape == gf.TensorShape([2, None, 3])
    u = scope.placeholder(gf.float32)
    assert scope.mul(x, u).shape.rank is None


def test_shape_size_rank_constant_fold(scope, run):
    x = scope.placeholder(gf.float32, shape=[2, None])
    assert scope.shape(x).shape == gf.TensorShape([2])
    assert scope.rank(x).shape == gf.TensorShape([])
    feed = {x: np.zeros((2, 5), np.float32)}
    assert run(scope.shape(x), feed).tolist() == [2, 5]
    assert run(scope.size(x), feed) == 10 and run(scope.rank(x), feed) == 2
    assert run(scope.shape(x, gf.int64), feed).dtype == np.int64


@pytest.mark.parametrize("target, static", [
    ([3, 2], [3, 2]), ([-1], [6]), ([2, -1], [2, 3]), ([-1, 1, 3], [2, 1, 3]),
])
def test_reshape(scope, run, target, static):
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = scope.reshape(x, target)
    assert out.shape == gf.TensorShape(static)
    np.testing.assert_array_equal(run(out), x.reshape(target))


def test_reshape_errors(scope, run):
    with pytest.raises(InvalidArgumentError, match="Cannot reshape a tensor with 6 elements"):
        scope.reshape(np.arange(6), [4])
    with pytest.raises(InvalidArgumentError, match="Only one input size may be -1"):
        scope.reshape(np.arange(6), [-1, -1])
    p = scope.placeholder(gf.int32, shape=[None])
    bad = scope.reshape(np.arange(6), p)
    with pytest.raises(InvalidArgumentError, match="Input to reshape is a tensor with 6 values"):
        run(bad, {p: np.array([4], np.int32)})


def test_reshape_from_packed_shape(scope):
    n = scope.placeholder(gf.int32, shape=[])
    out = scope.reshape(scope.placeholder(gf.float32), scope.pack([n, 4]))
    assert out.shape == gf.TensorShape([None, 4])


@pytest.mark.parametrize("start, limit, delta", [(0, 5, 1), (1, 10, 3), (5, 1, -2), (0.0, 1.0, 0.3),
                                                 (3, 3, 1)])
def test_range(scope, run, start, limit, delta):
    out = scope.range(start, limit, delta)
    expected = np.arange(start, limit, delta).astype(out.dtype.as_numpy_dtype)
    assert out.shape == gf.TensorShape([len(expected)])
    np.testing.assert_allclose(run(out), expected)


def test_range_errors(scope):
    with pytest.raises(InvalidArgumentError, match="Requires delta != 0"):
        scope.range(0, 5, 0)
    with pytest.raises(InvalidArgumentError, match="Requires start <= limit"):
        scope.range(5, 1, 1)


@pytest.mark.parametrize("src, dst", [(np.float32, np.int32), (np.int64, np.float16),
                                      (np.int32, np.bool_), (np.complex64, np.float32),
                                      (np.bool_, np.uint8), (np.float64, np.complex128)])
def test_cast(scope, run, src, dst):
    x = np.array([0, 1.7, -2.2, 3], dtype=src) if src not in (np.bool_,) else np.array([True, False])
    got = run(scope.cast(x, gf.as_dtype(dst)))
    expected = (np.real(x) if np.iscomplexobj(x) and not np.issubdtype(dst, np.complexfloating)
                else x).astype(dst)
    assert got.dtype == dst
    np.testing.assert_array_equal(got, expected)


def test_fill_zeros_ones(scope, run):
    out = scope.fill([2, 3], 7.5)
    assert out.shape == gf.TensorShape([2, 3]) and out.dtype is gf.float32
    np.testing.assert_array_equal(run(out), np.full((2, 3), 7.5, np.float32))
    x = np.arange(4, dtype=np.int16)
    assert run(scope.zeros_like(x)).tolist() == [0] * 4
    assert run(scope.ones_like(x)).dtype == np.int16
    assert run(scope.zeros_like(scope.constant(["a"]))).tolist() == [b""]
    with pytest.raises(InvalidArgumentError, match="value must be a scalar"):
        scope.fill([2], [1, 2])


def test_expand_dims_squeeze(scope, run):
    x = np.zeros((2, 1, 3), np.float32)
    assert scope.expand_dims(x, 0).shape == gf.TensorShape([1, 2, 1, 3])
    assert scope.expand_dims(x, -1).shape == gf.TensorShape([2, 1, 3, 1])
    assert run(scope.expand_dims(x, 1)).shape == (2, 1, 1, 3)
    assert scope.squeeze(x).shape == gf.TensorShape([2, 3])
    assert scope.squeeze(x, [1]).shape == gf.TensorShape([2, 3])
    with pytest.raises(InvalidArgumentError, match="Can not squeeze dim\\[2\\]"):
        scope.squeeze(x, [2])
    with pytest.raises(InvalidArgumentError, match="expand dim index 5"):
        scope.expand_dims(x, 5)
    p = scope.placeholder(gf.float32, shape=[None, 1])
    assert scope.squeeze(p, [1]).shape == gf.TensorShape([None])
    assert scope.squeeze(p).shape.rank is None


def test_concat_and_pack(scope, run):
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.arange(4, dtype=np.int32).reshape(2, 2)
    out = scope.concat([a, b], 1)
    assert out.shape == gf.TensorShape([2, 5])
    np.testing.assert_array_equal(run(out), np.concatenate([a, b], 1))
    with pytest.raises(InvalidArgumentError, match="Dimension 1 in both shapes must be equal"):
        scope.concat([a, b], 0)
    p = scope.placeholder(gf.int32, shape=[None, 3])
    assert scope.concat([a, p], 0).shape == gf.TensorShape([None, 3])
    packed = scope.pack([a, a, a], axis=1)
    assert packed.shape == gf.TensorShape([2, 3, 3])
    np.testing.assert_array_equal(run(packed), np.stack([a, a, a], 1))
    with pytest.raises(InvalidArgumentError, match="Shapes of all inputs must match"):
        scope.pack([a, b])


def test_identity_and_noop(scope, run):
    x = scope.constant([1, 2])
    assert run(scope.identity(x)).tolist() == [1, 2]
    assert run(scope.no_op()) is None


# -- FloorDiv / FloorMod: Python's // and % on integers ----------------------------------
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("name, python_op", [("floor_div", lambda a, b: a // b),
                                             ("floor_mod", lambda a, b: a % b)])
def test_floor_div_and_mod_are_pythons(scope, run, dtype, name, python_op):
    info = np.iinfo(dtype)
    values = [v for v in (info.min, -9, -7, -1, 0, 1, 6, 7, 9, info.max) if info.min <= v]
    divisors = [d for d in (info.min, -3, -2, -1, 1, 2, 3, info.max) if info.min <= d and d]
    x = np.array(values, dtype).reshape(-1, 1)
    y = np.array(divisors, dtype).reshape(1, -1)
    out = getattr(scope, name)(x, y)
    assert out.shape == gf.TensorShape([len(values), len(divisors)])
    expected = [[python_op(int(a), int(b)) for b in divisors] for a in values]
    if dtype in (np.int8, np.int16, np.int32, np.int64):  # MIN // -1 wraps to MIN, as TF's
        expected = [[e if e <= info.max else info.min for e in row] for row in expected]
    got = run(out)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(object), np.array(expected, dtype=object))


def test_floor_div_and_mod_zero_divisor_and_types(scope, run):
    for name in ("floor_div", "floor_mod"):
        op = getattr(scope, name)
        bad = op(np.array([7, 1], np.int32), np.array([0, 1], np.int32), name=f"{name}_by_zero")
        with pytest.raises(InvalidArgumentError, match=f"Integer division by zero.*{name}_by_zero"):
            run(bad)
        # an empty result divides nothing: no error (as TensorFlow)
        assert run(op(np.zeros([0], np.int64), np.int64(0))).shape == (0,)
        with pytest.raises(gf.errors.InvalidDTypeError):
            op(np.array([1.5], np.float32), np.array([2.0], np.float32))
        with pytest.raises(InvalidArgumentError, match="Dimensions must be equal"):
            op(np.ones([2], np.int32), np.ones([3], np.int32))
    # TF's Python names are aliases
    assert run(scope.floordiv(-7, 2)) == -4 and run(scope.mod(-7, 2)) == 1
    assert run(scope.floormod(7, -2)) == -1
