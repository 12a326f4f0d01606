"""gf.export_onnx: every exported graph runs in ONNX's reference evaluator (and in
onnxruntime where installed) with graphflow's Session results, bit for bit, duplicates
and empty inputs included; the tricky semantics are also checked against the plain
Python-loop references (TensorFlow's definitions)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError, UnimplementedError

from support.ref_partition import ref_dynamic_partition, ref_dynamic_stitch
from support.ref_scatter import gather_nd as ref_gather_nd, scatter as ref_scatter, \
    scatter_nd as ref_scatter_nd

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

try:
    import onnxruntime
except ImportError:  # the reference evaluator still judges
    onnxruntime = None

NUMERIC = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8,
           np.uint16, np.uint32, np.uint64]


def _plain(value: np.ndarray) -> np.ndarray:
    """Strings as bytes (onnxruntime returns str), everything else as it is."""
    value = np.asarray(value)
    if value.dtype.kind in "OU":
        return np.array([v.encode() if isinstance(v, str) else bytes(v) for v in value.ravel()],
                        object).reshape(value.shape)
    return value


def backends(model, path, ort: bool = True) -> dict:
    """name -> run(fetch names, feeds) for each ONNX backend present (onnxruntime only
    with ``ort``)."""
    found = {"reference": ReferenceEvaluator(model).run}
    if onnxruntime is not None and ort:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

        def run(names, feeds):  # onnxruntime takes (and returns) strings as str
            feeds = {k: v.astype(str) if v.dtype == object else v for k, v in feeds.items()}
            return session.run(names, feeds)
        found["onnxruntime"] = run
    return found


def check(graph: gf.Graph, feeds: dict, outputs: list, tmp_path, expected=None, opset=18,
          ort=True):
    """Export, run in graphflow and in every ONNX backend (onnxruntime unless ``ort`` is
    false); all must agree exactly (and with ``expected``, an independent reference)."""
    # the plain kernels (no fusion compiles): results are the same bits by contract
    with gf.Session(graph, gf.SessionConfig(optimize=False)) as sess:
        want = [_plain(w) for w in sess.run(outputs, feeds)]
    if expected is not None:
        for out, w, e in zip(outputs, want, expected):
            assert w.dtype == np.asarray(e).dtype and w.shape == np.shape(e), out.name
            np.testing.assert_array_equal(w, _plain(e), err_msg=f"graphflow: {out.name}")
    path = tmp_path / "model.onnx"
    model = gf.export_onnx(graph, list(feeds), outputs, path, opset=opset)
    assert [o.name for o in model.graph.output] == [o.name for o in outputs]
    names, feed = [o.name for o in outputs], {k.name: v for k, v in feeds.items()}
    for backend, run in backends(model, path, ort).items():
        got = run(names, feed)
        for out, w, g in zip(outputs, want, got):
            g = _plain(g)
            assert (g.dtype, g.shape) == (w.dtype, w.shape), f"{backend}: {out.name}"
            np.testing.assert_array_equal(g, w, err_msg=f"{backend}: {out.name}")
    return model


def values(dtype, shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype is bool or dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype is object:
        return np.array([f"s{v}".encode() for v in rng.integers(0, 99, int(np.prod(shape)))],
                        object).reshape(shape)
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 10).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -50), min(info.max, 50), shape, endpoint=True).astype(dtype)


# -- the scatter family -------------------------------------------------------------------------
SCATTERS = {"TensorScatterUpdate": "update", "TensorScatterAdd": "add", "TensorScatterSub": "sub",
            "TensorScatterMin": "min", "TensorScatterMax": "max"}
# depth-2 tuples into [4, 3, 2], duplicates (1, 2) x3 and (0, 0) x2, in a [2, 3] batch
DUP_INDICES = np.array([[[1, 2], [0, 0], [1, 2]], [[3, 1], [0, 0], [1, 2]]])


#: onnxruntime 1.32 has no float16 ScatterND with reduction "add" (the reference
#: evaluator still checks those graphs; float32 sums would round differently)
ORT_CANNOT_ADD = (np.float16,)


@pytest.mark.parametrize("dtype", NUMERIC)
def test_tensor_scatter_duplicates(tmp_path, dtype):
    """Each TensorScatter* op with duplicate tuples, against the loop reference."""
    index_dtype = (np.int32, np.int64)[NUMERIC.index(dtype) % 2]  # both, over the dtypes
    tensor, updates = values(dtype, (4, 3, 2), 1), values(dtype, (2, 3, 2), 2)
    if np.dtype(dtype).kind == "u":
        tensor = tensor + np.asarray(100, dtype)  # no wrap-around below zero in the test data
    indices = DUP_INDICES.astype(index_dtype)
    sums = ["TensorScatterAdd", "TensorScatterSub"]
    groups = [list(SCATTERS)] if dtype not in ORT_CANNOT_ADD else \
        [[op for op in SCATTERS if op not in sums], sums]
    for k, op_types in enumerate(groups):
        g = gf.Graph()
        scope = gf.Scope(g)
        t = scope.placeholder(gf.as_dtype(dtype), shape=[None, 3, 2])
        i = scope.placeholder(gf.as_dtype(index_dtype), shape=[2, 3, 2])
        u = scope.placeholder(gf.as_dtype(dtype), shape=None)
        outs = [getattr(scope, gf.op_def(op).builder_name)(t, i, u) for op in op_types]
        (tmp_path / str(k)).mkdir()
        check(g, {t: tensor, i: indices, u: updates}, outs, tmp_path / str(k),
              [ref_scatter(tensor, indices, updates, SCATTERS[op]) for op in op_types],
              ort=op_types != sums)


@pytest.mark.parametrize("dtype", [bool, object])
def test_tensor_scatter_update_bool_string(scope, tmp_path, dtype):
    tensor, updates = values(dtype, (4, 3, 2), 1), values(dtype, (2, 3, 2), 2)
    t, u = scope.placeholder(gf.as_dtype(dtype)), scope.placeholder(gf.as_dtype(dtype))
    i = scope.placeholder(gf.int32)
    out = scope.tensor_scatter_update(t, i, u)
    indices = DUP_INDICES.astype(np.int32)
    check(scope.graph, {t: tensor, i: indices, u: updates}, [out], tmp_path,
          [ref_scatter(tensor, indices, updates, "update")])


@pytest.mark.parametrize("dtype", NUMERIC + [bool])
def test_scatter_nd_sums_duplicates(scope, tmp_path, dtype):
    indices = np.array([[4], [3], [1], [7], [3], [3], [1]], np.int64)
    updates = values(dtype, (7, 2), 3)
    i = scope.placeholder(gf.int64, shape=[None, 1])
    u = scope.placeholder(gf.as_dtype(dtype), shape=[None, 2])
    out = scope.scatter_nd(i, u, np.array([8, 2], np.int64))
    expected = ref_scatter_nd(indices, updates, (8, 2)) if dtype is not bool else \
        ref_scatter_nd(indices, updates.astype(np.int32), (8, 2)) > 0  # bools OR
    check(scope.graph, {i: indices, u: updates}, [out], tmp_path, [expected],
          ort=dtype not in ORT_CANNOT_ADD)


@pytest.mark.parametrize("op_type", ["ScatterNd"] + list(SCATTERS))
def test_scatter_empty_indices(scope, tmp_path, op_type):
    indices, updates = np.zeros((0, 2), np.int32), np.zeros((0, 2), np.float32)
    tensor = values(np.float32, (3, 2, 2), 4)
    i, u = scope.placeholder(gf.int32), scope.placeholder(gf.float32)
    if op_type == "ScatterNd":
        out = scope.scatter_nd(i, u, np.array([3, 2, 2], np.int32))
        expected = np.zeros((3, 2, 2), np.float32)
        feeds = {i: indices, u: updates}
    else:
        t = scope.placeholder(gf.float32)
        out = getattr(scope, gf.op_def(op_type).builder_name)(t, i, u)
        expected, feeds = tensor, {t: tensor, i: indices, u: updates}
    check(scope.graph, feeds, [out], tmp_path, [expected])


# tuples into [4, 3, 2]: bad ones (negative, past the end) among duplicates
IGNORED_INDICES = np.array([[[1, 2], [-1, 0], [1, 2]], [[3, 3], [0, 0], [4, 0]]])


@pytest.mark.parametrize("op_type", ["ScatterNd"] + list(SCATTERS))
def test_bad_indices_policy_ignore_skips_bad_updates(scope, tmp_path, op_type):
    tensor, updates = values(np.int32, (4, 3, 2), 20), values(np.int32, (2, 3, 2), 21)
    t, i, u = (scope.placeholder(d) for d in (gf.int32, gf.int64, gf.int32))
    if op_type == "ScatterNd":
        out = scope.scatter_nd(i, u, np.array([4, 3, 2], np.int64), bad_indices_policy="IGNORE")
        expected = ref_scatter_nd(IGNORED_INDICES, updates, (4, 3, 2), "IGNORE")
        feeds = {i: IGNORED_INDICES, u: updates}
    else:
        out = getattr(scope, gf.op_def(op_type).builder_name)(t, i, u,
                                                               bad_indices_policy="IGNORE")
        expected = ref_scatter(tensor, IGNORED_INDICES, updates, SCATTERS[op_type], "IGNORE")
        feeds = {t: tensor, i: IGNORED_INDICES, u: updates}
    check(scope.graph, feeds, [out], tmp_path, [expected])


@pytest.mark.parametrize("batch_dims", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, bool, object])
def test_gather_nd_ignore_gives_zeros_for_bad_tuples(scope, tmp_path, dtype, batch_dims):
    params = values(dtype, (2, 3, 4), 22)
    indices = np.array([[[2, 1], [-1, 0], [0, 4]], [[3, 0], [1, 3], [0, 0]]], np.int32)
    if batch_dims:
        indices = indices[..., :1] % 5 - 1  # [2, 3, 1]: -1 and 3 are bad in dim 1
    p, i = scope.placeholder(gf.as_dtype(dtype)), scope.placeholder(gf.int32)
    out = scope.gather_nd(p, i, batch_dims=batch_dims, bad_indices_policy="IGNORE")
    check(scope.graph, {p: params, i: indices}, [out], tmp_path,
          [ref_gather_nd(params, indices, batch_dims, "IGNORE")])


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy's, wrapping
def test_integer_overflow_wraps_as_in_tensorflow(scope, tmp_path):
    """Scatter sums and AddN wrap around (and int64 stays exact past 2**53) in every
    backend, as TensorFlow's kernels."""
    t, i, u = (scope.placeholder(d) for d in (gf.int32, gf.int32, gf.int32))
    t64, u64 = scope.placeholder(gf.int64), scope.placeholder(gf.int64)
    outs = [scope.tensor_scatter_add(t, i, u), scope.scatter_nd(i, u, [2]),
            scope.tensor_scatter_add(t64, i, u64), scope.add_n([t, t, t])]
    feeds = {t: np.array([2**31 - 5, 0], np.int32), i: np.array([[0], [0], [1]], np.int32),
             u: np.array([3, 4, -2**31], np.int32), t64: np.array([2**60 + 1, 0], np.int64),
             u64: np.array([3, 2**62, 7], np.int64)}
    with np.errstate(over="ignore"):
        expected = [ref_scatter(feeds[t], feeds[i], feeds[u], "add"),
                    ref_scatter_nd(feeds[i], feeds[u], (2,)),
                    ref_scatter(feeds[t64], feeds[i], feeds[u64], "add"), feeds[t] * 3]
    check(scope.graph, feeds, outs, tmp_path, expected)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.uint64])
