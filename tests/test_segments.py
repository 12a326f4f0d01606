"""Compiled segments (runtime/segments.py): runs of lowered steps computed by one
generated numba function give the bits of ``optimize=False`` (every node's own
kernel), report the same errors naming the same node, write no variable twice, and
step aside (the steps one by one) until compiled."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.segments import outcome, segments_of
from support.threads import run_in_threads

import graphflow as gf
from graphflow.ops import tiering
from graphflow.runtime import segments as segment_runtime

CALLS = 3  # the first call runs the steps; the segment compiles at the second


@pytest.fixture(autouse=True)
def segments_on(monkeypatch):
    """tests/conftest.py turns segments off for the rest of the suite."""
    monkeypatch.setenv("GRAPHFLOW_SEGMENTS", "1")


def _run(build, feeds, optimize: bool, calls: int = CALLS):
    """Each call's outcome of ``build(scope) -> (fetches, placeholders, init)`` and the
    session's segments."""
    s = gf.Scope(gf.Graph())
    fetches, placeholders, init = build(s)
    with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
        if init is not None:
            sess.run(init)
        step = sess.make_callable(fetches, placeholders)
        outcomes = [outcome(lambda: step(*feeds)) for _ in range(calls)]
        return outcomes, segments_of(sess)


def _bits(value):
    if isinstance(value, (list, tuple)):
        return [_bits(v) for v in value]
    if value is None:
        return None
    value = np.asarray(value)
    return value.dtype.str, value.shape, value.tobytes()


def _assert_same(got, want):
    assert [k for k, _ in got] == [k for k, _ in want], (got, want)
    for (kind, a), (_, b) in zip(got, want):
        assert (_bits(a) if kind == "ok" else a) == (_bits(b) if kind == "ok" else b)


def _check(build, feeds, compiled: bool = True):
    """``build``'s graph gives optimize=False's bits on every call, and (``compiled``)
    ran in a compiled segment."""
    got, segments = _run(build, feeds, optimize=True)
    want, _ = _run(build, feeds, optimize=False)
    _assert_same(got, want)
    if compiled:
        assert segments and any(seg.runs for seg in segments), "no segment ran"
    return got


# -- one op at a time, between two element-wise steps ---------------------------------------------
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8]


def _around(s, x, dtype):
    """``x`` through an element-wise step, so that the op under test has lowered
    neighbours."""
    return s.add(x, np.ones((), dtype))


