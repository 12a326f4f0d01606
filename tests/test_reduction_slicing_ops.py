"""The ops gradients are made of: Sum, AddN, BroadcastTo, BroadcastGradientArgs
(ops/reduction_ops.py), Slice, Pad, Unpack (ops/slicing_ops.py), Conj and
StopGradient.

Forward values are checked against plain numpy references (integer sums in Python
ints, wrapped; float sums in float64 within a rounding bound) on the CPU and every
GPU kind; static shapes and errors follow TensorFlow 2.21 (recorded from it), with
range errors raised at build time whenever the numbers are known; gradients, first
and second order, are checked against central finite differences in float64 and
complex128, over random shapes and axes.
"""
from __future__ import annotations

import numpy as np
import pytest
from support.gpu_devices import GPU_KINDS, gpu_session_devices
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError, InvalidDTypeError

NUMBER_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                 np.uint8, np.uint16, np.uint32, np.uint64, np.complex64, np.complex128]
ALL_DTYPES = NUMBER_DTYPES + [np.bool_, object]
DEVICES = ["cpu", *GPU_KINDS]


def _ids(dtype) -> str:
    return np.dtype(dtype).name


def sample(shape, dtype, seed=0) -> np.ndarray:
    """Values of every kind the dtype has: negatives, large integers, complex parts."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == object:
        return np.array([b"ab"[: i % 3] for i in range(int(np.prod(shape)))],
                        dtype=object).reshape(shape)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    values = rng.standard_normal(shape) * 10
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape) * 10
    return values.astype(dtype)


def run_on(kind: str, build, *values, op_type: str | None = None):
    """``build(scope, *placeholders)`` on ``kind`` ("cpu" or a GPU kind), run with
    ``values`` fed; on a GPU, ``op_type`` must not have run on the CPU (no silent
    fallback). It may not run at all: the plan's simplification removes identities
    (Sum over no axes, AddN of one input, BroadcastTo to the input's shape)."""
    scope = gf.Scope(gf.Graph())
    if kind != "cpu":
        scope = scope.with_device("/gpu:0")
    inputs = [scope.placeholder(gf.as_dtype(v.dtype), shape=v.shape) for v in values]
    fetches = build(scope, *inputs)
    devices = None if kind == "cpu" else gpu_session_devices(kind)
    with gf.Session(scope.graph, devices=devices) as sess:
        feeds = dict(zip(inputs, values))
        result = sess.run(fetches, feeds)
        if kind != "cpu" and op_type is not None:
            plan = sess._plan(fetches if isinstance(fetches, list) else [fetches], inputs)
            placed = {d.device_type for op, d in plan.placement.items() if op.type == op_type}
            assert placed <= {"gpu"}, f"{op_type} ran on {placed}"
    return result


def assert_same(got, expected):
    """Same dtype, shape and values (NaN-free inputs: exact equality)."""
    got = np.asarray(got)
    expected = np.asarray(expected, dtype=object if isinstance(expected, bytes) else None)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if got.dtype == object:
        assert got.tolist() == expected.tolist()
    else:
        np.testing.assert_array_equal(got, expected)


def wrapped(total, dtype) -> np.ndarray:
    """Python ints wrapped to ``dtype``, two's complement, as TensorFlow's integer ops."""
    info = np.iinfo(dtype)
    span = 1 << info.bits
    signed = np.frompyfunc(lambda t: t % span - span if t % span > info.max else t % span, 1, 1)
    return np.asarray(signed(np.asarray(total, dtype=object)), dtype=object).astype(dtype)


# -- Sum ------------------------------------------------------------------------------------
def ref_sum(x: np.ndarray, axes, keep_dims: bool) -> np.ndarray:
    """Integers exactly in Python ints, then wrapped; floats in float64/complex128."""
    axes = tuple(sorted({a % x.ndim for a in np.ravel(axes).tolist()})) if x.ndim else ()
    if x.dtype.kind in "iu":
        return wrapped(np.sum(x.astype(object), axis=axes, keepdims=keep_dims), x.dtype)
    wide = np.complex128 if x.dtype.kind == "c" else np.float64
    return np.sum(x.astype(wide), axis=axes, keepdims=keep_dims)


def assert_sum_close(got, x, axes, keep_dims):
    expected = ref_sum(x, axes, keep_dims)
    assert got.dtype == x.dtype and got.shape == expected.shape
    if x.dtype.kind in "iu":
        np.testing.assert_array_equal(got, expected)
        return
    # a rounding bound: a few units of the dtype's epsilon times the sum of magnitudes
    magnitude = ref_sum(np.abs(x).astype(np.float64), axes, keep_dims)
    eps = np.finfo(x.dtype).eps
    assert np.all(np.abs(got.astype(expected.dtype) - expected) <= 4 * eps * magnitude + 1e-300)


SUM_CASES = [((3, 4), [1]), ((2, 3, 5), [0, -1]), ((0, 3), [0]), ((0, 3), [-1]), ((), []),
             ((4, 1, 2), -2), ((5, 6), []), ((2, 3, 4), [-3, 1, 2]), ((7,), 0)]


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("dtype", NUMBER_DTYPES, ids=_ids)
@pytest.mark.parametrize("shape, axes", SUM_CASES, ids=str)
@pytest.mark.parametrize("keep_dims", [False, True], ids=["drop", "keep"])
def test_sum_values_dtypes_and_shapes(kind, dtype, shape, axes, keep_dims):
    x = sample(shape, dtype)
    got = run_on(kind, lambda s, p: s.reduce_sum(p, axes, keep_dims=keep_dims), x,
                 op_type="Sum")
    assert_sum_close(got, x, axes, keep_dims)


@pytest.mark.parametrize("kind", DEVICES)
def test_sum_integers_wrap_and_float16_accumulates_in_float32(kind):
    got = run_on(kind, lambda s, a, b, h: [s.reduce_sum(a), s.reduce_sum(b), s.reduce_sum(h)],
                 np.array([100, 100, 100], np.int8), np.array([200, 100], np.uint8),
                 np.array([2048, 1, 1, 1, 1], np.float16), op_type="Sum")
    assert got[0] == np.int8(44) and got[1] == np.uint8(44)
    assert got[2] == np.float16(2052)  # a float16 running sum would stay at 2048


def test_reduce_sum_without_axis_sums_every_dim(scope, run):
    x = sample((2, 3, 4), np.float64)
    known = scope.reduce_sum(x)
    assert known.shape == gf.TensorShape([])
    assert known.op.inputs[1].op.type == "Const"  # range(rank) when the rank is known
    p = scope.placeholder(gf.float64)
    unknown = scope.reduce_sum(p)
    assert unknown.shape == gf.TensorShape([])  # Range(0, Rank(p), 1): a scalar at any rank
    kept = scope.reduce_sum(p, keepdims=True)
    assert kept.shape.rank is None
    for value in (x, np.float64(2.5), np.zeros((0, 2))):
        total, ones = run([unknown, kept], {p: value})
        np.testing.assert_allclose(total, np.sum(value))
        assert ones.shape == (1,) * np.ndim(value)
    np.testing.assert_allclose(run(known), np.sum(x))
    assert scope.sum(x, 0).shape == gf.TensorShape([3, 4])  # the op's own name works too


def test_reduce_sum_names_and_arguments(scope):
    x = scope.placeholder(gf.float32, shape=[2, 3])
    total = scope.with_name("total").reduce_sum(x)
    assert total.op.name == "total" and total.op.type == "Sum"
    assert scope.reduce_sum(x, [], keep_dims=False).shape == gf.TensorShape([2, 3])
    assert scope.reduce_sum(x, scope.constant(np.int64(1))).op.get_attr("Tidx") == gf.int64
    assert gf.ops.Sum.create(scope, x, [0], True).output().shape == gf.TensorShape([1, 3])
    with pytest.raises(InvalidArgumentError, match="keep_dims or keepdims, not both"):
        scope.reduce_sum(x, 0, keep_dims=True, keepdims=False)


def test_sum_static_shapes_as_tensorflow(scope):
    x = scope.placeholder(gf.float32, shape=[2, None, 4])
    axis = scope.placeholder(gf.int32, shape=[1])
    assert scope.reduce_sum(x, axis, keep_dims=True).shape.as_list() == [None, None, None]
    assert scope.reduce_sum(x, axis).shape.rank is None
    assert scope.reduce_sum(x, [1, -1]).shape.as_list() == [2]
    assert scope.reduce_sum(x, [1, -1], keep_dims=True).shape.as_list() == [2, 1, 1]
    assert scope.reduce_sum(scope.placeholder(gf.float32), [0]).shape.rank is None


@pytest.mark.parametrize("axes, message", [
    ([2], r"Invalid reduction dimension 2 for input with 2 dimensions\."),  # TF's shape fn
    (-3, r"Invalid reduction dimension -3 for input with 2 dimensions\."),
    ([1, -1], "Axes contains duplicate dimension: 1"),
    ([[0]], "axis must be a scalar or a vector, got shape"),
])
def test_sum_axis_errors_at_build_time(scope, axes, message):
    x = scope.placeholder(gf.float32, shape=[2, 3])
    with pytest.raises(InvalidArgumentError, match=message) as info:
        scope.reduce_sum(x, axes)
    assert info.value.node_name == "Sum"


@pytest.mark.parametrize("axes, message", [
    ([2], r"Invalid reduction dimension \(2 for input with 2 dimension\(s\)"),  # TF's kernel
    ([0, -2], "Axes contains duplicate dimension: 0"),
])
def test_sum_axis_errors_at_run_time(scope, run, axes, message):
    x = scope.placeholder(gf.float32)
    total = scope.reduce_sum(x, axes, name="total")
    with pytest.raises(InvalidArgumentError, match=message) as info:
        run(total, {x: np.ones((2, 3), np.float32)})
    assert info.value.node_name == "total"


def test_sum_rejects_bool_and_strings(scope):
    for value in (np.array([True]), np.array([b"a"], dtype=object)):
        with pytest.raises(InvalidDTypeError, match="not in list of allowed values"):
            scope.reduce_sum(value, 0)
    with pytest.raises(InvalidDTypeError):
        scope.reduce_sum([1.0], np.array([0.0]))


# -- AddN -------------------------------------------------------------------------------------
def ref_add_n(values: list[np.ndarray]) -> np.ndarray:
    """Left to right, rounding (or wrapping) to the dtype after every addition."""
    dtype = values[0].dtype
    if dtype.kind in "iu":
        return wrapped(sum(v.astype(object) for v in values), dtype)
    total = values[0].copy()
    for v in values[1:]:
        total = (total + v).astype(dtype)
    return total


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("dtype", NUMBER_DTYPES, ids=_ids)
@pytest.mark.parametrize("n, shape", [(1, (3,)), (2, (2, 3)), (4, ()), (3, (0, 2)), (9, (5,))],
                         ids=str)
def test_add_n_values(kind, dtype, n, shape):
    values = [sample(shape, dtype, seed=i) for i in range(n)]
    got = run_on(kind, lambda s, *ps: s.add_n(list(ps)), *values, op_type="AddN")
    assert_same(got, ref_add_n(values))


@pytest.mark.parametrize("kind", DEVICES)
def test_add_n_adds_left_to_right(kind):
    values = [np.array([1e8], np.float32), np.array([-1e8], np.float32),
              np.array([1.0], np.float32)]
    assert run_on(kind, lambda s, *ps: s.add_n(list(ps)), *values)[0] == 1.0


def test_add_n_shapes_and_errors(scope, run):
    a = scope.placeholder(gf.float32, shape=[None, 3])
    b = scope.placeholder(gf.float32, shape=[2, None])
    c = scope.placeholder(gf.float32)
    assert scope.add_n([a, b]).shape.as_list() == [2, 3]
    assert scope.add_n([c, b]).shape.as_list() == [2, None]
    with pytest.raises(InvalidArgumentError, match=r"inputs\[1\] has shape \[3\]"):
        scope.add_n([np.ones(2), np.ones(3)])
    with pytest.raises(InvalidArgumentError, match="less than minimum 1"):
        scope.add_n([])
    with pytest.raises(InvalidDTypeError):
        scope.add_n([np.array([True])])
    with pytest.raises(InvalidArgumentError, match="Expected list"):
        scope.add_n(a)
    total = scope.add_n([c, c, scope.placeholder(gf.float32, name="other")], name="total")
    with pytest.raises(InvalidArgumentError, match=r"Inputs to operation total of type AddN must "
                       r"have the same size and shape.  Input 0: \[2\] != input 2: \[1\]"):
        run(total, {c: np.ones(2, np.float32), "other:0": np.ones(1, np.float32)})


# -- BroadcastTo ----------------------------------------------------------------------------
BROADCAST_CASES = [((3,), [2, 3]), ((1, 3), [4, 2, 3]), ((), [2, 2]), ((2, 1), [2, 5]),
                   ((1, 3), [0, 3]), ((0, 3), [2, 0, 3]), ((2, 3), [2, 3]), ((), [])]


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids)
@pytest.mark.parametrize("shape, target", BROADCAST_CASES, ids=str)
def test_broadcast_to_values(kind, dtype, shape, target):
    if dtype == object and kind != "cpu":
        pytest.skip("string tensors live on the host")
    x = sample(shape, dtype)
    got = run_on(kind, lambda s, p: s.broadcast_to(p, np.array(target, np.int64)), x,
                 op_type="BroadcastTo")
    assert_same(got, np.broadcast_to(x, target))
    assert got.flags.writeable and not np.shares_memory(got, x)