def test_integer_sum_wraps_and_stays_exact(scope, tmp_path, dtype):
    """Integer Sum of values near a third of the type's max: past 2**53 and wrapping,
    over constant axes in any order, kept or not, and over an empty dim."""
    x = scope.placeholder(gf.as_dtype(dtype), shape=[None, 3, None])
    outs = [scope.sum(x, [1]), scope.sum(x, [0, -1], keep_dims=True), scope.sum(x, -1),
            scope.sum(scope.slice(x, [0, 0, 0], [0, -1, -1]), [0])]
    xv = np.arange(24, dtype=np.int64).reshape(2, 3, 4).astype(dtype) + np.iinfo(dtype).max // 3
    with np.errstate(over="ignore"):
        expected = [xv.sum(1, dtype=dtype), xv.sum((0, 2), dtype=dtype, keepdims=True),
                    xv.sum(-1, dtype=dtype), xv[:0].sum(0, dtype=dtype)]
    check(scope.graph, {x: xv}, outs, tmp_path, expected)


@pytest.mark.parametrize("op_type", ["TensorScatterMin", "TensorScatterMax"])
def test_scatter_min_max_nan_update_never_wins(scope, tmp_path, op_type):
    tensor = np.array([1.0, 2.0, np.nan, 4.0], np.float32)
    indices = np.array([[0], [0], [1], [2]], np.int32)
    updates = np.array([np.nan, 0.5, np.nan, 3.0], np.float32)
    t, i, u = (scope.placeholder(d) for d in (gf.float32, gf.int32, gf.float32))
    out = getattr(scope, gf.op_def(op_type).builder_name)(t, i, u)
    check(scope.graph, {t: tensor, i: indices, u: updates}, [out], tmp_path,
          [ref_scatter(tensor, indices, updates, SCATTERS[op_type])])


