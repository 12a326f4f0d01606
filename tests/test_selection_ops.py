"""Selection ops (ops/selection_ops.py) against plain numpy references written here:
ArgMax/ArgMin (Eigen's pair reducer: first index, NaN never wins), TopKV2 (lower index
first on ties), OneHot (TF's dtype rules), Where, Split/SplitV, Unique (first-occurrence
order); TF's errors naming the node, gradients, hypothesis properties, later calls of a
callable, and the GPU kernels on the simulated and emulated GPUs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError

from support.gpu_devices import GPU_KINDS, gpu_session_devices

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64]


def _run(fetches, feeds=None, devices=None):
    graph = (fetches[0] if isinstance(fetches, (list, tuple)) else fetches).graph
    with gf.Session(graph, devices=devices) as sess:
        return sess.run(list(fetches) if isinstance(fetches, tuple) else fetches, feeds)


def _values(shape, dtype, seed=0):
    """Small integers (many ties), in ``dtype``."""
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(dtype)


# -- references ---------------------------------------------------------------------------------
def ref_arg(x, axis, largest=True):
    """Eigen's pair reducer, one row at a time: start at (0, lowest); a value replaces the
    kept one only if strictly better (NaN compares false: never)."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    out = np.zeros(x.shape[:-1], np.int64)
    info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype) \
        if x.dtype.kind in "iu" else None
    for pos in np.ndindex(x.shape[:-1]):
        best_i = 0
        best = (info.min if largest else info.max) if info is not None else (not largest)
        for i, v in enumerate(x[pos]):
            if (v > best) if largest else (v < best):
                best_i, best = i, v
        out[pos] = best_i
    return out


def ref_top_k(x, k):
    """Sort each row by (value descending, index ascending); NaN above everything."""
    x = np.asarray(x)
    values = np.empty(x.shape[:-1] + (k,), x.dtype)
    indices = np.empty(x.shape[:-1] + (k,), np.int32)
    for pos in np.ndindex(x.shape[:-1]):
        row = x[pos]
        key = [(0 if np.isnan(v) else 1, -float(v) if not np.isnan(v) else 0.0, i)
               for i, v in enumerate(row)]
        order = [i for _, _, i in sorted(key)][:k]
        values[pos], indices[pos] = row[order], order
    return values, indices


def ref_unique(x):
    y, idx = [], []
    for v in x:
        found = [j for j, u in enumerate(y) if u == v]  # NaN != NaN: each NaN is new
        if found:
            idx.append(found[0])
        else:
            y.append(v)
            idx.append(len(y) - 1)
    return np.array(y, x.dtype), np.array(idx, np.int32)


# -- ArgMax / ArgMin -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES + [np.bool_, np.uint8], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("largest", [True, False], ids=["argmax", "argmin"])
def test_arg_matches_the_reference(scope, dtype, axis, largest):
    x = _values((4, 5), dtype, seed=axis + 2)
    fn = scope.argmax if largest else scope.argmin
    out = fn(x, axis)
    assert out.dtype == gf.int64 and out.shape.as_list() == [5 if axis == 0 else 4]
    np.testing.assert_array_equal(_run(out), ref_arg(x, axis, largest))


def test_arg_nan_inf_and_defaults(scope):
    nan, inf = np.nan, np.inf
    x = np.array([[nan, 1.0, 1.0], [nan, nan, nan], [-inf, -inf, 2.0], [nan, -inf, nan]],
                 np.float32)
    got_max, got_min = _run([scope.argmax(x, 1), scope.argmin(x, 1)])
    assert got_max.tolist() == ref_arg(x, 1).tolist() == [1, 0, 2, 0]
    assert got_min.tolist() == ref_arg(x, 1, False).tolist() == [1, 0, 0, 1]
    default = scope.argmax([[1, 5], [7, 2]], output_type=gf.int32)
    assert default.dtype == gf.int32 and _run(default).tolist() == [1, 0]  # axis None -> 0


@pytest.mark.parametrize("build, message", [
    (lambda s, x: s.argmax(x, 2), r"Expected dimension in the range \[-2, 2\), but got 2"),
    (lambda s, x: s.argmin(x, 1), r"Reduction axis 1 is empty in shape \[2,0\]"),
])
def test_arg_run_time_errors(scope, build, message):
    x = scope.placeholder(gf.float32, shape=None)
    out = build(scope, x)
    with pytest.raises(InvalidArgumentError, match=message) as info:
        _run(out, {x: np.zeros((2, 0), np.float32)})
    assert info.value.node_name == out.op.name


