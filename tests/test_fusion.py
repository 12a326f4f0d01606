"""Element-wise fusion (runtime/fusion.py, ops/fused_elementwise.py): fused regions give
the results and the errors of the graph as written, bit for bit."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError, ResourceExhaustedError
from graphflow.runtime import fusion

from support.threads import run_in_threads

FLOATS = [np.float32, np.float64]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
NUMBERS = INTS + FLOATS
SIGNED = [np.int8, np.int16, np.int32, np.int64] + FLOATS
ALL = NUMBERS + [np.bool_]


def special_values(dtype) -> list:
    """The values where element-wise ops differ: NaN, signed zeros, infinities, the
    integer limits (INT_MIN, max), the smallest subnormal."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return [True, False]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return [0, 1, 2, 7, info.max, info.max - 1, info.min, info.min + 1,
                *([-1, -2] if dtype.kind == "i" else [info.max // 2 + 1])]
    info = np.finfo(dtype)
    return [0.0, -0.0, 1.0, -1.0, 0.1, -2.5, 3.0, np.nan, -np.nan, np.inf, -np.inf,
            info.max, -info.max, info.smallest_subnormal, 1e30 if dtype == np.float32 else 1e300]


def same_bits(a, b) -> bool:
    """Equal dtype, shape and bits; any NaN equals any NaN (where two NaNs meet in a
    commutative op, not even numpy fixes which one comes out)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind != "f":
        return np.array_equal(a, b)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    uint = np.dtype(f"u{a.dtype.itemsize}")
    return np.array_equal(nan_a, nan_b) and np.array_equal(
        a.view(uint)[~nan_a], b.view(uint)[~nan_b])


def fused_steps(sess, fetches, feeds=()):
    plan = sess._plan(list(fetches), list(feeds))
    return [s for s in plan.steps if s.op is not None and s.op.type == "_FusedElementwise"]


def run_both(graph, fetches, feed_dict=None, **config):
    """(optimized outcome, unoptimized outcome, fused steps): each outcome is the
    fetched values, or the error as (class, message, node name)."""
    outcomes = []
    steps = []
    for optimize in (True, False):
        with gf.Session(graph, gf.SessionConfig(optimize=optimize, **config)) as sess:
            try:
                outcomes.append(sess.run(fetches, feed_dict))
            except gf.errors.OpError as e:
                outcomes.append((type(e), e.message, e.node_name))
            if optimize:
                steps = fused_steps(sess, fetches, (feed_dict or {}).keys())
    return outcomes[0], outcomes[1], steps


def assert_same(fused, plain):
    if isinstance(plain, tuple):
        assert fused == plain
        return
    assert not isinstance(fused, tuple), fused
    for got, want in zip(fused, plain):
        assert same_bits(got, want), (got, want)


# -- random element-wise graphs --------------------------------------------------------
BINARY = {"add": NUMBERS, "sub": NUMBERS, "mul": NUMBERS, "real_div": FLOATS,
          "maximum": NUMBERS, "minimum": NUMBERS, "equal": ALL, "not_equal": ALL,
          "less": NUMBERS, "greater": NUMBERS, "logical_and": [np.bool_],
          "logical_or": [np.bool_]}
UNARY = {"neg": SIGNED, "logical_not": [np.bool_], "square": NUMBERS,
         "abs": [t for t in SIGNED if np.dtype(t).kind in "if"], "floor": FLOATS,
         "ceil": FLOATS, "relu": [t for t in NUMBERS if np.dtype(t).kind in "iuf"],
         "relu6": [t for t in NUMBERS if np.dtype(t).kind in "iuf"]}
SHAPES = [(), (1,), (5,), (2, 3), (3, 1, 2)]


@st.composite
def elementwise_graphs(draw):
    """A graph of 2-6 element-wise ops over leaves of one broadcast shape (some
    scalars, some of shape [1,...], some broadcasting, now and then one that does not
    broadcast at run time), fed or constant, with special values."""
    scope = gf.Scope(gf.Graph())
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    base = draw(st.sampled_from(SHAPES))
    feeds: dict = {}
    pool: list = []  # (Output, numpy dtype)

    def leaf(dtype):
        kind = draw(st.sampled_from(["full", "full", "full", "scalar", "ones", "bcast", "bad"]))
        shape = base
        if kind == "scalar":
            shape = ()
        elif kind == "ones":
            shape = (1,) * draw(st.integers(0, max(len(base), 1)))
        elif kind == "bcast" and base:
            shape = tuple(1 if rng.random() < 0.5 else d for d in base)
        elif kind == "bad" and base:
            shape = base[:-1] + (base[-1] + 2,)
        values = special_values(dtype)
        data = np.array(rng.choice(np.array(values, dtype=object), size=shape), dtype=dtype) \
            if shape else np.array(values[rng.integers(len(values))], dtype=dtype)
        if kind != "bad" and draw(st.booleans()):
            out = scope.constant(data)
        else:  # fed with an unknown shape: a shape error shows at run time
            out = scope.placeholder(gf.as_dtype(dtype), shape=None)
            feeds[out] = data
        pool.append((out, np.dtype(dtype)))
        return out

    def value(dtype):
        """Mostly a recent value of ``dtype`` or a Cast of the last one (connected
        ops), else a new leaf."""
        dtype = np.dtype(dtype)
        matching = [o for o, d in pool if d == dtype]
        if matching and draw(st.integers(0, 3)):
            return matching[-draw(st.integers(1, min(len(matching), 3)))]
        if draw(st.integers(0, 2)):
            out = scope.cast(pool[-1][0], gf.as_dtype(dtype))
            pool.append((out, dtype))
            return out
        return leaf(dtype)

    def dtype_for(allowed):
        """The last value's dtype when the op takes it, mostly."""
        last = pool[-1][1]
        if any(last == np.dtype(t) for t in allowed) and draw(st.integers(0, 3)):
            return last
        return draw(st.sampled_from(allowed))

    leaf(draw(st.sampled_from(ALL)))
    for _ in range(draw(st.integers(2, 6))):
        kind = draw(st.sampled_from(["binary"] * 4 + ["unary", "select", "cast"]))
        if kind == "binary":
            name = draw(st.sampled_from(sorted(BINARY)))
            dtype = dtype_for(BINARY[name])
            out = getattr(scope, name)(value(dtype), value(dtype))
        elif kind == "unary":
            name = draw(st.sampled_from(sorted(UNARY)))
            out = getattr(scope, name)(value(dtype_for(UNARY[name])))
        elif kind == "select":
            dtype = dtype_for(ALL)
            out = scope.where(value(np.bool_), value(dtype), value(dtype))
        else:
            src, _ = pool[-draw(st.integers(1, len(pool)))]
            out = scope.cast(src, gf.as_dtype(draw(st.sampled_from(ALL))))
        pool.append((out, np.dtype(out.dtype.as_numpy_dtype)))
    computed = [o for o, _ in pool if o.op.type not in ("Const", "Placeholder")]
    fetches = [computed[-1]] + [o for o in computed[:-1] if draw(st.integers(0, 3)) == 0]
    return scope.graph, fetches, feeds


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(elementwise_graphs())
def test_random_graphs_fused_and_unfused_agree(case):
    graph, fetches, feeds = case
    fused, plain, _ = run_both(graph, fetches, feeds)
    assert_same(fused, plain)


# -- the regions ---------------------------------------------------------------------
def test_a_long_chain_of_adds_is_a_few_bounded_kernels(scope):
    n = fusion.MAX_REGION_OPS + 10
    x = scope.placeholder(gf.float32, shape=[4])
    h = x
    for _ in range(n):
        h = scope.add(h, x)
    v = np.array([1.5, -0.0, np.nan, 3e38], np.float32)
    with gf.Session(scope.graph) as sess:
        plan = sess._plan([h], [x])
        kernels = [s for s in plan.steps if s.op is not None]
        assert {s.op.type for s in kernels} == {"_FusedElementwise"}
        assert [len(s.op.attrs["replaces"]) for s in kernels] == [fusion.MAX_REGION_OPS, 10]
        got = sess.make_callable(h, [x])(v)
    want = v
    for _ in range(n):
        want = want + v
    assert same_bits(got, want)


def test_escaping_values_are_outputs_and_fed_values_are_boundaries(scope):
    x = scope.placeholder(gf.float32, shape=[3])
    a = scope.mul(x, 2.0)
    b = scope.add(a, 1.0)
    c = scope.sub(b, x)
    d = scope.neg(c)
    other = scope.reshape(b, [3, 1])  # b escapes: read by a node outside
    v = np.array([1, 2, 3], np.float32)
    with gf.Session(scope.graph) as sess:
        (region,) = [s.op.attrs["region"] for s in fused_steps(sess, [d, other], [x])]
        assert [o.name for o in region.outputs] == [b.name, d.name]
        got = sess.run([d, other], {x: v})
        np.testing.assert_array_equal(got[0], -((v * 2 + 1) - v))
        # feeding b cuts the region in two: the ops before it do not run
        fed = np.array([10, 20, 30], np.float32)
        got = sess.run(d, {x: v, b: fed})
        np.testing.assert_array_equal(got, -(fed - v))
        names = {s.op.name for s in sess._plan([d], [x, b]).steps if s.op is not None}
        assert a.op.name not in names and all(b.op.name not in s.op.attrs.get("replaces", ())
                                              for s in fused_steps(sess, [d], [x, b]))


def test_a_fetched_value_read_inside_a_region_is_computed_once(scope):
    x = scope.placeholder(gf.float32, shape=[4])
    h = [x]
    for _ in range(10):
        h.append(scope.add(h[-1], x))
    with gf.Session(scope.graph) as sess:
        got = sess.run([h[5], h[10]], {x: np.ones(4, np.float32)})
        np.testing.assert_array_equal(got, [np.full(4, 6.0), np.full(4, 11.0)])
        plan = sess._plan([h[5], h[10]], [x])
        assert [s.op.type for s in plan.steps if s.op is not None] == ["_FusedElementwise"]
        (region,) = [s.op.attrs["region"] for s in plan.steps if s.op is not None]
        assert [o.name for o in region.outputs] == [h[5].name, h[10].name]


def test_sessions_with_a_gpu_keep_the_nodes(scope):
    from support.gpu_devices import SimulatedGPU

    x = scope.placeholder(gf.float32, shape=[3])
    y = scope.neg(scope.add(x, 1.0))
    with gf.Session(scope.graph, devices=[gf.runtime.CPUDevice(0), SimulatedGPU(0)]) as sess:
        assert fused_steps(sess, [y], [x]) == []
        np.testing.assert_array_equal(sess.run(y, {x: np.zeros(3, np.float32)}), [-1, -1, -1])


def test_control_dependencies_and_float_to_int_casts_bound_regions(scope):
    x = scope.placeholder(gf.float32, shape=[3])
    a = scope.add(x, 1.0)
    b = scope.with_control_dependencies([a]).mul(a, 2.0)
    c = scope.cast(scope.mul(x, 3.0), gf.int32)  # float -> int is not fused
    d = scope.add(c, 1)
    with gf.Session(scope.graph) as sess:
        assert fused_steps(sess, [b, d], [x]) == []
        np.testing.assert_array_equal(sess.run(d, {x: np.array([1, 2, 3], np.float32)}),
                                      [4, 7, 10])


def test_regions_do_not_mix_device_requests(scope):
    x = scope.placeholder(gf.float32, shape=[3])
    a = scope.with_device("/cpu:0").add(x, 1.0)
    b = scope.neg(scope.mul(a, 2.0))
    assert [r.names for r in fusion.plan_regions(scope.graph)] == [(b.op.inputs[0].op.name,
                                                                      b.op.name)]


def test_partition_stitch_pattern_keeps_priority(scope):
    x = scope.placeholder(gf.float32, shape=[None])
    mask = scope.cast(scope.not_equal(x, np.float32(-1)), gf.int32)
    parts = scope.dynamic_partition(x, mask, num_partitions=2)
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), mask, num_partitions=2)
    out = scope.dynamic_stitch(rows, [parts[0], scope.mul(scope.add(parts[1], 1.0), 2.0)])
    v = np.array([0.5, -1, 2, -1], np.float32)
    with gf.Session(scope.graph) as sess:
        types = [s.op.type for s in sess._plan([out], [x]).steps if s.op is not None]
        assert "_PartitionedSelect" in types
        np.testing.assert_array_equal(sess.run(out, {x: v}), [3, -1, 6, -1])