@pytest.mark.parametrize("batch_dims", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.uint16, bool, object])
def test_gather_nd_batch_dims(scope, tmp_path, batch_dims, dtype):
    index_dtype = (np.int16, np.int32, np.int64)[batch_dims]
    params = values(dtype, (2, 3, 4, 5), 5)
    depth = 2 if batch_dims < 2 else 1
    batch = params.shape[:batch_dims]
    rng = np.random.default_rng(6)
    bounds = params.shape[batch_dims:batch_dims + depth]
    indices = np.stack([rng.integers(0, b, batch + (3,)) for b in bounds], -1).astype(index_dtype)
    p, i = scope.placeholder(gf.as_dtype(dtype)), scope.placeholder(gf.as_dtype(index_dtype))
    out = scope.gather_nd(p, i, batch_dims=batch_dims)
    check(scope.graph, {p: params, i: indices}, [out], tmp_path,
          [ref_gather_nd(params, indices, batch_dims)])


@pytest.mark.parametrize("indices_shape", [(0,), (2, 0), (0, 0)])
def test_gather_nd_empty_tuples_take_all_of_params(scope, tmp_path, indices_shape):
    params, indices = values(np.float32, (3, 2), 23), np.zeros(indices_shape, np.int64)
    p, i = scope.placeholder(gf.float32), scope.constant(indices)
    check(scope.graph, {p: params}, [scope.gather_nd(p, i)], tmp_path,
          [ref_gather_nd(params, indices)])


# -- partition and stitch --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, bool, object])
def test_dynamic_partition_multi_dim(scope, tmp_path, dtype):
    data = values(dtype, (2, 3, 2), 7)
    partitions = np.array([[0, 2, 0], [3, 0, 2]], np.int32)  # partition 1 stays empty
    d = scope.placeholder(gf.as_dtype(dtype), shape=[None, 3, 2])
    p = scope.placeholder(gf.int32, shape=[None, 3])
    outs = scope.dynamic_partition(d, p, num_partitions=4)
    check(scope.graph, {d: data, p: partitions}, outs, tmp_path,
          ref_dynamic_partition(data, partitions, 4))


def test_dynamic_partition_empty(scope, tmp_path):
    data, partitions = np.zeros((0, 3), np.float32), np.zeros((0,), np.int32)
    d, p = scope.placeholder(gf.float32), scope.placeholder(gf.int32)
    outs = scope.dynamic_partition(d, p, num_partitions=2)
    check(scope.graph, {d: data, p: partitions}, outs, tmp_path,
          ref_dynamic_partition(data, partitions, 2))


STITCH_INDICES = [np.array([[6, 0], [2, 6]], np.int32), np.array([2, 9, 0], np.int32)]


@pytest.mark.parametrize("op_type", ["DynamicStitch", "ParallelDynamicStitch"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8, np.uint16, bool,
                                   object])
def test_dynamic_stitch_last_write_wins_gaps_zero(scope, tmp_path, op_type, dtype):
    """Sized max index + 1 = 10 (not the 7 rows given), rows 1, 3-5, 7, 8 zero,
    duplicates 0, 2, 6 won by the later (m, i)."""
    data = [values(dtype, (2, 2, 3), 8), values(dtype, (3, 3), 9)]
    ins = [scope.placeholder(gf.int32, shape=[None, 2]), scope.placeholder(gf.int32)]
    ds = [scope.placeholder(gf.as_dtype(dtype)) for _ in data]
    out = getattr(scope, gf.op_def(op_type).builder_name)(ins, ds)
    check(scope.graph, {**dict(zip(ins, STITCH_INDICES)), **dict(zip(ds, data))}, [out], tmp_path,
          [ref_dynamic_stitch(STITCH_INDICES, data)])


