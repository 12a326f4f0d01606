"""Gradient edge cases (issue 25, items 3-8): gathers of gathers, mixed index dtypes,
stop_gradients on one output of several, fed grad_ys checked at run time,
DynamicPartition with rank-2 partitions, IndexedSlices arithmetic, and gradient
declarations made twice. References: numpy (row counts, the chain rule by hand)."""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf
from graphflow.registry import register_op, TypeAttr

RNG = np.random.default_rng(25)
X = RNG.standard_normal((6, 3)).astype(np.float32)


def dense(sess, grad):
    return sess.run(gf.convert_to_tensor(grad))


def row_counts(rows, n=6, width=3):
    """d sum(x[rows]) / dx: each row counted once per read."""
    out = np.zeros((n, width), np.float32)
    np.add.at(out, np.asarray(rows), 1.0)
    return out


# -- item 3: a gather of a gather --------------------------------------------------------------
INNER = np.array([4, 1, 1, 0])
OUTER = np.array([2, 2, 0])


def _gather_nd_twice(s, x):
    return s.gather_nd(s.gather_nd(x, INNER[:, None]), OUTER[:, None])


def _lookup_twice(s, x):
    return gf.nn.embedding_lookup(gf.nn.embedding_lookup(x, INNER), OUTER)


def _through_identity(s, x):
    return s.gather_nd(s.identity(s.gather_nd(x, INNER[:, None])), OUTER[:, None])


def _inner_rank3(s, x):  # inner rows are [2, 2] blocks: the outer gather's slices densify
    inner = s.gather_nd(x, INNER.reshape(2, 2, 1))
    return s.gather_nd(inner, [[1], [1], [0]])


@pytest.mark.parametrize("build,rows", [
    (_gather_nd_twice, INNER[OUTER]), (_lookup_twice, INNER[OUTER]),
    (_through_identity, INNER[OUTER]),
    (_inner_rank3, np.concatenate([INNER[2:], INNER[2:], INNER[:2]]))],
    ids=["gather_nd", "embedding_lookup", "identity_between", "inner_rank3"])
@pytest.mark.parametrize("as_variable", [False, True], ids=["tensor", "variable"])
def test_gather_of_gather(build, rows, as_variable):
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.variable(X) if as_variable else s.constant(X)
    loss = s.reduce_sum(s.mul(build(s, x), 2.0))
    grad, = gf.gradients(loss, [x])
    with gf.Session(g) as sess:
        if as_variable:
            sess.run(x.initializer)
        np.testing.assert_allclose(dense(sess, grad), 2 * row_counts(rows), rtol=1e-6)


def test_minimize_through_two_lookups_is_sparse_and_right():
    g = gf.Graph()
    s = gf.Scope(g)
    v = s.variable(X)
    loss = s.reduce_sum(_lookup_twice(s, v))
    grad, = gf.gradients(loss, [v])
    assert isinstance(grad, gf.IndexedSlices)
    step = gf.train.GradientDescentOptimizer(0.5).minimize(loss)
    with gf.Session(g) as sess:
        sess.run(v.initializer)
        sess.run(step)
        np.testing.assert_allclose(sess.run(v), X - 0.5 * row_counts(INNER[OUTER]), rtol=1e-6)


# -- item 4: int32 and int64 indices into one tensor ------------------------------------------
@pytest.mark.parametrize("as_variable", [False, True], ids=["tensor", "variable"])
def test_int32_and_int64_indices_add(as_variable):
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.variable(X) if as_variable else s.constant(X)
    a, b = np.array([4, 1], np.int32), np.array([1, 0, 5], np.int64)
    if as_variable:
        parts = [x.sparse_read(a), x.sparse_read(b)]
    else:
        parts = [s.gather_nd(x, a[:, None]), s.gather_nd(x, b[:, None])]
    grad, = gf.gradients(s.add(s.reduce_sum(parts[0]), s.reduce_sum(parts[1])), [x])
    assert isinstance(grad, gf.IndexedSlices) and grad.indices.dtype == gf.int64
    with gf.Session(g) as sess:
        if as_variable:
            sess.run(x.initializer)
        np.testing.assert_array_equal(dense(sess, grad), row_counts(np.r_[a, b]))