def test_broadcast_to_static_shapes_as_tensorflow(scope):
    def shape_of(shape, target):
        return scope.broadcast_to(scope.placeholder(gf.float32, shape=shape), target).shape

    unknown = scope.placeholder(gf.int32, shape=[])
    assert shape_of([None, 3], [4, 3]).as_list() == [4, 3]
    assert shape_of([None, 3], scope.pack([unknown, 3])).as_list() == [None, 3]
    assert shape_of([5, 3], scope.pack([unknown, 3])).as_list() == [5, 3]
    assert shape_of([1, 3], scope.pack([unknown, 3])).as_list() == [None, 3]
    assert shape_of(None, [4, 3]).as_list() == [4, 3]
    assert shape_of([3], scope.placeholder(gf.int32, shape=[2])).as_list() == [None, 3]
    assert shape_of([3], scope.placeholder(gf.int32, shape=[None])).rank is None
    assert shape_of([3], [-1, 3]).as_list() == [None, 3]


@pytest.mark.parametrize("shape, target, message", [
    ([3], [2, 4], "Dimensions must be equal, but are 3 and 4"),
    ([0], [1], "Dimensions must be equal, but are 0 and 1"),
    ([2, 3], [3], r"Rank of input \(2\) must be no greater than rank of output shape \(1\)"),
    ([3], [[1, 3]], "shape must be a vector"),
])
def test_broadcast_to_errors_at_build_time(scope, shape, target, message):
    with pytest.raises(InvalidArgumentError, match=message):
        scope.broadcast_to(np.zeros(shape, np.float32), target)