def test_dynamic_stitch_all_empty(scope, tmp_path):
    indices = [np.zeros((0,), np.int32), np.zeros((2, 0), np.int32)]
    data = [np.zeros((0, 4), np.float32), np.zeros((2, 0, 4), np.float32)]
    ins = [scope.placeholder(gf.int32) for _ in indices]
    ds = [scope.placeholder(gf.float32) for _ in data]
    out = scope.dynamic_stitch(ins, ds)
    check(scope.graph, {**dict(zip(ins, indices)), **dict(zip(ds, data))}, [out], tmp_path,
          [ref_dynamic_stitch(indices, data)])


def test_partition_stitch_round_trip(scope, tmp_path):
    """The classic pattern: partition rows, transform each part, stitch them back."""
    x = scope.placeholder(gf.float32, shape=[None, 2])
    parts = scope.placeholder(gf.int32, shape=[None])
    rows = scope.range(0, scope.size(parts), 1)
    pieces = scope.dynamic_partition(x, parts, num_partitions=2)
    where = scope.dynamic_partition(rows, parts, num_partitions=2)
    out = scope.dynamic_stitch(where, [scope.mul(pieces[0], 2.0), scope.neg(pieces[1])])
    data, ids = values(np.float32, (7, 2), 10), np.array([1, 0, 0, 1, 1, 0, 1], np.int32)
    expected = np.where(ids[:, None] == 0, data * 2, -data)
    check(scope.graph, {x: data, parts: ids}, [out], tmp_path, [expected])


# -- random indices with duplicates ----------------------------------------------------------
@settings(max_examples=12, deadline=None)
@given(st.data())
def test_random_duplicates(tmp_path_factory, data):
    """Random index lists, duplicates likely: last write wins (update, stitch), sums
    (add, ScatterNd), max, and partitions, in one graph."""
    rows = data.draw(st.integers(1, 5), label="rows")
    n = data.draw(st.integers(0, 8), label="n")
    ids = np.array(data.draw(st.lists(st.integers(0, rows - 1), min_size=n, max_size=n)),
                   np.int32)
    split = data.draw(st.integers(0, n), label="split")
    g = gf.Graph()
    scope = gf.Scope(g)
    tensor, updates = values(np.float32, (rows, 2), n), values(np.float32, (n, 2), n + 1)
    counts = values(np.int32, (n, 2), n + 2)
    t, i, u = (scope.placeholder(d) for d in (gf.float32, gf.int32, gf.float32))
    c = scope.placeholder(gf.int32)
    i0, i1 = scope.placeholder(gf.int32), scope.placeholder(gf.int32)
    d0, d1 = scope.placeholder(gf.float32), scope.placeholder(gf.float32)
    outs = [scope.tensor_scatter_update(t, i, u), scope.tensor_scatter_max(t, i, u),
            scope.tensor_scatter_add(scope.cast(t, gf.int32), i, c),
            scope.scatter_nd(i, c, np.array([rows, 2], np.int32)),
            scope.dynamic_stitch([i0, i1], [d0, d1])]
    outs += scope.dynamic_partition(u, scope.floor_mod(scope.reshape(i, [-1]), 3), 3)
    feeds = {t: tensor, i: ids[:, None], u: updates, c: counts, i0: ids[:split],
             i1: ids[split:], d0: updates[:split], d1: updates[split:]}
    check(g, feeds, outs, tmp_path_factory.mktemp("onnx"),
          [ref_scatter(tensor, ids[:, None], updates, "update"),
           ref_scatter(tensor, ids[:, None], updates, "max"),
           ref_scatter(tensor.astype(np.int32), ids[:, None], counts, "add"),
           ref_scatter_nd(ids[:, None], counts, (rows, 2)),
           ref_dynamic_stitch([ids[:split], ids[split:]], [updates[:split], updates[split:]])]
          + ref_dynamic_partition(updates, ids % 3, 3))


# -- math and array ops ----------------------------------------------------------------------
def _x(scope, dtype=gf.float32):
    return scope.placeholder(dtype, shape=[None, 3])