def test_arg_build_time_error(scope):
    with pytest.raises(InvalidArgumentError, match=r"Dimension \(3\) must be in the range "
                       r"\[-2, 2\)") as info:
        scope.argmax(np.zeros((2, 2)), 3, name="am")
    assert info.value.node_name == "am"


# -- TopKV2 --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_top_k_matches_the_reference(scope, dtype, k):
    x = _values((3, 2, 6), dtype, seed=k)
    values, indices = scope.top_k(x, k)
    assert values.shape.as_list() == [3, 2, k] and indices.dtype == gf.int32
    got_v, got_i = _run([values, indices])
    want_v, want_i = ref_top_k(x, k)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_v, want_v)


def test_top_k_nan_ranks_first(scope):
    x = np.array([1.0, np.nan, 3.0, np.inf, 3.0], np.float32)
    v, i = _run(list(scope.top_k(x, 3)))
    want_v, want_i = ref_top_k(x, 3)
    assert i.tolist() == want_i.tolist() == [1, 3, 2]
    # k == 1 is TF's argmax path: a NaN never wins there (TF 2.21: 3.0 of [1, nan, 3, 2])
    v, i = _run(list(scope.top_k(np.array([1.0, np.nan, 3.0, 2.0], np.float32), 1)))
    assert i.tolist() == [2] and v.tolist() == [3.0]


def test_top_k_errors(scope):
    with pytest.raises(InvalidArgumentError, match="input must have last dimension >= k = 4 "
                       "but is 3"):
        scope.top_k(np.zeros((2, 3)), 4)
    with pytest.raises(InvalidArgumentError, match="Need k >= 0, got -1"):
        scope.top_k(np.zeros(3), -1)
    k = scope.placeholder(gf.int32, shape=[])
    values, _ = scope.top_k(np.zeros((2, 3), np.float32), k, name="top")
    with pytest.raises(InvalidArgumentError, match="input must have at least k columns. Had 3, "
                       "needed 5") as info:
        _run(values, {k: 5})
    assert info.value.node_name == "top"
    with pytest.raises(InvalidArgumentError, match="Need k >= 0, got -2"):
        _run(values, {k: -2})


def test_top_k_gradient_scatters_into_the_input(scope):
    x = scope.placeholder(gf.float64, shape=[2, 5])
    values, _ = scope.top_k(x, 2)
    value = np.array([[1.0, 5.0, 3.0, 4.0, 2.0], [0.5, -1.0, 2.5, 0.1, 7.0]])
    for r in gf.gradient_check(values, [x], [value]):
        assert r.max_error < 1e-6
    (grad,) = gf.gradients(scope.reduce_sum(values), [x])
    assert _run(grad, {x: value}).tolist() == [[0, 1, 0, 1, 0], [0, 0, 1, 0, 1]]


# -- OneHot ------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [None, 0, 1, 2])
def test_one_hot_matches_the_reference(scope, axis):
    indices = np.array([[0, 3], [-1, 2]])
    out = scope.one_hot(indices, 4, axis=axis)
    assert out.dtype == gf.float32
    want = np.zeros((2, 2, 4), np.float32)
    for pos in np.ndindex(indices.shape):
        if 0 <= indices[pos] < 4:
            want[pos + (indices[pos],)] = 1
    want = np.moveaxis(want, -1, 2 if axis is None else axis)
    assert out.shape.as_list() == list(want.shape)
    np.testing.assert_array_equal(_run(out), want)


def test_one_hot_dtype_rules(scope):
    assert scope.one_hot([1], 2, on_value=5).dtype == gf.int32
    assert scope.one_hot([1], 2, off_value=np.float64(0.5)).dtype == gf.float64
    assert scope.one_hot([1], 2, dtype=gf.int64).dtype == gf.int64
    assert scope.one_hot([1], 2, on_value=3, dtype=gf.float32).dtype == gf.float32  # a hint
    assert _run(scope.one_hot([1, 0], 2, on_value=b"y", off_value=b"n")).tolist() == \
        [[b"n", b"y"], [b"y", b"n"]]
    with pytest.raises(TypeError, match="does not match dtype parameter"):
        scope.one_hot([1], 2, on_value=scope.constant(1.0, dtype=gf.float64), dtype=gf.float32)
    with pytest.raises(TypeError, match="does not match dtype"):
        scope.one_hot([1], 2, on_value=1, off_value=0.5)


