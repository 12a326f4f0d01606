"""Gradients of the scatter / gather / partition / stitch ops.

Every rule against central finite differences (float64, complex128 where the op
takes complex) over random shapes, index depths, batch_dims, duplicates, ties and
out-of-bound indices under bad_indices_policy="IGNORE"; ties of three or more in
TensorScatterMin/Max (where a central difference gives 1/2, not 1/k) against a plain
loop. Where TensorFlow 2.21 is wrong (duplicates in TensorScatterUpdate and the
stitches, IGNORE, a NaN kept by TensorScatterMax) the correct answer is a literal.
"""
from __future__ import annotations

import math
import pathlib
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.gradients import GradContext
from support.gpu_devices import GPU_KINDS, gpu_session_devices

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import partition_stitch  # noqa: E402  (examples/: the seed pipeline)

SCATTERS = ["scatter_nd", "tensor_scatter_update", "tensor_scatter_add", "tensor_scatter_sub",
            "tensor_scatter_min", "tensor_scatter_max"]
EXTREMES = ("tensor_scatter_min", "tensor_scatter_max")
FAST = gf.SessionConfig(optimize=False)  # no element-wise fusion to compile per example
SMALL = settings(max_examples=12, deadline=None)


def check(y, xs, vals, tol=1e-6, config=FAST, **kw):
    """Symbolic and numerical Jacobians of y agree for every x."""
    with gf.Session(y.graph, config, **kw) as sess:
        results = gf.gradient_check(y, xs, vals, session=sess)
    for r in results:
        assert r.max_error < tol, (r.x.name, r.theoretical, r.numerical)
    return results


def run(fetches, feeds=None, config=FAST, **kw):
    graph = (fetches[0] if isinstance(fetches, list) else fetches).graph
    with gf.Session(graph, config, **kw) as sess:
        return sess.run(fetches, feeds)