@pytest.mark.parametrize("value, target, message", [
    (np.ones(3), [2, 4], r"Incompatible shapes: \[3\] vs. \[2,4\]"),
    (np.ones(0), [1], r"Unable to broadcast tensor of shape \[0\] to tensor of shape \[1\]"),
    (np.ones(3), [1], r"Unable to broadcast tensor of shape \[3\] to tensor of shape \[1\]"),
    (np.ones((2, 3)), [3], r"Rank of input \(2\) must be no greater than rank of output"),
    (np.ones(3), [-1, 3], "Dimension -1 must be >= 0"),
])
def test_broadcast_to_errors_at_run_time(scope, run, value, target, message):
    x = scope.placeholder(gf.float64)
    t = scope.placeholder(gf.int32)
    out = scope.broadcast_to(x, t, name="bcast")
    with pytest.raises(InvalidArgumentError, match=message) as info:
        run(out, {x: value, t: np.array(target, np.int32)})
    assert info.value.node_name == "bcast"


# -- BroadcastGradientArgs ------------------------------------------------------------------
# recorded from tf.raw_ops.BroadcastGradientArgs (TensorFlow 2.21)
BGA_CASES = [([2, 3, 5], [3, 1], [], [0, 2]), ([2, 3], [2, 3], [], []),
             ([1, 1], [1], [0, 1], [0, 1]), ([], [2, 1], [0, 1], [1]),
             ([0, 3], [1, 3], [], [0]), ([0, 1], [1, 3], [1], [0]),
             ([1, 3, 1], [1, 1, 1], [0, 2], [0, 1, 2]), ([1, 1, 4], [2, 3, 1], [0, 1], [2]),
             ([1], [1], [], []), ([1, 1, 1], [1, 1, 1], [], []), ([2, 1], [2, 1], [], [])]


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=_ids)
@pytest.mark.parametrize("s0, s1, r0, r1", BGA_CASES, ids=str)
def test_broadcast_gradient_args_as_tensorflow(kind, dtype, s0, s1, r0, r1):
    got = run_on(kind, lambda s, a, b: s.broadcast_gradient_args(a, b),
                 np.array(s0, dtype), np.array(s1, dtype), op_type="BroadcastGradientArgs")
    assert_same(got[0], np.array(r0, dtype))
    assert_same(got[1], np.array(r1, dtype))


