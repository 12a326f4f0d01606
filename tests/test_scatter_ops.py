"""The scatter family and GatherNd: the seed examples, a plain loop reference
over random ranks, depths, dtypes and duplicates, errors, and forwarding."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError, NotFoundError
from graphflow.ops import ScatterNd, TensorScatterAdd, TensorScatterUpdate

import ref_scatter

SLICES = np.array([[[5, 5, 5, 5], [6, 6, 6, 6], [7, 7, 7, 7], [8, 8, 8, 8]]] * 2, np.int32)
OPS = {"update": "tensor_scatter_update", "add": "tensor_scatter_add", "sub": "tensor_scatter_sub",
       "min": "tensor_scatter_min", "max": "tensor_scatter_max"}


def test_seed_scatter_nd(scope, run):
    out = scope.scatter_nd(np.array([[4], [3], [1], [7]]), np.array([9, 10, 11, 12], np.int32),
                           np.array([8]))
    assert out.dtype is gf.int32 and out.shape == gf.TensorShape([8])
    assert run(out).tolist() == [0, 11, 0, 10, 9, 0, 0, 12]
    java = ScatterNd.create(scope, np.array([[0], [2]]), SLICES, np.array([4, 4, 4])).output()
    assert java.shape == gf.TensorShape([4, 4, 4])
    expected = np.zeros((4, 4, 4), np.int32)
    expected[[0, 2]] = SLICES
    np.testing.assert_array_equal(run(java), expected)


@pytest.mark.parametrize("style", ["builder", "class", "alias"])
def test_seed_tensor_scatter(scope, run, style):
    ones8, ones444 = np.ones(8, np.int32), np.ones((4, 4, 4), np.int32)
    idx, upd = np.array([[4], [3], [1], [7]]), np.array([9, 10, 11, 12], np.int32)
    if style == "builder":
        upd8, add8 = scope.tensor_scatter_update(ones8, idx, upd), scope.tensor_scatter_add(ones8, idx, upd)
        add3 = scope.tensor_scatter_add(ones444, np.array([[0], [2]]), SLICES)
    elif style == "class":
        upd8 = TensorScatterUpdate.create(scope, ones8, idx, upd).output()
        add8 = TensorScatterAdd.create(scope, ones8, idx, upd).output()
        add3 = TensorScatterAdd.create(scope, ones444, np.array([[0], [2]]), SLICES).output()
    else:
        upd8 = scope.tensor_scatter_nd_update(ones8, idx, upd)
        add8 = scope.tensor_scatter_nd_add(ones8, idx, upd)
        add3 = scope.tensor_scatter_nd_add(ones444, np.array([[0], [2]]), SLICES)
    assert run(upd8).tolist() == [1, 11, 1, 10, 9, 1, 1, 12]
    assert run(add8).tolist() == [1, 12, 1, 11, 10, 1, 1, 13]
    expected = np.ones((4, 4, 4), np.int32)
    expected[[0, 2]] += SLICES
    np.testing.assert_array_equal(run(add3), expected)


@st.composite
def scatter_case(draw, combine):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    depth = draw(st.integers(1, rank))
    batch = tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=2)))
    bad = draw(st.booleans()) and draw(st.booleans())
    lo, hi = (-2, 6) if bad else (0, None)
    cols = [draw(st.lists(st.integers(lo, (hi if hi is not None else shape[d] - 1)),
                          min_size=int(np.prod(batch)), max_size=int(np.prod(batch))))
            for d in range(depth)]
    index_dtype = draw(st.sampled_from([np.int32, np.int64]))
    indices = np.stack([np.array(c, index_dtype).reshape(batch) for c in cols], -1)
    kinds = [np.float32, np.float64, np.int32, np.int8, np.uint8, np.int64]
    if combine in ("update", "add", "sub"):
        kinds.append(np.complex64)
    dtype = draw(st.sampled_from(kinds))
    upd_shape = batch + shape[depth:]
    updates = np.array(draw(st.lists(st.integers(-50, 50), min_size=int(np.prod(upd_shape)),
                                     max_size=int(np.prod(upd_shape))))).reshape(upd_shape).astype(dtype)
    tensor = np.array(draw(st.lists(st.integers(-50, 50), min_size=int(np.prod(shape)),
                                    max_size=int(np.prod(shape))))).reshape(shape).astype(dtype)
    return tensor, indices, updates


@pytest.mark.parametrize("combine", sorted(OPS))
@given(data=st.data())
def test_tensor_scatter_matches_reference(combine, data):
    tensor, indices, updates = data.draw(scatter_case(combine))
    scope = gf.Scope(gf.Graph())
    out = getattr(scope, OPS[combine])(tensor, indices, updates)
    assert out.shape == gf.TensorShape(tensor.shape)
    with np.errstate(all="ignore"):
        try:
            expected = ref_scatter.scatter(tensor, indices, updates, combine)
        except IndexError:
            expected = None
    with gf.Session(scope.graph) as sess:
        if expected is None:
            with pytest.raises(InvalidArgumentError, match="does not index into shape"):
                sess.run(out)
        else:
            np.testing.assert_array_equal(sess.run(out), expected)


@given(data=st.data())
def test_scatter_nd_matches_reference(data):
    tensor, indices, updates = data.draw(scatter_case("add"))
    scope = gf.Scope(gf.Graph())
    out = scope.scatter_nd(indices, updates, np.array(tensor.shape, indices.dtype))
    with np.errstate(all="ignore"):
        try:
            expected = ref_scatter.scatter(np.zeros_like(tensor), indices, updates, "add")
        except IndexError:
            expected = None
    with gf.Session(scope.graph) as sess:
        if expected is None:
            with pytest.raises(InvalidArgumentError, match="does not index into shape"):
                sess.run(out)
        else:
            np.testing.assert_array_equal(sess.run(out), expected)


@given(data=st.data())
def test_gather_nd_matches_reference(data):
    params, indices, _ = data.draw(scatter_case("update"))
    scope = gf.Scope(gf.Graph())
    out = scope.gather_nd(params, indices)
    try:
        expected = ref_scatter.gather_nd(params, indices)
    except IndexError:
        expected = None
    with gf.Session(scope.graph) as sess:
        if expected is None:
            with pytest.raises(InvalidArgumentError, match="does not index into param shape"):
                sess.run(out)
        else:
            got = sess.run(out)
            assert got.shape == expected.shape and out.shape == gf.TensorShape(expected.shape)
            np.testing.assert_array_equal(got, expected)


def test_duplicates(scope, run):
    idx = np.array([[1], [1], [3], [1]])
    upd = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    assert run(scope.scatter_nd(idx, upd, [5])).tolist() == [0, 7, 0, 3, 0]
    base = np.full(5, 10.0, np.float32)
    assert run(scope.tensor_scatter_update(base, idx, upd)).tolist() == [10, 4, 10, 3, 10]  # last wins
    assert run(scope.tensor_scatter_min(base, idx, upd)).tolist() == [10, 1, 10, 3, 10]
    assert run(scope.tensor_scatter_max(base, idx, upd * 5)).tolist() == [10, 20, 10, 15, 10]
    strings = scope.scatter_nd(np.array([[0], [1], [0]]), np.array([b"a", b"b", b"c"], object), [3])
    assert run(strings).tolist() == [b"ac", b"b", b""]
    bools = scope.scatter_nd(np.array([[0], [0]]), np.array([True, False]), [2])
    assert run(bools).tolist() == [True, False]


def test_min_max_nan_rules(scope, run):
    t = np.array([1.0, np.nan, 3.0], np.float32)
    u = np.array([np.nan, 0.0, 2.0], np.float32)
    got = run(scope.tensor_scatter_min(t, np.array([[0], [1], [2]]), u))
    np.testing.assert_array_equal(got, [1.0, np.nan, 2.0])  # NaN update ignored, NaN kept


def test_bad_index_messages_and_policies(scope, run):
    idx = np.array([[1], [9], [2]])
    with pytest.raises(InvalidArgumentError, match=r"indices\[1\] = \[9\] does not index into "
                                                    r"shape \[8\] \[node ScatterNd\]"):
        run(scope.scatter_nd(idx, np.ones(3, np.float32), [8]))
    ignored = scope.scatter_nd(idx, np.ones(3, np.float32), [8], bad_indices_policy="IGNORE")
    assert run(ignored).tolist() == [0, 1, 1, 0, 0, 0, 0, 0]
    two = np.array([[[0, 0], [1, -1]]])
    with pytest.raises(InvalidArgumentError, match=r"indices\[0,1\] = \[1, -1\] does not index "
                                                    r"into param shape \[2,2\]"):
        run(scope.gather_nd(np.zeros((2, 2)), two))
    zeros = scope.gather_nd(np.arange(4.0).reshape(2, 2), two, bad_indices_policy="IGNORE")
    assert run(zeros).tolist() == [[0.0, 0.0]]


def test_nothing_written_on_error(scope):
    x = scope.placeholder(gf.float32, shape=[4])
    out = scope.tensor_scatter_update(scope.add(x, 0.0), np.array([[0], [7]]), np.ones(2, np.float32))
    feed = np.zeros(4, np.float32)
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError):
            sess.run(out, {x: feed})
        assert feed.tolist() == [0, 0, 0, 0]
        ok = scope.tensor_scatter_update(x, np.array([[0]]), np.ones(1, np.float32))
        assert sess.run(ok, {x: feed}).tolist() == [1, 0, 0, 0]


@pytest.mark.parametrize("indices, updates, shape, match", [
    (np.zeros((2, 1), np.int32), np.zeros(3, np.float32), [5], "Dimensions \\[0,1\\) of indices"),
    (np.zeros((2, 1), np.int32), np.zeros((2, 3), np.float32), [5, 4], "Dimensions \\[1,2\\) of input"),
    (np.zeros((2, 3), np.int32), np.zeros(2, np.float32), [5, 4], "indices.shape\\[-1\\] must be <="),
])
def test_build_time_shape_errors(scope, indices, updates, shape, match):
    with pytest.raises(InvalidArgumentError, match=match) as info:
        scope.scatter_nd(indices, updates, shape)
    assert isinstance(info.value, ValueError) and info.value.node_name == "ScatterNd"


def test_partial_shapes(scope):
    idx = scope.placeholder(gf.int64, shape=[None, 1])
    upd = scope.placeholder(gf.float32, shape=[None, 3])
    n = scope.placeholder(gf.int64, shape=[])
    assert scope.scatter_nd(idx, upd, scope.pack([n, 3])).shape == gf.TensorShape([None, 3])
    assert scope.scatter_nd(idx, upd, scope.placeholder(gf.int64, shape=[2])).shape == \
        gf.TensorShape([None, 3])
    params = scope.placeholder(gf.float32, shape=[5, None, 7])
    assert scope.gather_nd(params, scope.placeholder(gf.int32, shape=[4, 2])).shape == \
        gf.TensorShape([4, 7])
    assert scope.gather_nd(params, scope.placeholder(gf.int32, shape=[5, 3, 1]), batch_dims=1).shape \
        == gf.TensorShape([5, 3, 7])
    assert scope.gather_nd(params, scope.placeholder(gf.int32)).shape.rank is None


def test_dtype_rules(scope):
    with pytest.raises(NotFoundError, match="No registered 'TensorScatterMax' OpKernel"):
        scope.tensor_scatter_max(np.zeros(2, np.complex64), [[0]], np.ones(1, np.complex64))
    with pytest.raises(NotFoundError):
        scope.tensor_scatter_add(np.array([True]), [[0]], [True])
    with pytest.raises(TypeError, match="not in list of allowed values"):
        scope.scatter_nd(np.zeros((1, 1), np.float32), [1.0], [2])
    with pytest.raises(NotFoundError):
        scope.scatter_nd(np.zeros((1, 1), np.int16), [1.0], np.array([2], np.int16))


def _forwarded(graph, fetches, feed=None):
    with gf.Session(graph) as sess:
        values = sess.run(fetches, feed)
        return values, sess.stats.forwarded


def test_forwarding_in_a_chain(scope):
    x = scope.placeholder(gf.float32, shape=[6])
    idx = np.array([[1], [2]])
    a = scope.tensor_scatter_add(x, idx, np.ones(2, np.float32))        # fed input: copied
    b = scope.tensor_scatter_add(a, idx, np.ones(2, np.float32))        # a dies here: forwarded
    c = scope.tensor_scatter_update(b, idx, np.full(2, 7, np.float32))  # forwarded again
    feed = np.zeros(6, np.float32)
    value, forwarded = _forwarded(scope.graph, c, {x: feed})
    assert forwarded == 2 and value.tolist() == [0, 7, 7, 0, 0, 0] and feed.tolist() == [0] * 6


def test_no_forwarding_for_constants_second_consumers_and_fetches(scope):
    const = scope.constant(np.zeros(4, np.float32))
    idx = np.array([[0]])
    one = np.ones(1, np.float32)
    from_const = scope.tensor_scatter_add(const, idx, one)
    _, forwarded = _forwarded(scope.graph, from_const)
    assert forwarded == 0
    mid = scope.add(const, 1.0)
    first = scope.tensor_scatter_add(mid, idx, one)
    second = scope.mul(mid, 2.0)  # mid has a second consumer: must not be overwritten
    (f, s), forwarded = _forwarded(scope.graph, [first, second])
    assert forwarded == 0 and f.tolist() == [2, 1, 1, 1] and s.tolist() == [2, 2, 2, 2]
    (m, f2), forwarded = _forwarded(scope.graph, [mid, first])  # mid is fetched
    assert forwarded == 0 and m.tolist() == [1, 1, 1, 1] and f2.tolist() == [2, 1, 1, 1]
    assert scope.graph.operation(const.op.name).attrs["value"].tolist() == [0, 0, 0, 0]
