"""gf.gradients: the walk, its errors, and the basic ops' rules against central
finite differences (float64 and complex128)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from support.gpu_devices import GPU_KINDS, gpu_session_devices

RNG = np.random.default_rng(7)


def values(shape, dtype=np.float64, rng=RNG):
    a = rng.uniform(-2, 2, size=shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.uniform(-2, 2, size=shape)
    return a.astype(dtype)


def check(y, xs, vals, tol=1e-6, **kw):
    results = gf.gradient_check(y, xs, vals, **kw)
    for r in results:
        assert r.theoretical.shape == r.numerical.shape
        assert r.max_error < tol, (r.x.name, r.theoretical, r.numerical)
    return results


# -- the basic ops against finite differences --------------------------------------------
BINARY = ["add", "sub", "mul", "real_div", "maximum", "minimum"]
BROADCASTS = [([3], [3]), ([2, 3], [3]), ([2, 1], [1, 4]), ([], [2, 2]), ([2, 3, 1], [3, 5])]


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
def test_binary_ops_match_finite_differences(scope, op, dtype, shapes, static):
    if op in ("maximum", "minimum") and dtype == np.complex128:
        pytest.skip("Maximum/Minimum take real types")
    dt = gf.as_dtype(dtype)
    sx, sy = shapes
    x = scope.placeholder(dt, shape=sx if static else None)
    y = scope.placeholder(dt, shape=sy if static else [None] * len(sy))
    out = getattr(scope, op)(x, y)
    xv, yv = values(sx, dtype), values(sy, dtype)
    if op == "real_div":
        yv = yv + np.where(yv.real >= 0, 1.5, -1.5).astype(dtype)  # away from 0
    check(out, [x, y], [xv, yv])


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_unary_and_shape_ops(scope, dtype):
    dt = gf.as_dtype(dtype)
    x = scope.placeholder(dt, shape=[2, 3])
    chain = scope.neg(scope.identity(x))
    chain = scope.reshape(chain, [3, 2])
    chain = scope.expand_dims(chain, 1)
    chain = scope.squeeze(chain, squeeze_dims=[1])
    chain = scope.mul(chain, chain)
    check(chain, [x], [values([2, 3], dtype)])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_pack_and_concat(scope, axis):
    a = scope.placeholder(gf.float64, shape=[2, 3])
    b = scope.placeholder(gf.float64, shape=[2, 3])
    c = scope.placeholder(gf.float64, shape=[2, None])
    stacked = scope.stack([a, scope.mul(b, b)], axis=axis)
    joined = scope.concat([a, b, c], axis if axis != 0 else 1)
    va, vb, vc = values([2, 3]), values([2, 3]), values([2, 2])
    check(stacked, [a, b], [va, vb])
    check(joined, [a, b, c], [va, vb, vc])


def test_select_and_fill(scope):
    cond = scope.constant([[True, False, True]])
    t = scope.placeholder(gf.float64, shape=[2, 3])
    e = scope.placeholder(gf.float64, shape=[3])
    v = scope.placeholder(gf.float64, shape=[])
    out = scope.add(scope.select_v2(cond, t, e), scope.fill([2, 3], v))
    check(out, [t, e, v], [values([2, 3]), values([3]), values([])])


@pytest.mark.parametrize("src,dst", [(gf.float64, gf.float32), (gf.float64, gf.complex128),
                                     (gf.complex128, gf.float64)])
def test_cast_between_floats_and_complex(scope, src, dst):
    x = scope.placeholder(src, shape=[3])
    y = scope.cast(scope.cast(x, DstT=dst), DstT=gf.float64 if not src.is_complex
                   else gf.complex128)
    # through float32 the function is the identity up to rounding: a wide step
    check(y, [x], [values([3], src.as_numpy_dtype)], tol=1e-4, delta=1e-2)


@pytest.mark.parametrize("op,wins", [("maximum", [1, .5, 0]), ("minimum", [0, .5, 1])])
def test_ties_split_evenly(scope, op, wins):
    """TF sends a tie's whole gradient to x; the central difference splits it."""
    x = scope.constant([3.0, 2.0, 1.0], dtype=gf.float64)
    y = scope.constant([2.0, 2.0, 2.0], dtype=gf.float64)
    dx, dy = gf.gradients(getattr(scope, op)(x, y), [x, y])
    with gf.Session(scope.graph) as sess:
        gx, gy = sess.run([dx, dy])
    np.testing.assert_array_equal(gx, wins)
    np.testing.assert_array_equal(gy, 1 - np.array(wins))


