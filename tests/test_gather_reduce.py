"""Gather -> scale -> segment-sum runs as one node (runtime/gather_reduce.py), with
exactly the results and errors of the graph as written, forward and in the gradient,
on every call after the first."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import graphflow as gf

CALLS = 3  # the rewrite's plan must give the same on the 3rd call, after the compile


def _steps(sess, fetches, feeds):
    return [s.op.type for s in sess._plan(list(fetches), list(feeds)).steps if s.op is not None]


def _both(graph, fetches, feed):
    """[(results or error) with the rewrite, the same without optimization], and the
    optimized plan's step types."""
    out = []
    for optimize in (True, False):
        with gf.Session(graph, gf.SessionConfig(optimize=optimize)) as sess:
            for _ in range(CALLS):
                try:
                    got = sess.run(fetches, feed)
                except gf.errors.OpError as e:
                    got = (type(e), e.message, e.node_name)
            out.append(got)
            if optimize:
                types = _steps(sess, fetches, feed)
    return out[0], out[1], types


def _same_bits(a, b):
    if isinstance(a, tuple):
        assert a == b
        return
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype
        assert np.array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8))


def _layer(s, params, src, dst, n, scale, scale_first=False):
    gathered = s.gather_v2(params, src, 0)
    if scale is not None:
        gathered = s.mul(scale, gathered) if scale_first else s.mul(gathered, scale)
    return s.unsorted_segment_sum(gathered, dst, n)


