"""DynamicPartition, DynamicStitch and ParallelDynamicStitch: the seed examples,
TensorFlow's behaviour (values, static shapes, error messages), every dtype, and
property tests against the plain-loop references in support/ref_partition.py."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError, InvalidDTypeError, ResourceExhaustedError
from graphflow.ops import DynamicPartition, DynamicStitch, ParallelDynamicStitch, partition_loops

from support.ref_partition import ref_dynamic_partition, ref_dynamic_stitch

STITCHES = ["dynamic_stitch", "parallel_dynamic_stitch"]
ALL_DTYPES = [gf.float16, gf.float32, gf.float64, gf.int8, gf.int16, gf.int32, gf.int64,
              gf.uint8, gf.uint16, gf.uint32, gf.uint64, gf.bool, gf.complex64, gf.complex128,
              gf.string]


def values_of(dtype, n: int) -> np.ndarray:
    """``n`` distinct-ish values of ``dtype`` (bytes objects for string)."""
    if dtype == gf.string:
        out = np.empty(n, dtype=object)
        out[:] = [f"s{i}".encode() for i in range(n)]
        return out
    if dtype == gf.bool:
        return np.arange(n) % 3 == 0
    if dtype.is_complex:
        return (np.arange(n) + 1j * np.arange(n)[::-1]).astype(dtype.as_numpy_dtype)
    return (np.arange(n) % 100 + 1).astype(dtype.as_numpy_dtype)


def assert_same(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)


# -- the seed examples ---------------------------------------------------------------------
SEED_INDICES = [np.int32(6), np.array([4, 1], np.int32), np.array([[5, 2], [0, 3]], np.int32)]
SEED_DATA = [np.array([61, 62], np.int32), np.array([[41, 42], [11, 12]], np.int32),
             np.array([[[51, 52], [21, 22]], [[1, 2], [31, 32]]], np.int32)]
SEED_MERGED = [[1, 2], [11, 12], [21, 22], [31, 32], [41, 42], [51, 52], [61, 62]]


@pytest.mark.parametrize("builder", STITCHES)
def test_seed_stitch_multi_dim_indices(scope, run, builder):
    merged = getattr(scope, builder)([scope.constant(i) for i in SEED_INDICES],
                                     [scope.constant(d) for d in SEED_DATA])
    assert merged.shape.as_list() == [7, 2]
    assert merged.dtype == gf.int32
    assert_same(run(merged), np.array(SEED_MERGED, np.int32))


def _seed_pipeline(scope, x):
    mask = scope.cast(scope.not_equal(x, np.float32(-1)), gf.int32)
    parts = scope.dynamic_partition(x, mask, num_partitions=2)
    parts[1] = scope.add(parts[1], np.float32(1.0))
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), mask, num_partitions=2)
    return scope.dynamic_stitch(rows, parts)


SEED_X = np.array([0.1, -1.0, 5.2, 4.3, -1.0, 7.4], np.float32)
SEED_Y = np.array([1.1, -1.0, 6.2, 5.3, -1.0, 8.4], np.float32)


def test_seed_partition_stitch_pipeline(scope, run):
    y = _seed_pipeline(scope, scope.constant(SEED_X))
    assert y.dtype == gf.float32
    np.testing.assert_allclose(run(y), SEED_Y, rtol=1e-6)


def test_seed_pipeline_fed(scope, run):
    x = scope.placeholder(gf.float32, shape=[None])
    y = _seed_pipeline(scope, x)
    assert y.shape.as_list() == [None]
    np.testing.assert_allclose(run(y, {x: SEED_X}), SEED_Y, rtol=1e-6)


def test_partition_then_stitch_rows_of_a_matrix(scope, run):
    """2-D data: the partition and stitch kernels themselves run (no fusion applies)."""
    x = scope.placeholder(gf.float32, shape=[None, 2])
    p = scope.placeholder(gf.int32, shape=[None])
    parts = scope.dynamic_partition(x, p, num_partitions=3)
    rows = scope.dynamic_partition(scope.range(0, 4, 1), p,
                                   num_partitions=3)
    y = scope.dynamic_stitch(rows, [parts[0], scope.neg(parts[1]), parts[2]])
    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    got = run(y, {x: data, p: np.array([1, 0, 2, 1], np.int32)})
    assert_same(got, np.array([[-0, -1], [2, 3], [4, 5], [-6, -7]], np.float32))


# -- DynamicStitch ----------------------------------------------------------------------
def stitch(scope, run, indices, data, builder="dynamic_stitch"):
    out = getattr(scope, builder)([np.asarray(i, np.int32) for i in indices],
                                  [np.asarray(d) for d in data])
    return out, run(out)


@pytest.mark.parametrize("builder", STITCHES)
@pytest.mark.parametrize("indices, data, expected", [
    ([[0, 1, 2], [1, 2]], [[1, 2, 3], [20, 30]], [1, 20, 30]),           # across inputs
    ([[0, 1, 1, 0]], [[1, 2, 3, 4]], [4, 3]),                            # within one input
    ([[2], [2, 0], [2]], [[1.0], [2.0, 3.0], [4.0]], [3.0, 0.0, 4.0]),  # three inputs
    ([[2, 2, 2, 0, 2]], [[1, 2, 3, 4, 5]], [4, 0, 5]),
])
def test_stitch_later_wins(scope, run, builder, indices, data, expected):
    out, got = stitch(scope, run, indices, data, builder)
    assert_same(got, np.array(expected, dtype=np.asarray(data[0]).dtype))


def test_stitch_later_wins_at_scale(scope, run):
    """Many duplicates across and within inputs, against the loop reference."""
    rng = np.random.default_rng(1)
    indices = [rng.integers(0, 50, size=s).astype(np.int32) for s in (300, (20, 10), 7)]
    data = [rng.standard_normal(i.shape + (3,)) for i in indices]
    _, got = stitch(scope, run, indices, data)
    assert_same(got, ref_dynamic_stitch(indices, data))


@pytest.mark.parametrize("extra", [(), (1,), (3,)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.complex128, object])
def test_stitch_later_wins_every_width(scope, run, extra, dtype):
    """Rows moved as words of 1, 2, 4 and 8 bytes, and strings: duplicates within one
    input and across inputs resolve to the later (m, i)."""
    rng = np.random.default_rng(7)
    indices = [rng.integers(0, 12, size=s).astype(np.int32) for s in (23, (3, 5), 9)]
    data = [rng.integers(-100, 100, i.shape + extra).astype(dtype) for i in indices]
    if dtype is object:  # strings
        data = [np.vectorize(lambda v: str(v).encode(), otypes=[object])(d) for d in data]
    _, got = stitch(scope, run, indices, data)
    assert_same(got, ref_dynamic_stitch(indices, data))


@pytest.mark.parametrize("k", [1, 2, 17, 300])
@pytest.mark.parametrize("extra", [(), (3,)])
def test_partition_stable_across_threads(scope, run, monkeypatch, k, extra):
    """Counted and placed by ranges of rows on the intra-op pool even when small: each
    partition keeps the order of its rows."""
    monkeypatch.setattr(partition_loops, "PARTITION_PARALLEL_MIN", 0)
    rng = np.random.default_rng(k)
    p = rng.integers(0, k, 1001).astype(np.int32)
    data = rng.standard_normal((1001,) + extra)
    _, got = partition(scope, run, data, p, k)
    for g, e in zip(got, ref_dynamic_partition(data, p, k)):
        assert_same(g, e)


@pytest.mark.parametrize("builder", STITCHES)
def test_stitch_scalar_indices(scope, run, builder):
    _, got = stitch(scope, run, [1, 0], [[1.0, 2.0], [3.0, 4.0]], builder)
    assert_same(got, np.array([[3, 4], [1, 2]], np.float64))
    _, got = stitch(scope, run, [2, 0], [np.float32(5), np.float32(6)], builder)
    assert_same(got, np.array([6, 0, 5], np.float32))


@pytest.mark.parametrize("builder", STITCHES)
def test_stitch_multi_dim_indices(scope, run, builder):
    _, got = stitch(scope, run, [[[0, 2], [1, 3]]], [np.arange(12).reshape(2, 2, 3)], builder)
    assert_same(got, np.array([[0, 1, 2], [6, 7, 8], [3, 4, 5], [9, 10, 11]]))


@pytest.mark.parametrize("builder", STITCHES)
def test_stitch_gaps_are_zero(scope, run, builder):
    _, got = stitch(scope, run, [[0, 3]], [np.array([[1, 2], [3, 4]], np.int32)], builder)
    assert_same(got, np.array([[1, 2], [0, 0], [0, 0], [3, 4]], np.int32))
    _, got = stitch(scope, run, [[4], [1]], [np.float32([1.5]), np.float32([2.5])], builder)
    assert_same(got, np.array([0, 2.5, 0, 0, 1.5], np.float32))


def test_stitch_gaps_string_and_bool(scope, run):
    out = scope.dynamic_stitch([np.array([3], np.int32)], [scope.constant(["z"])])
    assert out.dtype == gf.string
    assert run(out).tolist() == [b"", b"", b"", b"z"]
    _, got = stitch(scope, run, [[2]], [[True]])
    assert_same(got, np.array([False, False, True]))


@pytest.mark.parametrize("builder", STITCHES)
def test_stitch_empty_inputs(scope, run, builder):
    out, got = stitch(scope, run, [np.zeros([0], np.int32)], [np.zeros([0, 2], np.float32)],
                      builder)
    assert out.shape.as_list() == [0, 2]
    assert_same(got, np.zeros([0, 2], np.float32))
    _, got = stitch(scope, run, [np.zeros([0], np.int32), [1, 0]],
                    [np.zeros([0, 2], np.float32), np.float32([[1, 2], [3, 4]])], builder)
    assert_same(got, np.array([[3, 4], [1, 2]], np.float32))


@pytest.mark.parametrize("builder", STITCHES)
@pytest.mark.parametrize("indices, position", [
    ([[0, -1]], 1),
    ([[0, 1], [3, -1, 2]], 1),       # TF names the position within its input
    ([[[0, 1], [-2, 3]]], 2),        # flat position in multi-dim indices
    ([[-5]], 0),
])
def test_stitch_negative_index(scope, builder, indices, position):
    x = scope.placeholder(gf.int32, shape=None)
    fed = [x] + [np.asarray(i, np.int32) for i in indices[1:]]
    data = [np.ones(np.shape(i), np.float32) for i in indices]
    out = getattr(scope, builder)(fed, data)
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError) as e:
            sess.run(out, {x: np.asarray(indices[0], np.int32)})
    assert f"indices[{position}] is out of range" in str(e.value)
    assert e.value.node_name == out.op.name
    assert f"[node {out.op.name}]" in str(e.value)


@pytest.mark.parametrize("builder", STITCHES)
def test_stitch_run_time_shape_errors(scope, builder):
    i0, i1 = (scope.placeholder(gf.int32) for _ in range(2))
    d0, d1 = (scope.placeholder(gf.float32) for _ in range(2))
    out = getattr(scope, builder)([i0, i1], [d0, d1])
    with gf.Session(scope.graph) as sess:
        feed = {i0: np.int32([0]), i1: np.int32([1]), d0: np.ones([1, 2], np.float32),
                d1: np.ones([1, 3], np.float32)}
        with pytest.raises(InvalidArgumentError, match=r"Need data\[0\]\.shape\[1:\] = "
                           r"data\[1\]\.shape\[1:\], got data\[0\]\.shape = \[1,2\], data\[1\]"
                           r"\.shape = \[1,3\], indices\[0\]\.shape = \[1\], indices\[1\]\.shape"
                           r" = \[1\]"):
            sess.run(out, feed)
        feed[d0], feed[d1] = np.ones([3], np.float32), np.ones([1], np.float32)
        with pytest.raises(InvalidArgumentError, match=r"data\[0\]\.shape = \[3\] does not "
                           r"start with indices\[0\]\.shape = \[1\]"):
            sess.run(out, feed)
        feed[d0] = np.ones([1], np.float32)
        assert_same(sess.run(out, feed), np.ones([2], np.float32))  # still usable


def test_stitch_static_shapes(scope):
    ph = scope.placeholder
    cases = [
        (["c:[0,5]", "c:[[2],[1]]"], [[2, 3], [2, 1, 3]], [6, 3]),
        (["p:[2]", "p:[3]"], [[2, 4], [3, 4]], [None, 4]),
        (["p:[None]", "p:[None]"], [[None, 4], [None, None]], [None, 4]),
        (["c:[0,3]", "p:[2]"], [[2], [2]], [None]),
        (["p:[2]"], [None], None),
        (["p:None"], [[2, 3]], None),
        (["c:[0,-1]"], [[2]], [1]),
        (["c:[]"], [[0, 3]], [0, 3]),
        (["c:[-4]"], [[1]], [0]),
    ]
    for index_specs, data_shapes, expected in cases:
        indices = []
        for spec in index_specs:
            kind, text = spec.split(":")
            value = eval(text)  # noqa: S307 - literal test table
            indices.append(scope.constant(np.array(value, np.int32)) if kind == "c"
                           else ph(gf.int32, shape=value))
        data = [ph(gf.float32, shape=s) for s in data_shapes]
        for builder in STITCHES:
            out = getattr(scope, builder)(indices, data)
            assert (out.shape.dims if expected is not None else out.shape.rank) == expected, \
                (index_specs, data_shapes, builder)


@pytest.mark.parametrize("builder", STITCHES)
def test_stitch_of_every_partition_of_a_range_knows_its_rows(scope, builder):
    """The positions of a mixture of experts' tokens, DynamicPartition(Range(0, n), p, K)
    stitched back whole, give n rows (the partitions together hold 0..n-1); a subset of
    them, or an unknown n, leaves the dim open. The values are the plain reference's on
    the 3rd and later calls (specialized plans, every size of the parts)."""
    x = scope.placeholder(gf.float32, shape=[7, 3])
    p = scope.placeholder(gf.int32, shape=[7])
    positions = scope.dynamic_partition(scope.range(0, scope.shape(x)[0], 1), p, 3)
    parts = scope.dynamic_partition(x, p, 3)
    stitch = getattr(scope, builder)
    whole = stitch([positions[2], positions[0], positions[1]], [parts[2], parts[0], parts[1]])
    assert whole.shape.dims == [7, 3]
    assert stitch(positions[:2], parts[:2]).shape.dims == [None, 3]
    opened = scope.placeholder(gf.float32, shape=[None, 3])
    q = scope.placeholder(gf.int32, shape=[None])
    open_positions = scope.dynamic_partition(scope.range(0, scope.shape(opened)[0], 1), q, 3)
    assert stitch(open_positions, scope.dynamic_partition(opened, q, 3)).shape.dims == [None, 3]
    rng = np.random.default_rng(5)
    with gf.Session(scope.graph) as sess:
        f = sess.make_callable(whole, [x, p])
        for _ in range(4):
            xs, ps = rng.normal(size=(7, 3)).astype(np.float32), rng.integers(0, 3, 7).astype(np.int32)
            assert_same(f(xs, ps), xs)


@pytest.mark.parametrize("builder", STITCHES)
def test_stitch_build_time_shape_errors(scope, builder):
    make = getattr(scope, builder)

    def build(index_shapes, data_shapes, index_dtype=gf.int32, data_dtypes=None):
        data_dtypes = data_dtypes or [gf.float32] * len(data_shapes)
        return make([scope.placeholder(index_dtype, s) for s in index_shapes],
                    [scope.placeholder(t, s) for t, s in zip(data_dtypes, data_shapes)])

    with pytest.raises(InvalidArgumentError, match="Dimension 0 in both shapes must be equal, "
                       r"but are 4 and 5. Shapes are \[4\] and \[5\]"):
        build([[2], [3]], [[2, 4], [3, 5]])
    with pytest.raises(ValueError, match=r"Dimensions must be equal, but are 3 and 2: data\[0\]"
                       r"\.shape = \[3,4\] does not start with indices\[0\]\.shape = \[2\]"):
        build([[2]], [[3, 4]])
    with pytest.raises(InvalidArgumentError, match=r"Dimensions must be equal, but are 2 and 3: "
                       r"data\[1\]\.shape = \[2,3\] does not start with indices\[1\]\.shape = "
                       r"\[3\]"):
        build([[2], [3]], [[2, 3], [2, 3]])
    with pytest.raises(InvalidArgumentError, match="Shape must be at least rank 2 but is rank 1"):
        build([[1, 2]], [[2]])
    with pytest.raises(InvalidArgumentError, match="Shapes must be equal rank, but are 1 and 2"):
        build([[2], [3]], [[2, 4], [3, 4, 1]])
    with pytest.raises(InvalidDTypeError, match="int64"):
        build([[2]], [[2]], index_dtype=gf.int64)
    with pytest.raises(InvalidArgumentError, match="must match length 2"):
        make([scope.placeholder(gf.int32, [1])] * 2, [scope.placeholder(gf.float32, [1])])
    with pytest.raises(InvalidDTypeError):
        build([[1], [1]], [[1], [1]], data_dtypes=[gf.float32, gf.float64])


def test_stitch_checks_allocation(scope):
    out = scope.dynamic_stitch([np.array([1 << 20], np.int32)], [np.ones([1, 64], np.float32)])
    with gf.Session(scope.graph, gf.SessionConfig(memory_limit_bytes=1 << 20)) as sess:
        with pytest.raises(ResourceExhaustedError):
            sess.run(out)


def test_stitch_never_aliases_its_inputs(scope):
    x = scope.placeholder(gf.float32, shape=[3])
    out = scope.dynamic_stitch([np.array([0, 1, 2], np.int32)], [x])
    fed = np.array([1, 2, 3], np.float32)
    with gf.Session(scope.graph) as sess:
        got = sess.run(out, {x: fed})
    got[0] = 99
    assert fed.tolist() == [1, 2, 3]


# -- DynamicPartition ------------------------------------------------------------------
def partition(scope, run, data, partitions, k):
    outs = scope.dynamic_partition(np.asarray(data), np.asarray(partitions, np.int32),
                                   num_partitions=k)
    assert isinstance(outs, list) and len(outs) == k
    return outs, run(outs)


@pytest.mark.parametrize("data, partitions, k, expected", [
    ([10, 20, 30, 40, 50], [0, 0, 1, 1, 0], 2, [[10, 20, 50], [30, 40]]),
    ([[10, 20, 30], [40, 50, 60]], [[1, 0, 1], [2, 3, 0]], 4, [[20, 60], [10, 30], [40], [50]]),
    ([[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]], [2, 0, 2, 1], 3,
     [[[3, 4, 5]], [[9, 10, 11]], [[0, 1, 2], [6, 7, 8]]]),
    ([1, 2, 3], [0, 0, 0], 1, [[1, 2, 3]]),
    (list(range(12)), [2, 1, 0, 2, 1, 0, 0, 0, 2, 1, 1, 2], 3,
     [[2, 5, 6, 7], [1, 4, 9, 10], [0, 3, 8, 11]]),
])
def test_partition_examples(scope, run, data, partitions, k, expected):
    _, got = partition(scope, run, np.array(data, np.int32), partitions, k)
    for g, e in zip(got, expected):
        assert_same(g, np.array(e, np.int32))


def test_partition_empty_partitions(scope, run):
    outs, got = partition(scope, run, np.arange(6, dtype=np.float32).reshape(3, 2), [0, 0, 2], 4)
    assert [o.shape.as_list() for o in outs] == [[None, 2]] * 4
    assert [g.shape for g in got] == [(2, 2), (0, 2), (1, 2), (0, 2)]
    assert_same(got[2], np.float32([[4, 5]]))
    _, got = partition(scope, run, np.zeros([0, 3], np.float32), np.zeros([0]), 2)
    assert [g.shape for g in got] == [(0, 3), (0, 3)]


def test_partition_scalars(scope, run):
    _, got = partition(scope, run, np.float32(3.5), np.int32(1), 2)
    assert_same(got[0], np.zeros([0], np.float32))
    assert_same(got[1], np.float32([3.5]))
    _, got = partition(scope, run, np.float32([1, 2]), np.int32(0), 2)
    assert_same(got[0], np.float32([[1, 2]]))
    assert_same(got[1], np.zeros([0, 2], np.float32))


@pytest.mark.parametrize("k", [2, 16])  # both kernel strategies
@pytest.mark.parametrize("partitions, message", [
    ([0, 2, 1], "partitions[1] = 2 is not in [0, {k})"),
    ([0, -1, 1], "partitions[1] = -1 is not in [0, {k})"),
    ([[0, 1], [100, 0]], "partitions[1,0] = 100 is not in [0, {k})"),
    (-3, "partitions = -3 is not in [0, {k})"),
])
def test_partition_out_of_range(scope, k, partitions, message):
    p = np.asarray(partitions, np.int32)
    if k == 16:
        p = np.where(p == 2, 16, p).astype(np.int32)  # numpy 1.x promotes a 0-d p
        message = message.replace("= 2 ", "= 16 ")
    ph = scope.placeholder(gf.int32, shape=p.shape)
    outs = scope.dynamic_partition(np.ones(p.shape, np.float32), ph, num_partitions=k)
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError) as e:
            sess.run(outs, {ph: p})
    assert message.format(k=k) in str(e.value)
    assert e.value.node_name == outs[0].op.name


def test_partition_run_time_shape_error(scope):
    data, p = scope.placeholder(gf.float32), scope.placeholder(gf.int32)
    outs = scope.dynamic_partition(data, p, num_partitions=2)
    with gf.Session(scope.graph) as sess:
        for d, q, text in [([1, 2, 3], [0, 1], "[3], partitions.shape = [2]"),
                           ([[0] * 3] * 2, [0, 1, 0], "[2,3], partitions.shape = [3]"),
                           ([1, 2], [[0, 1]], "[2], partitions.shape = [1,2]")]:
            with pytest.raises(InvalidArgumentError, match=r"data\.shape must start with "
                               r"partitions\.shape, got data\.shape = " + text.replace(
                                   "[", r"\[").replace("]", r"\]")):
                sess.run(outs, {data: np.float32(d), p: np.int32(q)})


def test_partition_static_shapes(scope):
    ph = scope.placeholder
    cases = [([6, 3], [6], 2, [None, 3]), ([None, 3], [None], 3, [None, 3]),
             (None, [4], 2, None), ([4, 3], None, 2, None), ([2, 3, 4], [2, 3], 2, [None, 4])]
    for data_shape, p_shape, k, expected in cases:
        outs = scope.dynamic_partition(ph(gf.float32, data_shape), ph(gf.int32, p_shape),
                                       num_partitions=k)
        assert len(outs) == k and all(o.dtype == gf.float32 for o in outs)
        for o in outs:
            assert (o.shape.dims if expected is not None else o.shape.rank) == expected
    # constant partitions: the first dim stays unknown, as TensorFlow records it
    outs = scope.dynamic_partition(np.float32([1, 2, 3]), np.int32([0, 1, 1]), num_partitions=2)
    assert [o.shape.as_list() for o in outs] == [[None], [None]]


def test_partition_build_time_errors(scope):
    ph = scope.placeholder
    with pytest.raises(InvalidArgumentError, match="Dimensions must be equal, but are 4 and 5: "
                       r"data\.shape must start with partitions\.shape, got data\.shape = "
                       r"\[4,3\], partitions\.shape = \[5\]"):
        scope.dynamic_partition(ph(gf.float32, [4, 3]), ph(gf.int32, [5]), num_partitions=2)
    with pytest.raises(ValueError, match="Shape must be at least rank 2 but is rank 1"):
        scope.dynamic_partition(ph(gf.float32, [4]), ph(gf.int32, [4, 1]), num_partitions=2)
    with pytest.raises(InvalidArgumentError, match="num_partitions.* 0 .*minimum 1"):
        scope.dynamic_partition(ph(gf.float32, [4]), ph(gf.int32, [4]), num_partitions=0)
    for dtype in (gf.int64, gf.uint8, gf.float32, gf.bool):
        with pytest.raises(InvalidDTypeError, match=f"Input 'partitions' of 'DynamicPartition' "
                           f"Op has type {dtype.name} that does not match expected type of int32"):
            scope.dynamic_partition(ph(gf.float32, [4]), ph(dtype, [4]), num_partitions=2)


def test_builder_styles(scope, run):
    data, p = np.float32([1, 2, 3]), np.int32([1, 0, 1])
    outs = DynamicPartition.create(scope, data, p, 2).outputs()
    also = DynamicPartition.create(scope, data, p, num_partitions=2).outputs()
    assert [o.op.type for o in outs] == ["DynamicPartition"] * 2
    assert outs[0].name == "DynamicPartition:0" and outs[1].name == "DynamicPartition:1"
    assert len(also) == 2
    merged = DynamicStitch.create(scope, [np.int32([1]), np.int32([0, 2])], outs).output()
    parallel = ParallelDynamicStitch.create(scope, [np.int32([1]), np.int32([0, 2])], outs)
    assert parallel.output().op.type == "ParallelDynamicStitch"
    got = run([merged, parallel.output()])
    assert_same(got[0], data)
    assert_same(got[1], data)


# -- every dtype -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("builder", STITCHES)
def test_every_dtype_round_trip(scope, run, dtype, builder):
    data = values_of(dtype, 10).reshape(5, 2)
    p = np.int32([1, 0, 2, 0, 1])
    parts = scope.dynamic_partition(scope.constant(data, dtype), p, num_partitions=3)
    rows = scope.dynamic_partition(np.arange(5, dtype=np.int32), p, num_partitions=3)
    merged = getattr(scope, builder)(rows, parts)
    assert all(o.dtype == dtype for o in parts) and merged.dtype == dtype
    got_parts, got = run([parts, merged])
    for g, e in zip(got_parts, ref_dynamic_partition(data, p, 3)):
        assert_same(g, e)
    assert_same(got, data)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_every_dtype_stitch_with_gaps(scope, run, dtype):
    data = values_of(dtype, 4)
    indices = [np.int32([0, 5]), np.int32([[2], [5]])]
    pieces = [data[:2], data[2:].reshape(2, 1)]
    out = scope.dynamic_stitch(indices, [scope.constant(d, dtype) for d in pieces])
    assert out.shape.as_list() == [6]
    assert_same(run(out), ref_dynamic_stitch(indices, pieces))


# -- properties against the loop references -----------------------------------------------
@st.composite
def partition_cases(draw):
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=3))
    prefix = draw(st.integers(0, len(shape)))
    k = draw(st.sampled_from([1, 2, 3, 5, 9, 17]))
    p = draw(st.lists(st.integers(0, k - 1), min_size=int(np.prod(shape[:prefix], dtype=int)),
                      max_size=int(np.prod(shape[:prefix], dtype=int))))
    data = np.arange(int(np.prod(shape, dtype=int)), dtype=np.float64).reshape(shape)
    return data, np.array(p, np.int32).reshape(shape[:prefix]), k


@settings(max_examples=100, deadline=None)
@given(partition_cases())
def test_partition_then_stitch_restores_the_input(case):
    data, p, k = case
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=data.shape)
    q = scope.placeholder(gf.int32, shape=p.shape)
    parts = scope.dynamic_partition(x, q, num_partitions=k)
    positions = np.arange(p.size, dtype=np.int32).reshape(p.shape)
    rows = scope.dynamic_partition(positions, q, num_partitions=k)
    merged = scope.dynamic_stitch(rows, parts)
    with gf.Session(scope.graph) as sess:
        got_parts, got = sess.run([parts, merged], {x: data, q: p})
    for g, e in zip(got_parts, ref_dynamic_partition(data, p, k)):
        assert_same(g, e)
    if p.size:  # with no slices, stitch cannot know data's first dims
        assert_same(got.reshape(data.shape), data)


@st.composite
def stitch_cases(draw):
    extra = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    n = draw(st.integers(1, 4))
    indices, data = [], []
    for m in range(n):
        ishape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
        size = int(np.prod(ishape, dtype=int))
        idx = draw(st.lists(st.integers(0, 8), min_size=size, max_size=size))
        indices.append(np.array(idx, np.int32).reshape(ishape))
        data.append((np.arange(size * int(np.prod(extra, dtype=int))) + 100 * m)
                    .astype(np.int64).reshape(ishape + extra))
    return indices, data


@settings(max_examples=100, deadline=None)
@given(stitch_cases())
def test_stitch_matches_the_loop_reference(case):
    indices, data = case
    scope = gf.Scope(gf.Graph())
    out = scope.dynamic_stitch(indices, data)
    with gf.Session(scope.graph) as sess:
        got = sess.run(out)
    expected = ref_dynamic_stitch(indices, data)
    assert out.shape.as_list() == list(expected.shape)
    assert_same(got, expected)


# -- replay of the recorded TensorFlow corpus, when present ------------------------------------
CORPUS = os.path.join(os.path.dirname(__file__), "conformance", "tf_cases.json")


def _corpus_cases():
    if not os.path.exists(CORPUS):
        return []
    with open(CORPUS) as f:
        cases = json.load(f)["cases"]
    return [c for c in cases if c["op"] in ("DynamicPartition", "DynamicStitch",
                                            "ParallelDynamicStitch")]


def _tensor(spec):
    dtype = gf.as_dtype(spec["dtype"])
    data = spec["data"]
    if dtype.is_complex:
        data = [complex(re, im) for re, im in data]
    if dtype.is_string:
        out = np.empty(len(data), dtype=object)
        out[:] = [s.encode("latin-1") for s in data]
        return out.reshape(spec["shape"])
    return np.array(data, dtype=dtype.as_numpy_dtype).reshape(spec["shape"])


def _bare_message(message: str) -> str:
    """TensorFlow's message without its eager / graph-construction wrapping."""
    message = message.split(" [Op:")[0].split(" for '{{node")[0]
    if message.startswith("{{function_node"):
        message = message.split("}} ", 1)[1]
    return message.rstrip(".")


