"""gf.export_onnx of the random ops (graphflow/interop/onnx_lowering_random.py).

ONNX runtimes draw from their own generators, so what is checked is what the export
keeps: each model passes onnx.checker and runs in ONNX Runtime and ONNX's reference
evaluator with graphflow's dtypes and shapes, values in the op's range with its
distribution, and the refused cases raise the documented errors. Statistical checks
use seeded draws of 100k values (decided once for all, as a seeded ONNX Runtime session
starts the same sequence), with the bounds of tests/test_random_ops.py: 6 sigma for
means and variances, 2.5 / sqrt(n) for the largest CDF deviation.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import graphflow as gf
from support.distributions import REFERENCE, max_cdf_deviation as _max_cdf_deviation
from graphflow.errors import UnimplementedError

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx.reference import ReferenceEvaluator  # noqa: E402

N = 100_000
INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1
FLOATS = [gf.float16, gf.float32, gf.float64]


# -- running an export -----------------------------------------------------------------------
def _seeded_scope(seed: int | None = 42) -> gf.Scope:
    graph = gf.Graph()
    graph.seed = seed
    return gf.Scope(graph)


def _ort_feed(value: np.ndarray) -> np.ndarray:
    return value.astype(str) if value.dtype == object else value  # ORT takes str, not bytes


#: The newest opset whose random ops ONNX Runtime 1.32 runs: it has no kernels for the
#: opset-22 versions of RandomUniform, RandomNormal and their Like forms.
ORT_NEWEST_RANDOM_OPSET = 21


def _backends(model, path, opset: int) -> dict:
    """backend name -> run(names, feeds), each a fresh session of ``model``."""
    backends = {"reference": ReferenceEvaluator(model).run}
    if opset <= ORT_NEWEST_RANDOM_OPSET:
        ort = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        backends["onnxruntime"] = lambda names, feeds: ort.run(
            names, {k: _ort_feed(v) for k, v in feeds.items()})
    return backends


def _export(graph: gf.Graph, feeds: dict, outputs: list, tmp_path, opset: int = 18):
    """The checked model of ``outputs``, and its backends."""
    path = tmp_path / "model.onnx"
    model = gf.export_onnx(graph, list(feeds), outputs, path, opset=opset)
    saved = onnx.load(str(path))
    for info in saved.graph.input:  # the checker wants a shape even for an unknown rank
        info.type.tensor_type.shape.SetInParent()
    onnx.checker.check_model(saved, full_check=True)
    return model, _backends(model, path, opset)


def _run_everywhere(graph: gf.Graph, feeds: dict, outputs: list, tmp_path,
                    opset: int = 18) -> dict:
    """backend -> the outputs' values; each has graphflow's dtype and shape."""
    with gf.Session(graph) as sess:
        want = sess.run(outputs, feeds)
    _, backends = _export(graph, feeds, outputs, tmp_path, opset)
    results = {}
    for name, run in backends.items():
        got = run([o.name for o in outputs], {k.name: v for k, v in feeds.items()})
        for out, w, g in zip(outputs, want, got):
            assert (g.dtype, g.shape) == (w.dtype, w.shape), (name, out.name)
        results[name] = got
    return results


def _op_types(model) -> list[str]:
    return [node.op_type for node in model.graph.node]


def _check_distribution(sample: np.ndarray, kind: str, resolution: float = 0.0) -> None:
    """``sample`` has the moments and the CDF of ``kind`` (``resolution``: the grid the
    values lie on, which widens the CDF bound by that much)."""
    m, var, m4, cdf = REFERENCE[kind]
    x = sample.astype(np.float64).ravel()
    n = x.size
    assert abs(x.mean() - m) < 6 * math.sqrt(var / n), (kind, x.mean())
    assert abs(x.var() - var) < 6 * math.sqrt((m4 - var ** 2) / n) + resolution, (kind, x.var())
    assert _max_cdf_deviation(x, cdf) < 2.5 / math.sqrt(n) + resolution, kind


# -- float draws -----------------------------------------------------------------------------
BUILDERS = {
    "uniform": lambda s, dtype: s.random_uniform([N], dtype=dtype, seed=1),
    "normal": lambda s, dtype: s.random_normal([N], dtype=dtype, seed=2),
    "truncated": lambda s, dtype: s.truncated_normal([N], dtype=dtype, seed=3),
}
STATELESS_BUILDERS = {
    "uniform": lambda s, dtype: s.stateless_random_uniform([N], [4, 5], dtype=dtype),
    "normal": lambda s, dtype: s.stateless_random_normal([N], [6, 7], dtype=dtype),
    "truncated": lambda s, dtype: s.stateless_truncated_normal([N], [8, 9], dtype=dtype),
}


@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("kind", ["uniform", "normal", "truncated"])
def test_float_draws_have_their_distribution(tmp_path, kind, dtype, stateless):
    s = _seeded_scope()
    out = (STATELESS_BUILDERS if stateless else BUILDERS)[kind](s, dtype)
    for backend, (value,) in _run_everywhere(s.graph, {}, [out], tmp_path).items():
        if kind == "uniform":
            assert value.min() >= 0 and value.max() < 1, backend
        if kind == "truncated":
            assert np.abs(value).max() <= 2, backend
        if kind == "uniform" and dtype == gf.float16:  # multiples of 2**-11, as graphflow's
            assert np.array_equal(value * 2048, np.floor(value * 2048)), backend
        resolution = 2.0 ** -11 if dtype == gf.float16 else 0.0
        _check_distribution(value, kind, resolution)


def test_scaled_draws_keep_their_bounds(tmp_path):
    s = _seeded_scope()
    outs = [s.random_uniform([N], minval=-2.0, maxval=3.0, seed=1),
            s.truncated_normal([N], mean=-1.0, stddev=0.5, dtype=gf.float64, seed=3),
            s.stateless_random_normal([N], [1, 2], mean=-5.0, stddev=3.0)]
    for backend, (u, t, n) in _run_everywhere(s.graph, {}, outs, tmp_path).items():
        assert u.min() >= -2 and u.max() < 3, backend
        assert t.min() >= -2 and t.max() <= 0, backend
        _check_distribution((n + 5.0) / 3.0, "normal")


# -- shapes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [18, ORT_NEWEST_RANDOM_OPSET, 22])
def test_a_static_shape_is_an_attribute_a_run_time_shape_an_input(tmp_path, opset):
    s = _seeded_scope()
    shape = s.placeholder(gf.int32, shape=[2])
    static = [s.random_uniform([3, 4], seed=1), s.random_normal([], seed=2),
              s.truncated_normal([0, 5], seed=3)]
    dynamic = [s.random_uniform(shape, seed=4), s.random_normal(shape, seed=5),
               s.stateless_truncated_normal(shape, [1, 2]),
               s.random_uniform(shape, minval=3, maxval=9, dtype=gf.int64, seed=6)]
    feeds = {shape: np.array([7, 2], np.int32)}
    results = _run_everywhere(s.graph, feeds, static + dynamic, tmp_path, opset)
    for backend, values in results.items():
        assert [v.shape for v in values] == [(3, 4), (), (0, 5)] + [(7, 2)] * 4, backend
    model, _ = _export(s.graph, feeds, static, tmp_path, opset)
    assert "RandomUniform" in _op_types(model) and "RandomUniformLike" not in _op_types(model)
    shapes = [list(a.ints) for n in model.graph.node for a in n.attribute if a.name == "shape"]
    assert [3, 4] in shapes and [0, 5] in shapes
    model, _ = _export(s.graph, feeds, dynamic, tmp_path, opset)
    kinds = _op_types(model)
    assert {"ConstantOfShape", "RandomUniformLike", "RandomNormalLike"} <= set(kinds)
    assert "RandomUniform" not in kinds and "RandomNormal" not in kinds


# -- integers --------------------------------------------------------------------------------
@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
@pytest.mark.parametrize("dtype", [gf.int32, gf.int64], ids=str)
def test_integer_draws_cover_minval_to_maxval_evenly_and_never_maxval(tmp_path, dtype,
                                                                      stateless):
    s = _seeded_scope()
    out = s.stateless_random_uniform([N], [3, 4], minval=-5, maxval=7, dtype=dtype) \
        if stateless else s.random_uniform([N], minval=-5, maxval=7, dtype=dtype, seed=1)
    for backend, (value,) in _run_everywhere(s.graph, {}, [out], tmp_path).items():
        counts = np.bincount(value - -5, minlength=12)
        assert value.min() == -5 and value.max() == 6 and counts.size == 12, backend
        p = 1 / 12  # each count within 6 sigma of N / 12
        assert np.abs(counts - N * p).max() < 6 * math.sqrt(N * p * (1 - p)), (backend, counts)


def test_integer_draws_over_wide_ranges(tmp_path):
    s = _seeded_scope()
    outs = [s.random_uniform([N], minval=INT32_MIN, maxval=INT32_MAX, dtype=gf.int32, seed=1),
            s.random_uniform([N], minval=-2 ** 40, maxval=2 ** 40, dtype=gf.int64, seed=2),
            s.random_uniform([N], minval=2 ** 62, maxval=2 ** 63 - 1, dtype=gf.int64, seed=3),
            s.random_uniform([N], minval=7, maxval=8, dtype=gf.int64, seed=4)]
    bounds = [(INT32_MIN, INT32_MAX), (-2 ** 40, 2 ** 40), (2 ** 62, 2 ** 63 - 1), (7, 8)]
    for backend, values in _run_everywhere(s.graph, {}, outs, tmp_path).items():
        for value, (lo, hi) in zip(values, bounds):
            assert value.min() >= lo and value.max() < hi, (backend, lo, hi)
            u = (value.astype(np.float64) - lo) / (hi - lo)  # uniform in [0, 1)
            if hi - lo > 1:
                _check_distribution(u, "uniform", resolution=1 / (hi - lo))


@pytest.mark.parametrize("dtype", [gf.int32, gf.int64, gf.uint32, gf.uint64], ids=str)
def test_full_range_integers_cover_the_whole_dtype(tmp_path, dtype):
    s = _seeded_scope()
    out = s.stateless_random_uniform([N], [5, 6], minval=None, maxval=None, dtype=dtype)
    info = np.iinfo(dtype.as_numpy_dtype)
    for backend, (value,) in _run_everywhere(s.graph, {}, [out], tmp_path).items():
        bits = value.view(np.uint32 if info.bits == 32 else np.uint64).astype(np.uint64)
        words = [bits >> np.uint64(32), bits & np.uint64(0xFFFFFFFF)] if info.bits == 64 \
            else [bits]
        for word in words:  # each 32-bit word uniform: the whole range, evenly
            _check_distribution(word.astype(np.float64) / 2.0 ** 32, "uniform", 2.0 ** -32)
        span = float(info.max) - float(info.min)
        assert value.min() < info.min + span / 1000, backend
        assert value.max() > info.max - span / 1000, backend


def test_minval_not_below_maxval_fails_the_run_unless_the_output_is_empty(tmp_path):
    s = _seeded_scope()
    shape = s.placeholder(gf.int64, shape=[1])
    lo, hi = s.placeholder(gf.int32, shape=[]), s.placeholder(gf.int32, shape=[])
    out = s.random_uniform(shape, minval=lo, maxval=hi, dtype=gf.int32, seed=1)
    _, backends = _export(s.graph, dict.fromkeys([shape, lo, hi]), [out], tmp_path)

    def feeds(n: int, low: int, high: int) -> dict:
        return {shape.name: np.array([n]), lo.name: np.array(low, np.int32),
                hi.name: np.array(high, np.int32)}
    for backend, run in backends.items():
        (value,) = run([out.name], feeds(1000, -3, 4))
        assert value.min() == -3 and value.max() == 3, backend
        assert run([out.name], feeds(0, 3, 3))[0].shape == (0,), backend  # TF skips the check
        with pytest.raises(Exception, match="out of (data )?bounds"):  # fail_if's Gather
            run([out.name], feeds(5, 3, 3))


def test_bounds_of_unknown_shape_must_be_scalars_when_run(tmp_path):
    s = _seeded_scope()
    lo = s.placeholder(gf.int64)
    out = s.random_uniform([4], minval=lo, maxval=10, dtype=gf.int64, seed=1)
    _, backends = _export(s.graph, dict.fromkeys([lo]), [out], tmp_path)
    for backend, run in backends.items():
        assert run([out.name], {lo.name: np.array(9)})[0].tolist() == [9] * 4, backend
        with pytest.raises(Exception):  # Reshape to [] fails, as TF's "minval must be 0-D"
            run([out.name], {lo.name: np.array([1, 2])})


# -- shuffle ---------------------------------------------------------------------------------
def test_shuffle_is_a_permutation_of_whole_rows(tmp_path):
    s = _seeded_scope()
    rows = s.placeholder(gf.float32, shape=[None, 3])
    table = np.arange(3000, dtype=np.float32).reshape(1000, 3)
    words = np.array([b"a", b"bb", b"ccc", b"dddd", b"eeeee"], dtype=object)
    outs = [s.random_shuffle(rows, seed=1), s.random_shuffle(np.arange(1000), seed=2),
            s.random_shuffle(words, seed=3), s.random_shuffle(np.float64(2.5), seed=4),
            s.random_shuffle(np.zeros((0, 2), np.int32), seed=5)]
    for backend, (a, b, w, scalar, empty) in _run_everywhere(
            s.graph, {rows: table}, outs, tmp_path).items():
        assert sorted(map(tuple, a)) == sorted(map(tuple, table)), backend  # rows kept whole
        assert np.array_equal(np.sort(b), np.arange(1000)), backend
        assert not np.array_equal(b, np.arange(1000)), backend
        assert sorted(bytes(v, "utf-8") if isinstance(v, str) else v for v in w) == list(words)
        assert scalar == 2.5 and empty.shape == (0, 2), backend


def test_shuffle_puts_an_element_anywhere_evenly(tmp_path):
    """Over 2000 runs of one ONNX Runtime session (each run draws anew), the first
    element lands in each of 10 places about equally often."""
    s = _seeded_scope()
    out = s.random_shuffle(np.arange(10), seed=7)
    run = _export(s.graph, {}, [out], tmp_path)[1]["onnxruntime"]
    places = [int(np.flatnonzero(run([out.name], {})[0] == 0)[0]) for _ in range(2000)]
    counts = np.bincount(places, minlength=10)
    assert np.abs(counts - 200).max() < 6 * math.sqrt(2000 * 0.1 * 0.9), counts


# -- seeds -----------------------------------------------------------------------------------
def _seeds(model) -> list:
    """The seed attribute of each random node, None where there is none."""
    return [next((a.f for a in n.attribute if a.name == "seed"), None)
            for n in model.graph.node if n.op_type.startswith("Random")]


def test_seed_attributes_come_from_graphflows_seeds(tmp_path):
    def model(graph_seed, op_seed, stateless_seed=(1, 2)):
        s = _seeded_scope(graph_seed)
        outs = [s.random_uniform([3], seed=op_seed),
                s.stateless_random_normal([3], list(stateless_seed))]
        return _export(s.graph, {}, outs, tmp_path)[0]

    first, again = _seeds(model(42, 1)), _seeds(model(42, 1))
    assert first == again and all(seed is not None for seed in first)
    assert all(seed == int(seed) and 0 <= seed < 2 ** 24 for seed in first)
    assert _seeds(model(42, 2))[0] != first[0] and _seeds(model(43, 1))[0] != first[0]
    assert _seeds(model(42, 1, (1, 3)))[1] != first[1]
    assert _seeds(model(None, None))[0] is None  # no seed: the runtime picks one, as the OS


def test_a_stateless_draw_repeats_where_the_backend_reseeds_each_run(tmp_path):
    """The reference evaluator seeds each run afresh, so a stateless op's export gives one
    value there; ONNX Runtime keeps a seeded node's generator, so it draws new ones."""
    s = gf.Scope(gf.Graph())
    out = s.stateless_random_uniform([1000], [4, 2])
    backends = _export(s.graph, {}, [out], tmp_path)[1]
    reference = backends["reference"]
    assert np.array_equal(reference([out.name], {})[0], reference([out.name], {})[0])
    ort = backends["onnxruntime"]
    assert not np.array_equal(ort([out.name], {})[0], ort([out.name], {})[0])


# -- refused ---------------------------------------------------------------------------------
def test_a_fed_stateless_seed_is_refused_naming_the_node(tmp_path):
    s = gf.Scope(gf.Graph())
    seed = s.placeholder(gf.int64, shape=[2])
    out = s.stateless_random_uniform([3], seed, name="draw")
    with pytest.raises(UnimplementedError) as info:
        gf.export_onnx(s.graph, [seed], [out])
    message = str(info.value)
    assert "StatelessRandomUniform with a seed that is not a constant (ONNX random ops take " \
           "their seed as an attribute): draw/StatelessRandomUniform" in message


def test_a_shuffle_of_unknown_rank_is_refused_naming_the_node(tmp_path):
    s = gf.Scope(gf.Graph())
    value = s.placeholder(gf.float32)
    out = s.random_shuffle(value, name="mix")
    with pytest.raises(UnimplementedError, match=r"RandomShuffle on a tensor of unknown rank "
                                                 r".*ONNX needs the rank.*: mix"):
        gf.export_onnx(s.graph, [value], [out])
