"""GatherNd: TensorFlow's documented examples, batch_dims, a plain loop reference over
random ranks, depths, dtypes, batch dims and bad indices, policies, and the errors."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError, NotFoundError
from graphflow.ops import GatherNd

import ref_scatter


def _strings(*words):
    return np.array([w.encode() for w in words], dtype=object)


# -- documented examples ---------------------------------------------------------------------------
def test_documented_examples(scope, run):
    params = _strings("a", "b", "c", "d").reshape(2, 2)
    assert run(scope.gather_nd(params, [[0, 0], [1, 1]])).tolist() == [b"a", b"d"]
    assert run(scope.gather_nd(params, [[1], [0]])).tolist() == [[b"c", b"d"], [b"a", b"b"]]
    assert run(scope.gather_nd(params, [[[0, 0]], [[0, 1]]])).tolist() == [[b"a"], [b"b"]]
    batched = _strings("a0b0", "a0b1", "a1b0", "a1b1", "c0d0", "c0d1", "c1d0", "c1d1") \
        .reshape(2, 2, 2)
    out = scope.gather_nd(batched, [[1], [0]], batch_dims=1)
    assert out.shape == gf.TensorShape([2, 2])
    assert run(out).tolist() == [[b"a1b0", b"a1b1"], [b"c0d0", b"c0d1"]]
    java = GatherNd.create(scope, np.arange(24).reshape(2, 3, 4), [[1, 2], [0, 0]]).output()
    assert run(java).tolist() == [[20, 21, 22, 23], [0, 1, 2, 3]]


def test_depths_ranks_and_empty_indices(scope, run):
    params = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    assert run(scope.gather_nd(params, [[1, 2, 3], [0, 1, 2]])).tolist() == [23, 6]
    assert run(scope.gather_nd(params, [1, 2, 3])).tolist() == 23  # rank-1 indices: one tuple
    assert run(scope.gather_nd(params, [1])).shape == (3, 4)
    whole = run(scope.gather_nd(params, np.zeros((2, 0), np.int32)))  # depth 0: all of params
    np.testing.assert_array_equal(whole, np.stack([params, params]))
    assert run(scope.gather_nd(params, np.zeros((0, 2), np.int64))).shape == (0, 4)
    assert run(scope.gather_nd(np.zeros((0, 3), np.float32), np.zeros((0, 1), np.int32))).shape \
        == (0, 3)


@pytest.mark.parametrize("index_dtype", [np.int16, np.int32, np.int64])
def test_index_dtypes(scope, run, index_dtype):
    out = scope.gather_nd(np.arange(4.0), np.array([[3], [0]], index_dtype))
    assert run(out).tolist() == [3.0, 0.0]


def test_index_dtype_rules(scope):
    for dtype in (np.int8, np.uint16, np.float32):
        with pytest.raises(TypeError, match="not in list of allowed values: int16, int32, int64"):
            scope.gather_nd(np.arange(4.0), np.array([[1]], dtype))


# -- batch_dims ------------------------------------------------------------------------------------
def test_batch_dims(scope, run):
    params = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    assert run(scope.gather_nd(params, [[1], [2]], batch_dims=1)).tolist() == \
        [[4, 5, 6, 7], [20, 21, 22, 23]]
    assert run(scope.gather_nd(params, [[[1, 2], [0, 0]], [[2, 3], [1, 1]]], batch_dims=1)) \
        .tolist() == [[6, 0], [23, 17]]
    assert run(scope.gather_nd(params, [[[1], [2], [3]], [[0], [0], [1]]], batch_dims=2)) \
        .tolist() == [[1, 6, 11], [12, 16, 21]]
    assert run(scope.gather_nd(np.zeros((0, 3), np.float32), np.zeros((0, 1), np.int32),
                               batch_dims=1)).shape == (0,)


def test_batch_dims_shapes(scope):
    params = scope.placeholder(gf.float32, [2, 3, 4])
    assert scope.gather_nd(params, scope.placeholder(gf.int32, [2, 5, 1]), batch_dims=1).shape == \
        gf.TensorShape([2, 5, 4])
    assert scope.gather_nd(params, scope.placeholder(gf.int32, [2, 3, 1]), batch_dims=2).shape == \
        gf.TensorShape([2, 3])
    partial = scope.placeholder(gf.float32, [None, 3, 4])
    assert scope.gather_nd(partial, scope.placeholder(gf.int32, [None, 5, 2]), batch_dims=1).shape \
        == gf.TensorShape([None, 5])


@pytest.mark.parametrize("params_shape, indices_shape, batch_dims, message", [
    ([2, 3, 4], [2, 1], 2, "Argument `batch_dims` = 2 must be less than rank(`indices`) = 2"),
    ([2], [1, 1, 1, 1], 3, "Argument `batch_dims` = 3 must be less than rank(`params`) = 1"),
    ([2, 3], [2, 3, 1], 2, "Argument `batch_dims` = 2 must be less than rank(`params`) = 2"),
    ([2, 3, 4], [2, 1], -1, "tf.gather_nd does not allow negative batch_dims."),
    ([2, 3], [3, 1], 1, "Cannot reshape a tensor with 3 elements to shape [2,1] (2 elements)"),
])
def test_batch_dims_errors_at_build_time(scope, params_shape, indices_shape, batch_dims, message):
    with pytest.raises(InvalidArgumentError) as info:
        scope.gather_nd(scope.placeholder(gf.float32, params_shape),
                        scope.placeholder(gf.int32, indices_shape), batch_dims=batch_dims)
    assert info.value.message == message and isinstance(info.value, ValueError)


@pytest.mark.parametrize("params, indices, batch_dims, message", [
    (np.zeros((2, 3, 4)), np.zeros((2, 1)), 2,
     "Argument `batch_dims` = 2 must be less than rank(`indices`) = 2"),
    (np.arange(24).reshape(2, 3, 4), [[1], [2], [0]], 1,
     "Input to reshape is a tensor with 3 values, but the requested shape has 2"),
    (np.arange(24).reshape(2, 3, 4), [[1], [5]], 1,
     "indices[1] = [1, 5] does not index into param shape [2,3,4], node name: GatherNd"),
])
def test_batch_dims_errors_at_run_time(scope, params, indices, batch_dims, message):
    p, i = scope.placeholder(gf.float64), scope.placeholder(gf.int32)
    out = scope.gather_nd(p, i, batch_dims=batch_dims)
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError) as info:
            sess.run(out, {p: np.asarray(params, np.float64), i: np.asarray(indices, np.int32)})
    assert info.value.message == message


# -- against the loop reference ----------------------------------------------------------------------
@st.composite
def gather_case(draw):
    """(params, indices, batch_dims, policy) with random rank, depth, batch dims, dtype."""
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    b = draw(st.integers(0, rank - 1))
    depth = draw(st.integers(0 if b == 0 else 1, rank - b))
    inner = tuple(draw(st.lists(st.integers(0, 3), min_size=0 if b else 1, max_size=2)))
    outer = shape[:b] + inner
    n = int(np.prod(outer))
    bad = draw(st.integers(0, 3)) == 0
    cols = [draw(st.lists(st.integers(-2 if bad else 0, shape[b + d] + (2 if bad else -1)),
                          min_size=n, max_size=n)) for d in range(depth)]
    indices = np.array(cols, draw(st.sampled_from([np.int16, np.int32, np.int64]))) \
        .T.reshape(outer + (depth,))
    kind = draw(st.sampled_from([np.float32, np.int64, np.uint8, np.bool_, np.complex64, object]))
    flat = np.arange(int(np.prod(shape)))
    params = np.array([b"v%d" % v for v in flat], object).reshape(shape) if kind is object \
        else flat.astype(kind).reshape(shape)
    return params, indices, b, draw(st.sampled_from(["", "ERROR", "IGNORE"]))


@given(case=gather_case())
def test_gather_nd_matches_reference(case):
    params, indices, b, policy = case
    scope = gf.Scope(gf.Graph())
    out = scope.gather_nd(params, indices, batch_dims=b, bad_indices_policy=policy)
    try:
        expected, message = ref_scatter.gather_nd(params, indices, b, policy), None
    except ref_scatter.BadIndex as e:
        expected, message = None, f"{e}, node name: GatherNd"
    with gf.Session(scope.graph) as sess:
        if message:
            with pytest.raises(InvalidArgumentError) as info:
                sess.run(out)
            assert info.value.message == message
        else:
            got = sess.run(out)
            assert got.dtype == params.dtype and out.shape == gf.TensorShape(expected.shape)
            np.testing.assert_array_equal(got, expected)


# -- bad indices and policies ----------------------------------------------------------------------
def test_bad_indices(scope, run):
    params = np.arange(6.0).reshape(3, 2)
    with pytest.raises(InvalidArgumentError, match=r"^indices\[0,2\] = \[-1\] does not index into "
                                                    r"param shape \[3,2\], node name: GatherNd "
                                                    r"\[node GatherNd\]"):
        run(scope.gather_nd(params, [[[1], [3], [-1]]]))  # the last bad tuple, as TensorFlow
    for policy in ("", "DEFAULT", "ERROR"):
        with pytest.raises(InvalidArgumentError, match="does not index into param shape"):
            run(scope.gather_nd(params, [[3]], bad_indices_policy=policy))
    ignored = scope.gather_nd(params, [[1], [3], [-1]], bad_indices_policy="IGNORE")
    assert run(ignored).tolist() == [[2, 3], [0, 0], [0, 0]]  # zeros for the bad ones
    words = scope.gather_nd(_strings("a", "b"), [[1], [2]], bad_indices_policy="IGNORE")
    assert run(words).tolist() == [b"b", b""]
    with pytest.raises(NotFoundError, match="No registered 'GatherNd' OpKernel"):
        scope.gather_nd(params, [[1]], bad_indices_policy="BOGUS")  # no kernel, as TensorFlow


@pytest.mark.parametrize("params, indices, message", [
    (np.float32(7), np.zeros((3, 0), np.int32), "params must be at least a vector"),
    (np.arange(4.0), np.int32(2), "indices must be at least a vector"),
    (np.arange(4.0), [[1, 2]], "index innermost dimension length must be <= params rank; saw: 2 "
                               "vs. 1"),
    (np.zeros((3, 0)), [[2], [0]], "Requested more than 0 entries, but params is empty.  Params "
                                   "shape: [3,0]"),
    (np.zeros((0, 3)), [[0]], "Requested more than 0 entries, but params is empty.  Params "
                              "shape: [0,3]"),
])
def test_run_time_errors(scope, params, indices, message):
    values = [np.asarray(params, np.float32), np.asarray(indices, np.int32)]
    holders = [scope.placeholder(gf.float32), scope.placeholder(gf.int32)]
    out = scope.gather_nd(*holders)
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError) as info:
            sess.run(out, dict(zip(holders, values)))
    assert info.value.message == message and info.value.node_name == "GatherNd"


def test_build_time_shapes_and_errors(scope):
    params = scope.placeholder(gf.float32, [2, 3, 4])
    assert scope.gather_nd(params, scope.placeholder(gf.int32, [5, 2])).shape == \
        gf.TensorShape([5, 4])
    assert scope.gather_nd(scope.placeholder(gf.float32, [None, 3, 4]),
                           scope.placeholder(gf.int32, [None, 2])).shape == gf.TensorShape([None, 4])
    assert scope.gather_nd(params, scope.placeholder(gf.int32, [5, None])).shape.rank is None
    assert scope.gather_nd(scope.placeholder(gf.float32), [[1]]).shape.rank is None
    assert scope.gather_nd(params, scope.placeholder(gf.int32)).shape.rank is None
    assert scope.gather_nd(params, [1, 2, 3]).shape == gf.TensorShape([])
    assert scope.gather_nd(params, [[5, 0]]).shape == gf.TensorShape([1, 4])  # checked when run
    with pytest.raises(InvalidArgumentError, match=r"indices.shape\[-1\] must be <= params.rank, "
                                                    r"but saw indices shape: \[5,4\] and params "
                                                    r"shape: \[2,3,4\]"):
        scope.gather_nd(params, scope.placeholder(gf.int32, [5, 4]))
    with pytest.raises(InvalidArgumentError, match="Shape must be at least rank 1 but is rank 0"):
        scope.gather_nd(params, np.int32(1))