@given(st.lists(st.integers(0, 4), min_size=0, max_size=4),
       st.lists(st.booleans(), min_size=4, max_size=4),
       st.lists(st.booleans(), min_size=4, max_size=4), st.integers(0, 4), st.integers(0, 4))
def test_broadcast_gradient_args_reduce_back_to_each_operand(out, ones0, ones1, drop0, drop1):
    """Summing a tensor of the broadcast shape over r_i (keeping dims) and dropping the
    leading ones gives operand i's shape; every other dim is the operand's own. Equal
    shapes reduce nothing (TensorFlow's BCast)."""
    s0 = [1 if o else d for d, o in zip(out, ones0)][min(drop0, len(out)):]
    s1 = [1 if o else d for d, o in zip(out, ones1)][min(drop1, len(out)):]
    scope = gf.Scope(gf.Graph())
    r0, r1 = scope.broadcast_gradient_args(np.array(s0, np.int32), np.array(s1, np.int32))
    with gf.Session(scope.graph) as sess:
        got = sess.run([r0, r1])
    full = np.broadcast_shapes(tuple(s0), tuple(s1))
    for shape, r in zip((s0, s1), got):
        padded = [1] * (len(full) - len(shape)) + shape
        assert r.tolist() == ([] if s0 == s1 else [i for i, d in enumerate(padded) if d == 1])
        reduced = np.sum(np.ones(full), axis=tuple(r.tolist()), keepdims=True)
        assert reduced.shape == tuple(padded)


