"""The random ops (ops/random_ops.py): their distributions, TF's seed rules, the per-Session
state of the stateful ops (new numbers each run, the same sequence in a new Session, never
folded or cached by a plan, safe from two threads), the stateless ops as pure functions of
their seed, partially known shapes and TF's errors.

Statistical checks use fixed seeds, so each is decided once and for all; their bounds are
also ones that a correct generator breaks with a chance of about 1e-5 or less (6 sigma
for means and variances, 2.5/sqrt(n) for the largest CDF deviation), so that a change of
seed or of numpy's streams cannot make them flake either.
"""
from __future__ import annotations

import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import graphflow as gf
from support.distributions import REFERENCE, max_cdf_deviation as _max_cdf_deviation
from graphflow import inference
from graphflow.errors import InvalidArgumentError, InvalidDTypeError
from graphflow.kernel_context import KernelContext

from support.gpu_devices import gpu_session_devices
from support.threads import run_in_threads

from graphflow.ops import random_ops  # noqa: E402  (the module: get_seed, its constants)

N = 100_000
INT32_MAX = 2 ** 31 - 1
STATEFUL = ["RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt",
            "RandomShuffle"]
STATELESS = ["StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal",
             "StatelessRandomUniformInt", "StatelessRandomUniformFullInt"]


def _run(fetches, feeds=None, **config):
    """``fetches`` run once in a new Session of their graph."""
    graph = (fetches[0] if isinstance(fetches, list) else fetches).graph
    with gf.Session(graph, gf.SessionConfig(**config) if config else None) as sess:
        return sess.run(fetches, feeds)


def _seeded_scope(seed: int | None = 42) -> gf.Scope:
    graph = gf.Graph()
    graph.seed = seed
    return gf.Scope(graph)


def _check_distribution(sample: np.ndarray, kind: str, mean=0.0, scale=1.0) -> None:
    """``sample`` (``raw * scale + mean``) has the moments and the CDF of ``kind``."""
    m, var, m4, cdf = REFERENCE[kind]
    raw = (sample.astype(np.float64).ravel() - mean) / scale
    n = raw.size
    assert abs(raw.mean() - m) < 6 * math.sqrt(var / n), (kind, raw.mean())
    assert abs(raw.var() - var) < 6 * math.sqrt((m4 - var ** 2) / n), (kind, raw.var())
    assert _max_cdf_deviation(raw, cdf) < 2.5 / math.sqrt(n), kind


# -- distributions ---------------------------------------------------------------------------
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
@pytest.mark.parametrize("dtype", [gf.float16, gf.float32, gf.float64], ids=str)
@pytest.mark.parametrize("kind", ["uniform", "normal", "truncated"])
def test_float_draws_have_their_distribution(kind, dtype, stateless):
    s = _seeded_scope()
    out = (STATELESS_BUILDERS if stateless else BUILDERS)[kind](s, dtype)
    value = _run(out)
    assert value.dtype == dtype.as_numpy_dtype and value.shape == (N,)
    if kind == "uniform":
        assert value.min() >= 0 and value.max() < 1
    if kind == "truncated":
        assert np.abs(value).max() <= 2
    _check_distribution(value, kind)


def test_scaled_draws_keep_their_bounds_and_moments():
    s = _seeded_scope()
    u = s.random_uniform([N], minval=-2.0, maxval=3.0, seed=1)
    n = s.random_normal([N], mean=3.0, stddev=2.0, dtype=gf.float64, seed=2)
    t = s.truncated_normal([N], mean=-1.0, stddev=0.5, dtype=gf.float64, seed=3)
    su = s.stateless_random_uniform([N], [1, 2], minval=10.0, maxval=12.0, dtype=gf.float64)
    sn = s.stateless_random_normal([N], [1, 2], mean=-5.0, stddev=3.0)
    u_, n_, t_, su_, sn_ = _run([u, n, t, su, sn])
    assert u_.min() >= -2 and u_.max() < 3
    _check_distribution(u_, "uniform", mean=-2.0, scale=5.0)
    _check_distribution(n_, "normal", mean=3.0, scale=2.0)
    assert t_.min() >= -2.0 and t_.max() <= 0.0  # never beyond 2 stddevs of the mean
    _check_distribution(t_, "truncated", mean=-1.0, scale=0.5)
    assert su_.min() >= 10 and su_.max() < 12
    _check_distribution(su_, "uniform", mean=10.0, scale=2.0)
    _check_distribution(sn_, "normal", mean=-5.0, scale=3.0)


