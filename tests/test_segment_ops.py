"""Segment reductions (ops/segment_ops.py) against a plain numpy reference written here:
TensorFlow's CPU loops (identities, Eigen's max/min rule, sorted runs), bit for bit;
edge cases, TF's errors naming the node, gradients against central differences, the
index rules as hypothesis properties, later calls of a callable, and the GPU kernels
on the simulated and emulated GPUs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError

from support.gpu_devices import GPU_KINDS, gpu_session_devices
from support.tiering import NeverReady

UNSORTED = ["sum", "prod", "max", "min"]
SORTED = ["sum", "mean", "prod", "max", "min"]
REAL = [np.float16, np.float32, np.float64, np.int32, np.int64]
NUMBER = REAL + [np.complex64]


# -- the reference: TensorFlow's CPU loops, written out ---------------------------------------
def _combine(op: str, o, d):
    """One step of TF's reduction functor: ``o`` (the value there) and the row ``d``."""
    if op == "sum":
        return o + d
    if op == "prod":
        return o * d
    if op == "max":  # Eigen: data.cwiseMax(output) = (d < o) ? o : d
        return o if d < o else d
    return o if o < d else d  # min: (o < d) ? o : d


def _identity(op: str, dtype):
    dtype = np.dtype(dtype)
    if op == "sum":
        return dtype.type(0)
    if op == "prod":
        return dtype.type(1)
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return dtype.type(info.min if op == "max" else info.max)


def ref_unsorted(op: str, data, ids, num: int) -> np.ndarray:
    data, ids = np.asarray(data), np.asarray(ids)
    inner = data.shape[ids.ndim:]
    out = np.full((num,) + inner, _identity(op, data.dtype), data.dtype)
    rows = data.reshape((ids.size,) + inner)
    for i, j in enumerate(ids.reshape(-1)):
        if j < 0:
            continue
        for pos in np.ndindex(inner):
            out[(j,) + pos] = _combine(op, out[(j,) + pos], rows[i][pos])
    return out


def ref_sorted(op: str, data, ids) -> np.ndarray:
    """Each run of equal ids: one row copied, more folded from the reducer's start (0, 1,
    -inf / +inf), a mean divided by the count (truncating integers); gaps 0 (prod 1)."""
    data, ids = np.asarray(data), np.asarray(ids)
    num = int(ids[-1]) + 1 if ids.size else 0
    out = np.full((num,) + data.shape[1:], 1 if op == "prod" else 0, data.dtype)
    for j in range(num):
        rows = data[ids == j]
        if len(rows) == 1:
            out[j] = rows[0]
        elif len(rows) > 1:
            step = "sum" if op == "mean" else op
            start = _identity(step, data.dtype)
            if data.dtype.kind == "f" and op in ("max", "min"):
                start = data.dtype.type(-np.inf if op == "max" else np.inf)
            for pos in np.ndindex(data.shape[1:]):
                acc = start
                for r in rows:
                    acc = _combine(step, acc, r[pos])
                if op == "mean":
                    count = data.dtype.type(len(rows))
                    acc = int(acc / count) if data.dtype.kind in "iu" else acc / count
                out[(j,) + pos] = acc
    return out


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-4, 5, shape).astype(dtype)
    values = rng.standard_normal(shape) * 3
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def _run(fetches, feeds=None, devices=None, **config):
    graph = (fetches[0] if isinstance(fetches, list) else fetches).graph
    with gf.Session(graph, gf.SessionConfig(**config) if config else None,
                    devices=devices) as sess:
        return sess.run(fetches, feeds)


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if np.dtype(got.dtype).kind == "f":  # bit for bit, NaN payloads aside
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert np.array_equal(got.view(f"u{got.itemsize}")[~np.isnan(got)],
                              want.view(f"u{want.itemsize}")[~np.isnan(want)])
    else:
        np.testing.assert_array_equal(got, want)