def test_optimize_false_runs_the_graph_as_written(scope):
    x = scope.placeholder(gf.float32, shape=[3])
    y = scope.neg(scope.add(x, 1.0))
    with gf.Session(scope.graph, gf.SessionConfig(optimize=False)) as sess:
        assert fused_steps(sess, [y], [x]) == []
    with gf.Session(scope.graph) as sess:
        assert len(fused_steps(sess, [y], [x])) == 1


# -- exact special values ----------------------------------------------------------------
def _exact(scope, fetches, feeds=None):
    fused, plain, steps = run_both(scope.graph, fetches, feeds)
    assert steps, "expected a fused region"
    for got, want in zip(fused, plain):
        got, want = np.asarray(got), np.asarray(want)
        assert got.dtype == want.dtype and got.shape == want.shape
        uint = np.dtype(f"u{got.dtype.itemsize}") if got.dtype.kind == "f" else got.dtype
        np.testing.assert_array_equal(got.view(uint), want.view(uint))


@pytest.mark.parametrize("dtype", FLOATS)
def test_nan_signs_signed_zeros_and_minmax_bit_for_bit(scope, dtype):
    specials = np.array(special_values(dtype), dtype)
    a = np.repeat(specials, len(specials))
    b = np.tile(specials, len(specials))
    x = scope.placeholder(gf.as_dtype(dtype), shape=[None])
    y = scope.placeholder(gf.as_dtype(dtype), shape=[None])
    fetches = [scope.neg(scope.maximum(x, y)), scope.neg(scope.minimum(x, y)),
               scope.neg(scope.neg(x)), scope.sub(scope.real_div(x, y), y),
               scope.cast(scope.neg(x), gf.bool), scope.where(scope.less(x, y), scope.neg(x), y)]
    _exact(scope, fetches, {x: a, y: b})