@pytest.mark.parametrize("dtype", [gf.int32, gf.int64], ids=str)
def test_integer_draws_cover_minval_to_maxval_evenly_and_never_maxval(dtype):
    s = _seeded_scope()
    stateful = s.random_uniform([N], minval=-3, maxval=4, dtype=dtype, seed=5)
    stateless = s.stateless_random_uniform([N], [5, 6], minval=-3, maxval=4, dtype=dtype)
    for value in _run([stateful, stateless]):
        assert value.dtype == dtype.as_numpy_dtype
        counts = np.bincount(value + 3, minlength=7)
        assert counts.size == 7, "a value outside [minval, maxval)"
        expected, sigma = N / 7, math.sqrt(N * (1 / 7) * (6 / 7))
        assert np.all(np.abs(counts - expected) < 6 * sigma), counts


def test_integer_draws_over_wide_and_full_ranges():
    s = _seeded_scope()
    wide = s.random_uniform([N], minval=-2 ** 62, maxval=2 ** 62, dtype=gf.int64, seed=1)
    full = s.stateless_random_uniform([N], [1, 2], minval=None, maxval=None, dtype=gf.uint32)
    full64 = s.stateless_random_uniform([N], [1, 2], minval=None, maxval=None, dtype=gf.int64)
    wide_, full_, full64_ = _run([wide, full, full64])
    assert wide_.min() >= -2 ** 62 and wide_.max() < 2 ** 62
    assert full_.dtype == np.uint32 and full64_.dtype == np.int64
    # each draw's top bit is a fair coin: the sample reaches both halves of the range evenly
    for top in ((wide_ >= 0), (full_ >= 2 ** 31), (full64_ >= 0)):
        assert abs(top.mean() - 0.5) < 6 * math.sqrt(0.25 / N)


def test_shuffle_is_a_permutation_of_whole_rows():
    s = _seeded_scope()
    value = np.arange(3000).reshape(1000, 3)
    shuffled = s.random_shuffle(value, seed=4)
    words = s.random_shuffle(np.array([b"a", b"b", b"c", b"d"], dtype=object), seed=5)
    scalar, one, empty = (s.random_shuffle(v) for v in (np.float32(7), np.ones((1, 2)),
                                                        np.zeros((0, 3))))
    with gf.Session(s.graph) as sess:
        first, second = sess.run(shuffled), sess.run(shuffled)
        w, sc, on, em = sess.run([words, scalar, one, empty])
    for got in (first, second):
        assert got.shape == value.shape and np.all(got[:, 1:] == got[:, :1] + [1, 2])
        assert sorted(got[:, 0].tolist()) == value[:, 0].tolist()
        assert not np.array_equal(got, value)
    assert not np.array_equal(first, second)  # a new run, a new order
    assert sorted(w.tolist()) == [b"a", b"b", b"c", b"d"]
    assert sc == 7 and on.shape == (1, 2) and em.shape == (0, 3)


def test_shuffle_puts_an_element_anywhere_evenly():
    s = _seeded_scope()
    shuffled = s.random_shuffle(np.arange(4), seed=6)
    with gf.Session(s.graph) as sess:
        call = sess.make_callable(shuffled)
        where = [int(np.argmax(call() == 0)) for _ in range(2400)]
    counts = np.bincount(where, minlength=4)
    assert np.all(np.abs(counts - 600) < 6 * math.sqrt(2400 * 0.25 * 0.75)), counts


# -- TF's seed rules -------------------------------------------------------------------------
def test_get_seed_follows_tensorflows_rules():
    g = gf.Graph()
    assert random_ops.get_seed(g, None) == (0, 0)                        # neither: from the OS
    assert random_ops.get_seed(g, 5) == (random_ops.DEFAULT_GRAPH_SEED, 5)
    assert random_ops.DEFAULT_GRAPH_SEED == 87654321
    g.seed = 42
    assert random_ops.get_seed(g, 5) == (42, 5)
    assert random_ops.get_seed(g, None) == (42, 0)                       # the op counter
    gf.Scope(g).constant(1.0)
    assert random_ops.get_seed(g, None) == (42, 1)
    assert random_ops.get_seed(g, INT32_MAX + 3) == (42, 3)             # seed % INT32_MAX
    assert random_ops.get_seed(g, np.int64(7)) == (42, 7)
    g.seed = 0
    assert random_ops.get_seed(g, 0) == (0, INT32_MAX)                   # never (0, 0)
    with pytest.raises(TypeError, match="seed must be an int"):
        random_ops.get_seed(g, 1.5)
    g.seed = "42"
    with pytest.raises(TypeError, match="graph seed must be an int"):
        random_ops.get_seed(g, 1)


