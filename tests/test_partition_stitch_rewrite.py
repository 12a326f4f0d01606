"""The partition -> element-wise -> stitch rewrite gives exactly the results of
the graph as written, and leaves other graphs alone."""
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.ops import fused_ops

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


def _split_in_two(scope, dtype):
    """Fed values of ``dtype`` and partitions, the values and their positions split in two."""
    x = scope.placeholder(dtype, shape=[None])
    p = scope.placeholder(gf.int32, shape=[None])
    parts = scope.dynamic_partition(x, p, num_partitions=2)
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), p, num_partitions=2)
    return x, p, parts, rows


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
    x, p, parts, rows = _split_in_two(scope, gf.float32)
    # an operand of shape [1] is not a scalar: it could broadcast an empty partition
    out = scope.dynamic_stitch([rows[1], rows[0]],
                               [parts[1], scope.mul(parts[0], np.float32([2]))])
    feed = {x: np.arange(5, dtype=np.float32), p: np.array([1, 0, 1, 1, 0], np.int32)}
    (a, b), was_fused = _run_both(scope.graph, out, feed)
    np.testing.assert_array_equal(a, b)
    assert not was_fused
    np.testing.assert_array_equal(a, [0, 2, 2, 3, 8])


def test_constant_or_fed_parts_are_left_alone(scope):
    """A part that folding made a constant (the fuzzer's case: a partition of
    constants), or one that is fed, is no chain the rewrite can follow: the graph runs
    as written, the feed read as fed."""
    data = np.array([1j, 2j, 3j], np.complex64)
    ids = np.zeros(3, np.int32)
    positions = scope.dynamic_partition(scope.range(0, scope.size(data), 1), ids, 1)
    parts = scope.dynamic_partition(data, ids, 1)
    out = scope.dynamic_stitch(positions, parts)
    feed = {positions[0]: np.array([2, 0, 1], np.int32)}
    with gf.Session(scope.graph) as sess:
        for _ in range(3):
            np.testing.assert_array_equal(sess.run(out, feed), data[[1, 2, 0]])
            np.testing.assert_array_equal(sess.run(out), data)
    x, p, parts, rows = _split_in_two(scope, gf.float32)
    doubled = scope.mul(parts[0], np.float32(2))
    out = scope.dynamic_stitch([rows[0], rows[1]], [doubled, parts[1]])
    feed = {x: np.arange(5, dtype=np.float32), p: np.array([1, 0, 1, 1, 0], np.int32),
            doubled: np.float32([7, 9])}
    (a, b), was_fused = _run_both(scope.graph, out, feed)
    np.testing.assert_array_equal(a, b)
    assert not was_fused
    np.testing.assert_array_equal(a, [0, 7, 2, 3, 9])


def test_a_value_times_itself_is_fused(scope):
    x, p, parts, rows = _split_in_two(scope, gf.float32)
    out = scope.dynamic_stitch([rows[1], rows[0]], [parts[1], scope.mul(parts[0], parts[0])])
    feed = {x: np.arange(5, dtype=np.float32), p: np.array([1, 0, 1, 1, 0], np.int32)}
    (a, b), was_fused = _run_both(scope.graph, out, feed)
    assert was_fused
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, [0, 1, 2, 3, 16])


def test_a_final_integer_cast_is_fused_a_float_one_is_not(scope):
    x, p, parts, rows = _split_in_two(scope, gf.int16)
    out = scope.dynamic_stitch(rows, [scope.cast(parts[0], gf.int8),
                                      scope.cast(scope.mul(parts[1], np.int16(300)), gf.int8)])
    feed = {x: np.int16([1, 200, -32768, 7]), p: np.int32([0, 1, 1, 0])}
    (a, b), was_fused = _run_both(scope.graph, out, feed)
    assert was_fused and a.dtype == b.dtype == np.int8
    np.testing.assert_array_equal(a, b)
    y = scope.placeholder(gf.float32, shape=[None])
    parts = scope.dynamic_partition(y, p, num_partitions=2)
    rows = scope.dynamic_partition(scope.range(0, scope.size(y), 1), p, num_partitions=2)
    out = scope.dynamic_stitch(rows, [scope.cast(v, gf.int32) for v in parts])
    _, was_fused = _run_both(scope.graph, out, {y: np.float32([1, 2, 3, 4]), p: feed[p]})
    assert not was_fused