def values(rng, shape, dtype=np.float64):
    a = rng.uniform(-2, 2, size=shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.uniform(-2, 2, size=shape)
    return a.astype(dtype)


# -- plain references ------------------------------------------------------------------------
def in_bounds(t, dims) -> bool:
    return all(0 <= v < d for v, d in zip(t, dims))


def min_max_gradients(tensor, tuples, updates, v, op):
    """TensorScatterMin/Max's gradients for the cotangent v by loops: the participants
    equal to each result element (the tensor's, the in-bound updates') share it evenly.
    Also returns the largest number of participants of an element."""
    out = tensor.copy()
    pick = max if op == "tensor_scatter_max" else min
    depth = tuples.shape[-1]
    rows = [(tuple(t), u) for t, u in zip(tuples.reshape(-1, depth),
                                           updates.reshape((-1,) + tensor.shape[depth:]))]
    for t, u in rows:
        if in_bounds(t, tensor.shape):
            for e in np.ndindex(u.shape):
                out[t + e] = pick(out[t + e], u[e])
    d_tensor, d_updates = np.zeros_like(tensor), np.zeros((len(rows),) + tensor.shape[depth:])
    most = 0
    for slot in np.ndindex(out.shape):
        who = [("t", None)] if tensor[slot] == out[slot] else []
        for i, (t, u) in enumerate(rows):
            e = slot[depth:]
            if in_bounds(t, tensor.shape) and t == slot[:depth] and u[e] == out[slot]:
                who.append(("u", i))
        for kind, i in who:
            if kind == "t":
                d_tensor[slot] = v[slot] / len(who)
            else:
                d_updates[(i,) + slot[depth:]] = v[slot] / len(who)
        most = max(most, len(who))
    return d_tensor, d_updates.reshape(updates.shape), most


# -- random cases ------------------------------------------------------------------------------
@st.composite
def scatter_cases(draw, op: str):
    """(op, shape, tuples, updates, tensor, policy, dtype) with duplicates, and out-of-bound
    tuples under IGNORE; min/max values from {0, 1, 2}, so that ties are common."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    depth = draw(st.integers(1, rank))
    outer = tuple(draw(st.lists(st.integers(1, 2), min_size=1, max_size=2)))
    policy = draw(st.sampled_from(["", "IGNORE"]))
    spill = 1 if policy == "IGNORE" else 0
    tuple_st = st.tuples(*[st.integers(-spill, d - 1 + spill) for d in shape[:depth]])
    tuples = np.array(draw(st.lists(tuple_st, min_size=math.prod(outer),
                                    max_size=math.prod(outer))), np.int64)
    tuples = tuples.reshape(outer + (depth,))
    dtype = np.float64 if op in EXTREMES else draw(st.sampled_from([np.float64, np.complex128]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    u_shape = outer + shape[depth:]
    if op in EXTREMES:
        tensor = rng.integers(0, 3, shape).astype(np.float64)
        updates = rng.integers(0, 3, u_shape).astype(np.float64)
    else:
        tensor, updates = values(rng, shape, dtype), values(rng, u_shape, dtype)
    index_dtype = draw(st.sampled_from([np.int32, np.int64]))
    return shape, tuples.astype(index_dtype), updates, tensor, policy, dtype


def build_scatter(scope, op, shape, tuples, updates, tensor, policy, dtype):
    dt = gf.as_dtype(dtype)
    u = scope.placeholder(dt, shape=updates.shape, name="updates")
    if op == "scatter_nd":
        return scope.scatter_nd(tuples, u, list(shape), bad_indices_policy=policy), [u], [updates]
    t = scope.placeholder(dt, shape=shape, name="tensor")
    y = getattr(scope, op)(t, tuples, u, bad_indices_policy=policy)
    return y, [t, u], [tensor, updates]


@pytest.mark.parametrize("op", SCATTERS)
@SMALL
@given(data=st.data())
def test_scatter_gradients_match_finite_differences(op, data):
    shape, tuples, updates, tensor, policy, dtype = data.draw(scatter_cases(op))
    scope = gf.Scope(gf.Graph())
    y, xs, vals = build_scatter(scope, op, shape, tuples, updates, tensor, policy, dtype)
    if op not in EXTREMES:
        check(y, xs, vals)
        return
    v = np.random.default_rng(0).uniform(1, 2, shape)
    d_tensor, d_updates, most = min_max_gradients(tensor, tuples, updates, v, op)
    got = run(gf.gradients(y, xs, grad_ys=[v]), dict(zip(xs, vals)))
    np.testing.assert_allclose(got[0], d_tensor, rtol=1e-12)
    np.testing.assert_allclose(got[1], d_updates, rtol=1e-12)
    if most <= 2:  # a central difference splits a tie of two evenly too (not one of three)
        check(y, xs, vals)


@st.composite
def gather_cases(draw):
    """(params, indices, batch_dims, policy): depths 0..rank - batch_dims, duplicates, and
    out-of-bound reads under IGNORE."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    b = draw(st.integers(0, rank - 1))
    depth = draw(st.integers(0, rank - b))
    inner = tuple(draw(st.lists(st.integers(1, 2), min_size=0, max_size=2)))
    policy = draw(st.sampled_from(["", "IGNORE"]))
    spill = 1 if policy == "IGNORE" else 0
    n = math.prod(shape[:b] + inner)
    tuples = draw(st.lists(st.tuples(*[st.integers(-spill, d - 1 + spill)
                                       for d in shape[b:b + depth]]), min_size=n, max_size=n))
    indices = np.array(tuples, np.int64).reshape(shape[:b] + inner + (depth,))
    dtype = draw(st.sampled_from([np.float64, np.complex128]))
    params = values(np.random.default_rng(draw(st.integers(0, 2**16))), shape, dtype)
    return params, indices.astype(draw(st.sampled_from([np.int32, np.int64]))), b, policy


@SMALL
@given(gather_cases())
def test_gather_nd_gradients_match_finite_differences(case):
    params, indices, b, policy = case
    scope = gf.Scope(gf.Graph())
    p = scope.placeholder(gf.as_dtype(params.dtype), shape=params.shape, name="params")
    y = scope.gather_nd(p, indices, batch_dims=b, bad_indices_policy=policy)
    (grad,) = gf.gradients(y, [p])
    sparse = b == 0 and indices.shape[-1] == 1 and policy != "IGNORE"
    assert isinstance(grad, gf.IndexedSlices) == sparse
    check(y, [p], [params])


@st.composite
def stitch_cases(draw):
    """N index inputs of rank 0..2 (maybe empty) with duplicates, and their data."""
    n = draw(st.integers(1, 3))
    extra = tuple(draw(st.lists(st.integers(1, 2), max_size=1)))
    shapes = [tuple(draw(st.lists(st.integers(0, 3), max_size=2))) for _ in range(n)]
    indices = [np.array(draw(st.lists(st.integers(0, 4), min_size=math.prod(s),
                                      max_size=math.prod(s))), np.int32).reshape(s)
               for s in shapes]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dtype = draw(st.sampled_from([np.float64, np.complex128]))
    return indices, [values(rng, s + extra, dtype) for s in shapes]


@pytest.mark.parametrize("op", ["dynamic_stitch", "parallel_dynamic_stitch"])
@SMALL
@given(case=stitch_cases())
def test_stitch_gradients_match_finite_differences(op, case):
    indices, data = case
    scope = gf.Scope(gf.Graph())
    xs = [scope.placeholder(gf.as_dtype(d.dtype), shape=d.shape) for d in data]
    y = getattr(scope, op)(indices, xs)
    check(y, xs, data)


@SMALL
@given(st.lists(st.integers(0, 3), min_size=1, max_size=2), st.integers(1, 3),
       st.lists(st.integers(1, 2), max_size=1), st.integers(0, 2**16))
def test_dynamic_partition_gradients_match_finite_differences(prefix, k, extra, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, k, prefix).astype(np.int32)
    data = values(rng, tuple(prefix) + tuple(extra))
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=data.shape)
    parts = scope.dynamic_partition(x, ids, num_partitions=k)
    for part in parts:  # the other outputs get zeros
        check(part, [x], [data])


