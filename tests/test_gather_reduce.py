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
    assert "_GatherReduce" in types and "UnsortedSegmentSum" not in types
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
    assert types.count("_GatherReduce") == 2 and "ScatterNd" not in types
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
    assert "_GatherReduce" in types
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
    assert "_GatherReduce" not in types
    _same_bits(fused, plain)
    z = scope.add(y, scope.reduce_sum(scaled))
    fused, plain, types = _both(scope.graph, [z], feed)
    assert "_GatherReduce" not in types
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
        assert "_GatherReduce" in types
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


# -- combines other than a scale, activations, max and min ---------------------------------------
COMBINES = ["Mul", "Add", "Sub", "RealDiv"]
SEGMENT_REDUCES = {"sum": "unsorted_segment_sum", "max": "unsorted_segment_max",
                   "min": "unsorted_segment_min"}


def _message(s, params, src, dst, n, edge, combine, edge_first, relu, reduce):
    """reduce_by_dst(relu?(params[src] (combine) edge)), edge on either side."""
    rows = s.gather_v2(params, src, 0)
    build = {"Mul": s.mul, "Add": s.add, "Sub": s.sub, "RealDiv": s.real_div}[combine]
    rows = build(edge, rows) if edge_first else build(rows, edge)
    if relu:
        rows = s.relu(rows)
    return getattr(s, SEGMENT_REDUCES[reduce])(rows, dst, n)


def _awkward(rng, shape, dtype):
    """Values with the IEEE corners in them: signed zeros, infinities, NaN, ties."""
    x = rng.normal(size=shape)
    flat = x.reshape(-1)
    if flat.size >= 8:
        flat[rng.choice(flat.size, 8, replace=False)] = [0.0, -0.0, np.inf, -np.inf, np.nan,
                                                        1.0, 1.0, -1.0]
    return x.astype(dtype)


@pytest.mark.parametrize("reduce", sorted(SEGMENT_REDUCES))
@pytest.mark.parametrize("combine", COMBINES)
@pytest.mark.parametrize("edge_kind", ["one", "per_edge", "full"])
@pytest.mark.parametrize("relu", [False, True])
def test_every_combine_and_reduction_is_fused_and_bit_exact(scope, reduce, combine, edge_kind,
                                                            relu):
    """GINE's relu(x_j + e_ij) summed, GraphSAGE's max of x_j * w_ij, and every other
    pairing, with NaN, infinities and signed zeros in the rows and the edge data: the bits
    (and the empty segments' lowest()/highest()) of the graph as written."""
    rng = np.random.default_rng(len(combine) * 7 + len(reduce) + relu)
    nodes, edges, width = 9, 60, 5
    src = rng.integers(0, nodes, edges).astype(np.int32)
    dst = rng.integers(-1, nodes + 2, edges).astype(np.int64) % (nodes + 2) - 1  # some drop
    x = scope.placeholder(gf.float32, [None, width])
    edge_shape = {"one": (), "per_edge": (edges, 1), "full": (edges, width)}[edge_kind]
    edge = scope.placeholder(gf.float32, [None] * len(edge_shape))
    outs = [_message(scope, x, src, np.minimum(dst, nodes - 1), nodes, edge, combine, first,
                     relu, reduce) for first in (False, True)]
    feed = {x: _awkward(rng, (nodes, width), np.float32),
            edge: _awkward(rng, edge_shape, np.float32)}
    fused, plain, types = _both(scope.graph, outs, feed)
    assert types.count("_GatherReduce") == 2, types
    assert combine not in types and "Relu" not in types
    _same_bits(fused, plain)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_max_and_min_errors_and_empty_segments(scope, reduce):
    """An id past the end is the reduction's own error (the session stays usable); a
    segment no edge names holds lowest() / highest(), as TF's kernel leaves it."""
    src = scope.placeholder(gf.int32, [None])
    dst = scope.placeholder(gf.int32, [None])
    x = scope.placeholder(gf.float64, [None, 3])
    y = _message(scope, x, src, dst, 6, np.float64(2.0), "Mul", False, False, reduce)
    ids = np.array([0, 1, 1, 4], np.int32)
    good = {x: np.arange(15, dtype=np.float64).reshape(5, 3), src: ids, dst: ids}
    fused, plain, types = _both(scope.graph, [y], good)
    assert "_GatherReduce" in types
    _same_bits(fused, plain)
    info = np.finfo(np.float64)
    assert fused[0][5].tolist() == [info.min if reduce == "max" else info.max] * 3
    bad = {**good, dst: np.array([0, 1, 6, 4], np.int32)}
    fused, plain, _ = _both(scope.graph, [y], bad)
    assert isinstance(fused, tuple) and fused == plain
    assert fused[2] == f"UnsortedSegment{reduce.capitalize()}"


def test_a_max_layer_trains_as_written(scope):
    """A max's gradient compares every message with its segment's winner, so in training
    the messages are read twice and the forward stays as written (fused only where the
    messages are the reduction's alone: inference); the step's bits are the graph's."""
    rng = np.random.default_rng(9)
    nodes, edges = 12, 80
    src, dst = (rng.integers(0, nodes, edges).astype(np.int32) for _ in range(2))
    w = scope.variable(rng.normal(size=(4, 4)).astype(np.float32), name="w")
    x = scope.placeholder(gf.float32, [nodes, 4])
    weight = rng.random((edges, 1)).astype(np.float32)
    h = _message(scope, scope.matmul(x, w), src, dst, nodes, weight, "Mul", False, True, "max")
    loss = scope.reduce_sum(scope.square(h))
    grad = gf.gradients(loss, [w])[0]
    feed = {x: rng.normal(size=(nodes, 4)).astype(np.float32)}
    results = []
    for optimize in (True, False):
        with gf.Session(scope.graph, gf.SessionConfig(optimize=optimize)) as sess:
            sess.run(gf.global_variables_initializer(scope.graph))
            for _ in range(CALLS):
                got = sess.run([loss, grad], feed)
            results.append(got)
            if optimize:
                assert "_GatherReduce" not in _steps(sess, [loss, grad], [x])
                assert "_GatherReduce" in _steps(sess, [loss], [x])
    _same_bits(results[0], results[1])

