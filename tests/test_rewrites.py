"""The plan's rewrites (runtime/pipeline.py, folding.py, simplify.py, specialize.py):
each alone against ``optimize=False`` bit for bit, every control dependency of what a
rewrite replaces kept, and random graphs run the same with every rewrite on and off,
with shape-specialized and general plans."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError


def _kernel_types(sess, fetches, feeds=()):
    plan = sess._plan(list(fetches), list(feeds))
    return [s.op.type for s in plan.steps if s.op is not None]


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.tobytes() == b.tobytes()


SPECIALS = np.array([1.5, -0.0, 0.0, np.nan, -np.inf, 3e38, -7.25, 1e-45], np.float32)


# -- each simplification alone --------------------------------------------------------------
CASES = {
    "identity": lambda s, x: s.identity(x),
    "identity_chain": lambda s, x: s.identity(s.identity(s.identity(x))),
    "reshape_same": lambda s, x: s.reshape(x, [8]),
    "broadcast_same": lambda s, x: s.broadcast_to(x, [8]),
    "sum_no_axes": lambda s, x: s.sum(x, np.zeros(0, np.int32)),
    "times_one": lambda s, x: s.mul(x, np.float32(1)),
    "one_times": lambda s, x: s.mul(np.ones(8, np.float32), x),
    "over_one": lambda s, x: s.real_div(x, np.float32(1)),
    "plus_minus_zero": lambda s, x: s.add(x, np.float32(-0.0)),
    "minus_zero": lambda s, x: s.sub(x, np.float32(0.0)),
    "neg_neg": lambda s, x: s.neg(s.neg(x)),
    "cast_same": lambda s, x: s.cast(x, gf.float32),
    "add_n_one": lambda s, x: s.add_n([x]),
    "add_n_two_as_add": lambda s, x: s.add_n([x, s.mul(x, np.float32(3))]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_simplification_alone_is_bit_exact(name):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[8])
    y = s.mul(CASES[name](s, x), s.neg(x))  # a reader after the simplified node
    with gf.Session(s.graph) as opt, \
            gf.Session(s.graph, gf.SessionConfig(optimize=False)) as plain:
        got, want = opt.run(y, {x: SPECIALS}), plain.run(y, {x: SPECIALS})
        assert _same_bits(got, want)
        kernels = _kernel_types(opt, [y], [x])
    assert len(kernels) == 1, kernels  # only the reader (Mul(x, Neg(x)) fused) is left



def test_a_fed_value_is_not_looked_through():
    """-(-x) is x, but not where the inner Neg's value is fed: the feed is what the
    outer Neg negates (a specialized plan too: the partition's size changes)."""
    g = gf.Graph()
    s = gf.Scope(g)
    mask = s.placeholder(gf.bool, shape=[3])
    parts = s.dynamic_partition(s.constant(np.array([1.0, 2.0, 3.0], np.float32)),
                                s.cast(mask, gf.int32), num_partitions=2)
    inner = s.neg(parts[0])
    outer = s.neg(inner)
    fed = np.array([-5.0, 7.0], np.float32)
    for m in ([False, False, True], [False, True, False], [False, True, False]):
        with gf.Session(g) as sess:
            for _ in range(3):
                got = sess.run(outer, {inner: fed, mask: np.array(m)})
                np.testing.assert_array_equal(got, -fed)

@pytest.mark.parametrize("value", [np.float32(0.0), np.zeros(8, np.float32)])
def test_adding_positive_zero_is_not_simplified(value):
    """x + (+0.0) turns -0.0 into +0.0: it stays, and the result keeps that bit."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[8])
    y = s.add(x, value)
    with gf.Session(s.graph) as sess:
        got = sess.run(y, {x: SPECIALS})
        assert _kernel_types(sess, [y], [x]) == ["Add"]
    assert not np.signbit(got[1])


@pytest.mark.parametrize("op", ["mul", "add", "sub", "real_div", "maximum"])
@pytest.mark.parametrize("source_shape", [[4, 1], [1, 8], [8], []])
@pytest.mark.parametrize("broadcast_first", [True, False])
def test_a_broadcast_to_an_operands_shape_is_left_to_the_op(op, source_shape, broadcast_first):
    """``op(BroadcastTo(g, [4, 8]), x)`` with x of [4, 8] runs as ``op(g, x)`` (no
    BroadcastTo step), bit for bit, NaN, infinities and signed zeros included; the
    BroadcastTo is still computed for another reader."""
    rng = np.random.default_rng(3)
    g_value = rng.choice(SPECIALS, size=source_shape).astype(np.float32)
    x_value = rng.choice(SPECIALS, size=(4, 8)).astype(np.float32)
    s = gf.Scope(gf.Graph())
    g = s.placeholder(gf.float32, shape=source_shape)
    x = s.placeholder(gf.float32, shape=[4, 8])
    wide = s.broadcast_to(g, [4, 8])
    operands = (wide, x) if broadcast_first else (x, wide)
    y = getattr(s, op)(*operands)
    feeds = {g: g_value, x: x_value}
    with gf.Session(s.graph) as opt, \
            gf.Session(s.graph, gf.SessionConfig(optimize=False)) as plain:
        for _ in range(3):
            assert _same_bits(opt.run(y, feeds), plain.run(y, feeds))
        assert "BroadcastTo" not in _kernel_types(opt, [y], [g, x])
        both = [opt.run([y, wide], feeds) for _ in range(3)][-1]
        for got, want in zip(both, plain.run([y, wide], feeds)):
            assert _same_bits(got, want)
        assert "BroadcastTo" in _kernel_types(opt, [y, wide], [g, x])


def test_a_broadcast_to_a_larger_shape_than_the_other_operand_stays():
    """x of [1, 8] with BroadcastTo(g, [4, 8]): the result needs the broadcast's rows."""
    s = gf.Scope(gf.Graph())
    g = s.placeholder(gf.float32, shape=[4, 1])
    x = s.placeholder(gf.float32, shape=[1, 8])
    y = s.mul(s.broadcast_to(g, [4, 8]), x)
    with gf.Session(s.graph) as sess:
        got = sess.run(y, {g: np.arange(4, dtype=np.float32).reshape(4, 1),
                           x: np.ones((1, 8), np.float32)})
        assert "BroadcastTo" in _kernel_types(sess, [y], [g, x])
    np.testing.assert_array_equal(got, np.repeat(np.arange(4, dtype=np.float32)[:, None], 8, 1))


def test_a_constant_that_broadcasts_x_is_not_an_identity():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[1])
    y = s.mul(x, np.ones(3, np.float32))
    with gf.Session(s.graph) as sess:
        assert sess.run(y, {x: [2.0]}).tolist() == [2.0, 2.0, 2.0]