def test_one_hot_errors(scope):
    with pytest.raises(InvalidArgumentError, match="non-negative"):
        scope.one_hot([1], -1)
    with pytest.raises(InvalidArgumentError, match="axis must be >= -1"):
        scope.one_hot([1], 2, axis=-2)
    depth = scope.placeholder(gf.int32, shape=None)
    out = scope.one_hot([1], depth, name="oh")
    with pytest.raises(InvalidArgumentError, match="depth must be non-negative, got: -3") as info:
        _run(out, {depth: -3})
    assert info.value.node_name == "oh"
    with pytest.raises(InvalidArgumentError, match=r"depth must be a scalar, but got: \[1\]"):
        _run(out, {depth: [3]})


# -- Where -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.bool_, np.float32, np.int64, np.complex64],
                         ids=lambda t: np.dtype(t).name)
def test_where_gives_the_coordinates_of_true_elements(scope, dtype):
    x = (np.arange(24).reshape(2, 3, 4) % 5 == 0).astype(dtype)
    out = scope.where(x)
    assert out.op.type == "Where" and out.dtype == gf.int64 and out.shape.as_list() == [None, 3]
    want = [list(pos) for pos in np.ndindex(x.shape) if x[pos]]
    assert _run(out).tolist() == want
    scalar = _run([scope.where(True), scope.where(np.zeros((0, 2), bool))])
    assert scalar[0].shape == (1, 0) and scalar[1].shape == (0, 2)


def test_where_with_x_and_y_is_select(scope):
    out = scope.where([True, False, True], [1, 2, 3], 0)
    assert out.op.type == "SelectV2" and _run(out).tolist() == [1, 0, 3]
    with pytest.raises(ValueError, match="both be non-None or both be None"):
        scope.where([True], [1])


# -- Split / SplitV ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES + [np.bool_], ids=lambda t: np.dtype(t).name)
def test_split_matches_numpy(scope, dtype):
    x = _values((4, 6), dtype)
    even = scope.split(x, 3, axis=1)
    sized = scope.split(x, [1, -1, 2], axis=-1)
    uneven = scope.split(x, np.array([3, 1], np.int64), axis=0)
    assert [p.shape.as_list() for p in sized] == [[4, 1], [4, 3], [4, 2]]
    got = _run(even + sized + uneven)
    want = np.split(x, 3, axis=1) + np.split(x, [1, 4], axis=1) + np.split(x, [3], axis=0)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype


def test_split_errors(scope):
    with pytest.raises(InvalidArgumentError, match=r"Number of ways to split should evenly "
                       r"divide the split dimension, but got split_dim 0 \(size = 5\) and "
                       r"num_split 2"):
        scope.split(np.zeros(5), 2)
    with pytest.raises(InvalidArgumentError, match="Determined shape must either match"):
        scope.split(np.zeros(5), [2, 2])
    with pytest.raises(InvalidArgumentError, match="There can only be one -1"):
        scope.split(np.zeros(5), [-1, -1])
    with pytest.raises(InvalidArgumentError, match=r"-input rank\(-1\) <= split_dim < input "
                       r"rank \(1\), but got 1"):
        scope.split(np.zeros(4), 2, axis=1)
    x = scope.placeholder(gf.float32, shape=None)
    parts = scope.split(x, 2, name="sp")
    with pytest.raises(InvalidArgumentError, match="evenly divide") as info:
        _run(parts, {x: np.zeros(3, np.float32)})
    assert info.value.node_name == "sp"


def test_split_gradients_concat(scope):
    x = scope.placeholder(gf.float64, shape=[3, 4])
    value = np.arange(12.0).reshape(3, 4)
    for parts in (scope.split(x, 2, axis=1), scope.split(x, [2, 1], axis=0)):
        y = scope.add_n([scope.reduce_sum(scope.mul(p, p)) for p in parts[:1]])
        for r in gf.gradient_check(y, [x], [value]):
            assert r.max_error < 1e-5


# -- Unique --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES + [np.bool_], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("out_idx", [gf.int32, gf.int64])
def test_unique_in_first_occurrence_order(scope, dtype, out_idx):
    x = _values(12, dtype, seed=3)
    y, idx = scope.unique(x, out_idx=out_idx)
    assert y.shape.as_list() == [None] and idx.shape.as_list() == [12] and idx.dtype == out_idx
    got_y, got_idx = _run([y, idx])
    want_y, want_idx = ref_unique(x)
    np.testing.assert_array_equal(got_y, want_y)
    np.testing.assert_array_equal(got_idx, want_idx)
    np.testing.assert_array_equal(got_y[got_idx], x)