def test_broadcast_gradient_args_shapes_and_errors(scope, run):
    a, b = scope.placeholder(gf.int32, shape=[3]), scope.placeholder(gf.int32, shape=[2])
    r0, r1 = scope.broadcast_gradient_args(a, b)
    assert r0.shape.as_list() == [None] and r1.shape.as_list() == [None]
    c0, c1 = scope.broadcast_gradient_args([2, 3, 5], [3, 1])
    assert c0.shape.as_list() == [0] and c1.shape.as_list() == [2]  # constants: known
    with pytest.raises(InvalidArgumentError, match="s0 must be a vector"):
        scope.broadcast_gradient_args(np.ones((3, 1), np.int32), b)
    with pytest.raises(InvalidArgumentError, match=r"Incompatible shapes: \[2,3\] vs. \[4\]"):
        scope.broadcast_gradient_args([2, 3], [4])
    with pytest.raises(InvalidDTypeError):
        scope.broadcast_gradient_args([2.0], [1.0])
    with pytest.raises(InvalidArgumentError, match=r"Incompatible shapes: \[0,2,3\] vs. \[1,4\]"):
        run(r0, {a: [0, 2, 3], b: [1, 4]})


# -- Slice ----------------------------------------------------------------------------------
def ref_slice(x, begin, size):
    return x[tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))]


SLICE_CASES = [((3, 4, 5), [1, 0, 2], [-1, 2, 3]), ((3, 4, 5), [0, 0, 0], [3, 4, 5]),
               ((3, 4, 5), [3, 4, 5], [0, 0, 0]), ((3, 4, 5), [1, 1, 1], [-1, -1, -1]),
               ((0, 2), [0, 1], [0, 1]), ((0, 2), [0, 0], [-1, -1]), ((), [], []),
               ((6,), [5], [1])]


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids)
@pytest.mark.parametrize("shape, begin, size", SLICE_CASES, ids=str)
@pytest.mark.parametrize("index", [np.int32, np.int64], ids=_ids)
def test_slice_values(kind, dtype, shape, begin, size, index):
    if dtype == object and kind != "cpu":
        pytest.skip("string tensors live on the host")
    x = sample(shape, dtype)
    got = run_on(kind, lambda s, p: s.slice(p, np.array(begin, index), np.array(size, index)),
                 x, op_type="Slice")
    assert_same(got, ref_slice(x, begin, size))


def test_slice_static_shapes_as_tensorflow(scope):
    x = np.zeros((3, 4), np.int32)
    unknown2 = scope.placeholder(gf.int32, shape=[2])
    assert scope.slice(x, unknown2, [-1, 2]).shape.as_list() == [None, 2]
    assert scope.slice(x, unknown2, [3, 2]).shape.as_list() == [3, 2]
    assert scope.slice(x, [1, 1], unknown2).shape.as_list() == [None, None]
    n = scope.placeholder(gf.int32, shape=[])
    assert scope.slice(x, [0, 0], scope.pack([n, 2])).shape.as_list() == [None, 2]
    partial = scope.placeholder(gf.int32, shape=[None, 4])
    assert scope.slice(partial, [1, 1], [-1, 3]).shape.as_list() == [None, 3]
    anything = scope.placeholder(gf.float32)
    assert scope.slice(anything, unknown2, scope.placeholder(gf.int32)).shape.as_list() == \
        [None, None]
    assert scope.slice(anything, [0, 0, 0], [1, -1, 2]).shape.as_list() == [1, None, 2]
    begin64 = scope.constant(np.array([1, 0], np.int64))
    assert scope.slice(x, begin64, [1, 1]).op.get_attr("Index") == gf.int64
    assert scope.slice(1.0, [], []).shape == gf.TensorShape([])


@pytest.mark.parametrize("shape, begin, size, message", [
    ((3, 4), [4, 0], [0, 1], r"Expected begin\[0\] in \[0, 3\], but got 4"),
    ((3, 4), [-1, 0], [1, 1], r"Expected begin\[0\] in \[0, 3\], but got -1"),
    ((3, 4), [1, 0], [3, 1], r"Expected size\[0\] in \[0, 2\], but got 3"),
    ((3, 4), [1, 0], [-2, 1], r"Expected size\[0\] in \[0, 2\], but got -2"),
    ((0, 2), [1, 0], [0, 1], (r"Expected begin\[0\] == 0 \(got 1\) and size\[0\] == 0 \(got 0\) "
                              r"when input.dim_size\(0\) == 0")),
    ((3, 4), [1], [1], ("Expected begin and size arguments to be 1-D tensors of size 2, but got "
                        r"shapes \[1\] and \[1\] instead")),
    ((3, 4), [1, 0], [1], "Expected begin and size arguments to be 1-D tensors of size 2"),
])
def test_slice_errors_at_build_time_and_at_run_time(scope, run, shape, begin, size, message):
    with pytest.raises(InvalidArgumentError, match=message):
        scope.slice(np.zeros(shape, np.float32), begin, size)
    x, b, n = (scope.placeholder(gf.float32), scope.placeholder(gf.int32),
               scope.placeholder(gf.int32))
    out = scope.slice(x, b, n, name="cut")
    with pytest.raises(InvalidArgumentError, match=message) as info:
        run(out, {x: np.zeros(shape, np.float32), b: begin, n: size})
    assert info.value.node_name == "cut"