def test_an_add_n_that_could_broadcast_stays_an_add_n():
    """AddN refuses inputs of two shapes where Add would broadcast them: with a shape
    unknown at plan time it stays, and so does its error."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[None])
    y = s.placeholder(gf.float32, shape=[None])
    total = s.add_n([x, y])
    with gf.Session(s.graph) as sess:
        assert sess.run(total, {x: [1.0, 2.0], y: [3.0, 4.0]}).tolist() == [4.0, 6.0]
        assert "AddN" in _kernel_types(sess, [total], [x, y])
        with pytest.raises(gf.errors.InvalidArgumentError, match="same size and shape"):
            sess.run(total, {x: [1.0, 2.0], y: [3.0]})


def test_integers_add_zero_and_multiply_by_one():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.int64, shape=[3])
    y = s.neg(s.add(s.mul(x, np.int64(1)), np.int64(0)))
    with gf.Session(s.graph) as sess:
        assert sess.run(y, {x: [1, -2, 2**62]}).tolist() == [-1, 2, -2**62]
        assert _kernel_types(sess, [y], [x]) == ["Neg"]


# -- control dependencies are kept (issue 25, items 1 and 2) -----------------------------------
def _counter(s):
    v = s.variable(np.int32(0), name="counter")
    inc = v.assign_add(np.int32(1), read_value=False)
    return v, inc


@pytest.mark.parametrize("optimize", [True, False])
def test_a_folded_constant_keeps_its_control_inputs(optimize):
    s = gf.Scope(gf.Graph())
    v, inc = _counter(s)
    c = s.with_control_dependencies([inc]).constant(np.float32(5))
    y = s.add(c, np.float32(1))
    with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
        sess.run(v.initializer)
        for _ in range(3):
            assert sess.run(y) == 6.0
        assert sess.run(v.read()) == 3


@pytest.mark.parametrize("optimize", [True, False])
def test_the_partition_stitch_rewrite_keeps_the_ranges_control_inputs(optimize):
    s = gf.Scope(gf.Graph())
    v, inc = _counter(s)
    x = s.placeholder(gf.float32, shape=[6])
    mask = s.cast(s.greater(x, np.float32(0)), gf.int32)
    parts = s.dynamic_partition(x, mask, num_partitions=2)
    rows = s.dynamic_partition(s.with_control_dependencies([inc]).range(0, s.size(x), 1),
                               mask, num_partitions=2)
    y = s.dynamic_stitch(rows, [s.neg(parts[0]), s.mul(parts[1], np.float32(2))])
    data = np.array([1, -2, 3, -4, 0, 5], np.float32)
    with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
        sess.run(v.initializer)
        for _ in range(3):
            np.testing.assert_array_equal(sess.run(y, {x: data}), np.where(data > 0, 2 * data,
                                                                            -data))
        assert sess.run(v.read()) == 3


def test_a_constant_waiting_on_an_update_is_written_after_it():
    """assign(w, c) with c waiting on inc: w gets c, and inc has run before."""
    s = gf.Scope(gf.Graph())
    v, inc = _counter(s)
    w = s.variable(np.int32(0), name="w")
    c = s.with_control_dependencies([inc]).constant(np.int32(7))
    update = w.assign(s.add(c, np.int32(1)), read_value=False)
    with gf.Session(s.graph) as sess:
        sess.run(gf.global_variables_initializer(s.graph))
        sess.run(update)
        assert sess.run(w.read()) == 8 and sess.run(v.read()) == 1


def test_a_folded_shape_still_runs_its_input():
    """Shape(x) with x's shape known folds, yet x's kernel still runs: its error stays."""
    s = gf.Scope(gf.Graph())
    t = s.placeholder(gf.float32, shape=[4])
    bad = s.tensor_scatter_update(t, np.array([[9]], np.int32), np.ones(1, np.float32))
    shape = s.shape(bad)
    with gf.Session(s.graph) as sess:
        with pytest.raises(InvalidArgumentError, match="does not index"):
            sess.run(shape, {t: np.zeros(4, np.float32)})


# -- random graphs with stateful counters under control dependencies ---------------------------
@st.composite
def counter_graphs(draw):
    """Ops drawn over constants, a fed value and counters; some built under control
    dependencies on counter increments."""
    n = draw(st.integers(2, 10))
    steps = [draw(st.tuples(st.sampled_from(["const", "add", "mul", "identity", "reshape",
                                             "shape", "range", "neg"]),
                            st.integers(0, 100), st.booleans(), st.integers(0, 2)))
             for _ in range(n)]
    return steps


def _build(steps):
    s = gf.Scope(gf.Graph())
    counters = [s.variable(np.int32(0), name=f"c{i}") for i in range(3)]
    incs = [c.assign_add(np.int32(1), read_value=False) for c in counters]
    x = s.placeholder(gf.float32, shape=[4], name="x")
    values = [x, s.constant(np.float32(2))]
    for kind, pick, waits, which in steps:
        b = s.with_control_dependencies([incs[which]]) if waits else s
        a = values[pick % len(values)]
        if kind == "const":
            out = b.constant(np.float32(pick))
        elif kind == "add":
            out = b.add(a, values[(pick // 7) % len(values)])
        elif kind == "mul":
            out = b.mul(a, np.float32(1))
        elif kind == "identity":
            out = b.identity(a)
        elif kind == "reshape":
            out = b.reshape(a, [-1])
        elif kind == "shape":
            out = b.cast(b.size(a), gf.float32)
        elif kind == "range":
            out = b.cast(b.range(0, 4, 1), gf.float32)
        else:
            out = b.neg(a)
        values.append(out)
    total = values[-1]
    for v in values[2:-1]:
        total = s.add(total, s.sum(v, s.range(0, s.rank(v), 1)))
    return s.graph, total, x, counters


@settings(max_examples=25, deadline=None)
@given(counter_graphs())
def test_counters_count_the_same_with_rewrites_on_and_off(steps):
    results = []
    for optimize in (True, False):
        graph, total, x, counters = _build(steps)
        with gf.Session(graph, gf.SessionConfig(optimize=optimize)) as sess:
            sess.run(gf.global_variables_initializer(graph))
            outs = [sess.run(total, {x: np.arange(4, dtype=np.float32)}) for _ in range(3)]
            counts = [int(sess.run(c.read())) for c in counters]
        results.append((outs, counts))
    (outs_on, counts_on), (outs_off, counts_off) = results
    assert counts_on == counts_off
    assert all(_same_bits(a, b) for a, b in zip(outs_on, outs_off))


# -- shape-specialized plans ----------------------------------------------------------------------
@st.composite
def shape_graphs(draw):
    ops = draw(st.lists(st.sampled_from(["add", "mul_one", "shape_fill", "reshape", "sum",
                                         "gather", "scatter"]), min_size=1, max_size=8))
    n = draw(st.integers(1, 6))
    return ops, n


def _shape_graph(ops):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[None])
    h = x
    for kind in ops:
        if kind == "add":
            h = s.add(h, x)
        elif kind == "mul_one":
            h = s.mul(h, np.float32(1))
        elif kind == "shape_fill":
            h = s.add(h, s.fill(s.shape(h), np.float32(0.5)))
        elif kind == "reshape":
            h = s.reshape(s.reshape(h, [-1, 1]), s.shape(x))
        elif kind == "sum":
            h = s.add(h, s.sum(h, [0], keep_dims=True))
        elif kind == "gather":
            h = s.gather_nd(h, s.expand_dims(s.range(s.size(h) - 1, -1, -1), 1))
        else:
            h = s.tensor_scatter_add(h, [[0]], np.ones(1, np.float32))
    return s.graph, x, h


@settings(max_examples=20, deadline=None)
@given(shape_graphs())
def test_specialized_plans_give_the_general_plans_bits(case):
    ops, n = case
    graph, x, h = _shape_graph(ops)
    data = np.linspace(-3, 3, n).astype(np.float32)
    with gf.Session(graph) as opt, gf.Session(graph, gf.SessionConfig(optimize=False)) as plain:
        f = opt.make_callable(h, [x])
        want = plain.run(h, {x: data})
        for _ in range(3):  # general, then specialized from the second sighting on
            assert _same_bits(f(data), want)
        (plan,) = opt._plans.values()
        assert (data.shape,) in plan.specialized


def test_specialized_plans_are_bounded_and_fall_back():
    from graphflow.runtime.specialize import MAX_SPECIALIZED
    graph, x, h = _shape_graph(["add", "shape_fill"])
    with gf.Session(graph) as sess:
        f = sess.make_callable(h, [x])
        for n in range(1, MAX_SPECIALIZED + 4):
            for _ in range(2):
                np.testing.assert_array_equal(f(np.ones(n, np.float32)), 2.5)
        (plan,) = sess._plans.values()
        assert len(plan.specialized) == MAX_SPECIALIZED


def test_a_specialized_plan_folds_the_gradient_shapes():
    """The sparse training step's gradient graph becomes a handful of kernels."""
    s = gf.Scope(gf.Graph())
    table = s.variable(np.ones((50, 4), np.float32), name="table")
    ids = s.placeholder(gf.int32, shape=[None])
    t = s.placeholder(gf.float32, shape=[None, 4])
    d = s.sub(s.mul(table.sparse_read(ids), np.float32(0.5)), t)
    loss = s.sum(s.mul(d, d), [0, 1])
    train = gf.train.GradientDescentOptimizer(0.1).minimize(loss)
    with gf.Session(s.graph) as sess, gf.Session(s.graph, gf.SessionConfig(optimize=False)) as p:
        sess.run(table.initializer)
        p.run(table.initializer)
        i, tt = np.array([3, 7, 3], np.int32), np.zeros((3, 4), np.float32)
        f = sess.make_callable([train, loss], [ids, t])
        for _ in range(3):
            got = f(i, tt)[1]
            want = p.run([train, loss], {ids: i, t: tt})[1]
            assert _same_bits(got, want)
        assert _same_bits(sess.run(table.read()), p.run(table.read()))
        (plan,) = [q for q in sess._plans.values() if q.feeds == [ids, t]]
        special = plan.specialized[((3,), (3, 4))]
        types = [st.op.type for st in special.steps if st.op is not None]
        assert not {"Shape", "Size", "Fill", "BroadcastGradientArgs", "OnesLike"} & set(types)
        assert len(types) < len([st for st in plan.steps if st.op is not None])


# -- parallel plans report the first error in plan order (issue 25, item 20) ---------------------
def test_a_parallel_plan_reports_the_first_failing_node_in_plan_order():
    n = 1 << 17
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[n])
    first = s.tensor_scatter_update(s.mul(x, 2.0), [[n + 1]], [1.0], name="first")
    second = s.tensor_scatter_update(s.mul(x, 3.0), [[n + 2]], [1.0], name="second")
    y = s.add(first, second)
    with gf.Session(s.graph, gf.SessionConfig(inter_op_threads=4)) as sess:
        assert sess._plan([y], [x]).parallel
        for _ in range(10):
            with pytest.raises(InvalidArgumentError) as e:
                sess.run(y, {x: np.zeros(n, np.float32)})
            assert e.value.node_name == "first"