def test_unique_nans_strings_and_errors(scope):
    x = np.array([np.nan, 1.0, np.nan, -0.0, 0.0], np.float32)
    y, idx = _run(list(scope.unique(x)))
    assert len(y) == 4 and idx.tolist() == [0, 1, 2, 3, 3] and np.signbit(y[3])
    s_y, s_idx = _run(list(scope.unique(np.array([b"b", b"a", b"b"], object))))
    assert s_y.tolist() == [b"b", b"a"] and s_idx.tolist() == [0, 1, 0]
    assert [v.shape for v in _run(list(scope.unique(np.zeros(0, np.int32))))] == [(0,), (0,)]
    with pytest.raises(InvalidArgumentError, match="rank 1 but is rank 2"):
        scope.unique(np.zeros((2, 2)))
    holder = scope.placeholder(gf.int32, shape=None)
    with pytest.raises(InvalidArgumentError, match="unique expects a 1D vector."):
        _run(scope.unique(holder)[0], {holder: np.zeros((2, 2), np.int32)})


def test_not_differentiable_as_tf():
    for name in ("ArgMax", "ArgMin", "OneHot", "Where", "Unique"):
        assert gf.op_def(name).differentiable is False
    for name in ("TopKV2", "Split", "SplitV"):
        assert gf.op_def(name).differentiable is True


# -- properties -------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-2, 2), min_size=1, max_size=9), st.integers(0, 9))
def test_top_k_and_arg_property(row, k):
    """top_k's first index is argmax's; its indices are distinct and name its values."""
    k = min(k, len(row))
    x = np.array(row, np.float32)
    scope = gf.Scope(gf.Graph())
    values, indices = scope.top_k(x, k)
    got_v, got_i, first = _run([values, indices, scope.argmax(x, 0)])
    assert len(set(got_i.tolist())) == k and (x[got_i] == got_v).all()
    np.testing.assert_array_equal(got_i, ref_top_k(x, k)[1])
    if k:
        assert got_i[0] == first


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-3, 3), max_size=10), st.integers(1, 4))
def test_one_hot_and_unique_property(indices, depth):
    """one_hot rows sum to 1 exactly where the index is in range; unique round-trips."""
    scope = gf.Scope(gf.Graph())
    x = np.array(indices, np.int64)
    hot, (y, idx) = scope.one_hot(x, depth), scope.unique(x)
    got, got_y, got_idx = _run([hot, y, idx])
    assert got.shape == (len(x), depth)
    np.testing.assert_array_equal(got.sum(axis=1), ((x >= 0) & (x < depth)).astype(np.float32))
    np.testing.assert_array_equal(got_y[got_idx], x)
    assert got_y.tolist() == list(dict.fromkeys(indices))


# -- compiled plans: later calls ---------------------------------------------------------------
def test_later_calls_of_a_callable(scope):
    x = scope.placeholder(gf.float32, shape=[None, 4])
    values, indices = scope.top_k(x, 2)
    fetches = [scope.argmax(x, 1), values, indices, scope.one_hot(scope.argmin(x, 1), 4),
               scope.where(scope.greater(x, 0.0)), *scope.split(x, 2, axis=1),
               scope.unique(scope.reshape(x, [-1]))[1]]
    with gf.Session(scope.graph) as sess:
        step = sess.make_callable(fetches, [x])
        for call in range(4):
            data = _values((3 + call, 4), np.float32, seed=call)
            got = step(data)
            np.testing.assert_array_equal(got[0], ref_arg(data, 1))
            np.testing.assert_array_equal(got[2], ref_top_k(data, 2)[1])
            np.testing.assert_array_equal(got[3], np.eye(4, dtype=np.float32)[
                ref_arg(data, 1, False)])
            np.testing.assert_array_equal(got[4], np.argwhere(data > 0))
            np.testing.assert_array_equal(got[6], data[:, 2:])
            np.testing.assert_array_equal(got[7], ref_unique(data.reshape(-1))[1])


# -- the GPU kernels -----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", GPU_KINDS)
def test_gpu_kernels_agree_with_the_cpu(kind):
    x = _values((4, 6), np.float32, seed=9)

    def build(device):
        s = gf.Scope(gf.Graph()).with_device(device)
        values, indices = s.top_k(x, 3)
        return [s.argmax(x, 1), s.argmin(x, 0), values, indices, s.one_hot([0, 5, -1], 4),
                s.where(x > 0), *s.split(x, [1, 5], axis=1), *s.unique(x.reshape(-1))]
    cpu = _run(build("/cpu:0"))
    gpu = _run(build("/gpu:0"), devices=gpu_session_devices(kind))
    for c, g in zip(cpu, gpu):
        assert c.dtype == g.dtype
        np.testing.assert_array_equal(g, c)
