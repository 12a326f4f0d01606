"""Sum(Mul(x, y), last axis) runs as one node (runtime/product_sum.py): bit for bit the
graph as written (numpy's pairwise summation of the row's products), on every call
after the compile, alone, inside a compiled segment and before its loop is compiled;
not fused where the pattern does not hold."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from support.plan_steps import bits, run_calls
from support.segments import segments_of

import graphflow as gf
from graphflow.ops import product_sum, tiering

CALLS = 3  # the 3rd call runs after the compile (segments: compiled at the 2nd)


def _dot(shape, dtype, axis=-1, keep_dims=False, fetch_product=False, other_reader=False):
    def build(s):
        x = s.placeholder(dtype, shape=[None] * len(shape))
        y = s.placeholder(dtype, shape=[None] * len(shape))
        product = s.mul(x, y)
        out = [s.reduce_sum(product, axis, keep_dims=keep_dims)]
        if fetch_product:
            out.append(product)
        if other_reader:
            out.append(s.neg(product))
        return out, [x, y]
    return build


def _values(shape, dtype, rng, special=False):
    x = rng.normal(size=shape) * 10.0 ** rng.uniform(-3, 3, shape)
    if special and x.size:
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = [np.inf, -0.0, np.nan]
    return x.astype(dtype.as_numpy_dtype)


SHAPES = [(5, 1), (5, 7), (5, 8), (3, 64), (6, 127), (4, 128), (4, 129), (2, 300), (2, 1000),
          (3, 0), (0, 4), (17,), (2, 3, 40), (2, 2, 2, 9)]


@pytest.mark.parametrize("dtype", [gf.float32, gf.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_fused_gives_the_graphs_bits(shape, dtype):
    rng = np.random.default_rng(len(shape) * 1000 + sum(shape))
    feeds = [_values(shape, dtype, rng, special=True), _values(shape, dtype, rng)]
    fast, types = run_calls(_dot(shape, dtype), feeds)
    slow, _ = run_calls(_dot(shape, dtype), feeds, optimize=False)
    assert fast == slow
    assert "_ProductSum" in types and "Mul" not in types


@pytest.mark.parametrize("axis,keep_dims", [(1, False), (-1, True), ([1], True), ([-1], False)])
def test_the_last_axis_however_written(axis, keep_dims):
    rng = np.random.default_rng(3)
    feeds = [_values((4, 9), gf.float32, rng), _values((4, 9), gf.float32, rng)]
    build = _dot((4, 9), gf.float32, axis=axis, keep_dims=keep_dims)
    fast, types = run_calls(build, feeds)
    assert fast == run_calls(build, feeds, optimize=False)[0]
    assert "_ProductSum" in types


@pytest.mark.parametrize("case", [
    dict(axis=0), dict(axis=[0, 1]), dict(fetch_product=True), dict(other_reader=True)],
    ids=["first-axis", "every-axis", "product-fetched", "product-read-elsewhere"])
def test_not_fused_where_the_pattern_does_not_hold(case):
    rng = np.random.default_rng(4)
    feeds = [_values((4, 9), gf.float64, rng), _values((4, 9), gf.float64, rng)]
    build = _dot((4, 9), gf.float64, **case)
    fast, types = run_calls(build, feeds)
    assert fast == run_calls(build, feeds, optimize=False)[0]
    assert "_ProductSum" not in types


def test_broadcast_and_integer_products_are_left_alone():
    def build(s):
        x = s.placeholder(gf.float32, shape=[None, 6])
        w = s.placeholder(gf.float32, shape=[None, 1])
        i = s.placeholder(gf.int32, shape=[None, 6])
        return [s.reduce_sum(s.mul(x, w), 1), s.reduce_sum(s.mul(i, i), 1)], [x, w, i]
    rng = np.random.default_rng(5)
    feeds = [_values((3, 6), gf.float32, rng), _values((3, 1), gf.float32, rng),
             rng.integers(-9, 9, (3, 6)).astype(np.int32)]
    fast, types = run_calls(build, feeds)
    assert fast == run_calls(build, feeds, optimize=False)[0]
    assert "_ProductSum" not in types


def test_before_its_loop_is_compiled_the_nodes_give_the_same_bits(monkeypatch):
    """Tiered compilation: the calls before the loop is ready run the Mul and the Sum."""
    monkeypatch.setattr(tiering.Tiered, "ready", lambda self, *args: False)
    rng = np.random.default_rng(6)
    feeds = [_values((50, 64), gf.float32, rng), _values((50, 64), gf.float32, rng)]
    fast, types = run_calls(_dot((50, 64), gf.float32), feeds)
    assert fast == run_calls(_dot((50, 64), gf.float32), feeds, optimize=False)[0]
    assert "_ProductSum" in types


def test_inside_a_compiled_segment(monkeypatch):
    monkeypatch.setenv("GRAPHFLOW_SEGMENTS", "1")
    monkeypatch.setenv("GRAPHFLOW_TIERED", "0")

    def build(s):  # GatherV2 and Max lower too: the three steps make one segment
        x = s.placeholder(gf.float32, shape=[None, 33])
        y = s.placeholder(gf.float32, shape=[None, 33])
        ids = s.placeholder(gf.int32, shape=[None])
        rows = s.gather_v2(x, ids, 0)
        return [s.reduce_max(s.reduce_sum(s.mul(rows, y), -1), 0)], [x, y, ids]
    rng = np.random.default_rng(7)
    feeds = [_values((20, 33), gf.float32, rng), _values((30, 33), gf.float32, rng),
             rng.integers(0, 20, 30).astype(np.int32)]
    s = gf.Scope(gf.Graph())
    fetches, placeholders = build(s)
    with gf.Session(s.graph) as sess:
        f = sess.make_callable(fetches, placeholders)
        fast = [bits(f(*feeds)) for _ in range(CALLS)]
        segments = segments_of(sess)
        assert any("product_rows" in (seg.source or "") and seg.runs for seg in segments)
    assert fast == run_calls(build, feeds, optimize=False)[0]


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 6), width=st.integers(0, 300), double=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_pairwise_order_matches_numpy(rows, width, double, seed):
    """The compiled loop alone against ``np.add.reduce`` of the product."""
    dtype = np.float64 if double else np.float32
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(rows, width)) * 10.0 ** rng.uniform(-4, 4, (rows, width))).astype(dtype)
    y = rng.normal(size=(rows, width)).astype(dtype)
    out = np.empty(rows, dtype)
    product_sum.product_rows(x, y, out, 0, rows)
    assert out.tobytes() == np.add.reduce(x * y, axis=(1,), dtype=dtype).tobytes()


def test_a_folded_shape_keeps_what_may_fail():
    """The product's Shape folds (static shapes); an index error under it still raises, as
    in TensorFlow, while a product that cannot fail is not computed for the Shape alone."""
    s = gf.Scope(gf.Graph())
    params = s.placeholder(gf.float32, shape=[4, 3])
    ids = s.placeholder(gf.int32, shape=[2, 1])
    shape_of_failing = s.shape(s.mul(s.gather_nd(params, ids), 2.0))
    x = s.placeholder(gf.float32, shape=[4, 3])
    shape_of_safe = s.shape(s.mul(x, 2.0))
    with gf.Session(s.graph) as sess:
        with pytest.raises(gf.errors.InvalidArgumentError, match="GatherNd"):
            for _ in range(CALLS):
                sess.run(shape_of_failing, {params: np.ones((4, 3), np.float32),
                                            ids: np.array([[0], [9]], np.int32)})
        for _ in range(CALLS):
            assert sess.run(shape_of_safe, {x: np.ones((4, 3), np.float32)}).tolist() == [4, 3]
        plan = sess._plan([shape_of_safe], [x])
        assert "Mul" not in [st.op.type for st in plan.steps if st.op is not None]


def test_a_folded_shape_of_a_shape_checked_op_keeps_only_what_it_reads():
    """A BroadcastTo, Reshape or ExpandDims of static shapes and constant operands fails
    only where its shape function failed at build time: a folded Shape of it does not
    compute it, but still computes (and raises) what it reads; a Reshape to a fed shape
    can fail at run time, and runs."""
    s = gf.Scope(gf.Graph())
    params = s.placeholder(gf.float32, shape=[4, 3])
    ids = s.placeholder(gf.int32, shape=[4, 1])
    x = s.placeholder(gf.float32, shape=[4, 3])
    wanted = s.placeholder(gf.int32, shape=[2])
    ones = np.ones((4, 3), np.float32)
    shaped = {"BroadcastTo": lambda v: s.broadcast_to(s.expand_dims(v, 0), [5, 4, 3]),
              "Reshape": lambda v: s.reshape(v, [3, 4]),
              "ExpandDims": lambda v: s.expand_dims(v, 1)}
    with gf.Session(s.graph) as sess:
        for kind, make in shaped.items():
            failing = s.shape(make(s.gather_nd(params, ids)))
            with pytest.raises(gf.errors.InvalidArgumentError, match="GatherNd"):
                for _ in range(CALLS):
                    sess.run(failing, {params: ones, ids: np.array([[0], [1], [9], [2]], np.int32)})
            safe = s.shape(make(x))
            for _ in range(CALLS):
                got = sess.run(safe, {x: ones})
            assert got.tolist() == list(make(x).shape.as_list())
            plan = sess._plan([safe], [x])
            assert kind not in [st.op.type for st in plan.steps if st.op is not None]
        fed_shape = s.shape(s.reshape(x, wanted))
        with pytest.raises(gf.errors.InvalidArgumentError, match="Reshape"):
            sess.run(fed_shape, {x: ones, wanted: np.array([5, 5], np.int32)})