MATH = {
    "add_sub_mul_div": lambda s, x, y: [s.add(x, y), s.sub(x, y), s.mul(x, y), s.real_div(x, y)],
    "max_min": lambda s, x, y: [s.maximum(x, y), s.minimum(x, y)],
    "compare": lambda s, x, y: [s.equal(x, y), s.not_equal(x, y), s.less(x, y),
                                s.greater(x, y)],
    "logic_select": lambda s, x, y: [s.select_v2(s.logical_and(s.less(x, y), s.logical_not(
        s.logical_or(s.greater(x, 5.0), s.equal(x, y)))), x, y)],
    "neg_identity_conj": lambda s, x, y: [s.neg(x), s.identity(x), s.stop_gradient(y),
                                          s.conj(x)],
    "add_n": lambda s, x, y: [s.add_n([x, y, x])],
    "cast": lambda s, x, y: [s.cast(x, gf.int32), s.cast(s.greater(x, y), gf.float32),
                             s.cast(x, gf.uint8)],
    "shape_size_rank": lambda s, x, y: [s.shape(x), s.shape(x, out_type=gf.int64), s.size(y),
                                        s.rank(x)],
    "reshape": lambda s, x, y: [s.reshape(x, [-1]), s.reshape(y, [3, -1]),
                                s.reshape(s.slice(x, [0, 0], [0, -1]), [0, 3])],
    "fill_like_broadcast": lambda s, x, y: [s.fill([2, 3], 1.5), s.zeros_like(x),
                                            s.ones_like(y), s.broadcast_to(s.slice(
                                                x, [0, 0], [1, -1]), s.shape(y))],
    "concat_pack_unpack": lambda s, x, y: [s.concat_v2([x, y], 1), s.concat_v2([x, y], -2),
                                           s.pack([x, y], axis=1), s.pack([x], axis=-1)]
    + s.unpack(x, num=3, axis=1)[:2],
    "expand_squeeze": lambda s, x, y: [s.expand_dims(x, -1), s.expand_dims(x, 0),
                                       s.squeeze(s.expand_dims(x, 1), [1]),
                                       s.squeeze(s.reshape(x, [1, -1, 1, 3]))],
    "pad_slice": lambda s, x, y: [s.pad(x, [[1, 0], [0, 2]]), s.slice(x, [1, 0], [-1, 2]),
                                  s.slice(y, [0, 1], [2, 1])],
    "sum": lambda s, x, y: [s.sum(s.cast(x, gf.int32), [1]),  # integers: no rounding
                            s.sum(s.cast(x, gf.int64), [0], keep_dims=True), s.sum(x, []),
                            s.sum(s.cast(y, gf.int32), [-1, 0])],
    "range": lambda s, x, y: [s.range(0, s.size(x), 2), s.range(1.0, 2.0, 0.25)],
}


@pytest.mark.parametrize("name", list(MATH))
def test_math_and_array_ops(scope, tmp_path, name):
    x, y = _x(scope), _x(scope)
    outs = MATH[name](scope, x, y)
    xv, yv = values(np.float32, (4, 3), 11), values(np.float32, (4, 3), 12)
    yv[0] = xv[0]  # some equal elements
    yv[yv == 0] = 1.0
    check(scope.graph, {x: xv, y: yv}, outs, tmp_path)


# every op graphflow accepts for a dtype, one graph per dtype; x is [4, 3]
SWEEP = {
    "pad": lambda s, x: s.pad(x, [[1, 0], [0, 2]]),
    "concat": lambda s, x: s.concat_v2([x, x], 1),
    "pack_unpack": lambda s, x: s.unpack(s.pack([x, x], axis=1), num=2, axis=1)[1],
    "transpose": lambda s, x: s.transpose(x, [1, 0]),
    "tile": lambda s, x: s.tile(x, [2, 1]),
    "reshape": lambda s, x: s.reshape(x, [-1]),
    "slice": lambda s, x: s.slice(x, [1, 0], [-1, 2]),
    "strided": lambda s, x: s.strided_slice(x, np.array([0, 2], np.int32),
                                            np.array([4, 0], np.int32),
                                            np.array([2, -1], np.int32)),
    "expand_squeeze": lambda s, x: s.squeeze(s.expand_dims(x, 1)),
    "zeros_like": lambda s, x: s.zeros_like(x),
    "ones_like": lambda s, x: s.ones_like(x),
    "fill": lambda s, x: s.fill([2, 2], s.reshape(s.slice(x, [0, 0], [1, 1]), [])),
    "broadcast": lambda s, x: s.broadcast_to(s.slice(x, [0, 0], [1, -1]), [3, 3]),
    "select": lambda s, x: s.select_v2(np.array([True, False, True]), x,
                                       s.slice(x, [1, 0], [1, -1])),
    "gather": lambda s, x: s.gather_v2(x, [2, 0], 1),
    "equal": lambda s, x: s.not_equal(x, s.slice(x, [1, 0], [1, -1])),
    "add_sub_mul": lambda s, x: s.mul(s.sub(s.add(x, x), x), x),
    "max_min": lambda s, x: s.minimum(s.maximum(x, s.slice(x, [1, 0], [1, -1])), x),
    "neg": lambda s, x: s.neg(x),
    "less_greater": lambda s, x: s.logical_and(s.less(x, 5), s.greater(x, -5)),
    "sum_prod": lambda s, x: s.add(s.sum(x, [1]), s.prod(s.cast(s.less(x, 0), x.dtype), [1])),
    "add_n": lambda s, x: s.add_n([x, x, x]),
    "cast": lambda s, x: s.cast(s.cast(x, gf.float64), gf.int16),
    "range": lambda s, x: s.range(s.cast(0, x.dtype), s.cast(5, x.dtype), s.cast(2, x.dtype)),
    "floor_div_mod": lambda s, x: s.add(s.floor_div(x, s.add(s.ones_like(x), s.ones_like(x))),
                                        s.floor_mod(x, s.fill([3], s.cast(3, x.dtype)))),
}
#: (op, dtype) that onnxruntime 1.32 cannot run; the reference evaluator checks them
ORT_CANNOT = {("range", "float16")}


