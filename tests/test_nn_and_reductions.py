"""Mean/Max/Min/Any/All (ops/reductions.py) and the nn ops (ops/nn_ops.py, gf.nn) of
issue #35 against plain numpy references: axes, keepdims, empty inputs, NaN, ties,
integer means; softmax and the cross-entropy losses (stable for huge logits, TF's
errors for bad labels); gradients against central differences, the labels' and the
second-order ones included; the 3rd+ call of a compiled plan.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from support.gpu_devices import GPU_KINDS, gpu_session_devices

REDUCERS = {"reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min,
            "reduce_any": np.any, "reduce_all": np.all}


def _calls(fetch, feeds: dict, n: int = 3):
    """The value of ``fetch`` on the ``n``-th call of a compiled callable."""
    graph = (fetch[0] if isinstance(fetch, list) else fetch).graph
    with gf.Session(graph) as sess:
        f = sess.make_callable(fetch, list(feeds))
        for _ in range(n):
            got = f(*feeds.values())
    return got


@pytest.mark.parametrize("name", sorted(REDUCERS))
@pytest.mark.parametrize("axis", [None, 0, 1, -1, [0, 2], []])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_match_numpy(name, axis, keepdims):
    rng = np.random.default_rng(0)
    value = rng.normal(size=(2, 3, 4))
    if name in ("reduce_any", "reduce_all"):
        value = value > 0.5
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.as_dtype(value.dtype), shape=[2, 3, 4])
    out = getattr(s, name)(x, axis, keepdims=keepdims)
    want = REDUCERS[name](value, axis=tuple(axis) if isinstance(axis, list) else axis,
                          keepdims=keepdims)
    assert out.shape.as_list() == list(np.shape(want))
    np.testing.assert_allclose(_calls(out, {x: value}), want, rtol=1e-13)


def test_reductions_over_nothing_and_nan():
    s = gf.Scope(gf.Graph())
    empty = np.zeros((0, 3), np.float32)
    with gf.Session(s.graph) as sess:
        assert np.all(sess.run(s.reduce_max(empty, 0)) == -np.inf)
        assert np.all(sess.run(s.reduce_min(empty, 0)) == np.inf)
        assert np.all(np.isnan(sess.run(s.reduce_mean(empty, 0))))
        assert np.all(sess.run(s.reduce_max(np.zeros((0, 2), np.int32), 0)) == np.iinfo(np.int32).min)
        np.testing.assert_array_equal(sess.run(s.reduce_mean(np.zeros((0, 2), np.int32), 0)), 0)
        assert sess.run(s.reduce_all(np.zeros(0, bool))) and not sess.run(s.reduce_any(np.zeros(0, bool)))
        nan = np.array([1.0, np.nan, 3.0])
        assert np.isnan(sess.run(s.reduce_max(nan))) and np.isnan(sess.run(s.reduce_min(nan)))


def test_integer_mean_truncates_toward_zero_and_float16_sums_wide():
    s = gf.Scope(gf.Graph())
    with gf.Session(s.graph) as sess:
        got = sess.run(s.reduce_mean(np.array([[-7, 2], [7, -2], [3, 3]], np.int32), 1))
        np.testing.assert_array_equal(got, [-2, 2, 3])  # C's division, as TF's
        h = np.full(4096, 0.1, np.float16)
        assert sess.run(s.reduce_mean(h)) == np.float16(np.float32(h[0]) * 4096 / 4096)


def test_reduction_errors():
    s = gf.Scope(gf.Graph())
    with pytest.raises(InvalidArgumentError, match="Invalid reduction dimension 3 for input "
                       r"with 2 dimensions\."):  # the shape function's words, as TF's
        s.reduce_max(np.ones((2, 3)), 3)
    with pytest.raises(TypeError):
        s.reduce_any(np.ones(3))


@pytest.mark.parametrize("name", ["reduce_max", "reduce_min"])
def test_max_min_gradients_split_among_ties(name):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, shape=[2, 3])
    (g,) = gf.gradients(s.reduce_sum(getattr(s, name)(x, 1)), [x])
    value = np.array([[5.0, 5.0, 1.0], [1.0, 1.0, 1.0]]) * (1 if name == "reduce_max" else -1)
    got = gf.Session(s.graph).run(g, {x: value})
    np.testing.assert_allclose(got, [[0.5, 0.5, 0], [1 / 3] * 3])


@pytest.mark.parametrize("name", ["reduce_mean", "reduce_max", "reduce_min"])
@pytest.mark.parametrize("shape", [[2, 3], [None, 3]])
def test_reduction_gradients(name, shape):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, shape=shape)
    loss = s.reduce_sum(s.square(getattr(s, name)(x, [0], keepdims=True)))
    value = np.random.default_rng(2).normal(size=(2, 3))
    (check,) = gf.gradient_check(loss, [x], [value])
    assert check.max_error < 1e-6


# -- softmax, cross-entropy --------------------------------------------------------------------
def _log_softmax(x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_softmax_and_log_softmax(axis, dtype):
    value = np.random.default_rng(3).normal(size=(2, 3, 4)).astype(dtype) * 5
    value[0, 0, 0] = 1000  # huge logits stay finite
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.as_dtype(dtype), shape=[2, 3, 4])
    got = _calls([gf.nn.softmax(x, axis), gf.nn.log_softmax(x, axis=axis)], {x: value})
    want = _log_softmax(value.astype(np.float64), axis)
    rtol = {np.float16: 3e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(got[0], np.exp(want), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(got[1], want, rtol=rtol, atol=rtol)
    assert got[0].dtype == dtype


def test_cross_entropy_losses_match_numpy():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(4, 5)) * 3
    logits[0] = [1e4, -1e4, 0, 0, 0]
    labels = np.array([0, 4, 2, 2])
    dense = rng.dirichlet(np.ones(5), size=4)
    s = gf.Scope(gf.Graph())
    lg = s.placeholder(gf.float64, shape=[None, 5])
    sparse = gf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=lg)
    soft = gf.nn.softmax_cross_entropy_with_logits(labels=dense, logits=lg)
    sig = gf.nn.sigmoid_cross_entropy_with_logits(labels=(dense > 0.2).astype(np.float64),
                                                  logits=lg)
    got = _calls([sparse, soft, sig], {lg: logits})
    ls = _log_softmax(logits)
    np.testing.assert_allclose(got[0], -ls[np.arange(4), labels], rtol=1e-12)
    np.testing.assert_allclose(got[1], -(dense * ls).sum(-1), rtol=1e-12)
    z = (dense > 0.2)
    want = np.maximum(logits, 0) - logits * z + np.log1p(np.exp(-np.abs(logits)))
    np.testing.assert_allclose(got[2], want, rtol=1e-12)
    assert np.all(np.isfinite(got[2]))


def test_cross_entropy_over_higher_ranks():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(2, 3, 4))
    labels = rng.integers(0, 4, (2, 3))
    s = gf.Scope(gf.Graph())
    loss = s.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    assert loss.shape.as_list() == [2, 3]
    want = -np.take_along_axis(_log_softmax(logits), labels[..., None], -1)[..., 0]
    np.testing.assert_allclose(gf.Session(s.graph).run(loss), want, rtol=1e-12)


def test_bad_labels_are_tensorflows_error_and_the_session_goes_on():
    s = gf.Scope(gf.Graph())
    lg = s.placeholder(gf.float32, shape=[3, 4])
    lb = s.placeholder(gf.int32, shape=[3])
    loss = gf.nn.sparse_softmax_cross_entropy_with_logits(labels=lb, logits=lg)
    with gf.Session(s.graph) as sess:
        # TF names the smallest label when it is negative, else the largest (TF 2.21)
        with pytest.raises(InvalidArgumentError, match=r"Received a label value of -1 which is "
                           r"outside the valid range of \[0, 4\)\.  Label values: 1 5 -1"):
            sess.run(loss, {lg: np.zeros((3, 4), np.float32), lb: np.array([1, 5, -1], np.int32)})
        np.testing.assert_allclose(sess.run(loss, {lg: np.zeros((3, 4), np.float32),
                                                   lb: np.array([1, 3, 0], np.int32)}),
                                   np.log(4), rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match="Rank mismatch"):
        gf.nn.sparse_softmax_cross_entropy_with_logits(labels=np.zeros((3, 1), np.int32),
                                                       logits=lg)
    with pytest.raises(InvalidArgumentError, match="same shape"):
        gf.nn.sigmoid_cross_entropy_with_logits(labels=np.zeros(3, np.float32), logits=lg)


def test_cross_entropy_gradients_logits_labels_and_second_order():
    rng = np.random.default_rng(6)
    s = gf.Scope(gf.Graph())
    lg = s.placeholder(gf.float64, shape=[3, 4])
    lb = s.placeholder(gf.float64, shape=[3, 4])
    weights = np.array([1.0, -2.0, 0.5])
    soft = s.reduce_sum(s.mul(gf.nn.softmax_cross_entropy_with_logits(labels=lb, logits=lg),
                              weights))
    values = [rng.normal(size=(3, 4)), rng.dirichlet(np.ones(4), size=3)]
    for check in gf.gradient_check(soft, [lg, lb], values):
        assert check.max_error < 1e-6
    sparse = s.reduce_sum(gf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=np.array([3, 0, 1]), logits=lg))
    (check,) = gf.gradient_check(sparse, [lg], values[:1])
    assert check.max_error < 1e-6
    (g,) = gf.gradients(sparse, [lg])  # second order: the gradient's own gradient
    (check,) = gf.gradient_check(s.reduce_sum(s.square(g)), [lg], values[:1])
    assert check.max_error < 1e-6


def test_l2_loss_and_softmax_gradients():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, shape=[2, 3])
    loss = s.add(gf.nn.l2_loss(x), s.reduce_sum(s.mul(gf.nn.softmax(x, 0),
                                                      np.arange(6.0).reshape(2, 3))))
    loss = s.add(loss, s.reduce_sum(s.mul(gf.nn.log_softmax(x), np.arange(6.0).reshape(2, 3))))
    (check,) = gf.gradient_check(loss, [x], [np.random.default_rng(7).normal(size=(2, 3))])
    assert check.max_error < 1e-6


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 4), classes=st.integers(1, 5), scale=st.sampled_from([1.0, 50.0, 1e4]),
       seed=st.integers(0, 1000))
def test_property_softmax_rows_sum_to_one_and_loss_is_log_sum_exp(rows, classes, scale, seed):
    logits = np.random.default_rng(seed).normal(size=(rows, classes)) * scale
    labels = np.random.default_rng(seed + 1).integers(0, classes, rows)
    s = gf.Scope(gf.Graph())
    sm = s.softmax(logits)  # numpy operands: the Scope's builders (gf.nn needs an Output)
    loss = s.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    got_sm, got_loss = gf.Session(s.graph).run([sm, loss])
    np.testing.assert_allclose(got_sm.sum(-1), 1, rtol=1e-12)
    peak = logits.max(-1)
    lse = peak + np.log(np.exp(logits - peak[:, None]).sum(-1))
    np.testing.assert_allclose(got_loss, lse - logits[np.arange(rows), labels], rtol=1e-9,
                               atol=1e-9)


# -- the GPU kernels ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", GPU_KINDS)
def test_gpu_kernels_agree_with_the_cpu(kind):
    """The dense math, reduction and nn ops on a GPU (through ``ctx.xp``: cupy, or the
    simulated/emulated devices here) give the CPU's results: exact where one IEEE
    operation makes each element, within float rounding for the transcendental ones."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    w = rng.normal(size=(6, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 2], np.int64)

    def build(device):
        s = gf.Scope(gf.Graph()).with_device(device)
        logits = s.bias_add(s.matmul(x, w), np.arange(3, dtype=np.float32))
        exact = [s.relu(x), s.square(x), s.abs(x), s.reduce_max(x, 1), s.reduce_min(x, 0),
                 s.reduce_any(s.greater(x, 1.0), 1), s.squared_difference(x, 0.5),
                 s.floor(x), s.leaky_relu(x)]
        rounded = [logits, s.exp(x), s.log1p(s.abs(x)), s.tanh(x), s.sigmoid(x), s.softmax(x),
                   s.log_softmax(x), s.reduce_mean(x, 0), s.pow(s.abs(x), 1.5), s.elu(x),
                   s.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits),
                   s.l2_loss(x)]
        return s.graph, exact, rounded

    def run(device, devices=None):
        graph, exact, rounded = build(device)
        with gf.Session(graph, devices=devices) as sess:
            return sess.run(exact), sess.run(rounded)
    cpu_exact, cpu_rounded = run("/cpu:0")
    gpu_exact, gpu_rounded = run("/gpu:0", gpu_session_devices(kind))
    for c, g in zip(cpu_exact, gpu_exact):
        assert c.dtype == g.dtype and c.tobytes() == g.tobytes()
    for c, g in zip(cpu_rounded, gpu_rounded):
        assert c.dtype == g.dtype
        np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(REDUCERS))
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_lean_reductions_give_the_kernels_bits(name, dtype):
    """With a constant axis and a static shape the plan's lean kernel runs: the bits
    of optimize=False's full kernel, NaN and empty dims included."""
    rng = np.random.default_rng(3)
    value = (rng.normal(size=(3, 0, 2)) if name == "reduce_max" and dtype == np.float32
             else rng.normal(size=(3, 5, 2)) * 50).astype(dtype)
    if name in ("reduce_any", "reduce_all"):
        value = value > 0
    elif dtype != np.int32 and value.size:
        value.flat[3] = np.nan
    got = []
    for optimize in (True, False):
        s = gf.Scope(gf.Graph())
        x = s.placeholder(gf.as_dtype(value.dtype), shape=list(value.shape))
        out = getattr(s, name)(x, [0, 2], keepdims=optimize)
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            f = sess.make_callable(out, [x])
            got.append([f(value) for _ in range(3)][-1].reshape(-1))
    assert got[0].tobytes() == got[1].tobytes()