def test_complex_mul_follows_tensorflows_convention(scope):
    """d/dz of sum(Re(conj(v) * z * w)) is conj(w) * v (TF 2.21 gives the same)."""
    z = scope.constant([1 + 2j, -1j], dtype=gf.complex128)
    w = scope.constant([3 - 1j, 2 + 2j], dtype=gf.complex128)
    v = np.array([1 + 1j, 2 - 1j])
    (dz,) = gf.gradients(scope.mul(z, w), [z], grad_ys=[v])
    with gf.Session(scope.graph) as sess:
        np.testing.assert_allclose(sess.run(dz), np.conj([3 - 1j, 2 + 2j]) * v)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=0, max_size=3),
       st.lists(st.booleans(), min_size=3, max_size=3),
       st.sampled_from(BINARY))
def test_broadcast_gradients_property(dims, ones, op):
    """Any pair of broadcast-compatible shapes: x gets the broadcast shape with some
    dims set to 1, y the trailing dims."""
    scope = gf.Scope(gf.Graph())
    sx = [1 if o else d for d, o in zip(dims, ones)]
    sy = dims[len(dims) // 2:]
    x = scope.placeholder(gf.float64, shape=sx)
    y = scope.placeholder(gf.float64, shape=sy)
    yv = values(sy) + 3.0  # away from 0 for real_div, from x for ties
    check(getattr(scope, op)(x, y), [x, y], [values(sx), yv])


# -- the walk ------------------------------------------------------------------------------
def test_static_shapes_and_dtypes_equal_the_inputs(scope):
    x = scope.placeholder(gf.float32, shape=[None, 3])
    w = scope.placeholder(gf.float32, shape=[3])
    dx, dw = gf.gradients(scope.mul(x, w), [x, w])
    assert (dx.dtype, dw.dtype) == (gf.float32, gf.float32)
    assert dx.shape.as_list() == [None, 3] and dw.shape.as_list() == [3]


PARTIAL_SHAPE_OPS = {
    "slice": lambda s, x: s.slice(x, [0, 1], [1, 2]),
    "pad": lambda s, x: s.pad(x, [[1, 0], [0, 2]]),
    "broadcast_to": lambda s, x: s.broadcast_to(s.slice(x, [0, 0], [1, 3]), [4, 2, 3]),
    "tensor_scatter_update": lambda s, x: s.tensor_scatter_update(x, [[1]], [[5.0, 6.0, 7.0]]),
    "tensor_scatter_max": lambda s, x: s.tensor_scatter_max(x, [[0]], [[5.0, 6.0, 7.0]]),
    "scatter_nd": lambda s, x: s.scatter_nd([[1]], s.slice(x, [0, 0], [1, 3]), [2, 3]),
}


@pytest.mark.parametrize("op", sorted(PARTIAL_SHAPE_OPS))
def test_gradients_keep_the_known_dims_of_a_partially_known_input(scope, op):
    """TensorFlow's set_shape: a rule built from run-time shapes still gives [?, 3]."""
    x = scope.placeholder(gf.float64, shape=[None, 3])
    (dx,) = gf.gradients(PARTIAL_SHAPE_OPS[op](scope, x), [x])
    assert dx.shape.as_list() == [None, 3]
    with gf.Session(scope.graph) as sess:
        assert sess.run(dx, {x: np.ones((2, 3))}).shape == (2, 3)


def test_names_live_under_gradients_scopes(scope):
    x = scope.placeholder(gf.float64, shape=[2])
    y = scope.mul(x, x)
    (first,) = gf.gradients(y, [x])
    (second,) = gf.gradients(y, [x])
    assert first.op.name.startswith("gradients/")
    assert second.op.name.startswith("gradients_1/")


def test_several_ys_sum_and_grad_ys_scale(scope):
    x = scope.placeholder(gf.float64, shape=[2])
    y1, y2 = scope.mul(x, x), scope.mul(x, scope.constant(3.0, dtype=gf.float64))
    (d,) = gf.gradients([y1, y2], [x], grad_ys=[[1.0, 2.0], None])
    with gf.Session(scope.graph) as sess:
        np.testing.assert_allclose(sess.run(d, {x: [1.0, 5.0]}), [2 * 1 + 3, 2 * 5 * 2 + 3])


def test_none_where_no_path_or_an_integer_or_nondifferentiable_path(scope):
    x = scope.placeholder(gf.float64, shape=[2])
    unrelated = scope.placeholder(gf.float64, shape=[2])
    xi = scope.placeholder(gf.int32, shape=[2])
    through_int = scope.cast(scope.cast(x, DstT=gf.int32), DstT=gf.float64)
    through_shape = scope.cast(scope.shape(x), DstT=gf.float64)
    y = scope.add(scope.add(through_int, through_shape), scope.cast(xi, DstT=gf.float64))
    y = scope.add(y, scope.mul(x, scope.constant(0.0, dtype=gf.float64)))
    dx, du, dxi = gf.gradients(y, [x, unrelated, xi])
    assert du is None and dxi is None
    with gf.Session(scope.graph) as sess:
        np.testing.assert_array_equal(sess.run(dx, {x: [1.0, 2.0], xi: [1, 2]}), [0.0, 0.0])
    assert gf.gradients(through_int, [x]) == [None]


def test_stop_gradients_hold_tensors_constant(scope):
    x = scope.placeholder(gf.float64, shape=[])
    a = scope.mul(x, x)
    y = scope.add(a, x)
    (d,) = gf.gradients(y, [x], stop_gradients=[a])
    with gf.Session(scope.graph) as sess:
        assert sess.run(d, {x: 3.0}) == 1.0


def test_a_held_tensor_gets_its_own_gradient_and_stops_there(scope):
    """As TensorFlow's stop_gradients: a held t that is also an x gets dy/dt; an x reached
    only through held tensors gets None (not a 'no path' error)."""
    x = scope.placeholder(gf.float64, shape=[])
    t = scope.mul(x, 2.0)
    y = scope.mul(t, t)
    dx, dt = gf.gradients(y, [x, t], stop_gradients=[t])
    assert dx is None
    (dt_alone,) = gf.gradients(y, [t], stop_gradients=[t])
    with gf.Session(scope.graph) as sess:
        assert sess.run([dt, dt_alone], {x: 1.5}) == [6.0, 6.0]


def test_second_order_of_a_polynomial(scope):
    x = scope.placeholder(gf.float64, shape=[3])
    c = lambda v: scope.constant(v, dtype=gf.float64)  # noqa: E731
    y = scope.add(scope.mul(scope.mul(x, x), x), scope.mul(c(2.0), scope.mul(x, x)))
    (d1,) = gf.gradients(y, [x])
    (d2,) = gf.gradients(d1, [x])
    xv = np.array([1.0, -2.0, 0.5])
    with gf.Session(scope.graph) as sess:
        g1, g2 = sess.run([d1, d2], {x: xv})
    np.testing.assert_allclose(g1, 3 * xv ** 2 + 4 * xv)
    np.testing.assert_allclose(g2, 6 * xv + 4)
    check(d1, [x], [xv])


def test_gradient_graphs_serialize_and_reload(scope, tmp_path):
    x = scope.placeholder(gf.float64, shape=[2], name="x")
    y = scope.maximum(scope.mul(x, x), scope.neg(x))
    (d,) = gf.gradients(y, [x])
    path = tmp_path / "g.json"
    scope.graph.save(path)
    loaded = gf.load_graph(path)
    with gf.Session(scope.graph) as a, gf.Session(loaded) as b:
        feed = [3.0, -0.5]
        np.testing.assert_array_equal(a.run(d, {x: feed}), b.run(d.name, {"x:0": feed}))


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_gradients_run_on_gpu_kinds(scope, kind):
    gpu = scope.with_device("/gpu:0")
    x = gpu.placeholder(gf.float64, shape=[None, 3])
    w = gpu.placeholder(gf.float64, shape=[3])
    y = gpu.maximum(gpu.mul(x, w), gpu.real_div(x, w))
    grads = gf.gradients(y, [x, w])
    xv, wv = values([2, 3]), values([3]) + 3.0
    with gf.Session(scope.graph) as cpu:
        expected = cpu.run(grads, {x: xv, w: wv})
    with gf.Session(scope.graph, devices=gpu_session_devices(kind)) as sess:
        got = sess.run(grads, {x: xv, w: wv})
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-12)


