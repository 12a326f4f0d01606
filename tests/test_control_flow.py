"""scope.cond and scope.while_loop: TF 2's functional control flow.

Values against plain Python/numpy references, on the 1st and later calls of a cached
plan; build-time errors with TensorFlow's messages; run-time errors naming the body's
node and the iteration; effects ordered as TF 2 orders them; gradients against
central differences (and tf.gradients where TensorFlow is installed)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError, UnimplementedError

F32 = np.float32
CALLS = 3  # the 3rd call runs the compiled, specialized plan


def _scope():
    return gf.Scope(gf.Graph())


def _run_all(graph, fetches, feeds, calls=CALLS):
    with gf.Session(graph) as sess:
        results = [sess.run(fetches, feeds) for _ in range(calls)]
    for later in results[1:]:
        for a, b in zip(gf.control_flow.flatten(results[0]), gf.control_flow.flatten(later)):
            np.testing.assert_array_equal(a, b)
    return results[-1]


# -- cond ------------------------------------------------------------------------------------
@pytest.mark.parametrize("taken", [True, False])
def test_cond_runs_the_branch_taken(taken):
    s = _scope()
    x = s.placeholder(gf.float32, [3])
    p = s.placeholder(gf.bool, [])
    y = s.cond(p, lambda: s.mul(x, 2.0), lambda: s.add(x, 1.0))
    assert y.op.type == "StatelessIf" and y.shape == gf.TensorShape([3])
    value = np.array([1, 2, 3], F32)
    got = _run_all(s.graph, y, {x: value, p: taken})
    np.testing.assert_array_equal(got, value * 2 if taken else value + 1)


def test_cond_returns_nested_structures_and_merges_shapes():
    s = _scope()
    p = s.placeholder(gf.bool, [])
    a = s.placeholder(gf.float32, [2, 3])
    b = s.placeholder(gf.float32, [4, 3])
    out = s.cond(p, lambda: {"m": a, "n": (s.shape(a), 1)},
                 lambda: {"m": b, "n": (s.shape(b), 2)})
    assert out["m"].shape.as_list() == [None, 3]
    feeds = {a: np.ones((2, 3), F32), b: np.zeros((4, 3), F32), p: False}
    got = _run_all(s.graph, out, feeds)
    assert got["m"].shape == (4, 3) and list(got["n"][0]) == [4, 3] and got["n"][1] == 2


def test_cond_mismatched_branches_are_tfs_type_error():
    s = _scope()
    p = s.placeholder(gf.bool, [])
    with pytest.raises(TypeError, match="must have the same number, type, and overall"):
        s.cond(p, lambda: s.constant(1.0), lambda: s.constant(1))
    with pytest.raises(TypeError, match="must have the same number"):
        s.cond(p, lambda: s.constant(1.0), lambda: (s.constant(1.0), s.constant(2.0)))
    with pytest.raises(TypeError, match="pred must not be a Python bool"):
        s.cond(True, lambda: 1.0, lambda: 2.0)
    with pytest.raises(TypeError, match="true_fn must be callable"):
        s.cond(p, 1.0, lambda: 2.0)


def test_cond_predicate_must_be_a_scalar():
    s = _scope()
    with pytest.raises(InvalidArgumentError, match="must be a scalar"):
        s.cond(s.placeholder(gf.bool, [2]), lambda: 1.0, lambda: 2.0)
    p = s.placeholder(gf.bool)  # unknown rank: checked when it runs
    y = s.cond(p, lambda: 1.0, lambda: 2.0)
    with gf.Session(s.graph) as sess:
        assert sess.run(y, {p: True}) == 1.0
        with pytest.raises(InvalidArgumentError, match=r"must be a scalar, but it has shape \[2\]"):
            sess.run(y, {p: [True, False]})
        assert sess.run(y, {p: False}) == 2.0  # the session is still usable


def test_cond_captures_outer_tensors_and_nests():
    s = _scope()
    x = s.placeholder(gf.float32, [])
    outer = s.mul(x, 3.0)

    def inner_true():
        return s.cond(x > 0, lambda: outer + 1.0, lambda: outer - 1.0)
    y = s.cond(x > -5, inner_true, lambda: s.constant(np.float32(0)))
    for value, want in [(2.0, 7.0), (-1.0, -4.0), (-9.0, 0.0)]:
        assert _run_all(s.graph, y, {x: F32(value)}) == F32(want)


def test_cond_runs_only_the_taken_branchs_effects():
    s = _scope()
    v = s.variable(np.float32(0.0))
    p = s.placeholder(gf.bool, [])
    y = s.cond(p, lambda: v.assign_add(1.0).read(), lambda: v.assign_add(10.0).read())
    assert y.op.type == "If"
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        got = [float(sess.run(y, {p: flag})) for flag in (True, True, False, True)]
    assert got == [1.0, 2.0, 12.0, 13.0]


# -- while_loop --------------------------------------------------------------------------------
def test_while_loop_values_and_zero_iterations():
    s = _scope()
    n = s.placeholder(gf.int32, [])
    x = s.placeholder(gf.float32, [3])
    i, acc = s.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * x + 1.0),
                          [0, s.zeros_like(x)])
    assert acc.shape == gf.TensorShape([3]) and i.dtype == gf.int32
    value = np.array([0.5, 2.0, -1.0], F32)
    for steps in (0, 1, 7):
        want = np.zeros(3, F32)
        for _ in range(steps):
            want = want * value + F32(1.0)
        got_i, got = _run_all(s.graph, [i, acc], {n: steps, x: value})
        assert got_i == steps
        np.testing.assert_array_equal(got, want)


def test_maximum_iterations_bounds_the_loop():
    s = _scope()
    i = s.while_loop(lambda i: i < 100, lambda i: i + 1, [s.constant(0)], maximum_iterations=7)
    assert _run_all(s.graph, i, {})[0] == 7
    with pytest.raises(ValueError, match="maximum_iterations must be a scalar"):
        s.while_loop(lambda i: i < 3, lambda i: i + 1, [0], maximum_iterations=[1, 2])


@pytest.mark.parametrize("dtype", [gf.float16, gf.float32, gf.float64, gf.int8, gf.int16,
                                   gf.int32, gf.int64, gf.uint8, gf.uint16, gf.uint32,
                                   gf.uint64, gf.bool, gf.complex64, gf.complex128, gf.string])
def test_loop_vars_of_every_dtype(dtype):
    s = _scope()
    x = s.placeholder(dtype, [2])
    value = np.array([b"a", b"b"], object) if dtype.is_string else \
        np.array([1, 0], dtype.as_numpy_dtype)
    i, y = s.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, s.gather_v2(y, [1, 0], 0)),
                        [0, x])
    got = _run_all(s.graph, y, {x: value})
    np.testing.assert_array_equal(got, value[::-1])
    assert got.dtype == value.dtype


def test_shape_changes_need_an_invariant():
    s = _scope()
    start = s.constant(np.ones(1, F32))
    with pytest.raises(ValueError, match=r"enters the loop with shape \[1\], but has shape "
                                         r"\[2\] after one iteration.*shape_invariants"):
        s.while_loop(lambda x: s.size(x) < 5, lambda x: s.concat([x, x], 0), [start])
    [out] = s.while_loop(lambda x: s.size(x) < 5, lambda x: s.concat([x, x], 0), [start],
                         shape_invariants=[gf.TensorShape([None])])
    assert out.shape.as_list() == [None]
    np.testing.assert_array_equal(_run_all(s.graph, out, {}), np.ones(8, F32))
    with pytest.raises(ValueError, match="not compatible with the initial shape"):
        s.while_loop(lambda x: s.size(x) < 5, lambda x: x, [start],
                     shape_invariants=[gf.TensorShape([3])])


def test_accumulation_through_concat():
    """TensorArray-free accumulation: each iteration appends a row."""
    s = _scope()
    x = s.placeholder(gf.float32, [3])
    rows = s.constant(np.zeros((0, 3), F32))
    _, out = s.while_loop(
        lambda i, r: i < 4,
        lambda i, r: (i + 1, s.concat([r, s.expand_dims(x * s.cast(i, gf.float32), 0)], 0)),
        [0, rows], shape_invariants=[gf.TensorShape([]), gf.TensorShape([None, 3])])
    value = np.array([1, 2, 3], F32)
    want = np.stack([value * k for k in range(4)])
    np.testing.assert_array_equal(_run_all(s.graph, out, {x: value}), want)


def test_dtype_and_structure_errors_are_tfs():
    s = _scope()
    with pytest.raises(TypeError, match="enters the loop with type float32 but has type "
                                        "float64 after 1 iteration"):
        s.while_loop(lambda x: x < 5, lambda x: s.cast(x, gf.float64) + 1.0,
                     [s.constant(1.0)])
    with pytest.raises(ValueError, match="don't have the same nested structure"):
        s.while_loop(lambda a, b: a < 5, lambda a, b: (a,), [s.constant(1.0), 2.0])
    with pytest.raises(TypeError, match="cond must be callable"):
        s.while_loop(1, lambda x: x, [1.0])
    with pytest.raises(ValueError, match="parallel_iterations must be a positive integer"):
        s.while_loop(lambda x: x < 2, lambda x: x + 1, [0], parallel_iterations=0)


def test_nested_loops_and_loops_in_conds():
    s = _scope()
    n = s.placeholder(gf.int32, [])

    def outer_body(i, total):
        _, inner = s.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + j), [0, total])
        return i + 1, inner
    _, total = s.while_loop(lambda i, t: i < n, outer_body, [0, 0])
    y = s.cond(n > 2, lambda: total * 10, lambda: total)
    for steps in (0, 2, 5):
        want = sum(j for i in range(steps) for j in range(i))
        assert _run_all(s.graph, y, {n: steps}) == (want * 10 if steps > 2 else want)


def test_body_errors_name_the_node_and_the_iteration():
    s = _scope()
    x = s.placeholder(gf.float32, [3])
    _, y = s.while_loop(lambda i, y: i < 3,
                        lambda i, y: (i + 1, s.gather_v2(y, i * 2, 0) * 0.0 + y),
                        [0, x])
    with gf.Session(s.graph) as sess:
        with pytest.raises(InvalidArgumentError) as info:
            sess.run(y, {x: np.ones(3, F32)})
        assert "GatherV2" in info.value.node_name
        assert "in iteration 2 of the while loop 'while'" in str(info.value)
        with pytest.raises(InvalidArgumentError):  # again, after a failed run
            sess.run(y, {x: np.ones(3, F32)})


def test_variable_updates_in_a_body_run_in_order_each_iteration():
    s = _scope()
    v = s.variable(np.float32(1.0))

    def body(i, seen):
        v.assign(v.read() * 2.0)
        return i + 1, seen + v.read()  # reads after the update (TF 2's order)
    _, seen = s.while_loop(lambda i, seen: i < 3, body, [0, s.constant(np.float32(0))])
    assert seen.op.type == "While"
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        assert sess.run(seen) == 2 + 4 + 8
        assert sess.run(v.read()) == 8.0
        assert sess.run(seen) == 16 + 32 + 64


@settings(max_examples=25, deadline=None)
@given(steps=st.integers(0, 12), size=st.integers(0, 4), seed=st.integers(0, 2 ** 16))
def test_a_polynomial_loop_matches_numpy(steps, size, seed):
    rng = np.random.default_rng(seed)
    value = rng.uniform(-1, 1, size).astype(F32)
    s = _scope()
    x = s.placeholder(gf.float32, [None])
    _, y = s.while_loop(lambda i, y: i < steps, lambda i, y: (i + 1, y * x - 0.5),
                        [0, s.ones_like(x)])
    want = np.ones(size, F32)
    for _ in range(steps):
        want = want * value - F32(0.5)
    np.testing.assert_array_equal(_run_all(s.graph, y, {x: value}, calls=2), want)


# -- gradients ---------------------------------------------------------------------------------
def _check(y, xs, values, feeds=None, tol=2e-3):
    for check in gf.gradient_check(y, xs, values, feed_dict=feeds):
        assert check.max_error < tol, (check.theoretical, check.numerical)


@pytest.mark.parametrize("taken", [True, False])
def test_cond_gradient_matches_central_differences(taken):
    s = _scope()
    x = s.placeholder(gf.float64, [3])
    w = s.placeholder(gf.float64, [3])
    p = s.placeholder(gf.bool, [])
    y = s.reduce_sum(s.cond(p, lambda: s.tanh(x) * w, lambda: s.square(x) + w))
    _check(y, [x, w], [np.array([0.3, -1.0, 2.0]), np.array([1.5, 0.5, -2.0])], {p: taken})
    dp = gf.gradients(y, [x])[0]
    with gf.Session(s.graph) as sess:
        for _ in range(CALLS):
            got = sess.run(dp, {x: [0.3, -1.0, 2.0], w: [1.5, 0.5, -2.0], p: taken})
    want = (1 - np.tanh([0.3, -1.0, 2.0]) ** 2) * [1.5, 0.5, -2.0] if taken else 2 * np.array([0.3, -1.0, 2.0])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_while_gradient_of_a_power_and_of_a_capture():
    s = _scope()
    x = s.placeholder(gf.float64, [])
    w = s.placeholder(gf.float64, [2])
    _, y = s.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * x + w), [0, s.ones_like(w)])
    loss = s.reduce_sum(s.square(y))
    _check(loss, [x, w], [np.float64(0.7), np.array([0.2, -0.4])], tol=1e-6)


def test_while_gradient_through_concat_accumulation_and_nesting():
    s = _scope()
    x = s.placeholder(gf.float64, [2])

    def body(i, rows):
        _, inner = s.while_loop(lambda j, z: j < 2, lambda j, z: (j + 1, s.tanh(z) * x), [0, x])
        return i + 1, s.concat([rows, s.expand_dims(inner * s.cast(i + 1, gf.float64), 0)], 0)
    _, rows = s.while_loop(lambda i, r: i < 3, body, [0, s.constant(np.zeros((0, 2)))],
                           shape_invariants=[gf.TensorShape([]), gf.TensorShape([None, 2])])
    y = s.reduce_sum(s.cond(s.reduce_sum(x) > 0, lambda: rows * rows, lambda: rows))
    _check(y, [x], [np.array([0.4, 0.9])], tol=1e-6)
    _check(y, [x], [np.array([-0.4, -0.9])], tol=1e-6)


def test_while_gradient_with_zero_iterations_is_the_identity():
    s = _scope()
    x = s.placeholder(gf.float64, [2])
    n = s.placeholder(gf.int32, [])
    _, y = s.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * a), [0, x])
    dx = gf.gradients(s.reduce_sum(y), [x])[0]
    with gf.Session(s.graph) as sess:
        np.testing.assert_array_equal(sess.run(dx, {x: [2.0, 3.0], n: 0}), [1.0, 1.0])
        np.testing.assert_array_equal(sess.run(dx, {x: [2.0, 3.0], n: 2}), [32.0, 108.0])


def test_gradient_through_a_variable_read_before_a_loop():
    s = _scope()
    v = s.variable(np.float32([1.0, 2.0]))
    value = v.read()  # read once, captured by the body
    _, y = s.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a * value),
                        [0, s.constant(np.ones(2, F32))])
    dv = gf.gradients(s.reduce_sum(y), [v])[0]
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        np.testing.assert_allclose(sess.run(dv), [2.0, 4.0])


def _variable_central_differences(sess, v, loss, value, eps=1e-6):
    """d loss / d v by central differences, the variable assigned each probe."""
    new = gf.Scope(v.handle.graph).placeholder(gf.float64, list(value.shape))
    assign = v.assign(new)
    grad = np.zeros_like(value)
    for j in np.ndindex(value.shape):
        probes = []
        for sign in (1, -1):
            probe = value.copy()
            probe[j] += sign * eps
            sess.run(assign, {new: probe})
            probes.append(float(sess.run(loss)))
        grad[j] = (probes[0] - probes[1]) / (2 * eps)
    sess.run(assign, {new: value})
    return grad


def _reads_in_control_flow(s, v, x):
    """A loop whose body reads ``v`` (twice: densely and rows by index), inside a cond
    whose other branch reads it too, and a nested loop reading it."""
    def body(i, a):
        _, inner = s.while_loop(lambda j, z: j < 2, lambda j, z: (j + 1, s.tanh(z * v.read())),
                                [0, a])
        rows = s.resource_gather(v.handle, s.constant([1, 0, 1]), dtype=gf.float64)
        return i + 1, inner * rows + x
    looped = s.while_loop(lambda i, a: i < 3, body, [0, x], maximum_iterations=5)[1]
    return s.reduce_sum(s.cond(s.reduce_sum(x) > 0, lambda: looped, lambda: looped * v.read()))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_gradient_wrt_a_variable_read_inside_control_flow(sign):
    s = _scope()
    value = np.array([0.3, -0.8, 0.5])
    v = s.variable(value.copy())
    x = s.constant(sign * np.array([0.2, 0.4, -0.1]))
    loss = _reads_in_control_flow(s, v, x)
    dv, dx = gf.gradients(loss, [v, x])
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        for _ in range(CALLS):
            got = sess.run(dv)
        want = _variable_central_differences(sess, v, loss, value)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
        assert sess.run(dx).shape == (3,)


def test_gradient_wrt_a_variable_read_inside_a_body_matches_tensorflow():
    tf = pytest.importorskip("tensorflow")
    value = np.array([1.2, -0.5], np.float32)
    tv = tf.Variable(value)
    with tf.GradientTape() as tape:
        _, ty = tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, tf.tanh(a * tv) + tv),
                              (tf.constant(0), tf.ones(2)))
        tloss = tf.reduce_sum(ty)
    want = tape.gradient(tloss, tv).numpy()
    s = _scope()
    v = s.variable(value)
    _, y = s.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, s.tanh(a * v.read()) + v.read()),
                        [0, s.constant(np.ones(2, F32))])
    dv = gf.gradients(s.reduce_sum(y), [v])[0]
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        np.testing.assert_allclose(sess.run(dv), want, rtol=1e-5)


def test_gradient_of_a_body_with_effects_is_refused():
    s = _scope()
    v = s.variable(np.float32(1.0))
    x = s.placeholder(gf.float32, [])

    def body(i, a):
        v.assign_add(1.0)
        return i + 1, a * x
    _, y = s.while_loop(lambda i, a: i < 2, body, [0, s.constant(np.float32(1))])
    with pytest.raises(UnimplementedError, match="has effects"):
        gf.gradients(y, [x])


def test_gradients_match_tensorflow():
    tf = pytest.importorskip("tensorflow")
    tf1 = tf.compat.v1
    value = np.array([0.5, -1.2, 2.0], np.float32)
    graph = tf.Graph()
    with graph.as_default():
        tx = tf1.placeholder(tf.float32, [3])
        _, ty = tf1.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, tf.tanh(a) * tx + a),
                               [0, tx])
        tz = tf1.cond(tf.reduce_sum(tx) > 0, lambda: ty * 2.0, lambda: ty * ty)
        tgrad = tf1.gradients(tf.reduce_sum(tz), tx)[0]
        with tf1.Session(graph=graph) as sess:
            want, want_grad = sess.run([tz, tgrad], {tx: value})
    s = _scope()
    x = s.placeholder(gf.float32, [3])
    _, y = s.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, s.tanh(a) * x + a), [0, x])
    z = s.cond(s.reduce_sum(x) > 0, lambda: y * 2.0, lambda: y * y)
    grad = gf.gradients(s.reduce_sum(z), [x])[0]
    got, got_grad = _run_all(s.graph, [z, grad], {x: value})
    # TF's tanh (Eigen's) and numpy's differ in the last bits of float32
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-4)


def test_a_step_fetching_a_loop_and_its_gradient_runs_the_loop_once():
    from graphflow.runtime.pipeline import compile_ir
    s = _scope()
    x = s.placeholder(gf.float32, [3])
    _, y = s.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, s.tanh(a) * x), [0, x])
    loss = s.reduce_sum(y)
    dx = gf.gradients(loss, [x])[0]
    with gf.Session(s.graph) as sess:
        ir = compile_ir([loss, dx], [x], sess.devices, sess.config)
        loops = [op.type for op in ir.ops if "While" in op.type]
        assert loops == ["_WhileRecorded", "_WhileGrad"]
        value = np.array([0.5, -1.0, 2.0], F32)
        fused = [sess.run([loss, dx], {x: value}) for _ in range(CALLS)][-1]
    with gf.Session(s.graph, gf.SessionConfig(optimize=False)) as sess:
        plain = sess.run([loss, dx], {x: value})
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)


def test_a_raw_while_whose_body_breaks_its_invariant_fails_when_it_runs():
    from graphflow.functions import FuncGraph, arguments_like, finish, tracing
    s = _scope()
    specs = [(gf.float32, gf.TensorShape([None]))]
    cond_graph = FuncGraph("c", s.graph)
    (c,) = arguments_like(cond_graph, specs)
    with tracing(cond_graph):
        pred = gf.Scope(cond_graph).less(gf.Scope(cond_graph).size(c), 4)
    body_graph = FuncGraph("b", s.graph)
    (b,) = arguments_like(body_graph, specs)
    with tracing(body_graph):
        grown = gf.Scope(body_graph).concat([b, b], 0)
    [out] = s.create_op("StatelessWhile", [s.constant(np.ones(1, F32))],
                        cond=finish(cond_graph, [c], [pred]), body=finish(body_graph, [b], [grown]),
                        output_shapes=[gf.TensorShape([1])])
    with gf.Session(s.graph) as sess, pytest.raises(InvalidArgumentError,
                                                    match="shape invariant"):
        sess.run(out)