def test_slice_rank_errors(scope):
    with pytest.raises(InvalidArgumentError, match="begin must be a vector"):
        scope.slice(np.zeros((3, 4)), [[1, 1]], [[1, 1]])
    with pytest.raises(InvalidArgumentError, match=r"Expected size\[1\] >= -1, but got -3"):
        scope.slice(scope.placeholder(gf.float32), [0, 0], [1, -3])


# -- Pad --------------------------------------------------------------------------------------
PAD_CASES = [((2, 3), [[1, 0], [0, 2]]), ((3, 4, 5), [[1, 2], [0, 0], [3, 1]]),
             ((0, 2), [[1, 1], [0, 0]]), ((), np.zeros((0, 2), np.int64)), ((4,), [[0, 0]])]


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids)
@pytest.mark.parametrize("shape, paddings", PAD_CASES, ids=str)
def test_pad_values(kind, dtype, shape, paddings):
    if dtype == object and kind != "cpu":
        pytest.skip("string tensors live on the host")
    x = sample(shape, dtype)
    zero = b"" if dtype == object else np.zeros((), dtype)[()]
    got = run_on(kind, lambda s, p: s.pad(p, np.array(paddings, np.int64)), x, op_type="Pad")
    expected = np.pad(x, np.array(paddings, np.int64).reshape(-1, 2), constant_values=zero) \
        if x.ndim else x
    assert_same(got, expected.astype(x.dtype))


def test_pad_static_shapes_and_errors(scope, run):
    known = [[1, 1], [2, 2]]
    assert scope.pad(scope.placeholder(gf.float32, shape=[None, 3]), known).shape.as_list() == \
        [None, 7]
    assert scope.pad(scope.placeholder(gf.float32), known).shape.as_list() == [None, None]
    some = scope.placeholder(gf.int32, shape=[3, 2])
    assert scope.pad(scope.placeholder(gf.float32), some).shape.as_list() == [None] * 3
    assert scope.pad(scope.placeholder(gf.float32), scope.placeholder(gf.int32)).shape.rank \
        is None
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(InvalidArgumentError, match="Paddings must be non-negative: -1 0"):
        scope.pad(x, [[-1, 0], [0, 2]])
    with pytest.raises(InvalidArgumentError, match="first dimension of paddings must be the rank"):
        scope.pad(x, [[1, 0]])
    with pytest.raises(InvalidArgumentError, match="paddings must be a matrix with 2 columns"):
        scope.pad(x, [1, 1])
    p, pads = scope.placeholder(gf.float32), scope.placeholder(gf.int32)
    out = scope.pad(p, pads, name="padded")
    for value, message in ((np.array([[0, -2], [0, 0]]), "Paddings must be non-negative: 0 -2"),
                           (np.array([[1, 0, 1], [0, 0, 0]]), r"2 columns: \[2,3\]"),
                           (np.array([[1, 0]]), r"rank of inputs\[1,2\] \[2,3\]")):
        with pytest.raises(InvalidArgumentError, match=message) as info:
            run(out, {p: x, pads: value})
        assert info.value.node_name == "padded"


# -- Unpack -----------------------------------------------------------------------------------
UNPACK_CASES = [((3, 4), 0), ((3, 4), 1), ((3, 4), -1), ((2, 3, 4), -2), ((0, 3), 0),
                ((3, 0), 0), ((1,), 0)]


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids)
@pytest.mark.parametrize("shape, axis", UNPACK_CASES, ids=str)
def test_unpack_values(kind, dtype, shape, axis):
    if dtype == object and kind != "cpu":
        pytest.skip("string tensors live on the host")
    x = sample(shape, dtype)
    got = run_on(kind, lambda s, p: s.unstack(p, axis=axis), x,
                 op_type="Unpack" if shape[axis] else None)
    expected = [np.take(x, i, axis=axis) for i in range(shape[axis])]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_same(g, e)
        assert g.flags.writeable and not np.shares_memory(g, x)


def test_unpack_num_shapes_and_errors(scope, run):
    x = scope.placeholder(gf.float32, shape=[None, 3])
    outs = scope.unpack(x, axis=1)
    assert len(outs) == 3 and all(o.shape.as_list() == [None] for o in outs)
    assert [o.shape.rank for o in scope.unpack(scope.placeholder(gf.float32), num=2)] == \
        [None, None]
    with pytest.raises(InvalidArgumentError, match=r"Cannot infer argument `num` from shape"):
        scope.unpack(x)
    with pytest.raises(InvalidArgumentError, match=r"Cannot infer argument `num` from shape"):
        scope.unpack(scope.placeholder(gf.float32))
    with pytest.raises(InvalidArgumentError, match=r"Invalid axis: 2; must be in \[-2, 2\)"):
        scope.unpack(x, axis=2)
    with pytest.raises(InvalidArgumentError, match=r"Invalid axis: 0; must be in \[0, 0\)"):
        scope.unpack(1.0)
    with pytest.raises(InvalidArgumentError, match=r"Input shape axis 1 must equal 2"):
        scope.unpack(x, num=2, axis=1)
    with pytest.raises(InvalidArgumentError, match="less than minimum 0"):
        scope.unpack(x, num=-1)
    assert scope.unpack(np.zeros((0, 2))) == []
    p = scope.placeholder(gf.float32)
    two = scope.unpack(p, num=2, name="parts")
    with pytest.raises(InvalidArgumentError, match=r"Input shape axis 0 must equal 2, got shape "
                                                   r"\[3,4\]") as info:
        run(two, {p: np.zeros((3, 4), np.float32)})
    assert info.value.node_name == "parts"


