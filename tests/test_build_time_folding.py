"""Build-time folding stays cheap: shape inference never materializes a large constant
(a range, a fill) to learn a shape, small constants are still folded, and static shapes
agree with the run past the folding bound.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import graphflow as gf
from graphflow import inference
from graphflow.errors import InvalidArgumentError


def _range_max(start: int, limit: int, delta: int) -> int | None:
    """The largest element of range(start, limit, delta), None if empty: the reference."""
    values = range(start, limit, delta)
    return max(values[0], values[-1]) if len(values) else None


def _peak_bytes(build) -> tuple:
    tracemalloc.start()
    try:
        result = build()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("start, limit, delta", [
    (0, 200_000_000, 1), (5, 100_000_005, 1), (199_999_999, -1, -1), (0, 200_000_000, 7),
    (3, 3, 1), (-10, 2 ** 31 - 1, 3)])
def test_stitch_of_a_large_range_keeps_its_static_shape_without_computing_it(start, limit, delta):
    s = gf.Scope(gf.Graph())
    n = len(range(start, limit, delta))

    def build():
        indices = s.range(start, limit, delta)
        return indices, s.dynamic_stitch([indices], [s.fill([n], 1.0)])
    (indices, merged), peak = _peak_bytes(build)
    top = _range_max(start, limit, delta)
    assert merged.shape.as_list() == [0 if top is None else top + 1]
    assert indices.shape.as_list() == [n]
    assert peak < 8 << 20, f"shape inference allocated {peak} bytes"


@pytest.mark.parametrize("size", [2 ** 16 + 1, 200_000_000])
def test_large_range_and_fill_are_not_evaluated_at_build_time(size):
    s = gf.Scope(gf.Graph())

    def build():
        outs = [s.range(0, size, 1), s.fill([size], 7), s.fill([size, 3], np.int8(1))]
        return [inference.constant_value(o) for o in outs]
    values, peak = _peak_bytes(build)
    assert values == [None, None, None]
    assert peak < 8 << 20


def test_small_constants_are_still_folded_and_kept():
    s = gf.Scope(gf.Graph())
    r = s.range(0, 10, 3)
    first = inference.constant_value(r)
    np.testing.assert_array_equal(first, [0, 3, 6, 9])
    assert inference.constant_value(r) is first  # computed once
    merged = s.dynamic_stitch([r, [11]], [s.fill([4], 1), [2]])
    assert merged.shape.as_list() == [12]


@pytest.mark.parametrize("indices, expected", [
    (lambda s: [s.fill([100_000], 41)], 42),
    (lambda s: [s.fill([0], 41)], 0),
    (lambda s: [s.range(0, 100_000, 1), [150_000]], 150_001),
    (lambda s: [s.range(0, 100_000, 1), s.placeholder(gf.int32, [None])], None),
    (lambda s: [s.range(0, s.placeholder(gf.int32, []), 1)], None),
])
def test_stitch_first_dim_from_bounds(indices, expected):
    s = gf.Scope(gf.Graph())
    idx = indices(s)
    data = [s.placeholder(gf.float32, shape=i.shape if isinstance(i, gf.Output) else [1])
            for i in (s.constant(i) if not isinstance(i, gf.Output) else i for i in idx)]
    merged, peak = _peak_bytes(lambda: s.dynamic_stitch(idx, data))
    assert merged.shape.as_list() == [expected]
    assert peak < 8 << 20


def test_static_shape_matches_the_run_past_the_folding_bound(run, scope):
    n = inference.MAX_FOLDED_ELEMENTS + 3
    indices = scope.range(n - 1, -1, -1)
    merged = scope.dynamic_stitch([indices], [scope.range(0, n, 1)])
    assert inference.constant_value(indices) is None
    value = run(merged)
    assert merged.shape.as_list() == list(value.shape) == [n]
    np.testing.assert_array_equal(value, np.arange(n)[::-1])


def test_shape_tensor_longer_than_any_rank_is_an_error_not_a_huge_shape():
    s = gf.Scope(gf.Graph())
    shape = s.range(0, 2 ** 31 - 1, 1)
    _, peak = _peak_bytes(lambda: pytest.raises(
        InvalidArgumentError, s.scatter_nd, [[0]], [1], shape).match("at most 254 dims"))
    assert peak < 8 << 20


def test_shape_and_size_past_int32_are_not_folded():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[2 ** 31, 2])
    assert inference.constant_value(s.size(x)) is None
    assert inference.constant_value(s.shape(x)) is None
    np.testing.assert_array_equal(inference.constant_value(s.shape(x, gf.int64)), [2 ** 31, 2])
    assert inference.constant_value(s.size(x, gf.int64)) == 2 ** 32
    assert inference.constant_value(s.rank(x)) == 2


@pytest.mark.parametrize("n", [10**5, 2**31 - 1])
def test_a_node_of_absurdly_many_outputs_is_refused_before_it_is_built(n):
    """num_partitions fits TensorFlow's int32, but 10**5 outputs would be lists of that
    size in every pass: refused at build time, from Python and from a file."""
    scope = gf.Scope(gf.Graph())
    with pytest.raises(gf.errors.InvalidArgumentError, match=f"would have {n} outputs"):
        scope.dynamic_partition([1.0, 2.0], [0, 1], num_partitions=n)
    ok = gf.Scope(gf.Graph())
    ok.dynamic_partition([1.0, 2.0], [0, 1], num_partitions=2)
    graph_def = ok.graph.as_graph_def()
    for node in graph_def["nodes"]:
        if node["op"] == "DynamicPartition":
            node["attrs"]["num_partitions"] = {"int": n}
    with pytest.raises(gf.errors.InvalidArgumentError, match="outputs"):
        gf.import_graph_def(graph_def)