@pytest.mark.parametrize("dtype", [bool, object] + NUMERIC)
def test_array_and_math_ops_over_dtypes(tmp_path, dtype):
    """Where onnxruntime lacks a kernel for a type (Where, Max, Pad, ReduceSum/Prod, Range
    on small or unsigned ints), the exporter computes in a wider type with the same bits."""
    outs = {}
    for ort_ok in (True, False):
        g = gf.Graph()
        scope = gf.Scope(g)
        x = scope.placeholder(gf.as_dtype(dtype), shape=[None, 3])
        for name, build in SWEEP.items():
            if ((name, np.dtype(dtype).name) not in ORT_CANNOT) != ort_ok:
                continue
            try:
                outs[name] = build(scope, x)
            except (InvalidArgumentError, gf.errors.NotFoundError, TypeError):
                continue  # graphflow has no such op for this dtype
        fetched = [o for o in outs.values() if o.graph is g]
        if not fetched:
            continue
        model = check(g, {x: values(dtype, (4, 3), 19)}, fetched, tmp_path, opset=19,
                      ort=ort_ok)
        assert len({t.name for t in model.graph.initializer}) == len(model.graph.initializer)
    assert len(outs) >= 6  # every dtype has at least the shape-only ops


# TensorFlow's glue ops (imported graphs carry them): x is [4, 5, 6]
STRIDED = {  # name: (begin, end, strides, masks)
    "implicit_ellipsis": ([1, 0], [3, 4], [1, 2], {}),
    "begin_end_masks": ([0, 0], [2, -1], [1, 1], {"begin_mask": 1, "end_mask": 2}),
    "reverse": ([-1], [0], [-1], {}),
    "reverse_masked_step_2": ([0, 0], [0, 0], [-2, -1], {"begin_mask": 3, "end_mask": 3}),
    "shrink_last": ([1, -1], [2, 0], [1, 1], {"shrink_axis_mask": 3}),
    "ellipsis_new_axis": ([0, 0, 1], [0, 0, 3], [1, 1, 1],
                          {"ellipsis_mask": 1, "new_axis_mask": 2}),
    "new_axis_then_shrink": ([0, 2], [0, 3], [1, 1], {"new_axis_mask": 1,
                                                      "shrink_axis_mask": 2}),
    "ellipsis_middle": ([1, 0, -1], [4, 0, 0], [1, 1, 1],
                        {"ellipsis_mask": 2, "shrink_axis_mask": 4}),
    "clamped": ([-100, 2], [100, -100], [1, -1], {}),
}


@pytest.mark.parametrize("name", list(STRIDED))
def test_strided_slice(scope, tmp_path, name):
    begin, end, strides, masks = STRIDED[name]
    x = scope.placeholder(gf.float32, shape=[None, 5, 6])
    out = scope.strided_slice(x, np.array(begin, np.int32), np.array(end, np.int32),
                              np.array(strides, np.int32), **masks)
    check(scope.graph, {x: values(np.float32, (4, 5, 6), 16)}, [out], tmp_path)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, object])
def test_gather_transpose_tile_prod(scope, tmp_path, dtype):
    x = scope.placeholder(gf.as_dtype(dtype), shape=[None, 5, 3])
    ids = scope.placeholder(gf.int32, shape=[None, 2])
    batch_ids = scope.placeholder(gf.int64, shape=[4, None])
    outs = [scope.gather_v2(x, ids, 0), scope.gather_v2(x, ids, 1), scope.gather_v2(x, ids, -1),
            scope.gather_v2(x, batch_ids, 1, batch_dims=1),
            scope.gather_v2(x, batch_ids, -1, batch_dims=1),
            scope.gather_v2(x, batch_ids, 2, batch_dims=-1),
            scope.transpose(x, [2, 0, 1]), scope.tile(x, [2, 1, 3])]
    small = scope.placeholder(gf.int32, shape=[None, 5, 3])  # products that do not overflow
    outs += [scope.prod(scope.cast(small, gf.int64), [1]),
             scope.prod(small, [0, 2], keep_dims=True)]
    check(scope.graph, {x: values(dtype, (4, 5, 3), 17), small: (values(np.int32, (4, 5, 3), 18)
                                                                   % 7 - 3),
                        ids: np.array([[2, 0], [2, 2], [1, 0]], np.int32),
                        batch_ids: np.array([[0, 2], [1, 1], [2, 0], [0, 0]], np.int64)},
          outs, tmp_path)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_floor_div_mod(scope, tmp_path, dtype):
    x, y = scope.placeholder(gf.as_dtype(dtype)), scope.placeholder(gf.as_dtype(dtype))
    outs = [scope.floor_div(x, y), scope.floor_mod(x, y)]
    xv = values(dtype, (40,), 13)
    yv = values(dtype, (40,), 14)
    yv[yv == 0] = 3
    if np.dtype(dtype).kind == "i":
        xv[:2], yv[:2] = np.iinfo(dtype).min, -1  # MIN // -1 wraps to MIN, as TensorFlow's
        yv[2] = -1
    with np.errstate(over="ignore"):  # MIN // -1
        expected = [np.floor_divide(xv, yv), np.mod(xv, yv)]
    check(scope.graph, {x: xv, y: yv}, outs, tmp_path, expected)


def test_strings_equal_at_opset_19(scope, tmp_path):
    x, y = scope.placeholder(gf.string), scope.placeholder(gf.string)
    outs = [scope.equal(x, y), scope.not_equal(x, y)]
    xv = np.array([b"a", b"b", b""], object)
    yv = np.array([b"a", b"c", b""], object)
    check(scope.graph, {x: xv, y: yv}, outs, tmp_path, opset=19)
    with pytest.raises(UnimplementedError, match="opset 19"):
        gf.export_onnx(scope.graph, [x, y], outs, None, opset=18)


def test_constants_and_fed_intermediates(scope, tmp_path):
    """Constants become initializers; any tensor can be an input, as in Session.run."""
    c = scope.constant(np.array([[1, 2], [3, 4]], np.int64))
    words = scope.constant(np.array([b"x", "\u00e9\u4e2d".encode()], object))
    hidden = scope.mul(c, 3)
    out = scope.add(hidden, c)
    check(scope.graph, {hidden: np.full((2, 2), 7, np.int64)}, [out, words], tmp_path)