@pytest.mark.parametrize("fed", [True, False], ids=["fed", "constant"])
@pytest.mark.parametrize("op", ["add", "sub", "update", "min", "max"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_scatter_in_a_segment(op, dtype, fed):
    indices = np.array([[1, 2], [0, 0], [1, 2], [3, 1]], np.int32)  # a duplicate
    updates = (np.arange(8) % 7).astype(dtype).reshape(4, 2)
    tensor = (np.arange(32) % 5).astype(dtype).reshape(4, 4, 2)

    def build(s):
        t = s.placeholder(gf.as_dtype(dtype), shape=tensor.shape)
        i = s.placeholder(gf.int32, shape=indices.shape) if fed else indices
        y = getattr(s, f"tensor_scatter_{op}")(_around(s, t, dtype), i, updates)
        return _around(s, y, dtype), [t, i] if fed else [t], None
    _check(build, [tensor, indices] if fed else [tensor])


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES + [np.bool_])
def test_gather_nd_in_a_segment(dtype, depth):
    params = (np.arange(24) % 7).astype(dtype).reshape(4, 3, 2)
    indices = np.array([[3, 1], [0, 2], [3, 1]], np.int64)[:, :depth]

    def build(s):
        p = s.placeholder(gf.as_dtype(dtype), shape=params.shape)
        i = s.placeholder(gf.int64, shape=indices.shape)
        y = s.gather_nd(s.reshape(p, [4, 3, 2]), i)
        return s.expand_dims(s.reshape(y, [-1]), 0), [p, i], None
    _check(build, [params, indices])


@pytest.mark.parametrize("op", ["add", "sub", "mul", "real_div", "maximum", "minimum", "equal",
                                "less", "greater"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_ops_in_a_segment(op, dtype):
    if op == "real_div" and np.dtype(dtype).kind != "f":
        pytest.skip("RealDiv takes floats")
    a = (np.arange(12) % 5 - 2).astype(dtype).reshape(3, 4)
    b = (np.arange(12) % 3 + 1).astype(dtype).reshape(3, 4)

    def build(s):
        x = s.placeholder(gf.as_dtype(dtype), shape=a.shape)
        y = s.placeholder(gf.as_dtype(dtype), shape=b.shape)
        # a control input keeps each op out of fused regions: lowered one by one
        waits = s.with_control_dependencies([s.no_op()])
        r = getattr(waits, op)(x, y)
        r2 = getattr(waits, op)(x, np.asarray(3, dtype))
        return [s.reshape(r, [12]), s.reshape(r2, [12])], [x, y], None
    _check(build, [a, b])


UNARY_AND_MORE = {
    "neg": lambda s, x, y: s.neg(x),
    "cast_to_int": lambda s, x, y: s.cast(s.greater(x, y), gf.int32),
    "cast_to_float": lambda s, x, y: s.cast(s.cast(x, gf.int64), gf.float32),
    "select": lambda s, x, y: s.select_v2(s.less(x, y), x, y),
    "logical": lambda s, x, y: s.logical_not(s.logical_and(s.less(x, y), s.greater(x, 0.5))),
    "squeeze": lambda s, x, y: s.squeeze(s.expand_dims(x, 1)),
    "dense_math": lambda s, x, y: s.relu6(s.abs(s.floor(s.square(s.relu(s.ceil(x)))))),
}


@pytest.mark.parametrize("name", sorted(UNARY_AND_MORE))
def test_other_lowered_ops_in_a_segment(name):
    a = np.array([-2.5, -0.0, 0.0, 0.5, 1.5, np.inf, -7.25, 3.0], np.float32)
    b = np.array([1.0, 0.0, -0.0, 0.75, 1.5, 2.0, -8.0, 3.5], np.float32)

    def build(s):
        x = s.placeholder(gf.float32, shape=[8])
        y = s.placeholder(gf.float32, shape=[8])
        waits = s.with_control_dependencies([s.no_op()])  # one lowered step per op
        r = UNARY_AND_MORE[name](waits, x, y)
        return s.expand_dims(r, 0), [x, y], None
    _check(build, [a, b])


def test_special_float_values_keep_their_bits():
    a = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38, -1.5], np.float32)

    def build(s):
        x = s.placeholder(gf.float32, shape=[8])
        waits = s.with_control_dependencies([s.no_op()])
        m = waits.maximum(waits.mul(x, np.float32(3e38)), waits.sub(x, np.float32(-0.0)))
        return s.gather_nd(s.minimum(m, x), np.arange(8)[::-1].reshape(8, 1)), [x], None
    _check(build, [a])


# -- a training step: reads and writes a variable --------------------------------------------------
def _sgd(batch: int | None = None):
    """W8's step on a [50, 4] table; ``batch`` None: ids of unknown length."""
    table = np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32)

    def build(s):
        var = s.variable(table, name="table")
        ids = s.placeholder(gf.int32, shape=[batch], name="ids")
        target = s.placeholder(gf.float32, shape=[batch, 4], name="target")
        d = s.sub(s.mul(var.sparse_read(ids), np.float32(0.5)), target)
        loss = s.sum(s.mul(d, d), [0, 1])
        train = gf.train.GradientDescentOptimizer(0.1).minimize(loss)
        return [train, loss, var.value()], [ids, target], var.initializer
    return build


def test_a_training_step_runs_in_segments_and_gives_the_same_bits():
    ids = np.array([3, 7, 3, 49], np.int32)  # a duplicate id: its updates add in order
    target = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    _check(_sgd(), [ids, target])


@pytest.mark.parametrize("bad", [50, -1])
def test_a_bad_id_is_the_kernels_error_and_nothing_is_written_twice(bad):
    """The segment's check fails: the steps run one by one from the segment's start,
    and the gather's own kernel reports it; the table is as before the call."""
    target = np.zeros((2, 4), np.float32)
    good = np.array([1, 2], np.int32)
    build = _sgd()
    for optimize in (True, False):
        s = gf.Scope(gf.Graph())
        fetches, (ids, tgt), init = build(s)
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            sess.run(init)
            step = sess.make_callable(fetches, [ids, tgt])
            for _ in range(CALLS):
                step(good, target)
            if optimize:
                assert any(seg.runs for seg in segments_of(sess))
            table = sess.run(fetches[2])
            with pytest.raises(gf.errors.InvalidArgumentError) as err:
                step(np.array([1, bad], np.int32), target)
            assert f"indices[1] = {bad} is not in [0, 50)" in str(err.value)
            assert err.value.node_name == "table/SparseRead"
            np.testing.assert_array_equal(sess.run(fetches[2]), table)
            step(good, target)  # the session goes on
            np.testing.assert_array_equal(sess.run(fetches[2]),
                                          _sgd_reference(table, good, target))


def _sgd_reference(table, ids, target):
    table = table.copy()
    rows = table[ids]
    grad = np.float32(2 * 0.5) * (rows * np.float32(0.5) - target)
    np.subtract.at(table, ids, np.float32(0.1) * grad)
    return table