# -- item 5: stop_gradients holds a tensor, not its op ----------------------------------------
def test_stop_gradients_on_one_output_of_a_multi_output_op():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.constant(np.array([1, 2, 3, 4], np.float32))
    parts = s.dynamic_partition(x, [0, 1, 0, 1], num_partitions=2)
    y = s.add(s.mul(3.0, s.reduce_sum(parts[0])), s.mul(5.0, s.reduce_sum(parts[1])))
    dx, dp0, dp1 = gf.gradients(y, [x, parts[0], parts[1]], stop_gradients=[parts[0]])
    with gf.Session(g) as sess:
        got = sess.run([dx, dp0, dp1])
    np.testing.assert_array_equal(got[0], [0, 5, 0, 5])  # only parts[1]'s path flows
    np.testing.assert_array_equal(got[1], [3, 3])  # a held x still gets its own gradient
    np.testing.assert_array_equal(got[2], [5, 5])


def test_stop_gradients_on_every_output_cuts_the_op():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.constant(np.array([1, 2, 3, 4], np.float32))
    parts = s.dynamic_partition(x, [0, 1, 0, 1], num_partitions=2)
    y = s.add(s.reduce_sum(parts[0]), s.reduce_sum(s.mul(x, x)))
    dx, = gf.gradients(y, [x], stop_gradients=parts)
    with gf.Session(g) as sess:
        np.testing.assert_array_equal(sess.run(dx), [2, 4, 6, 8])


# -- item 6: a fed grad_ys of the wrong run-time shape ----------------------------------------
@pytest.mark.parametrize("fed", [np.ones(5, np.float32), np.ones((2, 3), np.float32)],
                         ids=["5_for_3", "2x3_for_3"])
@pytest.mark.parametrize("y_shape", [[3], [None]], ids=["static", "dynamic"])
def test_fed_grad_ys_of_the_wrong_shape(fed, y_shape):
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, y_shape)
    y = s.mul(x, x)
    gy = s.placeholder(gf.float32, None)
    dx, = gf.gradients(y, [x], grad_ys=[gy])
    xv = np.array([1, 2, 3], np.float32)
    with gf.Session(g) as sess:
        with pytest.raises(gf.errors.InvalidArgumentError, match=r"grad_ys\[0\].*shape"):
            sess.run(dx, {x: xv, gy: fed})
        weights = np.array([1, 10, 100], np.float32)
        np.testing.assert_array_equal(sess.run(dx, {x: xv, gy: weights}), 2 * xv * weights)


def test_grad_ys_of_known_equal_shape_adds_no_check():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.constant(np.ones(3, np.float32))
    gf.gradients(s.mul(x, x), [x], grad_ys=[np.ones(3, np.float32)])
    assert not [op for op in g.operations() if op.type == "_AssertEqual"]


# -- item 7: DynamicPartition, rank-2 partitions, rank-3 data, an empty partition ------------
@pytest.mark.parametrize("used", [(0, 2, 1), (0, 2), (1,), (2, 3)])
@pytest.mark.parametrize("optimize", [True, False])
def test_dynamic_partition_rank2_partitions_with_an_empty_one(used, optimize):
    data = RNG.standard_normal((2, 2, 2))
    partitions = np.array([[2, 0], [2, 2]], np.int32)
    weights = {0: 3.0, 1: 7.0, 2: 5.0, 3: 11.0}
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float64, [2, 2, 2])
    parts = s.dynamic_partition(x, partitions, num_partitions=4)
    terms = [s.mul(weights[k], s.reduce_sum(s.mul(parts[k], parts[k]))) for k in used]
    y = terms[0]
    for t in terms[1:]:
        y = s.add(y, t)
    dx, = gf.gradients(y, [x])
    expected = np.zeros_like(data)  # d w_k * sum(p_k^2) = 2 w_k p_k where the row went to k
    for k in used:
        expected[partitions == k] = 2 * weights[k] * data[partitions == k]
    with gf.Session(g, gf.SessionConfig(optimize=optimize)) as sess:
        np.testing.assert_allclose(sess.run(dx, {x: data}), expected)