@pytest.mark.parametrize("dtype", FLOATS + [np.int8, np.int64])
def test_the_dense_math_rules_fuse_bit_for_bit(scope, dtype):
    """Square, Abs, Floor, Ceil, Relu and Relu6 in a fused region give their kernels'
    bits: NaN payloads, signed zeros, infinities, integer wraparound (abs(INT_MIN))."""
    if np.dtype(dtype).kind == "f":
        values = np.array(special_values(dtype) + [2.5, -2.5, 6.5, -0.5, 5.9], dtype)
    else:
        info = np.iinfo(dtype)
        values = np.array([info.min, info.min + 1, -7, -1, 0, 1, 6, 7, 100, info.max], dtype)
    x = scope.placeholder(gf.as_dtype(dtype), shape=[None])
    one = np.array(1, dtype)
    fetches = [scope.add(scope.square(x), one), scope.add(scope.abs(x) if np.dtype(dtype).kind
                                                         != "u" else x, one),
               scope.add(scope.relu(x), one), scope.add(scope.relu6(x), one)]
    if np.dtype(dtype).kind == "f":
        fetches += [scope.add(scope.floor(x), one), scope.add(scope.ceil(x), one)]
    _exact(scope, fetches, {x: values})


@pytest.mark.parametrize("dtype", FLOATS + [np.int8, np.int64])
def test_the_correctly_rounded_rules_fuse_bit_for_bit(scope, dtype):
    """Sqrt, Rsqrt, Reciprocal, Round, Softsign, SquaredDifference and Sign fused give
    their kernels' bits on special values and on 4096 random ones (rounding cases)."""
    rng = np.random.default_rng(7)
    if np.dtype(dtype).kind == "f":
        values = np.concatenate([np.array(special_values(dtype) + [2.5, -2.5, 0.5, -1.5],
                                          dtype),
                                 (rng.standard_normal(4096) * 100).astype(dtype)])
    else:
        info = np.iinfo(dtype)
        values = np.array([info.min, -7, -1, 0, 1, 7, info.max], dtype)
    x = scope.placeholder(gf.as_dtype(dtype), shape=[None])
    one = np.array(1, dtype)
    fetches = [scope.add(scope.sign(x), one)]
    if np.dtype(dtype).kind == "f":
        shifted = scope.add(x, one)
        fetches += [scope.add(op(x), one) for op in (
            scope.sqrt, scope.rsqrt, scope.reciprocal, scope.round, gf.nn.softsign)]
        fetches.append(scope.add(scope.squared_difference(x, shifted), one))
    _exact(scope, fetches, {x: values})