# -- user ops ------------------------------------------------------------------------------
def test_user_op_gradient_and_missing_rule():
    square = gf.register_op("GradTestSquare", inputs=["x: T"], outputs=["y: T"],
                            attrs={"T": gf.TypeAttr()})
    cube = gf.register_op("GradTestCube", inputs=["x: T"], outputs=["y: T"],
                          attrs={"T": gf.TypeAttr()})
    for op in (square, cube):
        op.shape_fn(lambda ctx: ctx.shape("x"))
    square.kernel("cpu")(lambda ctx, x: x * x)
    cube.kernel("cpu")(lambda ctx, x: x * x * x)

    @square.gradient
    def _(g, grad):
        (x,) = g.op.inputs
        return [g.scope.mul(grad, g.scope.mul(x, g.scope.constant(2.0, dtype=x.dtype)))]

    assert square.differentiable is True and cube.differentiable is None
    assert "gradient: yes" in repr(square)
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[2])
    check(scope.grad_test_square(x), [x], [values([2])])
    with pytest.raises(LookupError, match="No gradient defined for operation 'GradTestCube'"):
        gf.gradients(scope.grad_test_cube(x), [x])


def test_a_rule_returning_the_wrong_count_is_an_internal_error():
    bad = gf.register_op("GradTestBadRule", inputs=["x: T"], outputs=["y: T"],
                         attrs={"T": gf.TypeAttr()})
    bad.shape_fn(lambda ctx: ctx.shape("x"))
    bad.kernel("cpu")(lambda ctx, x: x)
    bad.gradient(lambda g, grad: [grad, grad])
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[2])
    with pytest.raises(gf.errors.InternalError, match="GradTestBadRule.*2 gradients for 1"):
        gf.gradients(scope.grad_test_bad_rule(x), [x])


