"""Lowerings of Max, Min, Any, All, integer Sum, GatherV2 and _GatherReduce: inside a
compiled segment (runtime/segments.py) they give the bits of ``optimize=False`` (every
node's own kernel) and of numpy, and the same errors, naming the same node."""
from __future__ import annotations

import numpy as np
import pytest
from support.segments import outcome, segments_of

import graphflow as gf
from graphflow.ops import reductions

CALLS = 3  # the first call runs the steps; the segment compiles at the second


@pytest.fixture(autouse=True)
def segments_on(monkeypatch):
    """tests/conftest.py turns segments off for the rest of the suite."""
    monkeypatch.setenv("GRAPHFLOW_SEGMENTS", "1")
    monkeypatch.setenv("GRAPHFLOW_TIERED", "0")


def _bits(value):
    if isinstance(value, (list, tuple)):
        return [_bits(v) for v in value]
    value = np.asarray(value)
    return value.dtype.str, value.shape, value.tobytes()


class _Runner:
    """One session of ``build(scope) -> (fetches, placeholders)`` under ``optimize``."""

    def __init__(self, build, optimize: bool):
        s = gf.Scope(gf.Graph())
        fetches, placeholders = build(s)
        self.sess = gf.Session(s.graph, gf.SessionConfig(optimize=optimize))
        self.step = self.sess.make_callable(fetches, placeholders)

    def __call__(self, *feeds):
        return outcome(lambda: self.step(*feeds))

    def runs(self) -> int:
        return sum(seg.runs for seg in segments_of(self.sess))

    def sources(self) -> str:
        return "\n".join(seg.source or "" for seg in segments_of(self.sess))

    def close(self):
        self.sess.close()


def _same(got, want):
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        assert _bits(got[1]) == _bits(want[1])
    else:
        assert got[1] == want[1]


def _check(build, feed_sets, ran=None):
    """Every feed set, CALLS times each, gives optimize=False's outcome; ``ran[k]``: whether
    the segment ran for feed set k (its default: every one). Returns the outcomes."""
    fast, slow = _Runner(build, True), _Runner(build, False)
    try:
        outcomes = []
        for k, feeds in enumerate(feed_sets):
            before = fast.runs()
            for _ in range(CALLS):
                got, want = fast(*feeds), slow(*feeds)
                _same(got, want)
            if ran is None or ran[k]:
                assert fast.runs() > before, f"no segment ran for feed set {k}"
            else:
                assert fast.runs() == before, f"a segment ran for feed set {k}"
            outcomes.append(got)
        return outcomes, fast.sources()
    finally:
        fast.close()
        slow.close()


# -- Max, Min, Any, All, Sum ----------------------------------------------------------------------
#: (axis, keep_dims) over a [2, 3, 4] input: all dims, leading ones (out of order), trailing
#: ones (one negative), a middle one, none
AXES = [([0, 1, 2], False), ([1, 0], True), ([-1, 1], False), ([1], True), ([], False)]

def _reductions(dtype, ops):
    def build(s):
        x = s.placeholder(gf.as_dtype(dtype), shape=[2, 3, 4])
        e = s.placeholder(gf.as_dtype(dtype), shape=[2, 0, 3])
        out = []
        for op in ops:
            fn = getattr(s, op)
            out += [fn(x, np.asarray(axis, np.int32), keepdims=keep) for axis, keep in AXES]
            out += [fn(e, np.asarray([1], np.int32)), fn(e, np.asarray([0, 1, 2], np.int32))]
        return out, [x, e]
    return build


def _numpy(op, x, axis, keep):
    axis = tuple(axis)
    if op in ("reduce_any", "reduce_all"):
        return getattr(np, op[7:])(x, axis=axis, keepdims=keep)
    if op == "reduce_sum":
        return np.sum(x, axis=axis, dtype=x.dtype, keepdims=keep)
    lowest = op == "reduce_max"
    limit = (-np.inf if lowest else np.inf) if x.dtype.kind == "f" else \
        (np.iinfo(x.dtype).min if lowest else np.iinfo(x.dtype).max)
    return getattr(np, op[7:])(x, axis=axis, keepdims=keep, initial=x.dtype.type(limit))