# -- where TensorFlow 2.21 is wrong: the correct literal answers ---------------------------------
def test_tensor_scatter_update_duplicates_only_the_last_writer_gets_the_gradient(scope):
    t = scope.placeholder(gf.float64, shape=[3])
    u = scope.placeholder(gf.float64, shape=[2])
    y = scope.tensor_scatter_nd_update(t, [[1], [1]], u)
    d_t, d_u = run(gf.gradients(y, [t, u], grad_ys=[np.array([1.0, 2.0, 3.0])]),
                   {t: np.zeros(3), u: [5.0, 7.0]})
    assert d_u.tolist() == [0, 2]  # TensorFlow: [2, 2]
    assert d_t.tolist() == [1, 0, 3]
    rows = scope.placeholder(gf.float64, shape=[3, 2])
    y = scope.tensor_scatter_nd_update(np.zeros((3, 2)), [[0], [2], [0]], rows)
    (d_rows,) = run(gf.gradients(y, [rows], grad_ys=[np.array([[1.0, 2], [3, 4], [5, 6]])]),
                    {rows: np.ones((3, 2))})
    assert d_rows.tolist() == [[0, 0], [5, 6], [1, 2]]  # TensorFlow: [[1,2],[5,6],[1,2]]


@pytest.mark.parametrize("op", ["dynamic_stitch", "parallel_dynamic_stitch"])
def test_stitch_duplicates_only_the_winner_gets_the_gradient(scope, op):
    x = scope.placeholder(gf.float64, shape=[1])
    ones = scope.placeholder(gf.float64, shape=[1])
    y = getattr(scope, op)([[0], [0]], [x, ones])
    d_x, d_ones = run(gf.gradients(y, [x, ones], grad_ys=[np.array([4.0])]),
                      {x: [3.0], ones: [1.0]})
    assert d_x.tolist() == [0] and d_ones.tolist() == [4]  # TensorFlow: d_x = [4]
    a = scope.placeholder(gf.float64, shape=[2])
    b = scope.placeholder(gf.float64, shape=[2])
    y = getattr(scope, op)([[0, 2], [2, 1]], [a, b])
    d_a, d_b = run(gf.gradients(y, [a, b], grad_ys=[np.array([1.0, 2.0, 3.0])]),
                   {a: [1.0, 1.0], b: [1.0, 1.0]})
    assert d_a.tolist() == [1, 0] and d_b.tolist() == [3, 2]  # TensorFlow: d_a = [1, 3]


@pytest.mark.parametrize("op", ["scatter_nd", "tensor_scatter_update", "tensor_scatter_add",
                                "tensor_scatter_sub", "tensor_scatter_min",
                                "tensor_scatter_max"])