# -- the compiled pass ----------------------------------------------------------------------
FLOAT_EDGES = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.5, -2.25, 3e38, 1e-45]
OPS_FOR = {"f": ["Add", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Neg", "Identity"],
           "i": ["Add", "Sub", "Mul", "Maximum", "Minimum", "Neg", "Identity"],
           "u": ["Add", "Sub", "Mul", "Maximum", "Minimum", "Identity"],
           "b": ["Identity"]}
COMPILED_DTYPES = [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint64,
                   np.bool_]


def _values(draw, dtype, size):
    """Edge values of ``dtype``: NaNs of both signs, signed zeros, infinities, the
    integer limits (whose sums and products wrap)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        pool = [True, False]
    elif dtype.kind == "f":
        pool = FLOAT_EDGES
    else:
        info = np.iinfo(dtype)
        pool = [info.min, info.max, 0, 1, 2, info.max // 2 + 1, int(info.min // 3)]
    picks = draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size))
    return np.array(picks, dtype=dtype) if dtype.kind != "f" else \
        np.array(picks, np.float64).astype(dtype)


def _chain_graph(scope, x, parts_of, chains, dtype, cast_to):
    branches = []
    for part, chain in zip(parts_of, chains):
        v = part
        for op_type, scalar, operand in chain:
            name = {"RealDiv": "real_div", "Maximum": "maximum", "Minimum": "minimum"}.get(
                op_type, op_type.lower())
            if op_type in ("Neg", "Identity"):
                v = getattr(scope, name)(v)
            elif operand == "self":
                v = getattr(scope, name)(v, v)
            else:
                c = scope.constant(np.asarray(scalar, dtype))
                v = getattr(scope, name)(c, v) if operand == "left" else \
                    getattr(scope, name)(v, c)
        branches.append(v if cast_to is None else scope.cast(v, gf.as_dtype(cast_to)))
    return branches


@st.composite
def compiled_pipelines(draw):
    dtype = np.dtype(draw(st.sampled_from(COMPILED_DTYPES)))
    by_mask = draw(st.booleans()) and dtype.kind != "b"
    k = 2 if by_mask else draw(st.integers(1, 4))
    n = draw(st.integers(0, 40))
    x = _values(draw, dtype, n)
    chains = [draw(st.lists(st.tuples(st.sampled_from(OPS_FOR[dtype.kind]),
                                      st.just(_values(draw, dtype, 1)[0]),
                                      st.sampled_from(["right", "left", "self"])),
                            max_size=3)) for _ in range(k)]
    cast_to = draw(st.sampled_from([None, np.int8, np.uint16, np.int64])) \
        if dtype.kind in "iub" else None
    ids = np.array(draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)), np.int32)
    compare = (draw(st.sampled_from(["equal", "not_equal", "less", "greater"])),
               _values(draw, dtype, 1)[0], draw(st.booleans())) if by_mask else None
    return dtype, x, ids, k, chains, compare, cast_to


def assert_same_bits(got, want):
    """The same dtype, shape and bits, except that a NaN may come out as another NaN:
    LLVM, like C compilers, does not keep the sign or payload of a NaN through
    arithmetic (it may compute -x + 0.0 as 0.0 - x, and the NaN x then keeps its
    sign), and numpy's own loops are compiled with the same freedom."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind in "fc":
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), (got, want)
        got, want = got[~nan], want[~nan]
    assert got.tobytes() == want.tobytes(), (got, want)


@settings(max_examples=30, derandomize=True, deadline=None)
@given(compiled_pipelines())
def test_compiled_pass_is_bit_identical_to_the_graph_as_written(case):
    """Random chains over edge values through the compiled pass (forced even for these
    small inputs): the same bits as the unfused graph. Derandomised: each distinct
    chain compiles once per machine, then loads from the disk cache."""
    dtype, values, ids, k, chains, compare, cast_to = case
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.as_dtype(dtype), shape=[None])
    feed = {x: values}
    if compare is None:
        p = scope.placeholder(gf.int32, shape=[None])
        feed[p] = ids
    else:
        name, c, swap = compare
        c = scope.constant(np.asarray(c, dtype))
        p = scope.cast(getattr(scope, name)(c, x) if swap else getattr(scope, name)(x, c),
                       gf.int32)
    parts = scope.dynamic_partition(x, p, num_partitions=k)
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), p, num_partitions=k)
    out = scope.dynamic_stitch(rows, _chain_graph(scope, x, parts, chains, dtype, cast_to))
    with mock.patch.object(fused_ops, "COMPILE_MIN_ELEMENTS", 0), \
            mock.patch.object(fused_ops, "_select_numpy", side_effect=AssertionError):
        (fused, plain), was_fused = _run_both(scope.graph, out, feed)
    assert was_fused
    assert_same_bits(fused, plain)


@pytest.mark.parametrize("dtype", [np.float16, np.complex64, np.float32])
def test_numpy_path_for_what_numba_cannot_do(scope, dtype):
    """float16 and complex go through numpy (as does everything below
    COMPILE_MIN_ELEMENTS); the same result as the graph as written."""
    x = scope.placeholder(gf.as_dtype(dtype), shape=[None])
    mask = scope.cast(scope.not_equal(x, np.asarray(-1, dtype)), gf.int32)
    parts = scope.dynamic_partition(x, mask, num_partitions=2)
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), mask, num_partitions=2)
    three = np.asarray(3, dtype)
    out = scope.dynamic_stitch(rows, [scope.neg(parts[0]), scope.mul(parts[1], three)])
    values = np.array([1, -1, np.inf, -0.0, np.nan, 2.5, -1, 7], dtype)
    (fused, plain), was_fused = _run_both(scope.graph, out, {x: values})
    assert was_fused
    assert_same_bits(fused, plain)