def test_repeated_blocks_share_one_source(monkeypatch):
    monkeypatch.setattr(segment_runtime, "MAX_SEGMENT_STEPS", 4)
    order = np.arange(16, dtype=np.int32)[::-1].reshape(16, 1)

    def build(s):
        x = s.placeholder(gf.float32, shape=[16])
        h = x
        for _ in range(9):
            h = s.gather_nd(s.add(h, np.float32(1)), order)
        return h, [x], None
    _, segments = _run(build, [np.linspace(0, 1, 16, dtype=np.float32)], optimize=True)
    assert len(segments) >= 2
    assert len({seg.source for seg in segments[:-1]}) == 1  # the last one is shorter
    _check(build, [np.linspace(0, 1, 16, dtype=np.float32)])


def test_a_plan_run_once_compiles_no_segment():
    _, segments = _run(_sgd(batch=1), [np.array([1], np.int32), np.zeros((1, 4), np.float32)],
                       optimize=True, calls=1)
    assert segments and all(seg.fn is None and not seg.runs for seg in segments)


def test_segments_off(monkeypatch):
    monkeypatch.setenv("GRAPHFLOW_SEGMENTS", "0")
    _, segments = _run(_sgd(), [np.array([1], np.int32), np.zeros((1, 4), np.float32)],
                       optimize=True)
    assert segments == []


def test_tiered_segments_run_the_steps_until_compiled(monkeypatch):
    """Tiered: the specialized plan is built in the background from call 2; call 3 is
    its first, which runs the segments' steps (their compile is asked for from the
    next call on)."""
    monkeypatch.setenv("GRAPHFLOW_TIERED", "1")
    feeds = [np.array([2, 2], np.int32), np.ones((2, 4), np.float32)]
    s = gf.Scope(gf.Graph())
    fetches, placeholders, init = _sgd()(s)
    with gf.Session(s.graph) as sess:
        sess.run(init)
        step = sess.make_callable(fetches, placeholders)
        got = [outcome(lambda: step(*feeds)) for _ in range(2)]
        deadline = time.monotonic() + 120
        while tiering.compiles_pending():  # the specialized plan's build
            assert time.monotonic() < deadline
            time.sleep(0.02)
        got.append(outcome(lambda: step(*feeds)))
        segments = segments_of(sess)
    want, _ = _run(_sgd(), feeds, optimize=False, calls=3)
    _assert_same(got, want)
    assert segments and not any(seg.runs for seg in segments)


def test_a_segment_compiles_once_for_writeable_and_read_only_values():
    """A segment's arguments are typed read-only and C-contiguous
    (runtime/segments.read_only): a value some kernel made (writeable), a feed or a view
    (read-only) and a strided one run one compiled function, where numba would compile
    one for each, and the value keeps its flags."""
    order = np.arange(16, dtype=np.int32)[::-1].reshape(16, 1)
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[16])
    h = x
    for _ in range(3):
        h = s.gather_nd(s.add(h, np.float32(1)), order)
    feed = np.linspace(0, 1, 16, dtype=np.float32)
    with gf.Session(s.graph) as sess:
        step = sess.make_callable(h, [x])
        for _ in range(3):
            step(feed)
        (segment,) = segments_of(sess)
        (arg,) = segment.args
        frozen = feed.copy()
        frozen.flags.writeable = False
        strided = np.repeat(feed, 2)[::2]  # another layout: copied, not compiled for
        for value in (feed.copy(), frozen, strided, feed.copy()):
            slots = [None] * (max(arg, *segment.outputs) + 1)
            slots[arg] = value
            assert segment.run(slots)
            one = np.float32(1)
            np.testing.assert_array_equal(slots[segment.outputs[-1]],
                                          (((feed + one) + one) + one)[::-1])
        assert len(segment.fn.signatures) == 1
        assert str(segment.fn.signatures[0][0]).startswith("readonly")
    assert feed.flags.writeable and not frozen.flags.writeable


# -- random chains ------------------------------------------------------------------------------------
_STEPS = ["add", "scatter_max", "gather", "reshape"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_STEPS), min_size=2, max_size=5),
       st.lists(st.integers(-2, 9), min_size=3, max_size=3))
def test_random_chains_give_the_unoptimized_bits(chain, fed_ids):
    """Chains of lowered steps with fed indices (some out of bounds): the values of
    optimize=False, or its error, node and message."""
    ids = np.array(fed_ids, np.int32).reshape(3, 1)

    def build(s):
        x = s.placeholder(gf.float32, shape=[8])
        i = s.placeholder(gf.int32, shape=[3, 1])
        h = x
        for kind in chain:
            if kind == "add":
                h = s.add(h, np.float32(0.25))
            elif kind.startswith("scatter"):
                h = getattr(s, f"tensor_{kind}")(h, i, np.array([1, -2, 3], np.float32))
            elif kind == "gather":
                h = s.tensor_scatter_add(h, i, s.gather_nd(h, i))
            else:
                h = s.reshape(s.reshape(h, [2, 4]), [8])
        return h, [x, i], None
    got, _ = _run(build, [np.linspace(-2, 2, 8, dtype=np.float32), ids], optimize=True)
    want, _ = _run(build, [np.linspace(-2, 2, 8, dtype=np.float32), ids], optimize=False)
    _assert_same(got, want)