def test_integer_wraparound_and_casts_bit_for_bit(scope):
    fetches = []
    feeds = {}
    for dtype in INTS:
        info = np.iinfo(dtype)
        v = np.array(special_values(dtype), dtype)
        x = scope.placeholder(gf.as_dtype(dtype), shape=[None])
        feeds[x] = v
        fetches += [scope.mul(scope.add(x, x), scope.sub(x, np.array(info.max, dtype))),
                    scope.cast(scope.add(x, x), gf.bool),
                    scope.cast(scope.mul(x, x), gf.float32),
                    scope.cast(scope.add(x, 1 if info.min == 0 else -1), gf.int8)]
        if dtype in SIGNED:
            fetches.append(scope.neg(scope.neg(scope.neg(x))))  # -INT_MIN == INT_MIN
    b = scope.placeholder(gf.bool, shape=[None])
    feeds[b] = np.array([True, False, True])
    fetches += [scope.cast(scope.logical_not(b), gf.float64), scope.cast(scope.logical_not(b),
                                                                         gf.uint64)]
    _exact(scope, fetches, feeds)


def test_float32_rounds_after_every_op(scope):
    x = scope.placeholder(gf.float32, shape=[None])
    big = np.float32(1e8)
    y = scope.sub(scope.add(x, big), big)                    # 1 + 1e8 rounds in float32
    z = scope.cast(scope.mul(scope.mul(x, 3e38), 0.5), gf.float64)  # overflows to inf first
    u = scope.placeholder(gf.uint64, shape=[None])
    w = scope.cast(scope.add(u, np.uint64(1)), gf.float32)  # rounding of 2**64 - 1 ...
    _exact(scope, [y, z, w], {x: np.array([1, 3, 0.1], np.float32),
                              u: np.array([2 ** 63 + 2 ** 39, 2 ** 64 - 2, 12345], np.uint64)})


