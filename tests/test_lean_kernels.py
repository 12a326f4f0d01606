"""Kernels specialized at plan time (``OpDef.prepare``): with the static shapes and
constants a plan knows, the lean kernel gives the registered kernel's results and
errors, for fed and constant indices, good and bad, duplicates included."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import graphflow as gf
from graphflow.errors import InvalidArgumentError

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.float16]
INDEX_SETS = {
    "dups": np.array([[4], [3], [4], [0], [4]]),
    "bad": np.array([[4], [8], [1], [-1], [2]]),
    "rows": np.array([[1, 2], [0, 0], [1, 2], [3, 1], [0, 3]]),
    "bad_rows": np.array([[1, 2], [0, 4], [1, 2], [3, 1], [0, 3]]),
}


def _run_both(build, feeds):
    """The fetch of ``build(scope)`` with optimize on (lean kernels) and off."""
    outcomes = []
    for optimize in (True, False):
        s = gf.Scope(gf.Graph())
        fetch, placeholders = build(s)
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            try:
                fed = dict(zip(placeholders, feeds))
                outcomes.append(("ok", [sess.run(fetch, fed) for _ in range(2)][-1]))
            except InvalidArgumentError as e:
                outcomes.append(("error", (str(e).split("\n")[0], e.node_name)))
    return outcomes


def _assert_same(outcomes):
    (kind_a, a), (kind_b, b) = outcomes
    assert kind_a == kind_b, outcomes
    if kind_a == "ok":
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    else:
        assert a == b


@pytest.mark.parametrize("fed", [True, False], ids=["fed", "constant"])
@pytest.mark.parametrize("which", sorted(INDEX_SETS))
@pytest.mark.parametrize("op", ["add", "sub", "update", "min", "max"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_scatter_lean_equals_full(op, dtype, which, fed):
    indices = INDEX_SETS[which].astype(np.int32)
    depth = indices.shape[1]
    shape = [8] if depth == 1 else [4, 4, 2]
    updates = (np.arange(5 * int(np.prod(shape[depth:]))) % 7).astype(dtype).reshape(
        [5] + shape[depth:])
    tensor = (np.arange(int(np.prod(shape))) % 5).astype(dtype).reshape(shape)

    def build(s):
        t = s.placeholder(gf.as_dtype(dtype), shape=shape)
        i = s.placeholder(gf.int32, shape=indices.shape) if fed else indices
        y = getattr(s, f"tensor_scatter_{op}")(s.mul(t, np.ones((), dtype)), i, updates)
        return y, [t] + ([i] if fed else [])
    _assert_same(_run_both(build, [tensor] + ([indices] if fed else [])))


@pytest.mark.parametrize("fed", [True, False], ids=["fed", "constant"])
@pytest.mark.parametrize("which", sorted(INDEX_SETS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_nd_and_gather_nd_lean_equal_full(dtype, which, fed):
    indices = INDEX_SETS[which].astype(np.int64)
    depth = indices.shape[1]
    shape = [8] if depth == 1 else [4, 4, 2]
    updates = (np.arange(5 * int(np.prod(shape[depth:]))) % 7).astype(dtype).reshape(
        [5] + shape[depth:])
    params = np.arange(int(np.prod(shape))).astype(dtype).reshape(shape)

    def build(s):
        i = s.placeholder(gf.int64, shape=indices.shape) if fed else indices
        u = s.placeholder(gf.as_dtype(dtype), shape=updates.shape)
        p = s.placeholder(gf.as_dtype(dtype), shape=shape)
        return [s.scatter_nd(i, u, shape), s.gather_nd(p, i)], [u, p] + ([i] if fed else [])
    outcomes = _run_both(build, [updates, params] + ([indices] if fed else []))
    (kind_a, a), (kind_b, b) = outcomes
    assert kind_a == kind_b
    if kind_a == "ok":
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes()
    else:
        assert a == b


def test_a_bad_fed_index_writes_nothing_into_a_forwarded_buffer():
    s = gf.Scope(gf.Graph())
    t = s.placeholder(gf.float32, shape=[8])
    i = s.placeholder(gf.int32, shape=[3, 1])
    base = s.mul(t, 2.0)  # fresh: the scatter writes into it
    y = s.tensor_scatter_add(base, i, np.ones(3, np.float32))
    both = [y, s.neg(base)]
    with gf.Session(s.graph) as sess:
        with pytest.raises(InvalidArgumentError, match=r"indices\[2\] = \[8\]"):
            sess.run(y, {t: np.ones(8, np.float32), i: [[0], [1], [8]]})
        got = sess.run(y, {t: np.ones(8, np.float32), i: [[0], [0], [7]]})
        assert got.tolist() == [4, 2, 2, 2, 2, 2, 2, 3]
        assert sess.run(both, {t: np.ones(8, np.float32), i: [[0], [0], [7]]})[1].tolist() == \
            [-2.0] * 8


def test_the_plan_uses_the_lean_kernel():
    from graphflow.runtime.steps import KernelStep
    s = gf.Scope(gf.Graph())
    i = s.placeholder(gf.int32, shape=[4, 1])
    u = s.placeholder(gf.int32, shape=[4])
    y = s.scatter_nd(i, u, [8])
    with gf.Session(s.graph) as sess:
        plan = sess._plan([y], [i, u])
        (step,) = [st for st in plan.steps if isinstance(st, KernelStep)]
        assert step.kernel().__name__.startswith("lean")


@pytest.mark.parametrize("axes, keep_dims", [([0, 1], False), ([1], True), ([-1], False),
                                             ([0], False), ([], False)])
@pytest.mark.parametrize("dtype", DTYPES + [np.complex64])
def test_sum_lean_equals_full(dtype, axes, keep_dims):
    x = ((np.arange(24) % 7) - 3).astype(dtype).reshape(4, 6)
    if np.dtype(dtype).kind == "f":
        x = x * dtype(0.3)  # rounding: the order of the additions shows

    def build(s):
        p = s.placeholder(gf.as_dtype(dtype), shape=[4, 6])
        return s.sum(p, np.array(axes, np.int32), keep_dims=keep_dims), [p]
    _assert_same(_run_both(build, [x]))


@pytest.mark.parametrize("op", ["add", "sub", "update", "min", "max"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.float16])
@pytest.mark.parametrize("ids", [[4, 3, 4, 0], [4, 8, 1, 0], [0, -1, 1, 2], []])
def test_resource_scatter_lean_equals_full(op, dtype, ids):
    """Rows of a variable updated through fed ids, then read: the same bits and errors
    with the lean kernel and without; a bad id writes nothing."""
    table = (np.arange(16) % 5).astype(dtype).reshape(8, 2)
    results = []
    for optimize in (True, False):
        s = gf.Scope(gf.Graph())
        v = s.variable(table, name="v")
        i = s.placeholder(gf.int32, shape=[len(ids), 1])
        u = s.placeholder(gf.as_dtype(dtype), shape=[len(ids), 2])
        update = getattr(v, f"scatter_nd_{op}")(i, u).op
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            sess.run(v.initializer)
            outcome = []
            for _ in range(2):
                try:
                    sess.run(update, {i: np.array(ids, np.int32).reshape(-1, 1),
                                      u: np.full((len(ids), 2), 1.5, dtype)})
                    outcome.append("ok")
                except InvalidArgumentError as e:
                    outcome.append(str(e).split("\n")[0])
                outcome.append(sess.run(v.read()).tobytes())
            results.append(outcome)
    assert results[0] == results[1]


def test_the_sparse_step_uses_lean_kernels_and_adds_two_gradients_in_its_fused_region():
    """W8's step: the ResourceScatterNdSub and the Sum are lean, and the AddN of the two
    gradients of d*d became an Add inside a fused region."""
    from graphflow.runtime.steps import KernelStep
    s = gf.Scope(gf.Graph())
    table = s.variable(np.ones((100, 4), np.float32), name="table")
    ids = s.placeholder(gf.int32, shape=[None], name="ids")
    target = s.placeholder(gf.float32, shape=[None, 4])
    d = s.sub(s.mul(table.sparse_read(ids), np.float32(0.5)), target)
    loss = s.sum(s.mul(d, d), [0, 1])
    train = gf.train.GradientDescentOptimizer(0.1).minimize(loss)
    with gf.Session(s.graph) as sess:
        sess.run(table.initializer)
        step = sess.make_callable([train, loss], [ids, target])
        for _ in range(3):
            step(np.array([1, 5, 1], np.int32), np.zeros((3, 4), np.float32))
        plan = sess._plan([train, loss], [ids, target])
        (special,) = [p for p in plan.specialized.values() if p is not None]
        kernels = {st.op.type: st.kernel().__name__ for st in special.steps
                   if isinstance(st, KernelStep)}
        assert "AddN" not in kernels
        assert kernels["ResourceScatterNdSub"].startswith("lean")
        assert kernels["Sum"].startswith("lean")
        # a step scales a row by 1 - lr * 0.5 per time its id is in the batch
        got = sess.run(table.read())
        assert np.allclose(got[1], 0.9 ** 3) and np.allclose(got[5], 0.95 ** 3)
        assert np.allclose(got[[0, 2, 3, 4, 6]], 1.0)


@pytest.mark.parametrize("ids", [[2, 0, 2, -1, 1], [2, 0, 3, 1, 1]], ids=["good", "bad"])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint64, np.float16])
def test_unsorted_segment_lean_equals_full(op, dtype, ids):
    data = (np.arange(15) % 7 - 3).astype(dtype).reshape(5, 3)
    if np.dtype(dtype).kind == "f":
        data[1, 1] = np.nan

    def build(s):
        d = s.placeholder(gf.as_dtype(dtype), shape=data.shape)
        i = s.placeholder(gf.int32, shape=[5])
        return getattr(s, f"unsorted_segment_{op}")(d, i, 3), [d, i]
    outcomes = _run_both(build, [data, np.array(ids, np.int32)])
    _assert_same(outcomes)
    assert outcomes[0][0] == ("ok" if ids[2] != 3 else "error")


@pytest.mark.parametrize("case", ["plain", "inf_peak", "nan", "bad_label", "neg_label"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_softmax_family_lean_equals_full(dtype, case):
    logits = (np.arange(12) % 5 - 2).astype(dtype).reshape(4, 3) * dtype(1.7)
    labels = np.array([0, 2, 1, 2], np.int32)
    if case == "inf_peak":
        logits[1, 0], logits[2] = np.inf, -np.inf
    elif case == "nan":
        logits[3, 1] = np.nan
    elif case == "bad_label":
        labels[2] = 3
    elif case == "neg_label":
        labels[0] = -1
    for build in (lambda s, x, y: s.softmax(x), lambda s, x, y: gf.nn.log_softmax(x),
                  lambda s, x, y: s.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                            logits=x)):
        def graph(s, build=build):
            x = s.placeholder(gf.as_dtype(dtype), shape=logits.shape)
            y = s.placeholder(gf.int32, shape=labels.shape)
            return build(s, x, y), [x, y]
        outcomes = _run_both(graph, [logits, labels])
        (kind_a, a), (kind_b, b) = outcomes
        assert kind_a == kind_b
        if kind_a == "error":
            assert a == b
            continue
        for got, want in zip(*(v if isinstance(v, list) else [v] for v in (a, b))):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


SORTED_IDS = {"runs": [0, 0, 2, 2, 2, 3], "gap_first": [1, 1, 1, 3, 4, 4], "one": [0] * 6,
              "singles": [0, 1, 2, 3, 4, 5], "decreasing": [0, 2, 1, 3, 3, 4],
              "negative": [-1, 0, 0, 1, 1, 2], "negative_last": [0, 0, 1, 1, 2, -1]}


@pytest.mark.parametrize("ids", sorted(SORTED_IDS))
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.float16])
def test_sorted_segment_lean_equals_full(op, dtype, ids):
    data = (np.arange(12) % 7 - 3).astype(dtype).reshape(6, 2)
    if np.dtype(dtype).kind == "f":
        data[2, 1], data[0, 0] = np.nan, -0.0

    def build(s):
        d = s.placeholder(gf.as_dtype(dtype), shape=data.shape)
        i = s.placeholder(gf.int64, shape=[6])
        return getattr(s, f"segment_{op}")(d, i), [d, i]
    _assert_same(_run_both(build, [data, np.array(SORTED_IDS[ids], np.int64)]))


def _special_values(shape, dtype, seed):
    """Values with ties, signed zeros, infinities and NaNs (for floats) in every row."""
    rng = np.random.default_rng(seed)
    pool = np.array([0.0, -0.0, 1.5, -2.0, 3.0, np.inf, -np.inf, np.nan]) \
        if np.dtype(dtype).kind == "f" else np.array([0, 1, 3, 7, 100])
    x = rng.normal(size=shape) * 4
    special = rng.random(shape) < 0.4
    x[special] = rng.choice(pool, size=int(special.sum()))
    return x.astype(dtype) if np.dtype(dtype).kind == "f" else np.abs(x).astype(dtype)


@pytest.mark.parametrize("width", [1, 2, 7, 8, 9, 64, 128, 129])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_rows_lean_equals_full(dtype, width):
    """The compiled row loops (rows of up to 128, ops/softmax_loops.py) and numpy's
    calls beyond give the registered kernels' bits, NaN, infinite and signed-zero rows
    included, on every call."""
    logits = _special_values((3, 20, width), dtype, width)
    for build in (lambda s, x: s.softmax(x), lambda s, x: gf.nn.log_softmax(x)):
        def graph(s, build=build):
            x = s.placeholder(gf.as_dtype(dtype), shape=logits.shape)
            return build(s, x), [x]
        _assert_same(_run_both(graph, [logits]))


def _top_k_reference(x, k):
    """TF's order row by row in plain Python: larger first, NaN above everything, ties
    by the lower index."""
    rows = x.reshape(-1, x.shape[-1])
    order = [sorted(range(len(row)), key=lambda j: (not np.isnan(row[j]),
                                                    -row[j] if not np.isnan(row[j]) else 0, j))[:k]
             for row in rows.astype(np.float64)]
    indices = np.array(order, np.int64).reshape(x.shape[:-1] + (k,))
    return np.take_along_axis(x, indices, -1), indices


@pytest.mark.parametrize("k", [2, 3, 16])
@pytest.mark.parametrize("dtype, index_type", [
    (np.float32, gf.int32), (np.float32, gf.int64), (np.float32, gf.int16),
    (np.float64, gf.int32), (np.int32, gf.int32), (np.uint8, gf.int64), (np.int64, gf.int32)])
def test_top_k_lean_equals_full_and_tf_order(dtype, index_type, k):
    """TopKV2's one-scan loop (a constant k up to 16) gives the sort's values and
    indices, bit for bit, in TF's order, for ties, NaNs and signed zeros."""
    x = _special_values((4, 5, 17), dtype, k)

    def graph(s):
        p = s.placeholder(gf.as_dtype(dtype), shape=x.shape)
        values, indices = s.create_op("TopKV2", p, np.int32(k), index_type=index_type)
        return [values, indices], [p]
    (kind_a, a), (kind_b, b) = _run_both(graph, [x])
    assert kind_a == kind_b == "ok"
    values, indices = _top_k_reference(x, k)
    for got, want in zip(a, b):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    assert a[0].tobytes() == values.tobytes()
    np.testing.assert_array_equal(a[1], indices)
    assert a[1].dtype == index_type.as_numpy_dtype