def test_builders_set_the_seed_attrs():
    s = _seeded_scope(None)
    assert gf.Graph().seed is None
    u = s.random_uniform([2], seed=3)
    assert (u.op.get_attr("seed"), u.op.get_attr("seed2")) == (87654321, 3)
    s.graph.seed = 11
    n = s.random_normal([2])
    raw = n.op.inputs[0].op.inputs[0].op
    assert raw.type == "RandomStandardNormal" and raw.get_attr("seed") == 11
    assert raw.get_attr("seed2") == raw.position  # the ops the graph had before it


def _two_graphs_draws(build, runs: int = 2, seed: int | None = 42) -> list[list[np.ndarray]]:
    """For two graphs built alike by ``build(scope)``: ``runs`` runs in a Session of each."""
    draws = []
    for _ in range(2):
        s = _seeded_scope(seed)
        out = build(s)
        with gf.Session(s.graph) as sess:
            draws.append([sess.run(out) for _ in range(runs)])
    return draws


def test_same_seeds_same_sequence_in_a_new_session_and_a_new_graph():
    s = _seeded_scope()
    out = [s.random_uniform([5], seed=1), s.random_normal([5], seed=1),
           s.truncated_normal([5]), s.random_uniform([5], maxval=9, dtype=gf.int32),
           s.random_shuffle(np.arange(8), seed=2)]
    sessions = []
    for _ in range(2):
        with gf.Session(s.graph) as sess:
            sessions.append([sess.run(out) for _ in range(3)])
    for first, again in zip(*sessions):
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)
    # and in a second graph built the same way (the same process)
    a, b = _two_graphs_draws(lambda s: s.random_uniform([5]), runs=3)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    # op seed only: the default graph seed, deterministic too
    a, b = _two_graphs_draws(lambda s: s.random_normal([5], seed=9), seed=None)
    np.testing.assert_array_equal(a[0], b[0])


def test_different_seeds_different_numbers():
    s = _seeded_scope()
    a, b = s.random_uniform([8], seed=1), s.random_uniform([8], seed=2)
    c, d = s.random_uniform([8]), s.random_uniform([8])   # graph seed only: their own seeds
    values = _run([a, b, c, d])
    assert len({v.tobytes() for v in values}) == 4
    other = _seeded_scope(43)
    assert not np.array_equal(_run(other.random_uniform([8], seed=1)), values[0])


def test_no_seed_at_all_draws_differently_in_each_session():
    s = _seeded_scope(None)
    u = s.random_uniform([8])
    assert (u.op.get_attr("seed"), u.op.get_attr("seed2")) == (0, 0)
    assert not np.array_equal(_run(u), _run(u))


def test_each_run_and_each_call_of_a_compiled_plan_draws_new_numbers():
    """Nothing caches or folds a stateful op: not a run, not a make_callable plan on its 3rd
    and later calls, not the pure ops downstream of it; and every plan of a Session draws
    from the op's one sequence (runs, then calls, continue it)."""
    s = _seeded_scope()
    u = s.random_uniform([4], seed=1)
    y = u * 2.0 + 1.0
    assert inference.constant_value(u) is None and inference.constant_value(y) is None
    other = s.random_normal([2], seed=2)
    with gf.Session(s.graph) as sess:
        draws = [sess.run(y), sess.run([y, other])[0], sess.run(y)]   # two plans, one sequence
        call = sess.make_callable(y)
        draws += [call() for _ in range(5)]
    assert len({d.tobytes() for d in draws}) == len(draws)
    with gf.Session(s.graph, gf.SessionConfig(optimize=False)) as sess:
        reference = [sess.run(y) for _ in range(len(draws))]
    np.testing.assert_array_equal(draws, reference)


def test_shape_specialized_plans_continue_the_same_sequence():
    s = _seeded_scope()
    x = s.placeholder(gf.float32, shape=[None])
    u = s.random_normal(s.shape(x), seed=3)
    feed = np.zeros(6, np.float32)
    with gf.Session(s.graph) as sess:
        call = sess.make_callable(u, [x])
        draws = [call(feed) for _ in range(5)]      # the 2nd sighting specializes the plan
    assert len({d.tobytes() for d in draws}) == 5
    with gf.Session(s.graph, gf.SessionConfig(optimize=False)) as sess:
        reference = [sess.run(u, {x: feed}) for _ in range(5)]
    np.testing.assert_array_equal(draws, reference)