# -- run-time errors -----------------------------------------------------------------------------
BAD_RUNS = {  # name: (build(scope, *placeholders), feeds): graphflow raises on each
    "scatter_negative": (lambda s, t, i: s.tensor_scatter_add(t, i, [1.0]),
                         [np.zeros(4, np.float32), np.array([[-1]], np.int32)]),
    "update_past_end": (lambda s, t, i: s.tensor_scatter_update(t, i, [1.0]),
                        [np.zeros(4, np.float32), np.array([[4]], np.int64)]),
    "scatter_nd_negative": (lambda s, i: s.scatter_nd(i, [1.0], [3]),
                            [np.array([[-2]], np.int32)]),
    "gather_nd_negative": (lambda s, p, i: s.gather_nd(p, i),
                           [np.zeros((2, 2), np.float32), np.array([[0, -1]], np.int32)]),
    "gather_v2_negative": (lambda s, p, i: s.gather_v2(p, i, 0),
                           [np.zeros((2, 2), np.float32), np.array([-1], np.int32)]),
    "stitch_negative": (lambda s, i: s.dynamic_stitch([i], [[1.0, 2.0]]),
                        [np.array([3, -1], np.int32)]),
    "partition_out_of_range": (lambda s, d, p: s.dynamic_partition(d, p, num_partitions=2)[0],
                               [np.zeros(3, np.float32), np.array([0, 2, 1], np.int32)]),
    "partition_negative": (lambda s, d, p: s.dynamic_partition(d, p, num_partitions=2)[1],
                           [np.zeros(3, np.float32), np.array([0, -1, 1], np.int32)]),
    "floor_div_by_zero": (lambda s, x, y: s.floor_div(x, y),
                          [np.array([7, 1], np.int32), np.array([2, 0], np.int32)]),
    "floor_mod_by_zero": (lambda s, x, y: s.floor_mod(x, y),
                          [np.array([7], np.int64), np.array([0], np.int64)]),
    "slice_negative_begin": (lambda s, x, b: s.slice(x, b, [1]),
                             [np.arange(4, dtype=np.float32), np.array([-1], np.int32)]),
    "slice_past_the_end": (lambda s, x, n: s.slice(x, [2], n),
                           [np.arange(4, dtype=np.float32), np.array([3], np.int64)]),
    "pad_negative": (lambda s, x, p: s.pad(x, p),
                     [np.arange(4, dtype=np.float32), np.array([[0, -1]], np.int32)]),
    "range_zero_delta": (lambda s, a, b, c: s.range(a, b, c),
                         [np.array(0, np.int32), np.array(5, np.int32), np.array(0, np.int32)]),
    "range_away_from_limit": (lambda s, a, b, c: s.range(a, b, c),
                              [np.array(0.0, np.float32), np.array(5.0, np.float32),
                               np.array(-1.0, np.float32)]),
}


@pytest.mark.parametrize("name", list(BAD_RUNS))
def test_what_graphflow_refuses_fails_the_onnx_run(scope, tmp_path, name):
    """ONNX cannot raise TensorFlow's error, but the lowering turns each bad index (and
    zero divisor) into an out-of-bounds index, which ONNX makes an error: the run fails."""
    build, feeds = BAD_RUNS[name]
    phs = [scope.placeholder(gf.as_dtype(v.dtype)) for v in feeds]
    out = build(scope, *phs)
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError):
            sess.run(out, dict(zip(phs, feeds)))
    model = gf.export_onnx(scope.graph, phs, [out], tmp_path / "m.onnx")
    for backend, run in backends(model, tmp_path / "m.onnx").items():
        with pytest.raises(Exception, match="(?i)out of bounds|invalid ind|out of data bounds"):
            run([out.name], {p.name: v for p, v in zip(phs, feeds)})


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# -- TensorFlow's own graphs and results -------------------------------------------------------
TF_FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tf")


@pytest.mark.parametrize("name, file", [("scatter_v1", "scatter_v1.pb"), ("glue", "glue.pbtxt"),
                                        ("frozen", "frozen.pb"), ("consts", "consts.pb"),
                                        ("variables_v1", "variables_v1.pb")])
def test_tensorflow_graphs_through_onnx_give_tensorflows_results(tmp_path, name, file):
    """Graphs TensorFlow 2.21 wrote (tests/fixtures/tf/generate.py), imported, exported
    (variables frozen after TF's updates) and run in ONNX: TensorFlow's results, bit for
    bit, duplicates included. Complex outputs and non-UTF-8 string constants are refused
    (ONNX has no complex math; its strings are UTF-8)."""
    pytest.importorskip("tensorboardX")  # gf.import_tf_graph's protobuf classes
    data = np.load(os.path.join(TF_FIXTURES, name + ".npz"), allow_pickle=True)
    feeds = {str(k): data[f"feed_{i}"] for i, k in enumerate(data["feed_names"])}
    want = {str(k): data[f"fetch_{i}"] for i, k in enumerate(data["fetch_names"])}
    graph = gf.import_tf_graph(os.path.join(TF_FIXTURES, file))
    fetches = [k for k, v in want.items() if v.dtype.kind != "c" and not (
        v.dtype == object and not all(_utf8(b) for b in v.ravel()))]
    with gf.Session(graph) as sess:
        for target in data["before"]:  # initializers and updates, as TensorFlow ran them
            sess.run(str(target))
        for refused in set(want) - set(fetches):
            with pytest.raises(UnimplementedError, match="complex|UTF-8"):
                gf.export_onnx(graph, list(feeds), [refused], None, session=sess)
        model = gf.export_onnx(graph, list(feeds), fetches, tmp_path / "m.onnx", session=sess)
    for backend, run in backends(model, tmp_path / "m.onnx").items():
        for fetch, got in zip(fetches, run(fetches, feeds)):
            got, expected = _plain(got), _plain(want[fetch])
            assert (got.dtype, got.shape) == (expected.dtype, expected.shape), (backend, fetch)
            assert got.tobytes() == expected.tobytes() if got.dtype != object else \
                got.tolist() == expected.tolist(), (backend, fetch, got, expected)