# -- item 8: IndexedSlices arithmetic ---------------------------------------------------------
def _slices(s, rows, dense_shape, dtype=np.int64):
    rows = np.asarray(rows)
    values = s.constant(RNG.standard_normal((len(rows), 3)).astype(np.float32))
    return gf.IndexedSlices(values, s.constant(rows.astype(dtype)), dense_shape)


def test_negated_indexed_slices():
    g = gf.Graph()
    s = gf.Scope(g)
    a = _slices(s, [3, 1, 3], s.constant(np.array([5, 3], np.int64)))
    neg = -a
    assert isinstance(neg, gf.IndexedSlices) and neg.indices is a.indices
    with gf.Session(g) as sess:
        np.testing.assert_array_equal(dense(sess, neg), -dense(sess, a))


def test_adding_slices_of_contradicting_static_dense_shapes_fails_at_build():
    g = gf.Graph()
    s = gf.Scope(g)
    a = _slices(s, [1], s.constant(np.array([5, 3], np.int64)))
    b = _slices(s, [2], s.constant(np.array([6, 3], np.int64)))
    with pytest.raises(gf.errors.InvalidArgumentError, match=r"dense_shape \[6,3\].*\[5,3\]"):
        a + b


def test_adding_slices_of_different_run_time_dense_shapes_fails_at_run():
    g = gf.Graph()
    s = gf.Scope(g)
    shape_a = s.placeholder(gf.int64, [2])
    a = _slices(s, [1], shape_a)
    b = _slices(s, [2, 0], s.constant(np.array([5, 3], np.int64)))
    total = a + b
    with gf.Session(g) as sess:
        got = sess.run(gf.convert_to_tensor(total), {shape_a: [5, 3]})
        np.testing.assert_allclose(
            got, sess.run(gf.convert_to_tensor(a), {shape_a: [5, 3]}) + dense(sess, b))
        with pytest.raises(gf.errors.InvalidArgumentError,
                           match=r"Cannot add IndexedSlices with dense_shape \[5,3\]"):
            sess.run(gf.convert_to_tensor(total), {shape_a: [6, 3]})


def test_adding_int32_and_int64_slices_casts_to_int64():
    g = gf.Graph()
    s = gf.Scope(g)
    a = _slices(s, [1, 4], s.constant(np.array([5, 3], np.int32)), np.int32)
    b = _slices(s, [4], s.constant(np.array([5, 3], np.int64)))
    total = a + b
    assert total.indices.dtype == gf.int64 and total.dense_shape.dtype == gf.int64
    with gf.Session(g) as sess:
        np.testing.assert_allclose(dense(sess, total), dense(sess, a) + dense(sess, b))


# -- item 8: a gradient declared twice ---------------------------------------------------------
def _fresh_op(name):
    return register_op(name, inputs=["x: T"], outputs=["y: T"], attrs={"T": TypeAttr()})


def test_declaring_a_gradient_twice_is_an_error():
    op = _fresh_op("EdgeTwiceGrad")

    @op.gradient
    def _first(g, grad):
        return [grad]

    with pytest.raises(ValueError, match="two gradients for op type 'EdgeTwiceGrad'"):
        op.gradient(lambda g, grad: [grad])
    assert op.gradient_function is _first


def test_declaring_a_gradient_after_not_differentiable_is_an_error():
    op = _fresh_op("EdgeNotDiffThenGrad")
    op.not_differentiable()
    with pytest.raises(ValueError, match="declared not differentiable at .*test_gradient_rules"):
        op.gradient(lambda g, grad: [grad])
    other = _fresh_op("EdgeGradThenNotDiff")
    other.gradient(lambda g, grad: [grad])
    with pytest.raises(ValueError, match="given a gradient"):
        other.not_differentiable()