def _assert_numpy(ops, outcome, x, e):
    kind, values = outcome
    assert kind == "ok", outcome
    want = []
    for op in ops:
        want += [_numpy(op, x, axis, keep) for axis, keep in AXES]
        want += [_numpy(op, e, [1], False), _numpy(op, e, [0, 1, 2], False)]
    assert _bits(values) == _bits(want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_max_min(dtype):
    ops = ["reduce_max", "reduce_min"]
    nan = np.array(np.nan, dtype)
    other_nan = (nan.view(f"u{nan.itemsize}") | 3).view(dtype)  # a NaN with a payload
    plain = np.linspace(-5, 7, 24, dtype=dtype).reshape(2, 3, 4)
    with_nan = plain.copy()
    with_nan[0, 1, 2] = with_nan[1, 2, 0] = nan
    # zeros of one sign per run, beside larger and smaller values and infinities
    zeros = np.where(plain > 0, dtype(np.inf), dtype(-0.0)).astype(dtype)
    zeros[0] = np.where(plain[0] > 0, dtype(-1.0), dtype(0.0))
    # zeros of both signs in runs whose result is a zero: numpy's loops pick either
    mixed = np.zeros((2, 3, 4), dtype)
    mixed[0, 0] = -0.0
    mixed[1, :, 1] = [-0.0, 0.0, -0.0]
    mixed_big = mixed.copy()  # a NaN's or a non-zero's bits are one value's
    mixed_big[:, 0, :] = mixed_big[:, :, 0] = nan  # in every run of more than one element
    payload = with_nan.copy()
    payload[1, 1, 1] = other_nan
    empty = np.zeros((2, 0, 3), dtype)
    feeds = [(plain, empty), (with_nan, empty), (zeros, empty), (mixed, empty),
             (mixed_big, empty), (payload, empty)]
    outcomes, _ = _check(_reductions(dtype, ops), feeds,
                         ran=[True, True, True, False, True, False])
    for (x, e), outcome in zip(feeds, outcomes):
        _assert_numpy(ops, outcome, x, e)
    assert reductions.nan_rules()


def test_signed_zeros_in_every_order_give_numpys_bits():
    """Runs of 0.0 and -0.0 (and a larger or smaller value) in every order, over the
    contiguous and the strided layout: the segment's bits or its steps', always numpy's."""
    rows = np.array([[a, b, c] for a in (0.0, -0.0) for b in (0.0, -0.0, 1.0, -1.0)
                     for c in (0.0, -0.0)], np.float32)  # [16, 3]

    def build(s):
        x = s.placeholder(gf.float32, shape=[16, 3])
        return [s.reduce_max(x, 1), s.reduce_min(x, 1), s.reduce_max(s.transpose(x, [1, 0]), 0),
                s.reduce_min(x, [-1], keepdims=True)], [x]
    outcomes, _ = _check(build, [(rows,), (rows[[0, 4, 11, 15]].repeat(4, 0),)], ran=[False, True])
    for feeds, outcome in zip([rows, rows[[0, 4, 11, 15]].repeat(4, 0)], outcomes):
        want = [np.max(feeds, 1, initial=-np.inf), np.min(feeds, 1, initial=np.inf),
                np.max(feeds.T, 0, initial=-np.inf), np.min(feeds, -1, keepdims=True,
                                                            initial=np.inf)]
        assert _bits(outcome[1]) == _bits([w.astype(np.float32) for w in want])


@pytest.mark.parametrize("dtype", [np.int8, np.uint64])
def test_integer_max_min_sum(dtype):
    ops = ["reduce_max", "reduce_min", "reduce_sum"]
    info = np.iinfo(dtype)
    x = np.array([info.max, info.min, info.max - 1, 1, 0, 2] * 4, dtype).reshape(2, 3, 4)
    x[1, 2] = info.max  # sums wrap around
    feeds = [(x, np.zeros((2, 0, 3), dtype)), (x[::-1].copy(), np.zeros((2, 0, 3), dtype))]
    outcomes, _ = _check(_reductions(dtype, ops), feeds)
    for (a, e), outcome in zip(feeds, outcomes):
        _assert_numpy(ops, outcome, a, e)


def test_any_all():
    ops = ["reduce_any", "reduce_all"]
    x = (np.arange(24) % 3 == 0).reshape(2, 3, 4)
    feeds = [(x, np.zeros((2, 0, 3), bool)), (np.ones((2, 3, 4), bool), np.zeros((2, 0, 3), bool))]
    outcomes, _ = _check(_reductions(np.bool_, ops), feeds)
    for (a, e), outcome in zip(feeds, outcomes):
        _assert_numpy(ops, outcome, a, e)


def test_reductions_not_lowered():
    """A float Sum, a run of dims with a gap and a fed axis run their kernels."""
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)

    def build(s):
        p = s.placeholder(gf.float32, shape=[2, 3, 4])
        axis = s.placeholder(gf.int32, shape=[1])
        y = s.add(p, np.float32(1))
        return [s.reduce_sum(y, [0, 1]), s.reduce_max(y, [0, 2]), s.reduce_min(y, axis),
                s.reduce_max(s.add(y, y), [1])], [p, axis]
    _, source = _check(build, [(x, np.array([1], np.int32))])
    assert source.count("_float_extremum_rows") == 1  # the last Max only
    assert "reduction_ops._wrapping_sum_rows" not in source


