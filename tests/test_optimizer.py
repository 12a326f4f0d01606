"""The partition -> element-wise -> stitch rewrite gives exactly the results of
the graph as written, and leaves other graphs alone."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError

CHAIN_OPS = ["add", "sub", "mul", "maximum", "minimum", "neg", "identity", "real_div"]


def _pipeline(scope, x, partitions, k, chains, stitch="dynamic_stitch", swap=False):
    parts = scope.dynamic_partition(x, partitions, num_partitions=k)
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), partitions, num_partitions=k)
    branches = []
    for part, chain in zip(parts, chains):
        v = part
        for name, c in chain:
            if name in ("neg", "identity"):
                v = getattr(scope, name)(v)
            elif swap:
                v = getattr(scope, name)(np.float32(c), v)
            else:
                v = getattr(scope, name)(v, np.float32(c))
        branches.append(v)
    return getattr(scope, stitch)(rows, branches)


def _run_both(graph, fetch, feed):
    results = []
    for optimize in (True, False):
        with gf.Session(graph, gf.SessionConfig(optimize=optimize)) as sess:
            results.append(sess.run(fetch, feed))
            fused = any(s.op is not None and s.op.type == "_PartitionedSelect"
                        for s in sess._plan([fetch], list(feed)).steps)
            if optimize:
                was_fused = fused
    return results, was_fused


def test_seed_pipeline_is_fused_and_exact(scope):
    x = scope.placeholder(gf.float32, shape=[None])
    mask = scope.cast(scope.not_equal(x, np.float32(-1)), gf.int32)
    out = _pipeline(scope, x, mask, 2, [[], [("add", 1.0)]])
    feed = {x: np.array([0.1, -1, 5.2, 4.3, -1, 7.4], np.float32)}
    (fused, plain), was_fused = _run_both(scope.graph, out, feed)
    assert was_fused
    np.testing.assert_array_equal(fused, plain)
    np.testing.assert_allclose(fused, [1.1, -1, 6.2, 5.3, -1, 8.4], rtol=1e-6)


@given(st.integers(1, 4), st.lists(st.floats(-100, 100, width=32), min_size=0, max_size=40),
       st.data(), st.booleans(), st.sampled_from(["dynamic_stitch", "parallel_dynamic_stitch"]))
def test_random_pipelines_match_unfused(k, values, data, swap, stitch):
    scope = gf.Scope(gf.Graph())
    n = len(values)
    ids = np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)), np.int32)
    chains = [data.draw(st.lists(st.tuples(st.sampled_from(CHAIN_OPS), st.floats(0.5, 3, width=32)),
                                 max_size=3)) for _ in range(k)]
    x = scope.placeholder(gf.float32, shape=[None])
    p = scope.placeholder(gf.int32, shape=[None])
    out = _pipeline(scope, x, p, k, chains, stitch, swap)
    (fused, plain), was_fused = _run_both(scope.graph, out, {x: np.array(values, np.float32), p: ids})
    assert was_fused
    np.testing.assert_array_equal(fused, plain)


def test_out_of_range_partition_is_the_same_error(scope):
    x = scope.placeholder(gf.float32, shape=[None])
    p = scope.placeholder(gf.int32, shape=[None])
    out = _pipeline(scope, x, p, 2, [[], [("add", 1.0)]])
    feed = {x: np.zeros(4, np.float32), p: np.array([0, 1, 5, 0], np.int32)}
    messages = []
    for optimize in (True, False):
        with gf.Session(scope.graph, gf.SessionConfig(optimize=optimize)) as sess:
            with pytest.raises(InvalidArgumentError) as info:
                sess.run(out, feed)
            messages.append(info.value.message)
    assert "partitions[2] = 5 is not in [0, 2)" in messages[0] == messages[1]


def test_other_graphs_are_left_alone(scope):
    x = scope.placeholder(gf.float32, shape=[None])
    p = scope.placeholder(gf.int32, shape=[None])
    parts = scope.dynamic_partition(x, p, num_partitions=2)
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), p, num_partitions=2)
    # a reduction-like op (concat) in a branch is not element-wise: no rewrite
    out = scope.dynamic_stitch([rows[1], rows[0]], [parts[1], scope.mul(parts[0], parts[0])])
    feed = {x: np.arange(5, dtype=np.float32), p: np.array([1, 0, 1, 1, 0], np.int32)}
    (a, b), was_fused = _run_both(scope.graph, out, feed)
    np.testing.assert_array_equal(a, b)
    assert not was_fused  # x * x of a partition is not "op with a scalar"
    np.testing.assert_array_equal(a, [0, 1, 2, 3, 16])