def test_ignored_updates_get_zero(scope, op):
    """TensorFlow raises at run time here (its gradient gathers with the default policy)."""
    u = scope.placeholder(gf.float64, shape=[4])
    indices = [[1], [5], [-1], [2]]
    v = np.array([10.0, 20.0, 30.0])
    if op == "scatter_nd":
        y = scope.scatter_nd(indices, u, [3], bad_indices_policy="IGNORE")
        xs, feeds = [u], {u: [1.0, 2.0, 3.0, 4.0]}
    else:
        t = scope.placeholder(gf.float64, shape=[3])
        y = getattr(scope, op)(t, indices, u, bad_indices_policy="IGNORE")
        xs, feeds = [t, u], {t: [0.0, 0.0, 0.0], u: [1.0, 2.0, 3.0, 4.0]}
    if op == "tensor_scatter_min":
        feeds[u] = [-1.0, -2.0, -3.0, -4.0]  # the updates win where they land
    got = run(gf.gradients(y, xs, grad_ys=[v]), feeds)
    sign = -1 if op == "tensor_scatter_sub" else 1
    assert got[-1].tolist() == [sign * 20, 0, 0, sign * 30]
    if op != "scatter_nd":  # the tensor's: zero where a kept update overwrote it
        overwritten = op in ("tensor_scatter_update", "tensor_scatter_min", "tensor_scatter_max")
        assert got[0].tolist() == ([10, 0, 0] if overwritten else [10, 20, 30])


def test_ignored_reads_of_a_depth_one_gather_contribute_nothing(scope):
    """TensorFlow's IndexedSlices keeps the bad rows, and densifying it raises."""
    p = scope.placeholder(gf.float64, shape=[3])
    y = scope.gather_nd(p, [[1], [5], [-1], [1]], bad_indices_policy="IGNORE")
    (grad,) = gf.gradients(y, [p], grad_ys=[np.array([1.0, 2.0, 3.0, 4.0])])
    assert not isinstance(grad, gf.IndexedSlices)
    assert run(grad, {p: np.zeros(3)}).tolist() == [0, 5, 0]


@pytest.mark.parametrize("op, tensor, want_tensor", [
    ("tensor_scatter_max", [1.0, 2.0, 3.0], [1, 1 / 3, 1]),
    ("tensor_scatter_max", [np.nan, 2.0, 3.0], [1, 1 / 3, 1]),  # TensorFlow: [nan, 1/3, 1]
    ("tensor_scatter_min", [1.0, 2.0, 0.25], [1, 1 / 3, 1]),
])
def test_min_max_ties_split_evenly_and_a_kept_nan_owns_its_element(scope, op, tensor,
                                                                   want_tensor):
    t = scope.placeholder(gf.float64, shape=[3])
    u = scope.placeholder(gf.float64, shape=[4])
    y = getattr(scope, op)(t, [[1], [1], [2], [0]], u)
    d_t, d_u = run(gf.gradients(y, [t, u]), {t: tensor, u: [2.0, 2.0, 0.5, np.nan]})
    np.testing.assert_allclose(d_t, want_tensor, rtol=1e-15)
    np.testing.assert_allclose(d_u, [1 / 3, 1 / 3, 0, 0], rtol=1e-15)  # NaN never wins


# -- sparse gradients of a depth-1 gather ---------------------------------------------------------
@pytest.mark.parametrize("index_dtype", [np.int16, np.int32, np.int64])
@pytest.mark.parametrize("indices", [[[3], [1], [3]], [[[3], [0]], [[3], [4]]]], ids=["2d", "3d"])
@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
def test_depth_one_gather_gives_indexed_slices(scope, index_dtype, indices, static):
    params = values(np.random.default_rng(1), (5, 2))
    p = scope.placeholder(gf.float64, shape=[5, 2] if static else [None, None])
    y = scope.gather_nd(p, np.array(indices, index_dtype))
    v = values(np.random.default_rng(2), np.array(indices).shape[:-1] + (2,))
    (grad,) = gf.gradients(y, [p], grad_ys=[v])
    assert isinstance(grad, gf.IndexedSlices)
    want_index_dtype = gf.int64 if index_dtype == np.int64 else gf.int32
    assert grad.indices.dtype == grad.dense_shape.dtype == want_index_dtype
    assert grad.dtype == gf.float64
    got_values, got_indices, got_shape, dense = run(
        [grad.values, grad.indices, grad.dense_shape, gf.convert_to_tensor(grad)], {p: params})
    flat = np.array(indices).reshape(-1)
    np.testing.assert_array_equal(got_values, v.reshape(-1, 2))
    assert got_indices.tolist() == flat.tolist() and got_shape.tolist() == [5, 2]
    want = np.zeros((5, 2))
    np.add.at(want, flat, v.reshape(-1, 2))
    np.testing.assert_array_equal(dense, want)
    check(y, [p], [params])  # densified, against finite differences