@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=12),
                  elements=st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf,
                                            np.nan])),
       st.integers(2, 16))
@settings(max_examples=60, deadline=None)
def test_top_k_lean_order_is_tfs_by_hypothesis(x, k):
    k = min(k, x.shape[-1])
    if k < 2 or x.size == 0:
        return
    s = gf.Scope(gf.Graph())
    p = s.placeholder(gf.float32, shape=x.shape)
    values, indices = s.top_k(p, k=k)
    with gf.Session(s.graph) as sess:
        got = [sess.run([values, indices], {p: x}) for _ in range(3)][-1]
    want_values, want_indices = _top_k_reference(x, k)
    assert got[0].tobytes() == want_values.tobytes()
    np.testing.assert_array_equal(got[1], want_indices)


def _with_specials(values: np.ndarray, payload: int) -> np.ndarray:
    """``values`` with NaNs (of ``payload``), infinities and signed zeros mixed in."""
    flat = values.reshape(-1).copy()
    bits = flat.view(np.uint32 if flat.dtype == np.float32 else np.uint64)
    bits[::7] = np.array([np.nan], flat.dtype).view(bits.dtype)[0] | payload
    flat[5::13], flat[6::17], flat[2::19], flat[4::23] = np.inf, -np.inf, 0.0, -0.0
    return flat.reshape(values.shape)