# -- values ------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", UNSORTED)
@pytest.mark.parametrize("dtype", NUMBER, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("index_type", [np.int32, np.int64])
def test_unsorted_matches_the_reference(scope, op, dtype, index_type):
    if op in ("max", "min") and np.dtype(dtype).kind == "c":
        pytest.skip("no order on complex numbers")
    data = _data((9, 3), dtype)
    ids = np.array([3, 0, -1, 3, 3, 1, -2, 0, 3], index_type)
    out = getattr(scope, f"unsorted_segment_{op}")(data, ids, np.int64(5))  # 2, 4 are empty
    assert out.shape.as_list() == [5, 3] and out.dtype == gf.as_dtype(dtype)
    _same(_run(out), ref_unsorted(op, data, ids, 5))


@pytest.mark.parametrize("op", SORTED)
@pytest.mark.parametrize("dtype", NUMBER, ids=lambda t: np.dtype(t).name)
def test_sorted_matches_the_reference(scope, op, dtype):
    if op in ("max", "min") and np.dtype(dtype).kind == "c":
        pytest.skip("no order on complex numbers")
    data = _data((8, 2), dtype, seed=1)
    ids = np.array([0, 0, 0, 2, 3, 3, 5, 5])  # 1 and 4 are gaps, 2 a single row
    out = getattr(scope, f"segment_{op}")(data, ids)
    assert out.shape.as_list() == [None, 2]
    _same(_run(out), ref_sorted(op, data, ids))


def test_float_sums_are_sequential_bit_for_bit(scope):
    """Sums in index order, as a plain loop: many rows of mixed magnitude into 3 segments."""
    rng = np.random.default_rng(5)
    data = (rng.standard_normal(3000) * 10.0 ** rng.integers(-6, 6, 3000)).astype(np.float32)
    ids = rng.integers(0, 3, 3000)
    got = _run(scope.unsorted_segment_sum(data, ids, 3))
    want = np.zeros(3, np.float32)
    for d, j in zip(data, ids):
        want[j] = np.float32(want[j] + d)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("op, dtype", [
    ("sum", np.float32), ("prod", np.float32), ("sum", np.complex64), ("prod", np.complex64),
    *((op, np.int64) for op in UNSORTED)], ids=lambda v: v if isinstance(v, str)
    else np.dtype(v).name)
def test_the_fold_before_its_loop_compiles_gives_the_loops_bits(op, dtype, monkeypatch):
    """Until a fold's loop is compiled (tiered compilation), numpy's ``ufunc.at`` folds
    where it folds alike (sums, products, integer max/min; a float max or min always
    runs the loop): the loop's bits, with NaN, inf and signed zeros, wrapping integers
    and skipped (negative) ids."""
    from graphflow.ops import segment_ops
    rng = np.random.default_rng(3)
    rows = (rng.standard_normal((300, 4)) * 10.0 ** rng.integers(-3, 3, (300, 4)))
    rows = rows.astype(dtype)
    if np.dtype(dtype).kind in "fc":
        rows[[7, 40], 1] = np.nan
        rows[[9, 11], 2] = [-0.0, 0.0]
        rows[13, 3] = np.inf
    ids = rng.integers(-1, 5, 300)
    start = np.full((5, 4), segment_ops.unsorted_identity(op, np.dtype(dtype)), dtype)
    by_loop = start.copy()
    segment_ops.fold_rows(by_loop, ids, rows, op)
    loops = dict(segment_ops._FOLD_LOOPS)
    monkeypatch.setattr(segment_ops, "_FOLD_LOOPS",
                        {k: NeverReady(v.fn) for k, v in loops.items()})
    by_numpy = start.copy()
    segment_ops.fold_rows(by_numpy, ids, rows, op)
    assert by_numpy.tobytes() == by_loop.tobytes()


def test_empty_segments_hold_tf_identities(scope):
    data = np.zeros((0, 2), np.float32)
    outs = [getattr(scope, f"unsorted_segment_{op}")(data, np.zeros(0, np.int32), 2)
            for op in UNSORTED]
    got = _run(outs)
    lowest = np.finfo(np.float32).min
    assert [g.tolist() for g in got] == [[[0, 0]] * 2, [[1, 1]] * 2, [[lowest] * 2] * 2,
                                         [[-lowest] * 2] * 2]
    ints = _run(scope.unsorted_segment_max(np.array([5], np.int32), [1], 3))
    assert ints.tolist() == [np.iinfo(np.int32).min, 5, np.iinfo(np.int32).min]


def test_empty_inputs(scope):
    outs = [scope.unsorted_segment_sum(np.zeros((0, 3), np.float32), np.zeros(0, np.int64), 0),
            scope.segment_sum(np.zeros((0, 3), np.float32), np.zeros(0, np.int32)),
            scope.unsorted_segment_max(np.zeros((2, 0), np.float32), [0, 1], 3)]
    assert [g.shape for g in _run(outs)] == [(0, 3), (0, 3), (3, 0)]


def test_nan_and_inf_follow_eigen(scope):
    """max(d, o) = o if d < o else d: a NaN row wins, the next row replaces it; -inf
    cannot beat lowest() in an otherwise empty segment; sorted segments start at -inf."""
    nan, inf = np.nan, np.inf
    data = np.array([nan, 1.0, 2.0, nan, -inf, inf, 3.0], np.float32)
    ids = np.array([0, 0, 1, 1, 2, 3, 3])
    got = _run(scope.unsorted_segment_max(data, ids, 4))
    _same(got, ref_unsorted("max", data, ids, 4))
    assert got[0] == 1.0 and np.isnan(got[1]) and got[2] == np.finfo(np.float32).min
    assert got[3] == inf
    sorted_max = _run(scope.segment_max(np.array([-inf, -inf, nan], np.float32), [0, 0, 1]))
    assert sorted_max[0] == -inf and np.isnan(sorted_max[1])


def test_segment_ids_of_higher_rank_and_scalars(scope):
    data = _data((2, 3, 2), np.float64)
    ids = np.array([[0, 2, 2], [-1, 0, 1]])
    out = scope.unsorted_segment_sum(data, ids, 3)
    assert out.shape.as_list() == [3, 2]
    _same(_run(out), ref_unsorted("sum", data, ids, 3))
    scalar = scope.unsorted_segment_prod(np.float32(5.0), np.int32(1), 2)
    assert scalar.shape.as_list() == [2] and _run(scalar).tolist() == [1.0, 5.0]


def test_integers_wrap_and_mean_truncates(scope):
    big = np.array([2**31 - 1, 1, -7, 2], np.int32)
    assert _run(scope.unsorted_segment_sum(big, [0, 0, 1, 1], 2)).tolist() == [-2**31, -5]
    assert _run(scope.segment_mean(np.array([-7, 2, 5], np.int32), [0, 0, 1])).tolist() == [-2, 5]


@pytest.mark.parametrize("op", ["mean", "sqrt_n"])
def test_composites_as_tf_builds_them(scope, op):
    data = _data((5, 2), np.float32)
    ids = np.array([1, -1, 1, 3, 1])
    out = getattr(scope, f"unsorted_segment_{op}")(data, ids, 4)
    counts = np.maximum(np.bincount(ids[ids >= 0], minlength=4), 1).astype(np.float32)[:, None]
    summed = ref_unsorted("sum", data, ids, 4)
    want = summed / (counts if op == "mean" else np.sqrt(counts))
    assert out.shape.as_list() == [4, 2]
    np.testing.assert_allclose(_run(out), want, rtol=1e-6)
    ints = scope.unsorted_segment_mean(np.array([1, 2, 4], np.int32), [0, 0, 1], 3)
    assert ints.dtype == gf.float64 and _run(ints).tolist() == [1.5, 4.0, 0.0]


# -- errors ------------------------------------------------------------------------------------
def _run_error(out, feeds=None) -> InvalidArgumentError:
    with pytest.raises(InvalidArgumentError) as info:
        _run(out, feeds)
    return info.value


def test_an_id_past_num_segments_is_tfs_error(scope):
    out = scope.unsorted_segment_sum(np.ones((2, 3), np.float32), [[0, 1, 5], [-1, 9, 0]], 4,
                                     name="seg")
    e = _run_error(out)
    assert e.message == "segment_ids[0,2] = 5 is out of range [0, 4)" and e.node_name == "seg"


def test_bad_num_segments_and_prefix_at_run_time(scope):
    n = scope.placeholder(gf.int32, shape=None)
    ids = scope.placeholder(gf.int32, shape=None)
    out = scope.unsorted_segment_max(np.ones((3, 2), np.float32), ids, n, name="m")
    assert _run_error(out, {n: -1, ids: [0, 0, 1]}).message == \
        "Input num_segments == -1 must not be negative."
    assert _run_error(out, {n: [2], ids: [0, 0, 1]}).message == \
        "num_segments should be a scalar, not shape [1]"
    assert _run_error(out, {n: 2, ids: [0, 1]}).message == \
        "data.shape = [3,2] does not start with segment_ids.shape = [2]"


@pytest.mark.parametrize("build, message", [
    (lambda s: s.unsorted_segment_sum(np.ones((3, 2)), [0, 1], 2), "Dimensions must be equal"),
    (lambda s: s.unsorted_segment_sum(np.ones(3), [[0, 1, 2]], 2), "at least rank 2"),
    (lambda s: s.unsorted_segment_sum(np.ones(3), [0, 1, 2], -2), "must be non-negative"),
    (lambda s: s.unsorted_segment_sum(np.ones(3), [0, 1, 2], [2]), "rank 0 but is rank 1"),
    (lambda s: s.segment_sum(np.ones((3, 2)), [0, 1]), "Dimensions must be equal"),
    (lambda s: s.segment_sum(np.ones((3, 2)), [[0, 1, 1]]), "rank 1 but is rank 2"),
    (lambda s: s.segment_sum(np.float32(1), [0]), "at least rank 1"),
])
def test_build_time_errors_name_the_node(scope, build, message):
    with pytest.raises(InvalidArgumentError, match=message) as info:
        build(scope)
    assert info.value.node_name is not None and "Segment" in info.value.node_name


@pytest.mark.parametrize("ids, message", [
    ([0, 2, 1, 3], "segment ids are not increasing"),
    ([1, 0, 0, 0], "segment ids are not increasing"),
    ([-1, 0, 0, 1], "Segment id -1 out of range [0, 2), possibly because 'segment_ids' input "
                    "is not sorted."),
    ([-2, -3, 0, 1], "segment ids are not increasing"),
    ([0, 0, 0, -1], "segment ids must be >= 0"),
])
def test_sorted_ids_errors_are_tfs(scope, ids, message):
    holder = scope.placeholder(gf.int32, shape=[4])
    out = scope.segment_max(np.ones((4, 2), np.float32), holder, name="sorted")
    e = _run_error(out, {holder: ids})
    assert e.message == message and e.node_name == "sorted"


# -- gradients ----------------------------------------------------------------------------------
def _check_gradient(y, x, value, tol=1e-6):
    for r in gf.gradient_check(y, [x], [value]):
        assert r.max_error < tol, (r.theoretical, r.numerical)


@pytest.mark.parametrize("op", UNSORTED + ["mean", "sqrt_n"])
def test_unsorted_gradients(scope, op):
    x = scope.placeholder(gf.float64, shape=[6, 2])
    ids = np.array([2, 0, -1, 2, 2, 0])
    value = _data((6, 2), np.float64, seed=3)
    _check_gradient(getattr(scope, f"unsorted_segment_{op}")(x, ids, 4), x, value)


@pytest.mark.parametrize("op", SORTED)
def test_sorted_gradients(scope, op):
    x = scope.placeholder(gf.float64, shape=[6, 2])
    value = _data((6, 2), np.float64, seed=4)
    _check_gradient(getattr(scope, f"segment_{op}")(x, [0, 0, 2, 2, 2, 3]), x, value)


@pytest.mark.parametrize("sorted_ids", [False, True])
def test_max_gradient_divides_among_ties(scope, sorted_ids):
    x = scope.placeholder(gf.float64, shape=[4])
    y = scope.segment_max(x, [0, 0, 0, 1]) if sorted_ids else \
        scope.unsorted_segment_max(x, [0, 0, 0, 1], 2)
    (grad,) = gf.gradients(scope.reduce_sum(y), [x])
    assert _run(grad, {x: [3.0, 1.0, 3.0, 2.0]}).tolist() == [0.5, 0.0, 0.5, 1.0]


@pytest.mark.parametrize("value", [[2.0, 0.0, 3.0, 4.0], [0.0, 0.0, 3.0, 4.0]])
def test_prod_gradient_with_zeros(scope, value):
    x = scope.placeholder(gf.float64, shape=[4])
    _check_gradient(scope.unsorted_segment_prod(x, [0, 0, 0, 1], 2), x, np.array(value))
    _check_gradient(scope.segment_prod(x, [0, 0, 0, 1]), x, np.array(value))


def test_ids_and_num_segments_get_no_gradient(scope):
    x = scope.placeholder(gf.float32, shape=[3])
    ids = scope.placeholder(gf.int32, shape=[3])
    n = scope.placeholder(gf.int32, shape=[])
    assert gf.gradients(scope.unsorted_segment_sum(x, ids, n), [ids, n]) == [None, None]


# -- properties of the index rules -------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-3, 6), min_size=0, max_size=12), st.integers(0, 3),
       st.sampled_from(UNSORTED))