# -- GatherV2 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.bool_])
def test_gather_v2(dtype):
    params = (np.arange(15) % 4).astype(dtype).reshape(5, 3)

    def build(s):
        p = s.placeholder(gf.as_dtype(dtype), shape=[5, 3])
        i = s.placeholder(gf.int32, shape=[2, 2])
        j = s.placeholder(gf.int64, shape=[3])
        g = s.gather(s.reshape(p, [5, 3]), i, axis=0)
        h = s.gather(p, j, axis=np.int64(-2))
        k = s.gather(s.reshape(p, [15]), s.reshape(i, [4]), axis=0)
        return [s.reshape(g, [12]), s.expand_dims(h, 0), s.expand_dims(k, 0)], [p, i, j]
    good = (params, np.array([[4, 0], [2, 4]], np.int32), np.array([1, 1, 0], np.int64))
    bad_high = (params, np.array([[4, 0], [5, 4]], np.int32), np.array([1, 1, 0], np.int64))
    bad_low = (params, np.array([[4, 0], [1, 4]], np.int32), np.array([1, -1, 0], np.int64))
    outcomes, source = _check(build, [good, bad_high, bad_low, good],
                              ran=[True, False, False, True])
    assert "gathered_rows" in source
    assert outcomes[1][0] == outcomes[2][0] == "error"
    assert "indices[1,0] = 5 is not in [0, 5)" in outcomes[1][1][1]
    assert "indices[1] = -1 is not in [0, 5)" in outcomes[2][1][1]
    want = [params[good[1]].reshape(12), params[good[2]][None],
            params.reshape(15)[good[1].reshape(4)][None]]
    assert _bits(outcomes[3][1]) == _bits(want)


# -- _GatherReduce --------------------------------------------------------------------------
KINDS = ["none", "one", "per_edge", "full"]
REDUCES = ["UnsortedSegmentSum", "ScatterNd"]


def _message_passing(cases, n: int = 5):
    """One gather -> scale -> segment sum per (scale kind, reduce) of ``cases``, which
    the plan makes _GatherReduce nodes, each between two lowered steps."""
    def build(s):
        params = s.placeholder(gf.float32, shape=[6, 2, 2])
        ids = s.placeholder(gf.int32, shape=[7])
        seg = s.placeholder(gf.int64, shape=[7])
        w = s.placeholder(gf.float32, shape=[7, 2, 2])
        w1 = s.placeholder(gf.float32, shape=[7, 1, 1])
        shifted = s.add(params, np.float32(0.5))
        out = []
        for kind, reduce in cases:
            rows = s.gather(shifted, ids, axis=0)
            if kind == "one":
                rows = s.mul(np.float32(1.5), rows)
            elif kind == "per_edge":
                rows = s.mul(rows, w1)
            elif kind == "full":
                rows = s.mul(w, rows)
            if reduce == "ScatterNd":
                y = s.scatter_nd(s.reshape(seg, [7, 1]), rows, np.array([n, 2, 2], np.int32))
            else:
                y = s.unsorted_segment_sum(rows, seg, np.int32(n))
            out.append(s.mul(y, np.float32(3)))
        return out, [params, ids, seg, w, w1]
    return build