def test_two_threads_running_one_op_draw_disjoint_parts_of_its_sequence():
    s = _seeded_scope()
    u = s.truncated_normal([1000], seed=8)   # a draw of several steps (re-draws): atomic
    per_thread: list[list[np.ndarray]] = [[], [], [], []]
    with gf.Session(s.graph) as sess:
        call = sess.make_callable(u)
        errors = run_in_threads(lambda k: per_thread[k].extend(call() for _ in range(10)), 4)
    assert not errors
    with gf.Session(s.graph) as sess:
        sequential = [sess.run(u) for _ in range(40)]
    drawn = sorted(d.tobytes() for rows in per_thread for d in rows)
    assert drawn == sorted(d.tobytes() for d in sequential)  # every draw whole, none twice


# -- stateless ops ---------------------------------------------------------------------------
def test_stateless_ops_are_a_pure_function_of_the_seed():
    s = gf.Scope(gf.Graph())
    seed = s.placeholder(gf.int64, shape=[2])
    outs = [s.stateless_random_uniform([6], [3, 4]), s.stateless_random_normal([6], [3, 4]),
            s.stateless_truncated_normal([6], [3, 4]),
            s.stateless_random_uniform([6], [3, 4], minval=0, maxval=100, dtype=gf.int64),
            s.stateless_random_uniform([6], [3, 4], minval=None, maxval=None, dtype=gf.uint64)]
    fed = s.stateless_random_normal([6], seed)
    int32_seed = s.stateless_random_normal([6], np.array([3, 4], np.int32))
    other = s.stateless_random_normal([6], [3, 5])
    feeds = {seed: np.array([3, 4])}
    with gf.Session(s.graph) as sess:
        first, again = sess.run(outs + [fed], feeds), sess.run(outs + [fed], feeds)
    with gf.Session(s.graph, gf.SessionConfig(optimize=False)) as sess:
        unoptimized = sess.run(outs + [fed, int32_seed, other], feeds)
    for a, b, c in zip(first, again, unoptimized):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(first[1], unoptimized[5])      # a fed seed: the same
    np.testing.assert_array_equal(first[1], unoptimized[6])      # an int32 seed: the same
    assert not np.array_equal(first[1], unoptimized[7])           # another seed: others
    assert inference.constant_value(outs[0]) is not None          # pure: foldable
    # a stateless seed [a, b] and a stateful op's seeds (a, b) key different streams
    stateful = s.create_op("RandomUniform", [6], dtype=gf.float32, seed=3, seed2=4)
    assert not np.array_equal(_run(stateful), first[0])


_IN_ANOTHER_PROCESS = """
import graphflow as gf
g = gf.Graph(); g.seed = 1
s = gf.Scope(g)
out = [s.stateless_random_normal([4], [3, 4]), s.random_uniform([4], seed=9),
       s.random_uniform([4])]
with gf.Session(g) as sess:
    print([v.tolist() for v in sess.run(out)])
"""


def test_seeded_numbers_are_the_same_in_another_process(tmp_path):
    g = gf.Graph()
    g.seed = 1
    s = gf.Scope(g)
    out = [s.stateless_random_normal([4], [3, 4]), s.random_uniform([4], seed=9),
           s.random_uniform([4])]
    here = [v.tolist() for v in _run(out)]
    # started outside the checkout: there its graphflow/ folder would shadow the installed
    # package (python -c puts the working directory first on sys.path)
    done = subprocess.run([sys.executable, "-c", _IN_ANOTHER_PROCESS], capture_output=True,
                          text=True, timeout=60, check=True, cwd=tmp_path)
    assert done.stdout.strip() == str(here)


# -- shapes ----------------------------------------------------------------------------------
def test_shapes_partially_known():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[None, 4])
    n = s.placeholder(gf.int32, shape=[])
    dims = s.placeholder(gf.int32, shape=[3])
    anything = s.placeholder(gf.int64, shape=None)
    cases = {
        "[?,?,?]": s.random_uniform(dims),
        "[?,4]": s.random_normal(s.shape(x)),
        "<unknown>": s.truncated_normal(anything),
        "[?,3]": s.stateless_random_uniform(s.pack([n, 3]), [1, 2]),
        "[?,4] shuffled": s.random_shuffle(x),
        "[2,5]": s.random_uniform(gf.TensorShape([2, 5]), maxval=3, dtype=gf.int64),
        "[]": s.random_uniform([]),
    }
    got = {k: str(v.shape) for k, v in cases.items()}
    assert got == {"[?,?,?]": "[?,?,?]", "[?,4]": "[?,4]", "<unknown>": "<unknown>",
                   "[?,3]": "[?,3]", "[?,4] shuffled": "[?,4]", "[2,5]": "[2,5]", "[]": "[]"}
    values = _run(list(cases.values()), {x: np.zeros((2, 4), np.float32), n: 5,
                                        dims: [1, 2, 3], anything: [2]})
    assert [v.shape for v in values] == [(1, 2, 3), (2, 4), (2,), (5, 3), (2, 4), (2, 5), ()]