# -- shapes and paths ----------------------------------------------------------------------
@pytest.mark.parametrize("shape_x, shape_c, compiled", [
    ((4,), (), True), ((4,), (1,), True), ((2, 3), (1, 1), True), ((0,), (), True),
    ((), (), True), ((1,), (1,), True), ((1, 1), (), True), ((), (1, 1), True),
    ((4,), (1, 1), True), ((2, 3), (3,), True), ((2, 1), (1, 3), True), ((0, 3), (1,), True),
    ((3, 1, 2), (1, 2), True)])
def test_scalars_and_broadcasting_give_numpy_shapes(scope, shape_x, shape_c, compiled):
    x = scope.placeholder(gf.float64, shape=None)
    c = scope.placeholder(gf.float64, shape=None)
    y = scope.mul(scope.add(x, c), c)
    z = scope.sub(c, 1.0)  # of c only: c's shape, computed once
    rng = np.random.default_rng(0)
    feeds = {x: rng.normal(size=shape_x), c: rng.normal(size=shape_c)}
    fetches = [y, z, scope.neg(z)]
    fused, plain, steps = run_both(scope.graph, fetches, feeds)
    assert_same(fused, plain)
    assert fused[0].shape == np.broadcast_shapes(shape_x, shape_c)
    with gf.Session(scope.graph) as sess:
        sess.run(fetches, feeds)
        steps = fused_steps(sess, fetches, feeds)
        assert len(steps) == 2  # {add, mul} and {sub, neg}
        assert all("per_node_runs" not in s.ctx.cache for s in steps) == compiled