def _want(kind, feeds):
    """numpy, edge by edge in edge order (the unfused segment sum's order)."""
    params, ids, seg, w, w1 = feeds
    rows = (params + np.float32(0.5))[ids]
    rows = {"none": rows, "one": np.float32(1.5) * rows, "per_edge": rows * w1,
            "full": w * rows}[kind]
    want = np.zeros((5, 2, 2), np.float32)
    for e in range(7):
        if seg[e] >= 0:
            want[seg[e]] += rows[e]
    return want * np.float32(3)


def _edges():
    rng = np.random.default_rng(1)
    return (rng.standard_normal((6, 2, 2)).astype(np.float32),
            np.array([5, 0, 3, 3, 1, 0, 2], np.int32), np.array([4, 0, 4, 2, 0, 4, 1], np.int64),
            rng.standard_normal((7, 2, 2)).astype(np.float32),
            rng.standard_normal((7, 1, 1)).astype(np.float32))


def test_gather_scale_sum_every_scale_kind():
    cases = [(kind, "UnsortedSegmentSum") for kind in KINDS]  # ScatterNd: the test below
    feeds = _edges()
    outcomes, source = _check(_message_passing(cases), [feeds])
    assert source.count("gather_reduce:_sum_rows") == 1  # one binding for every fused node
    assert source.count("{g}(".format(g=source.split("gather_reduce:_sum_rows")[0]
                                      .rsplit("# ", 1)[1].split(" ")[0])) == len(cases)
    assert _bits(outcomes[0][1]) == _bits([_want(kind, feeds) for kind, _ in cases])


@pytest.mark.parametrize("reduce", REDUCES)
def test_gather_scale_sum_bad_ids(reduce):
    """An id out of range is the members' error, naming their node; a negative segment id
    drops under UnsortedSegmentSum (the segment runs) and is ScatterNd's error."""
    feeds = _edges()
    params, ids, seg, w, w1 = feeds
    bad_gather, bad_segment, negative = ids.copy(), seg.copy(), seg.copy()
    bad_gather[3], bad_segment[2], negative[1] = 6, 5, -1
    sets = [feeds, (params, bad_gather, seg, w, w1), (params, ids, bad_segment, w, w1),
            (params, ids, negative, w, w1), feeds]
    unsorted = reduce == "UnsortedSegmentSum"
    outcomes, source = _check(_message_passing([("per_edge", reduce)]), sets,
                              ran=[True, False, False, unsorted, True])
    assert "gather_reduce:_sum_rows" in source  # the fused node ran in the segment
    assert [kind for kind, _ in outcomes] == ["ok", "error", "error",
                                              "ok" if unsorted else "error", "ok"]
    assert _bits(outcomes[0][1]) == _bits([_want("per_edge", feeds)])
    if unsorted:
        assert _bits(outcomes[3][1]) == _bits([_want("per_edge", sets[3])])


@pytest.mark.parametrize("reduce", ["unsorted_segment_sum", "unsorted_segment_max",
                                    "unsorted_segment_min"])
def test_gather_combine_reduce_in_a_segment(reduce):
    """relu(rows - edge) reduced by sum, max or min: the general loop inside a segment,
    the graph's bits; a bad segment id is the reduction's error."""
    def build(s):
        params = s.placeholder(gf.float32, shape=[6, 2, 2])
        ids = s.placeholder(gf.int32, shape=[7])
        seg = s.placeholder(gf.int64, shape=[7])
        w = s.placeholder(gf.float32, shape=[7, 2, 2])
        w1 = s.placeholder(gf.float32, shape=[7, 1, 1])
        rows = s.gather(s.add(params, np.float32(0.5)), ids, axis=0)
        y = getattr(s, reduce)(s.relu(s.sub(w1, rows)), seg, np.int32(5))
        return [s.mul(y, np.float32(3))], [params, ids, seg, w, w1]
    feeds = _edges()
    bad = list(feeds)
    bad[2] = np.where(np.arange(7) == 3, 5, feeds[2])
    outcomes, source = _check(build, [feeds, tuple(bad), feeds], ran=[True, False, True])
    assert "gather_reduce:_combine_rows" in source
    assert [kind for kind, _ in outcomes] == ["ok", "error", "ok"]