def test_seed_pipeline_compiles_the_mask_into_the_pass(scope):
    """x != -1 is computed inside the pass: the NotEqual and the Cast do not run."""
    x = scope.placeholder(gf.float32, shape=[None])
    mask = scope.cast(scope.not_equal(x, np.float32(-1)), gf.int32)
    out = _pipeline(scope, x, mask, 2, [[], [("add", 1.0)]])
    values = np.random.default_rng(0).standard_normal(1 << 15).astype(np.float32)
    values[::3] = -1
    with gf.Session(scope.graph) as sess:
        types = [s.op.type for s in sess._plan([out], [x]).steps if s.op is not None]
        got = sess.run(out, {x: values})
    assert "_PartitionedSelect" in types
    assert "NotEqual" not in types and "Cast" not in types and "DynamicPartition" not in types
    np.testing.assert_array_equal(got, np.where(values != -1, values + 1, values))


def test_trace_says_which_nodes_the_fused_step_replaced(scope):
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    mask = scope.cast(scope.not_equal(x, np.float32(-1), name="is_set"), gf.int32, name="ids")
    parts = scope.dynamic_partition(x, mask, num_partitions=2, name="parts")
    rows = scope.dynamic_partition(scope.range(0, scope.size(x, name="n"), 1, name="positions"),
                                   mask, num_partitions=2, name="rows")
    out = scope.dynamic_stitch(rows, [parts[0], scope.add(parts[1], np.float32(1), name="inc")],
                               name="y")
    md = gf.RunMetadata()
    with gf.Session(scope.graph) as sess:
        sess.run(out, {x: np.float32([1, -1])}, options=gf.RunOptions(trace=True),
                 run_metadata=md)
    (event,) = [e for e in md.events if e.op_type == "_PartitionedSelect"]
    assert event.node == "y"
    assert event.replaces == ("is_set", "ids", "parts", "n", "positions", "rows", "inc", "y")


@pytest.mark.parametrize("n", [6, 1 << 15])  # the numpy path and the compiled pass
def test_bad_id_names_the_partition_node(scope, n):
    x = scope.placeholder(gf.float32, shape=[None])
    p = scope.placeholder(gf.int32, shape=[None])
    out = _pipeline(scope, x, p, 3, [[("mul", 2.0)], [], [("add", 1.0)]])
    ids = np.zeros(n, np.int32)
    ids[n - 2], ids[n - 1] = -4, 7
    feed = {x: np.ones(n, np.float32), p: ids}
    errors = []
    for optimize in (True, False):
        with gf.Session(scope.graph, gf.SessionConfig(optimize=optimize)) as sess:
            with pytest.raises(InvalidArgumentError) as info:
                sess.run(out, feed)
            errors.append(info.value)
    fused, plain = errors
    assert fused.message == plain.message == f"partitions[{n - 2}] = -4 is not in [0, 3)"
    assert fused.node_name == plain.node_name and fused.op_type == plain.op_type == \
        "DynamicPartition"


def test_control_inputs_on_the_cast_keep_the_mask(scope):
    """A Cast that must wait for another node is not skipped."""
    x = scope.placeholder(gf.float32, shape=[None])
    guard = scope.no_op()
    mask = scope.with_control_dependencies([guard]).cast(
        scope.not_equal(x, np.float32(-1)), gf.int32)
    out = _pipeline(scope, x, mask, 2, [[], [("add", 1.0)]])
    feed = {x: np.array([1, -1, 2], np.float32)}
    (fused, plain), was_fused = _run_both(scope.graph, out, feed)
    assert was_fused
    np.testing.assert_array_equal(fused, plain)
    with gf.Session(scope.graph) as sess:
        types = [s.op.type for s in sess._plan([out], [x]).steps if s.op is not None]
    assert "Cast" in types and "NoOp" in types


def test_concurrent_runs_of_the_compiled_pass(scope):
    """One Session, many threads, each run split over the intra-op pool: every result
    is right."""
    x = scope.placeholder(gf.float32, shape=[None])
    p = scope.placeholder(gf.int32, shape=[None])
    out = _pipeline(scope, x, p, 3, [[("mul", 2.0)], [], [("add", 1.0)]])
    rng = np.random.default_rng(5)
    feeds = [(rng.standard_normal(1 << 21).astype(np.float32),
              rng.integers(0, 3, 1 << 21).astype(np.int32)) for _ in range(4)]
    want = [np.select([ids == 0, ids == 1], [v * np.float32(2), v], v + np.float32(1))
            for v, ids in feeds]
    with gf.Session(scope.graph) as sess:
        f = sess.make_callable(out, [x, p])
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda i: f(*feeds[i % 4]), range(16)))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % 4])