def test_differentiability_is_declared():
    assert gf.op_def("Mul").differentiable is True
    assert gf.op_def("Shape").differentiable is False
    assert gf.op_def("Equal").gradient_description.startswith("no")


# -- bad input -----------------------------------------------------------------------------
def test_bad_input_is_a_clear_build_time_error(scope):
    x = scope.placeholder(gf.float64, shape=[2], name="x")
    y = scope.mul(x, x, name="y")
    other = gf.Scope(gf.Graph()).placeholder(gf.float64, shape=[2], name="elsewhere")
    with pytest.raises(TypeError, match="not a graphflow Output"):
        gf.gradients("y", [x])
    with pytest.raises(gf.errors.InvalidArgumentError, match="'elsewhere:0' is from another"):
        gf.gradients(y, [other])
    with pytest.raises(TypeError, match="grad_ys for 'y:0' has dtype float32"):
        gf.gradients(y, [x], grad_ys=[scope.constant([1.0, 1.0])])
    with pytest.raises(gf.errors.InvalidArgumentError, match=r"shape \[3\].*'y:0'"):
        gf.gradients(y, [x], grad_ys=[np.ones(3)])
    unrelated = scope.placeholder(gf.float64, shape=[2], name="u")
    with pytest.raises(gf.errors.InvalidArgumentError, match="'u:0' does not depend on any"):
        gf.gradients(unrelated, [x])
    with pytest.raises(TypeError, match="'y' is an Operation"):
        gf.gradients(y.op, [x])