@pytest.mark.parametrize("column_first", [False, True], ids=["rows_op_column", "column_op_rows"])
@pytest.mark.parametrize("op", ["mul", "add", "sub", "real_div"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_column_per_row_gives_numpys_bits_in_either_operand_order(dtype, op, column_first):
    """``x (op) c`` and ``c (op) x`` with c one value per row of x ([n, k] and [n, 1]): the
    compiled row loops (ops/row_loops.py) give numpy's broadcasting bits, NaN payloads
    (one per operand: two NaNs' product may carry either), infinities and signed zeros
    included, on every call."""
    from graphflow.ops.math_ops import MIN_OUT_ELEMENTS
    rng = np.random.default_rng(5)
    n, k = 2 * MIN_OUT_ELEMENTS // 64 + 3, 64
    rows = _with_specials(rng.normal(size=(n, k)).astype(dtype), payload=1)
    column = _with_specials(rng.normal(size=(n, 1)).astype(dtype), payload=1)
    words = column.view(f"u{np.dtype(dtype).itemsize}")
    words[1::6] = np.array([np.nan], dtype).view(words.dtype)[0] | 2  # another payload
    rows[1::6] = np.where(np.isnan(rows[1::6]), 1.5, rows[1::6])  # ... never with a NaN
    a, b = (column, rows) if column_first else (rows, column)
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.as_dtype(dtype), shape=a.shape)
    y = s.placeholder(gf.as_dtype(dtype), shape=b.shape)
    out = getattr(s, op)(x, y)
    want = {"mul": np.multiply, "add": np.add, "sub": np.subtract,
            "real_div": np.divide}[op](a, b)
    with gf.Session(s.graph) as sess, np.errstate(all="ignore"):
        f = sess.make_callable(out, [x, y])
        for _ in range(3):
            got = f(a, b)
            assert got.shape == want.shape and got.tobytes() == want.tobytes()
    from graphflow.ops import row_loops
    loops = row_loops.COLUMN_FIRST_LOOPS if column_first else row_loops.LOOPS
    op_type = {"mul": "Mul", "add": "Add", "sub": "Sub", "real_div": "RealDiv"}[op]
    assert loops[op_type].signatures, "the row loop did not run"