# -- errors ----------------------------------------------------------------------------------
def test_builder_errors_are_tensorflows():
    s = gf.Scope(gf.Graph())
    with pytest.raises(ValueError, match="Must specify maxval for integer dtype"):
        s.random_uniform([2], dtype=gf.int32)
    for bad in (gf.bool, gf.string, gf.complex64, gf.uint8):
        with pytest.raises(ValueError, match="Argument `dtype` got invalid value"):
            s.random_uniform([2], maxval=3, dtype=bad)
    with pytest.raises(TypeError, match="Cannot convert 0.0 to a tensor of dtype int32"):
        s.random_normal([2], dtype=gf.int32)       # the mean, as TF's convert_to_tensor
    with pytest.raises(TypeError, match="not in the list of allowed values"):
        s.truncated_normal([2], mean=0, stddev=1, dtype=gf.int32)   # TruncatedNormal's dtype
    with pytest.raises(TypeError):
        s.create_op("RandomUniformInt", [2], 0.0, 1.0)   # Tout: int32 or int64
    with pytest.raises(ValueError, match="minval and maxval must be both `None`"):
        s.stateless_random_uniform([2], [1, 2], dtype=gf.int32)
    with pytest.raises(ValueError, match="Invalid dtype for bounded uniform integers"):
        s.stateless_random_uniform([2], [1, 2], minval=0, maxval=5, dtype=gf.uint32)
    with pytest.raises(TypeError, match="seed must be an int"):
        s.random_uniform([2], seed="7")
    with pytest.raises(InvalidArgumentError, match="partially known TensorShape"):
        s.random_uniform(gf.TensorShape([2, None]))


def test_shape_and_seed_inputs_are_checked_when_built():
    s = gf.Scope(gf.Graph())
    with pytest.raises(InvalidArgumentError, match="Dimension must be 2 but is 3"):
        s.stateless_random_uniform([2], [1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="must be rank 1 but is rank 0"):
        s.stateless_random_normal([2], 5)
    with pytest.raises(InvalidDTypeError):
        s.stateless_random_normal([2], [1.0, 2.0])   # Tseed: int32 or int64
    with pytest.raises(InvalidArgumentError, match="must be rank 1 but is rank 2"):
        s.random_uniform([[2, 3]])
    with pytest.raises(InvalidArgumentError, match="Dimension -1 must be >= 0"):
        s.random_normal([2, -1])
    with pytest.raises(InvalidArgumentError, match="minval must be a scalar"):
        s.create_op("RandomUniformInt", [2], [0, 1], 5)
    with pytest.raises(InvalidArgumentError, match="maxval must be a scalar"):
        s.create_op("StatelessRandomUniformInt", [2], [1, 2], 0, [5])


def test_fed_inputs_are_checked_when_run():
    s = gf.Scope(gf.Graph())
    seed = s.placeholder(gf.int32, shape=[None])
    dims = s.placeholder(gf.int32, shape=[None])
    lo, hi = s.placeholder(gf.int32, shape=[]), s.placeholder(gf.int32, shape=[])
    by_seed = s.stateless_random_uniform([2], seed)
    by_dims = s.random_uniform(dims)
    bounded = s.create_op("RandomUniformInt", dims, lo, hi, seed=1)
    with gf.Session(s.graph) as sess:
        with pytest.raises(InvalidArgumentError, match=r"seed must have shape \[2\], not \[3\]"):
            sess.run(by_seed, {seed: [1, 2, 3]})
        with pytest.raises(InvalidArgumentError, match="Dimension -2 must be >= 0"):
            sess.run(by_dims, {dims: [3, -2]})
        with pytest.raises(InvalidArgumentError, match="Need minval < maxval: 4 >= 4"):
            sess.run(bounded, {dims: [3], lo: 4, hi: 4})
        empty = sess.run(bounded, {dims: [0], lo: 4, hi: 4})   # empty: bounds not compared
        assert empty.shape == (0,) and empty.dtype == np.int32


# -- traits, kernels per device --------------------------------------------------------------
@pytest.mark.parametrize("name", STATEFUL + STATELESS)
def test_op_traits(name):
    d = gf.op_def(name)
    assert d.stateful == (name in STATEFUL)
    assert d.differentiable is False
    assert d.kernel_devices() == ["cpu", "gpu"]


def test_no_gradient_flows_through_a_random_op():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[3])
    assert gf.gradients(s.reduce_sum(s.random_shuffle(x)), [x]) == [None]