SCALES = {"none": lambda e, w, d: None,
          "one": lambda e, w, d: np.array(1.5, d),
          "per_edge": lambda e, w, d: np.linspace(-1, 2, e).astype(d).reshape(e, 1),
          "full": lambda e, w, d: np.linspace(-1, 2, e * w).astype(d).reshape(e, w)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", sorted(SCALES))
@pytest.mark.parametrize("scale_first", [False, True])
def test_forward_is_fused_and_bit_exact(scope, dtype, scale, scale_first):
    rng = np.random.default_rng(1)
    nodes, edges, width = 50, 400, 8
    src = rng.integers(0, nodes, edges).astype(np.int32)
    dst = rng.integers(-2, nodes, edges).astype(np.int64)  # negative ids drop
    x = scope.placeholder(gf.as_dtype(dtype), [None, width])
    y = _layer(scope, x, src, dst, nodes, SCALES[scale](edges, width, dtype),
               scale_first and scale != "none")
    feed = {x: rng.normal(size=(nodes, width)).astype(dtype)}
    fused, plain, types = _both(scope.graph, [y], feed)
    assert "_GatherScaleSum" in types and "UnsortedSegmentSum" not in types
    assert "Mul" not in types
    _same_bits(fused, plain)


def test_gcn_gradient_is_fused_and_bit_exact(scope):
    """The gradient's gather -> Mul -> ScatterNd (IndexedSlices densified) fuses too."""
    rng = np.random.default_rng(2)
    nodes, edges = 40, 300
    src, dst = (rng.integers(0, nodes, edges).astype(np.int32) for _ in range(2))
    weight = rng.random((edges, 1)).astype(np.float32)
    w = scope.variable(rng.normal(size=(6, 5)).astype(np.float32))
    x = scope.placeholder(gf.float32, [nodes, 6])
    h = _layer(scope, scope.matmul(x, w), src, dst, nodes, weight)
    loss = scope.reduce_sum(scope.square(h))
    grads = gf.gradients(loss, [w, x])
    feed = {x: rng.normal(size=(nodes, 6)).astype(np.float32)}
    init = gf.global_variables_initializer(scope.graph)
    results = []
    for optimize in (True, False):
        with gf.Session(scope.graph, gf.SessionConfig(optimize=optimize)) as sess:
            sess.run(init)
            for _ in range(CALLS):
                got = sess.run([loss, *grads], feed)
            results.append(got)
            if optimize:
                types = _steps(sess, [loss, *grads], feed)
    assert types.count("_GatherScaleSum") == 2 and "ScatterNd" not in types
    _same_bits(*results)


@pytest.mark.parametrize("bad", ["gather", "segment"])
def test_ids_out_of_range_raise_the_nodes_own_errors(scope, bad):
    nodes, edges = 10, 30
    src = scope.placeholder(gf.int32, [None])
    dst = scope.placeholder(gf.int32, [None])
    x = scope.placeholder(gf.float32, [None, 4])
    y = _layer(scope, x, src, dst, nodes, np.float32(2))
    ids = np.arange(edges, dtype=np.int32) % nodes
    feed = {x: np.ones((nodes, 4), np.float32), src: ids, dst: ids}
    if bad == "gather":
        feed[src] = np.where(ids == 3, nodes + 5, ids).astype(np.int32)
    else:
        feed[dst] = np.where(ids == 3, nodes, ids).astype(np.int32)
    fused, plain, types = _both(scope.graph, [y], feed)
    assert "_GatherScaleSum" in types
    assert isinstance(fused, tuple) and fused == plain
    assert fused[2] == ("GatherV2" if bad == "gather" else "UnsortedSegmentSum")
    with gf.Session(scope.graph) as sess:  # and the session stays usable
        feed.update({src: ids, dst: ids})
        for _ in range(CALLS):
            with pytest.raises(gf.errors.InvalidArgumentError):
                sess.run(y, {**feed, src: np.full(edges, -1, np.int32)})
            np.testing.assert_array_equal(sess.run(y, feed), np.full((nodes, 4), 6, np.float32))


def test_intermediates_that_are_fetched_or_read_twice_are_left_alone(scope):
    rng = np.random.default_rng(3)
    src = rng.integers(0, 5, 20).astype(np.int32)
    x = scope.placeholder(gf.float32, [5, 3])
    scaled = scope.mul(scope.gather_v2(x, src, 0), np.float32(3))
    y = scope.unsorted_segment_sum(scaled, src, 5)
    feed = {x: rng.normal(size=(5, 3)).astype(np.float32)}
    fused, plain, types = _both(scope.graph, [y, scaled], feed)
    assert "_GatherScaleSum" not in types
    _same_bits(fused, plain)
    z = scope.add(y, scope.reduce_sum(scaled))
    fused, plain, types = _both(scope.graph, [z], feed)
    assert "_GatherScaleSum" not in types
    _same_bits(fused, plain)


def test_shapes_the_pass_does_not_cover_run_the_nodes(scope):
    """A scale that broadcasts along the features only ([F]), rank-3 rows, empty edges."""
    rng = np.random.default_rng(4)
    x = scope.placeholder(gf.float32, [None, 2, 3])
    src = scope.placeholder(gf.int32, [None])
    per_feature = scope.placeholder(gf.float32, None)
    y = _layer(scope, x, src, src, 4, per_feature)
    x_value = rng.normal(size=(4, 2, 3)).astype(np.float32)
    for ids, scale in ((np.int32([0, 3, 3, 1]), np.float32([1, 2, 3])),
                       (np.int32([0, 3, 3, 1]), rng.normal(size=(4, 2, 3)).astype(np.float32)),
                       (np.int32([0, 3, 3, 1]), np.float32([[[2]]] * 4)),
                       (np.zeros(0, np.int32), np.float32(2)),
                       (np.int32([0, 1]), np.float32([1, 2, 3, 4]))):
        fused, plain, types = _both(scope.graph, [y], {x: x_value, src: ids, per_feature: scale})
        assert "_GatherScaleSum" in types
        _same_bits(fused, plain)


@settings(max_examples=40, deadline=None)
@given(nodes=st.integers(0, 12), edges=st.integers(0, 60), width=st.integers(1, 5),
       scale=st.sampled_from(sorted(SCALES)), low=st.integers(-3, 0), high=st.integers(0, 3),
       seed=st.integers(0, 2**16))
def test_property_matches_the_graph_as_written(nodes, edges, width, scale, low, high, seed):
    """Random sizes and ids (some negative, some past the end) on either side: the
    rewrite's results or errors are the plain graph's, on every call."""
    rng = np.random.default_rng(seed)
    s = gf.Scope(gf.Graph())
    src = s.placeholder(gf.int64, [None])
    dst = s.placeholder(gf.int32, [None])
    x = s.placeholder(gf.float32, [None, width])
    y = _layer(s, x, src, dst, nodes, SCALES[scale](edges, width, np.float32))
    rows = max(nodes, 1)
    feed = {x: rng.normal(size=(rows, width)).astype(np.float32),
            src: rng.integers(0, rows, edges) + (rng.random(edges) < 0.05) * (high + low),
            dst: rng.integers(low, nodes + high, edges).astype(np.int32) if nodes
            else np.zeros(edges, np.int32) - 1}
    fused, plain, _ = _both(s.graph, [y], feed)
    _same_bits(fused, plain)