def test_an_output_of_a_smaller_shape_runs_node_by_node(scope):
    x = scope.placeholder(gf.int16, shape=[None, None])
    c = scope.placeholder(gf.int16, shape=[None])
    doubled = scope.mul(c, np.int16(2))  # fetched: [3], while the region's shape is [2, 3]
    y = scope.sub(x, doubled)
    feeds = {x: np.arange(6, dtype=np.int16).reshape(2, 3), c: np.array([1, -32768, 7], np.int16)}
    fused, plain, steps = run_both(scope.graph, [y, doubled], feeds)
    assert_same(fused, plain) and fused[1].shape == (3,)
    with gf.Session(scope.graph) as sess:
        sess.run([y, doubled], feeds)
        (step,) = fused_steps(sess, [y, doubled], feeds)
        assert step.ctx.cache["per_node_runs"] == 1


def test_incompatible_shapes_name_the_original_node(scope):
    x = scope.placeholder(gf.float32, shape=None)
    y = scope.placeholder(gf.float32, shape=None)
    a = scope.with_name("first").add(x, 1.0)
    b = scope.with_name("second").mul(a, y)
    c = scope.with_name("third").neg(b)
    fused, plain, steps = run_both(scope.graph, [c], {x: np.ones(3, np.float32),
                                                        y: np.ones(4, np.float32)})
    assert steps
    assert fused == plain == (InvalidArgumentError, "Incompatible shapes: [3] vs. [4]", "second")
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError, match=r"\[node second\]"):
            sess.run(c, {x: np.ones(3, np.float32), y: np.ones(4, np.float32)})


def test_memory_limit_is_the_same_error_from_the_same_node(scope):
    x = scope.placeholder(gf.float64, shape=None)
    y = scope.placeholder(gf.float64, shape=None)
    a = scope.with_name("small").add(x, x)
    b = scope.with_name("outer").mul(a, y)  # [1000, 1] * [1, 1000]: 8 MB
    c = scope.neg(b)
    feeds = {x: np.ones((1000, 1)), y: np.ones((1, 1000))}
    fused, plain, steps = run_both(scope.graph, [c], feeds, memory_limit_bytes=1 << 20)
    assert steps
    assert fused == plain and fused[0] is ResourceExhaustedError and fused[2] == "outer"
    # equal shapes past the limit: the fused kernel leaves the check to the nodes
    feeds = {x: np.ones(200_000), y: np.ones(200_000)}
    fused, plain, _ = run_both(scope.graph, [c], feeds, memory_limit_bytes=1 << 20)
    assert_same(fused, plain)


def test_threads_share_one_plan(scope):
    x = scope.placeholder(gf.int32, shape=[None])
    y = scope.mul(scope.add(x, 1), scope.sub(x, 1))
    with gf.Session(scope.graph) as sess:
        f = sess.make_callable(y, [x])

        def work(k):
            v = np.arange(k, k + 1000, dtype=np.int32)
            for _ in range(50):
                np.testing.assert_array_equal(f(v), (v + 1) * (v - 1))
        errors = run_in_threads(work, 4)
    assert not errors, errors[0]


