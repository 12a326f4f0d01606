"""Optimizer edge cases (issue 25, items 9-13): unused variables, the step op's name,
non-scalar learning rates, one Adagrad on two graphs, gradients given as numpy values,
and what is not a variable. References: numpy updates written out by hand."""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf

W0 = np.array([1.0, -2.0, 3.0], np.float32)


def _graph():
    g = gf.Graph()
    s = gf.Scope(g)
    w = s.variable(W0, name="w")
    loss = s.reduce_sum(s.mul(w, w))  # d/dw = 2w
    return g, s, w, loss


# -- item 9 --------------------------------------------------------------------------------------
def test_compute_gradients_of_an_unused_variable_is_none():
    g, s, w, loss = _graph()
    u = s.variable(np.zeros(2, np.float32), name="u")
    opt = gf.train.GradientDescentOptimizer(0.1)
    assert opt.compute_gradients(loss, var_list=[u]) == [(None, u)]
    pairs = opt.compute_gradients(loss, var_list=[u, w])
    assert pairs[0] == (None, u) and pairs[1][1] is w
    with gf.Session(g) as sess:
        sess.run(w.initializer)
        np.testing.assert_array_equal(sess.run(pairs[1][0]), 2 * W0)
    with pytest.raises(gf.errors.InvalidArgumentError, match="No gradients provided"):
        opt.minimize(loss, var_list=[u])


# -- item 10 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("opt", [lambda: gf.train.GradientDescentOptimizer(0.1),
                                 lambda: gf.train.AdagradOptimizer(0.1)],
                         ids=["GradientDescent", "Adagrad"])
def test_the_step_op_has_the_name_given(opt, tmp_path):
    g, s, w, loss = _graph()
    optimizer = opt()
    default = optimizer.minimize(loss)
    assert default.name == optimizer.name  # TF: "GradientDescent", not "GradientDescent_1"
    named = optimizer.minimize(loss, name="train")
    assert named.name == "train"
    assert optimizer.minimize(loss, name="train").name == "train_1"
    path = tmp_path / "g.json"
    g.save(path)
    loaded = gf.load_graph(path)  # a saved graph runs by the name the user gave
    with gf.Session(loaded) as sess:
        sess.run(gf.global_variables_initializer(loaded))
        sess.run("train")
        grad = 2 * W0
        expected = W0 - 0.1 * grad if isinstance(optimizer, gf.train.GradientDescentOptimizer) \
            else W0 - 0.1 * grad / np.sqrt(0.1 + grad * grad)
        np.testing.assert_allclose(sess.run("w/Read:0"), expected, rtol=1e-6)


# -- item 11 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("rate_shape", [None, [None], [3]], ids=["unknown", "vector", "3"])
@pytest.mark.parametrize("opt", [gf.train.GradientDescentOptimizer, gf.train.AdagradOptimizer],
                         ids=["GradientDescent", "Adagrad"])
def test_a_fed_non_scalar_learning_rate_is_refused(rate_shape, opt):
    g, s, w, loss = _graph()
    if rate_shape is not None:  # statically not a scalar: refused when the optimizer is made
        with pytest.raises(gf.errors.InvalidArgumentError, match="must be a scalar"):
            opt(s.placeholder(gf.float32, rate_shape))
        return
    rate = s.placeholder(gf.float32, rate_shape)
    step = opt(rate).minimize(loss)
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        with pytest.raises(gf.errors.InvalidArgumentError, match=r"alpha is not a scalar: \[3\]"):
            sess.run(step, {rate: np.array([0.1, 0.2, 0.3], np.float32)})
        np.testing.assert_array_equal(sess.run(w), W0)
        if opt is gf.train.GradientDescentOptimizer:
            sess.run(step, {rate: np.float32(0.25)})
            np.testing.assert_allclose(sess.run(w), W0 - 0.25 * 2 * W0)


# -- item 12 -------------------------------------------------------------------------------------
def test_one_adagrad_on_two_graphs_with_a_variable_of_one_name():
    opt = gf.train.AdagradOptimizer(0.5, initial_accumulator_value=0.1)
    runs = []
    for scale in (1.0, 3.0):
        g, s, w, _ = _graph()
        loss = s.reduce_sum(s.mul(s.mul(w, w), scale))
        step = opt.minimize(loss)
        assert opt.get_slot(w, "accumulator").graph is g
        runs.append((g, w, step, scale))
    for g, w, step, scale in runs:
        with gf.Session(g) as sess:
            sess.run(gf.global_variables_initializer(g))
            sess.run(step)
            grad = 2 * scale * W0
            acc = 0.1 + grad * grad
            np.testing.assert_allclose(sess.run(w), W0 - 0.5 * grad / np.sqrt(acc), rtol=1e-6)
            np.testing.assert_allclose(sess.run(opt.get_slot(w, "accumulator")), acc, rtol=1e-6)


# -- item 13 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("grad", [np.array([1.0, 2.0, 4.0]), [1.0, 2.0, 4.0],
                                  np.array([1, 2, 4], np.int64)], ids=["float64", "list", "int"])
def test_apply_gradients_converts_numpy_gradients(grad):
    g, s, w, _ = _graph()
    step = gf.train.GradientDescentOptimizer(0.5).apply_gradients([(grad, w)])
    with gf.Session(g) as sess:
        sess.run(w.initializer)
        sess.run(step)
        np.testing.assert_allclose(sess.run(w), W0 - 0.5 * np.array([1.0, 2.0, 4.0]))


@pytest.mark.parametrize("pairs,match", [
    (lambda w: [(np.ones(3), "w")], r"grads_and_vars\[0\] has 'w' in place of the variable"),
    (lambda w: [(np.ones(3), w.read())], r"in place of the variable"),
    (lambda w: [np.ones(3)], r"not a \(gradient, variable\) pair"),
    (lambda w: "w", "list of \\(gradient, variable\\) pairs"),
    (lambda w: [(np.ones((2, 2)), w)], None),
    (lambda w: [([b"x"] * 3, w)], "does not convert"),
], ids=["string", "tensor", "not_a_pair", "not_a_list", "wrong_shape", "bytes"])
def test_apply_gradients_names_what_is_wrong(pairs, match):
    g, s, w, _ = _graph()
    opt = gf.train.GradientDescentOptimizer(0.5)
    if match is None:  # the update's shape function names the variable
        with pytest.raises(gf.errors.InvalidArgumentError, match="shape"):
            opt.apply_gradients(pairs(w))
        return
    with pytest.raises(TypeError, match=match):
        opt.apply_gradients(pairs(w))