def _operand(scope, spec, feeds):
    """A placeholder for a recorded placeholder; for a value case, a placeholder of
    unknown shape fed with the value, so that the kernel (not shape inference) runs."""
    if "placeholder" in spec:
        return scope.placeholder(gf.as_dtype(spec["placeholder"]["dtype"]),
                                 shape=spec["placeholder"]["shape"])
    if feeds is None:
        return scope.constant(_tensor(spec), gf.as_dtype(spec["dtype"]))
    x = scope.placeholder(gf.as_dtype(spec["dtype"]))
    feeds[x] = _tensor(spec)
    return x


@pytest.mark.skipif(not _corpus_cases(), reason="tests/conformance/tf_cases.json not present")
@pytest.mark.parametrize("case", _corpus_cases(), ids=lambda c: c["id"])
def test_tensorflow_corpus(case):
    scope = gf.Scope(gf.Graph())
    expect = case["expect"]
    feeds = None if case.get("static") else {}
    args = [[_operand(scope, s, feeds) for s in spec["list"]] if "list" in spec
            else _operand(scope, spec, feeds) for spec in case["inputs"]]
    builder = getattr(scope, {"DynamicPartition": "dynamic_partition",
                              "DynamicStitch": "dynamic_stitch",
                              "ParallelDynamicStitch": "parallel_dynamic_stitch"}[case["op"]])
    if "error" in expect:
        with pytest.raises((InvalidArgumentError, TypeError, ValueError)) as e:
            out = builder(*args, **case["attrs"])
            with gf.Session(scope.graph) as sess:
                sess.run(out, feeds)
        python_class = {"TypeError": TypeError, "ValueError": ValueError}.get(expect["error"])
        if python_class is not None:  # build-time errors keep TF's Python classes
            assert isinstance(e.value, python_class)
        bare = _bare_message(expect["message"])
        # TF's eager / op-def plumbing words these differently; graphflow's core owns them
        if not bare.startswith(("cannot compute", "NodeDef", "Value for attr", "Attr ",
                                "Tensors in list")):
            assert bare in str(e.value)
        return
    out = builder(*args, **case["attrs"])
    outs = out if isinstance(out, list) else [out]
    if "shapes" in expect:
        assert [o.shape.dims for o in outs] == expect["shapes"]
        assert [o.dtype.name for o in outs] == expect["dtypes"]
        return
    with gf.Session(scope.graph) as sess:
        got = sess.run(outs, feeds)
    for g, e in zip(got, expect["values"]):
        assert_same(g, _tensor(e))