# -- Conj, StopGradient -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("dtype", NUMBER_DTYPES, ids=_ids)
def test_conj_conjugates_complex_and_passes_reals_through(kind, dtype):
    x = sample((2, 3), dtype)
    got = run_on(kind, lambda s, p: s.conj(p), x, op_type="Conj")
    assert_same(got, np.conj(x) if x.dtype.kind == "c" else x)


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids)
def test_stop_gradient_forwards_its_input(kind, dtype):
    if dtype == object and kind != "cpu":
        pytest.skip("string tensors live on the host")
    x = sample((2, 3), dtype)
    assert_same(run_on(kind, lambda s, p: s.stop_gradient(p), x, op_type="StopGradient"), x)


def test_stop_gradient_blocks_gradients(scope, run):
    x = scope.placeholder(gf.float64, shape=[3])
    assert gf.gradients(scope.reduce_sum(scope.stop_gradient(x)), [x]) == [None]
    y = scope.reduce_sum(scope.mul(scope.stop_gradient(x), x))  # d/dx = stop(x), not 2x
    (dx,) = gf.gradients(y, [x])
    value = np.array([1.0, -2.0, 3.0])
    np.testing.assert_array_equal(run(dx, {x: value}), value)
    assert gf.op_def("StopGradient").differentiable is False
    assert gf.op_def("BroadcastGradientArgs").differentiable is False


# -- gradients ------------------------------------------------------------------------------
RNG = np.random.default_rng(11)


def values(shape, dtype=np.float64):
    a = RNG.uniform(-2, 2, size=shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.uniform(-2, 2, size=shape)
    return a.astype(dtype)


def check(y, xs, vals, tol=1e-6):
    for r in gf.gradient_check(y, xs, vals):
        assert r.theoretical.shape == r.numerical.shape
        assert r.max_error < tol, (r.x.name, r.theoretical, r.numerical)


def placeholder(scope, dtype, shape, static: bool):
    """A placeholder of ``shape`` or, for ``static=False``, of unknown dims and rank."""
    return scope.placeholder(gf.as_dtype(dtype), shape=shape if static else None)


#: (name, input shapes, build(scope, *inputs)) of each op's gradient case
GRADIENT_CASES = [
    ("sum_axes", [(2, 3, 4)], lambda s, x: s.reduce_sum(x, [0, -1])),
    ("sum_all", [(2, 3)], lambda s, x: s.reduce_sum(x)),
    ("sum_keep", [(2, 3, 4)], lambda s, x: s.reduce_sum(x, 1, keep_dims=True)),
    ("sum_none", [(2, 3)], lambda s, x: s.reduce_sum(x, [])),
    ("sum_scalar", [()], lambda s, x: s.reduce_sum(x)),
    ("add_n", [(2, 3), (2, 3)], lambda s, x, y: s.add_n([x, y, x])),
    ("broadcast_to", [(1, 3)], lambda s, x: s.broadcast_to(x, [4, 2, 3])),
    ("broadcast_to_same", [(2, 3)], lambda s, x: s.broadcast_to(x, [2, 3])),
    ("slice", [(3, 4)], lambda s, x: s.slice(x, [1, 0], [-1, 2])),
    ("slice_empty", [(3, 4)], lambda s, x: s.slice(x, [1, 4], [2, 0])),
    ("pad", [(3, 4)], lambda s, x: s.pad(x, [[1, 0], [0, 2]])),
    ("unpack_all", [(3, 4)], lambda s, x: s.pack(s.unpack(x, num=4, axis=1)[::-1], axis=1)),
    ("unpack_one", [(3, 4)], lambda s, x: s.unpack(x, num=3, axis=-2)[1]),
    ("conj", [(2, 3)], lambda s, x: s.conj(x)),
]


@pytest.mark.parametrize("name, shapes, build", GRADIENT_CASES, ids=[c[0] for c in GRADIENT_CASES])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=_ids)
@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
def test_gradients_match_finite_differences(scope, name, shapes, build, dtype, static):
    xs = [placeholder(scope, dtype, shape, static) for shape in shapes]
    check(build(scope, *xs), xs, [values(shape, dtype) for shape in shapes])