def test_indexed_slices_that_cannot_be_dense_fail_when_built(scope):
    """One row of values per index, values of dense_shape's rank, a 1-D dense_shape: what
    the static shapes already contradict is an error here, not at the densifying run."""
    rows = scope.placeholder(gf.float64, shape=[3, 2], name="rows")
    with pytest.raises(gf.errors.InvalidArgumentError, match=r"'rows:0' of shape \[3,2\] must "
                                                             r"hold one row per index"):
        gf.IndexedSlices(rows, scope.constant([0, 1, 2, 3]), scope.constant([5, 2]))
    with pytest.raises(gf.errors.InvalidArgumentError, match="must hold one row per index"):
        gf.IndexedSlices(scope.constant(1.0), scope.constant([0]), scope.constant([5]))
    with pytest.raises(gf.errors.InvalidArgumentError, match=r"rank of dense_shape .* \(3\)"):
        gf.IndexedSlices(rows, scope.constant([0, 1, 2]), scope.constant([5, 2, 1]))
    with pytest.raises(gf.errors.InvalidArgumentError, match="dense_shape must be 1-D"):
        gf.IndexedSlices(rows, scope.constant([0, 1, 2]), scope.constant(5))
    unknown = gf.IndexedSlices(scope.placeholder(gf.float64), scope.placeholder(gf.int32),
                               scope.constant([5, 2]))
    assert unknown.shape.as_list() == [5, 2]


# -- static shapes, dtypes, None for indices ---------------------------------------------------------
def _every_op(scope, dtype):
    """(forward output, its differentiable inputs) for each op, all shapes static."""
    dt = gf.as_dtype(dtype)
    t = scope.placeholder(dt, shape=[4, 3], name="t")
    u = scope.placeholder(dt, shape=[2, 3], name="u")
    row = scope.placeholder(dt, shape=[1, 3], name="row")
    idx = scope.constant(np.array([[1], [3]], np.int32))
    cases = [(scope.scatter_nd(idx, u, [4, 3]), [u]),
             (scope.gather_nd(t, [[[0, 1]], [[2, 2]]]), [t]),
             (scope.gather_nd(t, [[1], [0]]), [t]),
             (scope.gather_nd(t, [[1], [0], [2], [1]], batch_dims=1), [t]),
             (scope.dynamic_stitch([[0, 1], [1]], [u, row]), [u, row]),
             (scope.parallel_dynamic_stitch([[2, 0], [0]], [u, row]), [u, row])]
    cases += [(getattr(scope, op)(t, idx, u), [t, u]) for op in SCATTERS[1:]
              if dt.is_floating or op not in EXTREMES]
    cases += [(out, [t]) for out in scope.dynamic_partition(t, [0, 1, 1, 0], num_partitions=2)]
    return cases


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_gradients_have_the_inputs_static_shapes_and_dtypes(scope, dtype):
    for y, xs in _every_op(scope, dtype):
        for x, g in zip(xs, gf.gradients(y, xs)):
            assert g.dtype == x.dtype, (y.op.type, x.name)
            assert g.shape.as_list() == x.shape.as_list(), (y.op.type, x.name, g.shape)


def test_indices_shapes_and_partitions_get_none(scope):
    """The rules themselves return None for every integer input."""
    for y, _ in _every_op(scope, np.float64):
        op = y.op
        grads = [scope.ones_like(o) for o in op.outputs]
        with_rule = op.op_def.gradient_function(GradContext(op, scope.with_sub_scope("g")), *grads)
        for t, g in zip(op.inputs, with_rule):
            assert (g is None) == t.dtype.is_integer, (op.type, t.name)


# -- the seed pipeline, as written and as the optimizer compiles it ------------------------------
def test_seed_pipeline_gradients_with_and_without_the_optimizer(scope):
    """Gradients are built on the user's graph; the plan may rewrite the forward into one
    _PartitionedSelect (no rule needed: no user graph holds one), and the values agree."""
    x = scope.placeholder(gf.float32, shape=[6], name="x")
    _, y = partition_stitch.build(scope, x)
    v = np.arange(1, 7, dtype=np.float32)
    (dx,) = gf.gradients(y, [x], grad_ys=[v])
    feed = {x: np.array(partition_stitch.X, np.float32)}
    results = {}
    for optimize in (True, False):
        config = gf.SessionConfig(optimize=optimize)
        with gf.Session(scope.graph, config) as sess:
            results[optimize] = sess.run([y, dx], feed)
            alone = [s.op.type for s in sess._plan([y], [x]).steps if s.op is not None]
            assert ("_PartitionedSelect" in alone) == optimize
        check(y, [x], [feed[x]], tol=1e-2, config=config)
    for a, b in zip(results[True], results[False]):
        assert a.tobytes() == b.tobytes()
    np.testing.assert_array_equal(results[True][1], v)  # the pipeline is x or x + 1