@pytest.mark.parametrize("tiered", ["0", "1"])
def test_a_segment_numba_cannot_compile_runs_its_steps(monkeypatch, caplog, tiered):
    """A lowering bug (here: a name numba does not know) costs the segment, never the
    run: its steps run one by one, and a warning names them."""
    from graphflow.lowering import Lowering
    from graphflow.registry import op_def

    monkeypatch.setenv("GRAPHFLOW_TIERED", tiered)
    monkeypatch.setitem(op_def("Neg").lowerers, "cpu",
                        lambda spec: Lowering("{o0} = no_such_function({i0})"))

    def build(s):
        x = s.placeholder(gf.float32, shape=[4])
        return s.reshape(s.neg(s.gather_nd(x, [[3], [0]])), [2, 1]), [x], None
    feeds = [np.arange(4, dtype=np.float32)]
    got, segments = _run(build, feeds, optimize=True, calls=6)
    want, _ = _run(build, feeds, optimize=False, calls=6)
    _assert_same(got, want)
    if tiered == "1":  # the background compile failed: a later call finds out
        for future in list(tiering._compiling.values()):
            future.result()
        got, segments = _run(build, feeds, optimize=True, calls=6)
        _assert_same(got, want)
    assert segments and all(seg.broken and not seg.runs for seg in segments)
    assert "could not be compiled" in caplog.text


def test_threads_sharing_a_segment_lose_no_update():
    """Four threads run one plan whose segment reads and writes a variable: it holds the
    variable's lock for the whole call, so every update lands (integer sums commute:
    the total is known)."""
    s = gf.Scope(gf.Graph())
    table = s.variable(np.zeros((16, 2), np.int64), name="counts")
    ids = s.placeholder(gf.int32, shape=[3])
    ones = s.placeholder(gf.int64, shape=[3, 2])
    step = table.scatter_nd_add(s.expand_dims(ids, 1), s.mul(ones, np.int64(2)),
                                read_value=False)
    with gf.Session(s.graph) as sess:
        sess.run(table.initializer)
        call = sess.make_callable(step, [ids, ones])
        batches = [np.array([k % 16, (3 * k) % 16, k % 16], np.int32) for k in range(4)]
        unit = np.ones((3, 2), np.int64)
        assert run_in_threads(lambda k: [call(batches[k], unit) for _ in range(50)], 4) == []
        assert any(seg.runs for seg in segments_of(sess))
        want = np.zeros((16, 2), np.int64)
        for batch in batches:
            np.add.at(want, batch, 2 * 50)
        np.testing.assert_array_equal(sess.run(table.value()), want)


def test_a_segment_locks_its_variables_in_name_order():
    """Segments that read the same variables take their locks in one order: two of them
    never wait on each other."""
    def build(s):
        zeta = s.variable(np.arange(8, dtype=np.float32).reshape(4, 2), name="zeta")
        alpha = s.variable(np.ones((4, 2), np.float32), name="alpha")
        ids = s.placeholder(gf.int32, shape=[2])
        both = s.add(zeta.sparse_read(ids), alpha.sparse_read(ids))
        return s.mul(both, np.float32(2)), [ids], [zeta.initializer, alpha.initializer]
    got, segments = _run(build, [np.array([3, 1], np.int32)], optimize=True)
    want, _ = _run(build, [np.array([3, 1], np.int32)], optimize=False)
    _assert_same(got, want)
    (segment,) = [seg for seg in segments if seg.runs]
    assert [v[0] for v in segment.variables] == ["alpha", "zeta"]


@pytest.mark.parametrize("ids", [[2, 0, 2, -1, 1], [2, 0, 3, 1, 1]], ids=["good", "bad"])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_unsorted_segment_ops_in_a_segment(op, dtype, ids):
    """Lowered: the identity-filled fold in index order; an id >= num_segments is the
    kernel's error, a negative one drops."""
    data = (np.arange(10) % 7 - 3).astype(dtype).reshape(5, 2)
    segment_ids = np.array(ids, np.int32)

    def build(s):
        d = s.placeholder(gf.as_dtype(dtype), shape=data.shape)
        i = s.placeholder(gf.int32, shape=[5])
        y = getattr(s, f"unsorted_segment_{op}")(_around(s, d, dtype), i, 3)
        return _around(s, y, dtype), [d, i], None
    got = _check(build, [data, segment_ids], compiled=ids[2] != 3)
    assert [k for k, _ in got] == ["ok" if ids[2] != 3 else "error"] * CALLS