# -- kernels on disk --------------------------------------------------------------------------
def test_kernel_source_is_cached_by_structure(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHFLOW_CACHE_DIR", str(tmp_path))
    program = fusion.Program(("int16",), (("Add", "int16", (0, 0)), ("Neg", "int16", (1,))),
                             (1,))
    fn = program.kernel(0)
    assert fn is fusion.Program(*[getattr(program, f) for f in ("inputs", "nodes", "outputs")]) \
        .kernel(0)
    out = np.empty(3, np.int16)
    fn(3, np.array([1, -16384, 20000], np.int16), out)
    np.testing.assert_array_equal(out, -(np.array([1, -16384, 20000], np.int16) * 2))
    sources = list(tmp_path.rglob("graphflow_fused_*.py"))
    assert len(sources) == 1 and "def fused(n, x0, o0):" in sources[0].read_text()
    assert list(tmp_path.rglob("*.nbi")), "numba's cache index is written next to it"


# -- traces, inspect, DOT ------------------------------------------------------------------
def _small_graph():
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    y = scope.add(x, 1.0, name="plus_one")
    z = scope.mul(y, y, name="square")
    return scope, x, z


def test_trace_says_which_nodes_a_fused_step_replaced():
    scope, x, z = _small_graph()
    md = gf.RunMetadata()
    with gf.Session(scope.graph) as sess:
        sess.run(z, {x: np.arange(3, dtype=np.float32)}, options=gf.RunOptions(trace=True),
                 run_metadata=md)
    (event,) = [e for e in md.events if e.op_type == "_FusedElementwise"]
    assert event.replaces == ("plus_one", "square") and event.output_shapes == [[3]]
    trace = md.chrome_trace()
    (fused,) = [e for e in trace["traceEvents"] if e.get("cat") == "_FusedElementwise"]
    assert fused["args"]["replaces"] == ["plus_one", "square"]
    json.dumps(trace)


def test_plan_regions_and_dot_clusters():
    scope, x, z = _small_graph()
    (region,) = fusion.plan_regions(scope.graph)
    assert region.names == ("plus_one", "square")
    assert "square/fused: 2 ops (plus_one, square)" in region.describe()
    dot = scope.graph.to_dot(fused=True)
    assert 'label="fused: square/fused"' in dot
    assert "fused" not in scope.graph.to_dot()


def test_cli_inspect_and_show_fused_regions(tmp_path):
    from graphflow.tools.cli import main

    scope, x, z = _small_graph()
    path = tmp_path / "g.json"
    scope.graph.save(path)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", str(path)]) == 0
    text = out.getvalue()
    assert "fused regions" in text and "square/fused: 2 ops (plus_one, square)" in text
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", str(path), "--fused"]) == 0
    assert 'label="fused: square/fused"' in out.getvalue()


def test_a_kernel_numba_cannot_compile_runs_node_by_node(scope, monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("GRAPHFLOW_CACHE_DIR", str(tmp_path))
    x = scope.placeholder(gf.int32, shape=[3])  # one plan: not shape-specialized
    y = scope.neg(scope.add(x, 1))
    source = fusion.Program.source
    monkeypatch.setattr(fusion.Program, "source", lambda self, scalars=0, rank=0: source(
        self, scalars, rank).replace("    for", "    undefined_name()\n    for", 1))
    fusion._KERNELS.clear()
    try:
        with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1)) as sess:
            for _ in range(2):
                np.testing.assert_array_equal(sess.run(y, {x: np.arange(3, dtype=np.int32)}),
                                              [-1, -2, -3])
            (step,) = fused_steps(sess, [y], [x])
            assert step.ctx.cache["per_node_runs"] == 2
    finally:
        fusion._KERNELS.clear()
    assert sum("failed to compile" in r.getMessage() for r in caplog.records) == 1
