"""Variables: TF 1.x resource semantics, in-place sparse updates, concurrency, and
training an embedding table with gf.train."""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf

from support.threads import run_in_threads

NUMBER = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
          np.uint16, np.uint32, np.uint64, np.complex64, np.complex128]
REAL = [t for t in NUMBER if np.dtype(t).kind != "c"]
RNG = np.random.default_rng(11)


def table_values(shape, dtype):
    a = RNG.integers(0, 20, size=shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.integers(0, 20, size=shape)
    return a.astype(dtype)


def reference(op, value, indices, updates):
    """The update on a plain numpy copy, in index order."""
    out = value.copy()
    idx = tuple(np.moveaxis(indices, -1, 0))
    if op == "update":
        for i in np.ndindex(indices.shape[:-1]):
            out[tuple(indices[i])] = updates[i]
    else:
        ufunc = {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum}[op]
        if value.dtype == np.bool_:  # TensorFlow's CPU kernel: C++'s bool += (or), -= (xor)
            ufunc = {"add": np.logical_or, "sub": np.logical_xor}[op]
        ufunc.at(out, idx, updates)
    return out


def session_with(graph):
    sess = gf.Session(graph)
    sess.run(gf.global_variables_initializer(graph))
    return sess


@pytest.mark.parametrize("op,dtypes", [("update", NUMBER + [np.bool_]),
                                       ("add", NUMBER + [np.bool_]), ("sub", NUMBER + [np.bool_]),
                                       ("min", REAL), ("max", REAL)])
@pytest.mark.parametrize("depth", [1, 2])
def test_scatter_updates_match_numpy_with_duplicates(op, dtypes, depth):
    for dtype in dtypes:
        scope = gf.Scope(gf.Graph())
        init = table_values([6, 3], dtype) if dtype != np.bool_ else RNG.random((6, 3)) > .5
        v = scope.variable(init, name="v")
        if depth == 1:
            indices = np.array([[1], [4], [1], [0]], np.int64)
            updates = table_values([4, 3], dtype) if dtype != np.bool_ else RNG.random((4, 3)) > .5
        else:
            indices = np.array([[1, 2], [5, 0], [1, 2]], np.int32)
            updates = table_values([3], dtype) if dtype != np.bool_ else RNG.random(3) > .5
        after = getattr(v, f"scatter_nd_{op}")(indices, updates)
        with session_with(scope.graph) as sess:
            got = sess.run(after)
            np.testing.assert_array_equal(got, reference(op, init, indices, updates),
                                          err_msg=str(dtype))
            assert got.dtype == init.dtype
            np.testing.assert_array_equal(sess.run(v), got)
            if dtype == np.bool_:  # a bool is stored as the byte 0 or 1, never another
                assert got.view(np.uint8).max(initial=0) <= 1


def test_assign_assign_add_assign_sub(scope):
    v = scope.variable(np.arange(4, dtype=np.int64))
    with session_with(scope.graph) as sess:
        np.testing.assert_array_equal(sess.run(v.assign_add([1, 1, 1, 1])), [1, 2, 3, 4])
        np.testing.assert_array_equal(sess.run(v.assign_sub([1, 0, 0, 0])), [0, 2, 3, 4])
        np.testing.assert_array_equal(sess.run(v.assign([9, 9, 9, 9])), [9] * 4)


def test_an_out_of_range_index_leaves_the_variable_unchanged(scope):
    init = np.arange(12.0).reshape(4, 3)
    v = scope.variable(init, name="table")
    bad = v.scatter_nd_add([[0], [2], [7]], np.ones((3, 3)), read_value=False)
    ignored = v.scatter_nd_add([[0], [7]], np.ones((2, 3)), bad_indices_policy="IGNORE")
    with session_with(scope.graph) as sess:
        with pytest.raises(gf.errors.InvalidArgumentError, match=r"indices\[2\] = \[7\].*table"):
            sess.run(bad)
        np.testing.assert_array_equal(sess.run(v), init)
        expected = init.copy()
        expected[0] += 1
        np.testing.assert_array_equal(sess.run(ignored), expected)


def test_string_variables_assign_scatter_update_and_gather_as_tensorflow(scope):
    init = np.array([[b"a", b"bc"], [b"", b"\x00\xff"], ["é".encode(), b"z"]], dtype=object)
    v = scope.variable(init, name="words")
    indices = np.array([[0], [2], [0]], np.int32)  # a duplicate: the last one wins
    updates = np.array([[b"p", b"q"], [b"r", b""], [b"s", b"t"]], dtype=object)
    after = v.scatter_nd_update(indices, updates)
    bad = v.scatter_nd_update([[1, 1], [3, 0]], [b"X", b"X"])
    with session_with(scope.graph) as sess:
        got = sess.run(after)
        assert got.tolist() == reference("update", init, indices, updates).tolist()
        rows = sess.run(v.sparse_read([2, 2, 1]))
        assert rows.tolist() == [got[2].tolist(), got[2].tolist(), [b"", b"\x00\xff"]]
        with pytest.raises(gf.errors.InvalidArgumentError, match=r"indices\[1\] = \[3, 0\]"):
            sess.run(bad)
        assert sess.run(v).tolist() == got.tolist()  # nothing of the failing update landed
        assert sess.run(v.assign(np.full((3, 2), b"k", dtype=object))).tolist() == [[b"k"] * 2] * 3
        sess.run(v.initializer)
        assert sess.run(v).tolist() == init.tolist()
    assert init[0, 0] == b"a"  # the caller's array is never written
    for update in (v.assign_add, v.assign_sub):  # TensorFlow has no such string kernels
        with pytest.raises(TypeError, match="string"):
            update(init)
    for name in ("add", "sub", "min", "max"):
        with pytest.raises(TypeError, match="string"):
            getattr(v, f"scatter_nd_{name}")([[0]], [[b"a", b"b"]])


def test_a_failing_run_applies_its_successful_ops_whole(scope):
    a = scope.variable(np.zeros(3), name="a")
    b = scope.variable(np.zeros(3), name="b")
    ok = a.scatter_nd_add([[0], [1]], [1.0, 1.0], read_value=False)
    failing = scope.with_control_dependencies([ok]).resource_scatter_nd_add(
        b.handle, [[1], [5]], np.ones(2))
    with session_with(scope.graph) as sess:
        with pytest.raises(gf.errors.InvalidArgumentError):
            sess.run(failing)
        np.testing.assert_array_equal(sess.run(a), [1, 1, 0])
        np.testing.assert_array_equal(sess.run(b), [0, 0, 0])
        sess.run(ok)  # the session stays usable
        np.testing.assert_array_equal(sess.run(a), [2, 2, 0])


def test_uninitialized_reads_and_updates_name_the_variable(scope):
    v = scope.variable([1.0, 2.0], name="weights")
    with gf.Session(scope.graph) as sess:
        for fetch in (v, v.scatter_nd_add([[0]], [1.0]), v.sparse_read([0]), v.assign_add([1, 1])):
            with pytest.raises(gf.errors.FailedPreconditionError, match="'weights'"):
                sess.run(fetch)


def test_initializer_copies_and_resets(scope):
    init = np.ones(3, np.float32)
    v = scope.variable(init)
    bump = v.assign_add(np.ones(3, np.float32))
    with gf.Session(scope.graph) as sess:
        sess.run(v.initializer)
        sess.run(bump)
        sess.run(bump)
        np.testing.assert_array_equal(sess.run(v), [3, 3, 3])
        sess.run(v.initializer)
        np.testing.assert_array_equal(sess.run(v), [1, 1, 1])
    np.testing.assert_array_equal(init, [1, 1, 1])


def test_reads_are_snapshots(scope):
    v = scope.variable(np.zeros(4))
    bump = v.scatter_nd_add([[1]], [5.0], read_value=False)
    overwritten = scope.tensor_scatter_update(v.read(), [[0]], [7.0])
    with session_with(scope.graph) as sess:
        before = sess.run(v)
        sess.run(bump)
        np.testing.assert_array_equal(before, 0)
        np.testing.assert_array_equal(sess.run(overwritten), [7, 5, 0, 0])
        np.testing.assert_array_equal(sess.run(v), [0, 5, 0, 0])


def test_sessions_are_independent(scope):
    v = scope.variable(np.zeros(2))
    bump = v.assign_add([1.0, 1.0])
    with session_with(scope.graph) as s1, session_with(scope.graph) as s2:
        s1.run(bump)
        s1.run(bump)
        np.testing.assert_array_equal(s1.run(v), [2, 2])
        np.testing.assert_array_equal(s2.run(v), [0, 0])


@pytest.mark.parametrize("optimize", [True, False])
def test_a_variable_read_under_control_dependencies_sees_the_update(scope, optimize):
    """As TF 1.x: an op built under ``with_control_dependencies([update])`` that takes a
    Variable reads it after the update (a fresh read under the dependencies), not the
    shared read, which may run before it."""
    v = scope.variable(np.zeros(3, np.float32), name="v")
    w = scope.variable(np.ones(3, np.float32), name="w")
    update = v.assign_add(np.ones(3, np.float32), read_value=False)
    ordered = scope.with_control_dependencies([update])
    after = ordered.identity(v)
    summed = ordered.add_n([v, w])  # list inputs too
    unordered = scope.identity(v)   # no dependency: the shared read, as before
    assert unordered.op.inputs[0] is v.read()
    assert after.op.inputs[0].op.control_inputs == (update,)
    with gf.Session(scope.graph, gf.SessionConfig(optimize=optimize)) as sess:
        for _ in range(20):  # the shared read ran first often enough to show it here
            sess.run(gf.global_variables_initializer(scope.graph))
            np.testing.assert_array_equal(sess.run(after), [1, 1, 1])
            sess.run(gf.global_variables_initializer(scope.graph))
            np.testing.assert_array_equal(sess.run(summed), [2, 2, 2])
    (grad,) = gf.gradients(scope.reduce_sum(scope.mul(after, after)), [v])
    with session_with(scope.graph) as sess:  # the fresh read is one of v's reads
        np.testing.assert_array_equal(sess.run(grad), [2, 2, 2])


def test_a_variable_built_under_control_dependencies_does_not_take_them(scope):
    """As TF 1.x's init_scope: the handle, initializer and read of a variable created in
    a scope with control dependencies do not wait on (and rerun) them at every use."""
    counter = scope.variable(np.int64(0), name="counter")
    bump = counter.assign_add(np.int64(1), read_value=False)
    v = scope.with_control_dependencies([bump]).variable(np.arange(3.0), name="v")
    assert all(not op.control_inputs for op in (v.handle.op, v.initializer, v.read().op))
    with session_with(scope.graph) as sess:
        for fetch in (v, v.sparse_read([0]), v.assign_add(np.ones(3))):
            sess.run(fetch)
        assert sess.run(counter) == 0


def test_stateful_ops_are_never_folded_or_pruned(scope):
    v = scope.variable(np.zeros(2))
    bump = v.assign_add(scope.constant([1.0, 1.0], dtype=gf.float64), read_value=False)
    with session_with(scope.graph) as sess:
        for _ in range(3):
            assert sess.run(bump) is None
        np.testing.assert_array_equal(sess.run(v), [3, 3])


def test_many_threads_lose_no_update(scope):
    v = scope.variable(np.zeros(4, np.int64))
    bump = v.scatter_nd_add([[0], [2], [2]], np.ones(3, np.int64), read_value=False)
    with session_with(scope.graph) as sess:
        def work(_):
            for _ in range(200):
                sess.run(bump)
        assert not run_in_threads(work, 8)
        np.testing.assert_array_equal(sess.run(v), [1600, 0, 3200, 0])


def test_build_time_errors_name_the_variable(scope):
    v = scope.variable(np.zeros((3, 2), np.float32), name="emb")
    with pytest.raises(gf.errors.OpError, match="float64.*'emb'.*float32"):
        v.scatter_nd_add([[0]], scope.constant([[1.0, 2.0]], dtype=gf.float64))
    with pytest.raises(gf.errors.OpError, match="wrong shape"):
        v.assign(np.zeros((2, 2), np.float32))
    with pytest.raises(gf.errors.OpError):
        v.scatter_nd_update([[0]], np.zeros((1, 3), np.float32))


def test_variables_are_operands_and_survive_save_and_load(scope, tmp_path):
    v = scope.variable(np.arange(3.0), name="w")
    y = scope.mul(v, v)
    path = tmp_path / "g.json"
    scope.graph.save(path)
    loaded = gf.load_graph(path)
    (w,) = gf.global_variables(loaded)
    assert (w.name, w.shape.as_list(), w.dtype) == ("w", [3], gf.float64)
    with session_with(scope.graph) as a, session_with(loaded) as b:
        np.testing.assert_array_equal(a.run(y), b.run(y.name))


# -- training ---------------------------------------------------------------------------------
def test_sparse_gradient_of_a_sparse_read_is_indexed_slices(scope):
    v = scope.variable(np.arange(8.0).reshape(4, 2), name="t")
    rows = v.sparse_read([[3, 1], [3, 3]])
    (g,) = gf.gradients(scope.mul(rows, rows), [v])
    assert isinstance(g, gf.IndexedSlices)
    with session_with(scope.graph) as sess:
        dense = sess.run(gf.convert_to_tensor(g))
    table = np.arange(8.0).reshape(4, 2)
    expected = np.zeros_like(table)
    np.add.at(expected, [3, 1, 3, 3], 2 * table[[3, 1, 3, 3]])
    np.testing.assert_array_equal(dense, expected)


def test_gradient_descent_touches_only_gathered_rows_and_converges(scope):
    rng = np.random.default_rng(3)
    init = rng.normal(size=(40, 4))
    table = scope.variable(init, name="embedding")
    bias = scope.variable(np.zeros(4), name="bias")
    ids = scope.placeholder(gf.int32, shape=[None])
    target = scope.placeholder(gf.float64, shape=[None, 4])
    diff = scope.sub(scope.add(table.sparse_read(ids), bias), target)
    loss = scope.mul(diff, diff)
    grads = gf.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
    assert isinstance(grads[0][0], gf.IndexedSlices) and isinstance(grads[1][0], gf.Output)
    train = gf.train.GradientDescentOptimizer(0.1).minimize(loss)
    feed = {ids: np.array([1, 5, 5, 9]), target: np.ones((4, 4))}
    with session_with(scope.graph) as sess:
        first = sess.run(loss, feed).sum()
        for _ in range(40):
            sess.run(train, feed)
        last = sess.run(loss, feed).sum()
        after = sess.run(table)
    assert last < first / 10
    untouched = np.setdiff1d(np.arange(40), [1, 5, 9])
    np.testing.assert_array_equal(after[untouched], init[untouched])


def test_all_gradients_of_a_step_see_the_values_before_it(scope):
    """y = a * b: both updates must use the old a and b (not one already updated)."""
    a = scope.variable(np.array([2.0]), name="a")
    b = scope.variable(np.array([3.0]), name="b")
    train = gf.train.GradientDescentOptimizer(1.0).minimize(scope.mul(a, b))
    with session_with(scope.graph) as sess:
        sess.run(train)
        np.testing.assert_array_equal(sess.run([a, b]), [[2.0 - 3.0], [3.0 - 2.0]])


def test_adagrad_sparse_sums_duplicates_first_as_tensorflow(scope):
    init = np.arange(10.0).reshape(5, 2)
    table = scope.variable(init, name="t")
    w = scope.variable(np.ones(2), name="w")
    ids = [1, 3, 1]
    rows = scope.mul(table.sparse_read(ids), w)
    opt = gf.train.AdagradOptimizer(0.5)
    train = opt.minimize(scope.reduce_sum(scope.mul(rows, rows)))
    with session_with(scope.graph) as sess:
        sess.run(train)
        got_table, got_w = sess.run([table, w])
    acc, expected = np.full((5, 2), 0.1), init.copy()
    summed = np.zeros((5, 2))
    np.add.at(summed, ids, 2 * init[ids])
    acc[[1, 3]] += summed[[1, 3]] ** 2
    expected[[1, 3]] -= 0.5 * summed[[1, 3]] / np.sqrt(acc[[1, 3]])
    np.testing.assert_allclose(got_table, expected, rtol=1e-15)
    gw = (2 * init[ids] ** 2).sum(0)
    np.testing.assert_allclose(got_w, 1 - 0.5 * gw / np.sqrt(0.1 + gw ** 2), rtol=1e-15)
    assert [opt.get_slot(v, "accumulator").name for v in (table, w)] == ["t/Adagrad", "w/Adagrad"]


def test_adagrad_out_of_range_rows_leave_both_variables_unchanged(scope):
    table = scope.variable(np.ones((3, 2)), name="t")
    acc = scope.variable(np.full((3, 2), 0.1), name="acc")
    step = scope.resource_sparse_apply_adagrad(table.handle, acc.handle, np.float64(0.1),
                                               np.ones((2, 2)), [0, 3])
    with session_with(scope.graph) as sess:
        with pytest.raises(gf.errors.InvalidArgumentError, match="Index 3 at offset 1"):
            sess.run(step)
        np.testing.assert_array_equal(sess.run(table), 1)
        np.testing.assert_array_equal(sess.run(acc), 0.1)


ADAGRAD_MISUSE = [  # (what, var value, accum value, lr, grad, indices or None: dense, error)
    ("lr vector, dense", np.ones((3, 2)), np.ones((3, 2)), [0.1, 0.2], np.ones((3, 2)), None,
     r"lr is not a scalar: \[2\]"),
    ("lr vector, sparse", np.ones((3, 2)), np.ones((3, 2)), [0.1, 0.2], np.ones((1, 2)), [0],
     r"lr is not a scalar: \[2\]"),
    ("accum of another shape, dense", np.ones((3, 2)), np.ones((4, 2)), 0.1, np.ones((3, 2)),
     None, r"var and accum do not have the same shape: \[3,2\] \[4,2\]"),
    ("accum of another shape, sparse", np.ones((3, 2)), np.ones((4, 2)), 0.1, np.ones((1, 2)),
     [0], r"var and accum do not have the same shape: \[3,2\] \[4,2\]"),
    ("accum of another dtype", np.ones((3, 2)), np.ones((3, 2), np.float32), 0.1,
     np.ones((3, 2)), None, "'acc' has dtype float32"),
    ("a scalar var, sparse", np.float64(1), np.float64(1), 0.1, np.ones(1), [0],
     "var must be at least 1 dimensional"),
]


@pytest.mark.parametrize("hidden", [False, True], ids=["at build time", "at run time"])
@pytest.mark.parametrize("case", ADAGRAD_MISUSE, ids=[c[0] for c in ADAGRAD_MISUSE])
def test_adagrad_ops_refuse_what_tensorflow_refuses_and_change_nothing(scope, case, hidden):
    """As TensorFlow's kernels: lr a scalar, var and accum of one shape and of the update's
    dtype, sparse updates on a var of rank >= 1. Checked when the graph is built where the
    handles tell, else (``hidden``: handles through Identity, lr fed) when it runs, before
    anything is written."""
    _, var_value, acc_value, lr, grad, indices, error = case
    var, acc = scope.variable(var_value, name="var"), scope.variable(acc_value, name="acc")
    handles = [var.handle, acc.handle]
    if hidden:
        handles = [scope.identity(h) for h in handles]
    rate = scope.placeholder(gf.float64) if hidden or np.ndim(lr) else np.float64(lr)
    feed = {rate: np.float64(lr)} if hidden or np.ndim(lr) else {}

    def build():
        if indices is None:
            return scope.resource_apply_adagrad(*handles, rate, grad)
        return scope.resource_sparse_apply_adagrad(*handles, rate, grad, indices)
    if not hidden and "lr vector" not in case[0]:  # a fed lr's shape is known only later
        with pytest.raises(gf.errors.InvalidArgumentError, match=error):
            build()
        return
    step = build()
    with session_with(scope.graph) as sess:
        with pytest.raises(gf.errors.InvalidArgumentError, match=error):
            sess.run(step, feed)
        assert np.array_equal(sess.run(var), var_value) and np.array_equal(sess.run(acc),
                                                                           acc_value)


WRONG_DTYPE = [  # (what a kernel does through a handle that hides the variable's dtype, match)
    ("read", lambda s, h: s.read_variable_op(h, dtype=gf.float32),
     "read variable 'v' with wrong dtype. Expected float32 got float64"),
    ("sparse_read", lambda s, h: s.resource_gather(h, [0], dtype=gf.int32),
     "read variable 'v' with wrong dtype. Expected int32 got float64"),
    ("assign", lambda s, h: s.assign_variable_op(h, np.ones((3, 2), np.float32)),
     "assign variable 'v' with wrong dtype. Expected float64 got float32"),
    ("assign_add", lambda s, h: s.assign_add_variable_op(h, np.ones((3, 2), np.int64)),
     "update variable 'v' with wrong dtype. Expected float64 got int64"),
    ("assign_sub", lambda s, h: s.assign_sub_variable_op(h, np.ones((3, 2), np.float16)),
     "update variable 'v' with wrong dtype. Expected float64 got float16"),
    ("scatter_nd_update", lambda s, h: s.resource_scatter_nd_update(h, [[0]], np.ones((1, 2), np.int8)),
     "update variable 'v' with wrong dtype. Expected float64 got int8"),
    ("scatter_nd_max", lambda s, h: s.resource_scatter_nd_max(h, [[0]], np.ones((1, 2), np.float32)),
     "update variable 'v' with wrong dtype. Expected float64 got float32"),
]


@pytest.mark.parametrize("initialized", [True, False])
@pytest.mark.parametrize("what, make, match", WRONG_DTYPE, ids=[c[0] for c in WRONG_DTYPE])
def test_a_handle_that_hides_the_dtype_cannot_read_or_write_another(scope, what, make, match,
                                                                    initialized):
    """A handle not straight from its VarHandleOp (through Identity here) lets build-time
    checks pass; the kernels check the variable's dtype (its value's, else the one its
    VarHandleOp declared), as TensorFlow's, and write nothing."""
    v = scope.variable(np.arange(6.0).reshape(3, 2), name="v")
    step = make(scope, scope.identity(v.handle))
    with gf.Session(scope.graph) as sess:
        if initialized:
            sess.run(v.initializer)
        else:
            sess.run(v.handle)  # the VarHandleOp ran: the dtype is declared, no value yet
            if what != "assign":  # the others need a value first
                match = "'v': it is uninitialized"
        with pytest.raises(gf.errors.OpError, match=match):
            sess.run(step)
        if initialized:
            np.testing.assert_array_equal(sess.run(v), np.arange(6.0).reshape(3, 2))
        else:
            assert sess.resources.variable("v").value is None


def test_two_handles_of_one_variable_must_agree_on_its_dtype(scope):
    a = scope.var_handle_op(dtype=gf.float32, shape=[2], shared_name="shared")
    b = scope.var_handle_op(dtype=gf.int32, shape=[2], shared_name="shared")
    with gf.Session(scope.graph) as sess:
        sess.run(a)
        with pytest.raises(gf.errors.InvalidArgumentError,
                           match="access variable 'shared' as int32: it was declared float32"):
            sess.run(b)


@pytest.mark.parametrize("optimizer", [gf.train.GradientDescentOptimizer, gf.train.AdagradOptimizer])
def test_a_learning_rate_can_be_a_scalar_output(optimizer):
    """As TF 1.x: a fed (or computed) learning rate, cast to each variable's dtype, gives
    the same steps as the same number; 0 changes nothing; a non-scalar or non-real one is
    refused when the optimizer is made."""
    def model():
        scope = gf.Scope(gf.Graph())
        table = scope.variable(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2), name="t")
        bias = scope.variable(np.array([0.5, -2.0]), name="b")  # float64
        rows = table.sparse_read([0, 0, 3])
        loss = scope.add(scope.cast(scope.reduce_sum(scope.mul(rows, rows)), gf.float64),
                         scope.reduce_sum(scope.mul(bias, bias)))
        return scope, table, bias, loss
    scope, table, bias, loss = model()
    rate = scope.placeholder(gf.float64, shape=[], name="rate")
    step = optimizer(rate).minimize(loss)
    ref_scope, ref_table, ref_bias, ref_loss = model()
    ref_step = optimizer(0.1).minimize(ref_loss)
    with session_with(scope.graph) as sess, session_with(ref_scope.graph) as ref:
        for _ in range(3):
            sess.run(step, {rate: 0.1})
            ref.run(ref_step)
        got, expected = sess.run([table, bias]), ref.run([ref_table, ref_bias])
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
        sess.run(step, {rate: 0.0})
        for a, b in zip(sess.run([table, bias]), expected):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(gf.errors.InvalidArgumentError, match="must be a scalar"):
        optimizer(scope.placeholder(gf.float32, shape=[2]))
    with pytest.raises(TypeError, match="real number"):
        optimizer(scope.constant("fast"))
    with pytest.raises(TypeError, match="number"):
        optimizer(True)