# -- variables ---------------------------------------------------------------------------------
def test_variables_refused_without_session_frozen_with_one(scope, tmp_path):
    table = scope.variable(values(np.float32, (5, 2), 15), name="table")
    ids = scope.placeholder(gf.int32, shape=[None])
    out = scope.add(table.sparse_read(ids), scope.reduce_sum(table.read(), [0]))
    with pytest.raises(UnimplementedError, match="pass session= to freeze") as err:
        gf.export_onnx(scope.graph, [ids], [out], None)
    assert "table" in str(err.value)
    with gf.Session(scope.graph) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        sess.run(table.scatter_nd_add([[1]], [[10.0, 20.0]]))
        want = sess.run(out, {ids: np.array([1, 4, 1], np.int32)})
        model = gf.export_onnx(scope.graph, [ids], [out], tmp_path / "m.onnx", session=sess)
    for backend, run in backends(model, tmp_path / "m.onnx").items():
        got = run([out.name], {ids.name: np.array([1, 4, 1], np.int32)})[0]
        np.testing.assert_array_equal(got, want, err_msg=backend)


def test_variable_handle_is_not_a_value(scope):
    v = scope.variable(np.zeros((3,), np.float32), name="v")
    with gf.Session(scope.graph) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        with pytest.raises(InvalidArgumentError, match="handle"):
            gf.export_onnx(scope.graph, [], [v.handle], None, session=sess)


def test_variable_updates_refused(scope):
    v = scope.variable(np.zeros((3,), np.float32), name="v")
    after = v.scatter_nd_add([[1]], [2.0])
    with gf.Session(scope.graph) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        with pytest.raises(UnimplementedError, match="updates state"):
            gf.export_onnx(scope.graph, [], [after], None, session=sess)


# -- what cannot be exported -------------------------------------------------------------------
def test_unsupported_ops_listed_in_one_error(scope):
    x = scope.placeholder(gf.string)
    ax = scope.placeholder(gf.int32, shape=[])
    bad = [scope.add(x, x, name="concat_a"), scope.add(x, x, name="concat_b"),
           scope.scatter_nd([[0]], scope.reshape(x, [1]), [2], name="strings"),
           scope.concat_v2([x, x], ax, name="dynamic_axis"),
           scope.transpose(x, scope.shape(x), name="dynamic_perm"),
           scope.cast(scope.constant([1.0]), gf.complex64, name="complex"),
           scope.constant(np.array([b"ok", b"\xff"], object), name="not_utf8")]
    with pytest.raises(UnimplementedError) as err:
        gf.export_onnx(scope.graph, [x, ax], bad, None)
    message = str(err.value)
    assert "7 node(s)" in message
    for name in ("concat_a, concat_b", "strings", "dynamic_axis", "dynamic_perm", "complex",
                 "not_utf8"):
        assert name in message


def test_bad_arguments(scope):
    x = scope.placeholder(gf.float32, name="x")
    y = scope.neg(x)
    with pytest.raises(InvalidArgumentError, match="placeholder tensor 'x:0'.*not listed"):
        gf.export_onnx(scope.graph, [], [y], None)
    with pytest.raises(InvalidArgumentError, match="opset"):
        gf.export_onnx(scope.graph, [x], [y], None, opset=11)
    with pytest.raises(InvalidArgumentError, match="listed twice"):
        gf.export_onnx(scope.graph, [x], [y, y], None)
    with pytest.raises(InvalidArgumentError, match="not an element of this graph"):
        gf.export_onnx(gf.Graph(), [], [y], None)
    with pytest.raises(TypeError, match="list"):
        gf.export_onnx(scope.graph, x, [y], None)
    model = gf.export_onnx(scope.graph, ["x:0"], ["Neg:0"], None)  # TF-style names
    assert [i.name for i in model.graph.input] == ["x:0"]


def test_default_inputs_and_outputs(scope, tmp_path):
    """outputs=None: the tensors nothing consumes; inputs=None: the placeholders they need."""
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    scope.placeholder(gf.float32, name="unused")
    y = scope.neg(x, name="y")
    z = scope.tensor_scatter_add(y, [[0], [0]], [1.0, 2.0], name="z")
    model = gf.export_onnx(scope.graph, None, None, tmp_path / "m.onnx")
    assert [i.name for i in model.graph.input] == ["x:0"]
    assert [o.name for o in model.graph.output] == ["z:0"]
    check(scope.graph, {x: np.arange(3, dtype=np.float32)}, [z, y], tmp_path)


def test_nothing_the_user_passed_is_modified(scope, tmp_path):
    x = scope.placeholder(gf.float32, shape=[None])
    out = scope.tensor_scatter_update(x, [[0], [0]], [1.0, 2.0])
    before = [(op.name, op.type) for op in scope.graph.operations()]
    inputs, outputs = [x], [out]
    gf.export_onnx(scope.graph, inputs, outputs, tmp_path / "m.onnx")
    assert [(op.name, op.type) for op in scope.graph.operations()] == before
    assert inputs == [x] and outputs == [out]