def test_unsorted_property(ids, extra, op):
    """Any ids in [-3, num): the reference loop; the ones past num are TF's error."""
    num = (max(ids) + 1 if ids else 0) + extra - 1
    scope = gf.Scope(gf.Graph())
    data = _data((len(ids), 2), np.float32, seed=len(ids))
    out = getattr(scope, f"unsorted_segment_{op}")(data, np.array(ids, np.int64), max(num, 0))
    if ids and max(ids) >= max(num, 0):
        with pytest.raises(InvalidArgumentError, match="is out of range"):
            _run(out)
    else:
        _same(_run(out), ref_unsorted(op, data, np.array(ids, np.int64), max(num, 0)))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=10), st.sampled_from(SORTED))
def test_sorted_property(ids, op):
    """Sorted ids give the reference's runs and last id + 1 rows."""
    ids = np.sort(np.array(ids))
    scope = gf.Scope(gf.Graph())
    data = _data((len(ids), 2), np.float64, seed=int(ids.sum()))
    got = _run(getattr(scope, f"segment_{op}")(data, ids))
    assert len(got) == ids[-1] + 1
    _same(got, ref_sorted(op, data, ids))


# -- compiled plans: later calls ---------------------------------------------------------------
@pytest.mark.parametrize("op", ["unsorted_segment_sum", "unsorted_segment_max", "segment_mean",
                                "unsorted_segment_mean"])