def test_gpu_kernels_on_a_simulated_gpu():
    """The GPU kernels' logic on a GPU whose arrays are numpy's: stateless numbers are the
    CPU's; stateful ones keep a per-Session sequence on the device."""
    def build():
        s = _seeded_scope()
        gpu = s.with_device("/gpu:0")
        return s, [gpu.stateless_random_normal([5], [1, 2]), gpu.random_uniform([5], seed=1),
                   gpu.random_uniform([5], maxval=7, dtype=gf.int64, seed=2),
                   gpu.random_shuffle(np.arange(5), seed=3), gpu.truncated_normal([5], seed=4)]
    s, outs = build()
    with gf.Session(s.graph, devices=gpu_session_devices("simulated")) as sess:
        on_gpu = [sess.run(outs), sess.run(outs)]
    s, outs = build()
    with gf.Session(s.graph) as sess:
        on_cpu = [sess.run(outs), sess.run(outs)]
    for gpu_run, cpu_run in zip(on_gpu, on_cpu):
        for a, b in zip(gpu_run, cpu_run):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(on_gpu[0][1], on_gpu[1][1])


class _FakeRandomState:
    """The cupy.random.RandomState calls the stateful GPU kernels make, on numpy."""

    made: list = []

    def __init__(self, seed=None):
        self.made.append(seed)
        self._generator = np.random.default_rng(seed)

    def random_sample(self, size, dtype):
        return self._generator.random(size, dtype=dtype)

    def standard_normal(self, size, dtype):
        return self._generator.standard_normal(size, dtype=dtype)

    def randint(self, low, high, size, dtype):
        return self._generator.integers(low, high, size, dtype=dtype)

    def permutation(self, n):
        return self._generator.permutation(n)


FAKE_CUPY = SimpleNamespace(random=SimpleNamespace(RandomState=_FakeRandomState), abs=np.abs,
                            floor=np.floor, asarray=np.asarray, empty=np.empty)


@pytest.mark.parametrize("name, dtype", [("RandomUniform", gf.float16),
                                         ("RandomStandardNormal", gf.float32),
                                         ("TruncatedNormal", gf.float64),
                                         ("RandomUniformInt", gf.int32),
                                         ("RandomShuffle", gf.float32)])
def test_the_cupy_path_of_the_stateful_gpu_kernels(name, dtype):
    """What the kernels ask of cupy (cupy itself needs a CUDA device): one RandomState per
    op, seeded once from (seed, seed2); each call draws on from it."""
    d = gf.op_def(name)
    type_attr = {"RandomUniformInt": "Tout", "RandomShuffle": "T"}.get(name, "dtype")
    attrs = {type_attr: dtype, "seed": 5, "seed2": 6}
    if name != "RandomShuffle":
        attrs["T"] = gf.int32
    kernel = d.find_kernel("gpu", attrs).fn
    ctx = KernelContext("op", name, attrs, xp=FAKE_CUPY)
    args = {"RandomUniformInt": (np.array([1000]), np.int32(-2), np.int32(3)),
            "RandomShuffle": (np.arange(1000, dtype=np.float32),)}.get(name, (np.array([1000]),))
    _FakeRandomState.made.clear()
    first, second = kernel(ctx, *args), kernel(ctx, *args)
    assert len(_FakeRandomState.made) == 1 and isinstance(_FakeRandomState.made[0], int)
    assert first.dtype == dtype.as_numpy_dtype and first.shape == (1000,)
    assert not np.array_equal(first, second)
    if name == "RandomUniform":
        assert first.min() >= 0 and first.max() < 1
    if name == "TruncatedNormal":
        assert np.abs(first).max() <= 2
    if name == "RandomUniformInt":
        assert set(first.tolist()) == {-2, -1, 0, 1, 2}
    if name == "RandomShuffle":
        assert sorted(first.tolist()) == list(range(1000))