# -- GPU kinds -----------------------------------------------------------------------------------
def _gpu_graph():
    """Every rule on /gpu:0, with duplicates, ties, batch dims and IGNORE."""
    rng = np.random.default_rng(0)
    scope = gf.Scope(gf.Graph()).with_device("/gpu:0")
    t = scope.placeholder(gf.float64, shape=[5, 2], name="t")
    u = scope.placeholder(gf.float64, shape=[6, 2], name="u")
    idx = rng.integers(0, 5, (6, 1))
    bad = np.array([[1], [7], [1], [-1], [4], [1]])
    outs = [scope.tensor_scatter_update(t, idx, u), scope.tensor_scatter_max(t, idx, u),
            scope.tensor_scatter_min(t, bad, u, bad_indices_policy="IGNORE"),
            scope.scatter_nd(bad, u, [5, 2], bad_indices_policy="IGNORE"),
            scope.gather_nd(t, rng.integers(0, 2, (5, 3, 1)), batch_dims=1),
            scope.gather_nd(t, idx),
            scope.parallel_dynamic_stitch([idx[:, 0].astype(np.int32), [0, 1]],
                                          [u, scope.gather_nd(t, [[0], [1]])]),
            *scope.dynamic_partition(t, rng.integers(0, 3, 5).astype(np.int32),
                                     num_partitions=3)]
    grads = [gf.convert_to_tensor(g) for y in outs for g in gf.gradients(y, [t, u])
             if g is not None]
    tv = rng.integers(0, 3, (5, 2)).astype(np.float64)  # ties
    uv = rng.integers(0, 3, (6, 2)).astype(np.float64)
    return grads, {t: tv, u: uv}


@pytest.mark.parametrize("kind", GPU_KINDS)
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
def test_gradients_on_gpu_kinds_equal_the_cpus(kind, deterministic):
    grads, feeds = _gpu_graph()
    want = run(grads, feeds)
    config = gf.SessionConfig(optimize=False, deterministic=deterministic)
    with gf.Session(grads[0].graph, config, devices=gpu_session_devices(kind)) as sess:
        got = sess.run(grads, feeds)
        placement = sess._plan(grads, list(feeds)).placement
    on_gpu = {op.type for op, device in placement.items() if device.device_type == "gpu"}
    assert {"_ScatterWinners", "_ScatterMinMaxShares", "_BatchIndexTuples", "_StitchWinners",
            "GatherNd", "ScatterNd", "TensorScatterUpdate"} <= on_gpu
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)


@pytest.mark.parametrize("kind", GPU_KINDS)
@pytest.mark.parametrize("op", ["parallel_dynamic_stitch", "dynamic_stitch",
                                "tensor_scatter_update"])
def test_gpu_winner_of_the_forward_is_the_one_that_gets_the_gradient(kind, op):
    """Many writers per slot, threads in a shuffled order (emulated): the value the forward
    kept must come from the one writer whose gradient is nonzero, and that is the last."""
    rng = np.random.default_rng(5)
    scope = gf.Scope(gf.Graph()).with_device("/gpu:0")
    slots, n = 4, 40
    positions = rng.integers(0, slots, n).astype(np.int32)
    data = scope.placeholder(gf.float64, shape=[n], name="data")
    if op == "tensor_scatter_update":
        y = scope.tensor_scatter_update(np.zeros(slots), positions[:, None].astype(np.int64), data)
    else:
        halves = [scope.gather_nd(data, np.arange(n // 2)[:, None]),
                  scope.gather_nd(data, np.arange(n // 2, n)[:, None])]
        y = getattr(scope, op)([positions[: n // 2], positions[n // 2:]], halves)
    (d_data,) = gf.gradients(y, [data], grad_ys=[np.ones(slots)])
    feed = {data: np.arange(n, dtype=np.float64) + 100}  # distinct values name their writer
    config = gf.SessionConfig(optimize=False, deterministic=False)
    with gf.Session(scope.graph, config, devices=gpu_session_devices(kind)) as sess:
        for _ in range(3):  # a new thread order each launch
            merged, grad = sess.run([y, d_data], feed)
            kept = sorted((merged - 100).astype(int).tolist())
            assert np.flatnonzero(grad).tolist() == kept
            last = sorted(max(np.flatnonzero(positions == s)) for s in range(slots))
            assert kept == last