def test_later_calls_of_a_callable(scope, op):
    x = scope.placeholder(gf.float32, shape=[None, 2])
    ids = scope.placeholder(gf.int32, shape=[None])
    y = getattr(scope, op)(x, ids) if op.startswith("segment") else \
        getattr(scope, op)(x, ids, 3)
    with gf.Session(scope.graph) as sess:
        step = sess.make_callable(y, [x, ids])
        for call in range(4):
            data = _data((4 + call, 2), np.float32, seed=call)
            order = np.sort(np.arange(4 + call) % 3).astype(np.int32)
            got = step(data, order)
            name = op.split("segment_")[1]
            if op.startswith("segment"):
                want = ref_sorted(name, data, order)
            elif name == "mean":
                want = ref_unsorted("sum", data, order, 3) / np.maximum(
                    np.bincount(order, minlength=3), 1)[:, None].astype(np.float32)
            else:
                want = ref_unsorted(name, data, order, 3)
            np.testing.assert_allclose(got, want, rtol=1e-6)


# -- the GPU kernels -----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", GPU_KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.float16],
                         ids=lambda t: np.dtype(t).name)
def test_gpu_kernels_agree_with_the_cpu(kind, dtype):
    """Deterministic GPU runs of every op equal the CPU (integers always; floats without
    NaN, whose rule differs on the GPU); ids past num_segments are skipped on the GPU."""
    data = _data((7, 3), dtype, seed=2)
    ids = np.array([2, 0, -1, 2, 2, 0, 3])
    sorted_ids = np.array([0, 0, 2, 2, 2, 3, 5])

    def build(device):
        s = gf.Scope(gf.Graph()).with_device(device)
        outs = [getattr(s, f"unsorted_segment_{op}")(data, ids, 4) for op in UNSORTED]
        return outs + [getattr(s, f"segment_{op}")(data, sorted_ids) for op in SORTED]
    cpu = _run(build("/cpu:0"))
    gpu = _run(build("/gpu:0"), devices=gpu_session_devices(kind), deterministic=True)
    for c, g in zip(cpu, gpu):
        if np.dtype(dtype).kind == "f" and np.dtype(dtype) != np.float16:
            np.testing.assert_allclose(g, c, rtol=1e-6)
        else:
            np.testing.assert_allclose(g.astype(np.float64), c.astype(np.float64), rtol=2e-3)
    skipped = lambda s: s.unsorted_segment_sum(np.ones(3, np.float32), [0, 7, 1], 2)  # noqa: E731
    scope = gf.Scope(gf.Graph()).with_device("/gpu:0")
    assert _run(skipped(scope), devices=gpu_session_devices(kind)).tolist() == [1.0, 1.0]