def test_stop_gradient_op_blocks_the_gradient(scope):
    x = scope.placeholder(gf.float64, shape=[2])
    y = scope.add(scope.mul(scope.stop_gradient(x), x), x)
    (d,) = gf.gradients(y, [x])
    with gf.Session(scope.graph) as sess:
        np.testing.assert_array_equal(sess.run(d, {x: [2.0, 3.0]}), [3.0, 4.0])
    assert gf.gradients(scope.stop_gradient(x), [x]) == [None]


def test_gradient_graphs_with_internal_ops_reload(scope, tmp_path):
    """The winners of a TensorScatterUpdate's gradient are an internal op: a graph file
    holding it loads back."""
    t = scope.placeholder(gf.float64, shape=[4], name="t")
    u = scope.placeholder(gf.float64, shape=[2], name="u")
    dt, du = gf.gradients(scope.tensor_scatter_update(t, [[1], [1]], u), [t, u],
                          grad_ys=[np.array([1.0, 2.0, 3.0, 4.0])])
    assert any(op.type.startswith("_") for op in scope.graph.operations())
    scope.graph.save(tmp_path / "g.json")
    with gf.Session(gf.load_graph(tmp_path / "g.json")) as sess:
        got = sess.run([dt.name, du.name], {"t:0": np.zeros(4), "u:0": np.ones(2)})
    np.testing.assert_array_equal(got[0], [1, 0, 3, 4])
    np.testing.assert_array_equal(got[1], [0, 2])


def test_concat_gradient_with_run_time_sizes(scope):
    a = scope.placeholder(gf.float64, shape=[None])
    b = scope.placeholder(gf.float64, shape=[None])
    c = scope.concat([a, b], 0)
    check(scope.mul(c, c), [a, b], [values([2]), values([3])])


# -- gf.gradient_check itself -------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_gradient_check_divides_by_the_step_actually_taken(scope, dtype):
    """x +- delta rounds in x's dtype (float16: 1 + 1e-3 is 1.00098, 1 - 1e-3 is 0.99902):
    the difference quotient uses the rounded step, so x * x at 1 checks out as 2."""
    x = scope.placeholder(gf.as_dtype(dtype), shape=[3])
    (r,) = gf.gradient_check(scope.mul(x, x), [x], [np.ones(3)])
    np.testing.assert_allclose(np.diag(r.numerical), 2.0, rtol=1e-3)
    assert r.max_error < 2e-3


def test_gradient_check_rejects_what_has_no_gradient(scope):
    x = scope.placeholder(gf.float64, shape=[2], name="x")
    n = scope.placeholder(gf.int32, shape=[2], name="n")
    with pytest.raises(TypeError, match="x 'n:0' has dtype int32"):
        gf.gradient_check(scope.cast(n, gf.float64), [n], [np.ones(2)])
    with pytest.raises(TypeError, match="y 'as_int:0' has dtype int32"):
        gf.gradient_check(scope.cast(x, gf.int32, name="as_int"), [x], [np.ones(2)])
    for delta in (0, -1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="delta must be a finite number > 0"):
            gf.gradient_check(scope.mul(x, x), [x], [np.ones(2)], delta=delta)


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
@pytest.mark.parametrize("known_rank", [True, False], ids=["rank", "no_rank"])
def test_concat_gradient_with_a_run_time_axis_or_rank(scope, axis, known_rank):
    """As TensorFlow: the axis may be a tensor fed at run time, the inputs of unknown rank."""
    shape = [None, None] if known_rank else None
    a = scope.placeholder(gf.float64, shape=shape)
    b = scope.placeholder(gf.float64, shape=shape)
    at = scope.placeholder(gf.int32, shape=[])
    c = scope.concat([a, b], at)
    sizes = [2, 3]
    sizes[axis % 2] = 1
    check(scope.mul(c, c), [a, b], [values([2, 3]), values(sizes)], feed_dict={at: axis})