@pytest.mark.parametrize("name, shapes, build", GRADIENT_CASES, ids=[c[0] for c in GRADIENT_CASES])
@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
def test_second_order_gradients(scope, name, shapes, build, static):
    """z = d(sum(f(x) * v))/dx times x*x: its gradient w.r.t. x and v goes through the
    gradient rules' own gradients."""
    xs = [placeholder(scope, np.float64, shape, static) for shape in shapes]
    y = build(scope, *xs)
    v = scope.placeholder(gf.float64, shape=y.shape if static else None)
    grads = gf.gradients(y, xs, grad_ys=v)
    z = scope.add_n([scope.mul(g, scope.mul(x, x)) for g, x in zip(grads, xs)])
    x_values = [values(shape) for shape in shapes]
    with gf.Session(scope.graph) as sess:
        y_shape = sess.run(y, dict(zip(xs, x_values))).shape
    check(z, [*xs, v], [*x_values, values(y_shape)])


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_gradients_on_gpu_kinds_equal_the_cpu(kind):
    scope = gf.Scope(gf.Graph())
    gpu = scope.with_device("/gpu:0")
    x = gpu.placeholder(gf.float64, shape=[None, 3])
    w = gpu.placeholder(gf.float64, shape=[2, 1, 3])
    y = gpu.reduce_sum(gpu.mul(gpu.broadcast_to(x, gpu.shape(w)), w), [0, -1])
    parts = gpu.unpack(gpu.pad(gpu.slice(y, [0], [-1]), [[1, 1]]), num=3)
    loss = gpu.add_n([gpu.reduce_sum(gpu.conj(p)) for p in parts])
    grads = gf.gradients(loss, [x, w])
    feeds = {x: values([1, 3]), w: values([2, 1, 3])}
    with gf.Session(scope.graph) as cpu:
        expected = cpu.run(grads, feeds)
    with gf.Session(scope.graph, devices=gpu_session_devices(kind)) as sess:
        got = sess.run(grads, feeds)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-12)


# -- gradients over random shapes and axes -------------------------------------------------------
shapes = st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple)


@settings(max_examples=30, deadline=None)
@given(shapes, st.data(), st.booleans(), st.booleans())
def test_sum_gradient_over_random_axes(shape, data, keep_dims, static):
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(0, max(rank - 1, 0)), unique=True, max_size=rank)
                     if rank else st.just([]))
    axes = [a - rank if data.draw(st.booleans()) else a for a in axes]
    scope = gf.Scope(gf.Graph())
    x = placeholder(scope, np.float64, shape, static)
    value = values(shape)
    y = scope.reduce_sum(x, axes, keep_dims=keep_dims)
    with gf.Session(scope.graph) as sess:
        assert_sum_close(sess.run(y, {x: value}), value, axes, keep_dims)
    check(y, [x], [value])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple), st.data(),
       st.booleans())
def test_slice_and_pad_gradients_over_random_bounds(shape, data, static):
    begin = [data.draw(st.integers(0, d)) for d in shape]
    size = [data.draw(st.sampled_from([-1, d - b]) | st.integers(0, d - b))
            for d, b in zip(shape, begin)]
    paddings = [[data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))] for _ in shape]
    scope = gf.Scope(gf.Graph())
    x = placeholder(scope, np.float64, shape, static)
    value = values(shape)
    cut = scope.slice(x, begin, size)
    padded = scope.pad(x, paddings)
    with gf.Session(scope.graph) as sess:
        got_cut, got_padded = sess.run([cut, padded], {x: value})
    np.testing.assert_array_equal(got_cut, ref_slice(value, begin, size))
    np.testing.assert_array_equal(got_padded, np.pad(value, paddings))
    check(cut, [x], [value])
    check(padded, [x], [value])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple), st.data(),
       st.booleans())
def test_broadcast_to_gradient_over_random_shapes(target, data, static):
    keep = data.draw(st.integers(0, len(target)))
    shape = tuple(1 if data.draw(st.booleans()) else d for d in target[len(target) - keep:])
    scope = gf.Scope(gf.Graph())
    x = placeholder(scope, np.float64, shape, static)
    value = values(shape)
    if static:
        y, feeds = scope.broadcast_to(x, list(target)), {}
    else:
        dims = scope.placeholder(gf.int32, shape=[None])
        y, feeds = scope.broadcast_to(x, dims), {dims: np.array(target, np.int32)}
    with gf.Session(scope.graph) as sess:
        np.testing.assert_array_equal(sess.run(y, {x: value, **feeds}),
                                      np.broadcast_to(value, target))
    for r in gf.gradient_check(y, [x], [value], feed_dict=feeds):
        assert r.max_error < 1e-6


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple), st.data())
def test_unpack_gradient_over_random_axes(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    pick = data.draw(st.integers(0, shape[axis] - 1))
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.complex128, shape=shape)
    parts = scope.unpack(x, axis=axis)
    check(scope.add_n([parts[pick], parts[pick], parts[-1]]), [x], [values(shape, np.complex128)])
