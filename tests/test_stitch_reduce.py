"""A mixture of experts' combine and its gradient run as three nodes that never write
the routed [n, F] rows (runtime/stitch_reduce.py): bit for bit the graph as written, on
every call after the compile; the graph's own errors, naming its nodes, where a call is
not one they cover; not fused where a routed tensor is needed elsewhere."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from support.plan_steps import bits, run_calls

import graphflow as gf
from graphflow.ops import fused_elementwise, stitch_reduce

CALLS = 3  # the 3rd call runs the shape-specialized plan, its loops compiled
FUSED = {"_StitchSegmentSum", "_StitchProductSum", "_ScaledGatherRows"}


def _moe(dtype, experts: int, width: int, scale: str = "column", scale_first: bool = False,
         fetch_merged: bool = False, stitch: str = "dynamic_stitch"):
    """``build(scope) -> (fetches, placeholders)``: a routed layer's output and the
    gradients of its squared sum w.r.t. the expert weights and the row scales. Feeds:
    x [tokens, width], expert_of [n], token_of [n], scale, weights [experts, width, width]."""
    def build(s):
        x = s.placeholder(dtype, shape=[None, width])
        expert_of = s.placeholder(gf.int32, shape=[None])
        token_of = s.placeholder(gf.int32, shape=[None])
        w = s.placeholder(dtype, shape={"column": [None, 1], "full": [None, width],
                                        "one": [], "none": []}[scale])
        kernels = s.placeholder(dtype, shape=[experts, width, width])
        rows = s.dynamic_partition(s.range(0, s.size(expert_of), 1), expert_of, experts)
        tokens = s.shape(x)[0]
        source = s.minimum(s.maximum(token_of, 0), s.sub(tokens, 1))  # a bad id: the sum's
        parts = s.dynamic_partition(s.gather_v2(x, source, 0), expert_of, experts)
        outs = [s.tanh(s.matmul(p, s.gather_v2(kernels, e, 0))) for e, p in enumerate(parts)]
        merged = getattr(s, stitch)(rows, outs)
        scaled = merged if scale == "none" else \
            s.mul(w, merged) if scale_first else s.mul(merged, w)
        y = s.unsorted_segment_sum(scaled, token_of, tokens)
        loss = s.reduce_sum(s.square(y))
        grads = gf.gradients(loss, [kernels] + ([] if scale == "none" else [w]))
        return [y, *grads] + ([merged] if fetch_merged else []), \
            [x, expert_of, token_of, w, kernels]
    return build


def _feeds(dtype, experts, width, tokens, k, scale, rng, negative_tokens=0):
    """A top-k routing: each token's k rows go to k distinct experts."""
    np_type = dtype.as_numpy_dtype
    n = tokens * k
    expert_of = np.array([rng.permutation(experts)[:k] for _ in range(tokens)],
                         np.int64).reshape(-1)
    token_of = np.repeat(np.arange(tokens), k)
    if negative_tokens:
        token_of[rng.choice(n, negative_tokens, replace=False)] = -1
    w = {"column": (n, 1), "full": (n, width), "one": (), "none": ()}[scale]
    return [rng.normal(size=(tokens, width)).astype(np_type), expert_of.astype(np.int32),
            token_of.astype(np.int32), rng.uniform(0.1, 1.0, size=w).astype(np_type),
            (rng.normal(size=(experts, width, width)) / width).astype(np_type)]


#: what fuses per scale: a column's gradient is a row-wise dot (_ProductSum); a full or
#: one-element scale's is a plain product or a total sum, which read the merged rows
#: (they stay, and so do the nodes around them); without a scale the gradient picks the
#: gathered rows directly
FUSES = {"column": FUSED, "full": set(), "one": set(), "none": {"_StitchSegmentSum"}}


@pytest.mark.parametrize("dtype", [gf.float32, gf.float64])
@pytest.mark.parametrize("scale,scale_first", [("column", False), ("column", True),
                                               ("full", False), ("one", True), ("none", False)])
def test_fused_gives_the_graphs_bits(dtype, scale, scale_first):
    rng = np.random.default_rng(7)
    feeds = _feeds(dtype, 4, 8, 37, 2, scale, rng)
    build = _moe(dtype, 4, 8, scale, scale_first)
    fast, types = run_calls(build, feeds)
    slow, _ = run_calls(build, feeds, optimize=False)
    assert fast == slow
    assert FUSED & set(types) == FUSES[scale]
    assert ("DynamicStitch" in types) == (not FUSES[scale])
    assert "_StitchWinners" not in types  # the indices of a partitioned range are distinct


@settings(max_examples=25, deadline=None)
@given(experts=st.integers(1, 5), k=st.integers(1, 3), tokens=st.integers(0, 40),
       width=st.sampled_from([1, 3, 8, 13]), negatives=st.integers(0, 3),
       seed=st.integers(0, 2 ** 16))
def test_any_routing_gives_the_graphs_bits(experts, k, tokens, width, negatives, seed):
    """Any top-k routing (a part may be empty, a segment may have 3 rows, rows with a
    negative token id drop), bit for bit the graph's."""
    k = min(k, experts)
    rng = np.random.default_rng(seed)
    feeds = _feeds(gf.float32, experts, width, tokens, k, "column", rng,
                   negative_tokens=min(negatives, tokens * k))
    build = _moe(gf.float32, experts, width)
    fast, _ = run_calls(build, feeds)
    slow, _ = run_calls(build, feeds, optimize=False)
    assert fast == slow


def test_covered_calls_run_the_loops_not_the_members(monkeypatch):
    """Every call of a valid routing runs the fused loops (the members would raise)."""
    rng = np.random.default_rng(9)
    feeds = _feeds(gf.float32, 5, 6, 30, 2, "column", rng)
    slow, _ = run_calls(_moe(gf.float32, 5, 6), feeds, optimize=False)

    def no_members(*args):
        raise AssertionError("a covered call ran the members")
    monkeypatch.setattr(fused_elementwise, "members_runner", no_members)
    fast, types = run_calls(_moe(gf.float32, 5, 6), feeds, calls=5)
    assert fast == slow + slow[:2] and FUSED <= set(types)


def test_an_expert_id_out_of_range_is_the_partitions_error_and_the_session_recovers():
    rng = np.random.default_rng(3)
    good = _feeds(gf.float32, 4, 8, 20, 2, "column", rng)
    bad = list(good)
    bad[1] = good[1].copy()
    bad[1][5] = 4
    s = gf.Scope(gf.Graph())
    fetches, placeholders = _moe(gf.float32, 4, 8)(s)
    with gf.Session(s.graph) as sess:
        f = sess.make_callable(fetches, placeholders)
        first = bits(f(*good))
        for _ in range(CALLS):
            f(*good)
        with pytest.raises(gf.errors.InvalidArgumentError, match=r"partitions\[5\] = 4 is not in \[0, 4\)"):
            f(*bad)
        assert bits(f(*good)) == first


def test_a_token_id_past_the_segments_is_the_segment_sums_error():
    """A row whose token id is past num_segments: the fused node runs its members, and
    the UnsortedSegmentSum raises, naming itself, as the unfused plan does."""
    rng = np.random.default_rng(4)
    feeds = _feeds(gf.float32, 3, 4, 10, 2, "column", rng)
    feeds[2] = feeds[2].copy()
    feeds[2][7] = 10
    messages = []
    for optimize in (True, False):
        s = gf.Scope(gf.Graph())
        fetches, placeholders = _moe(gf.float32, 3, 4)(s)
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            f = sess.make_callable(fetches[:1], placeholders)
            good = list(feeds)
            good[2] = np.repeat(np.arange(10), 2).astype(np.int32)
            for _ in range(CALLS):
                f(*good)
            with pytest.raises(gf.errors.InvalidArgumentError) as caught:
                f(*feeds)
            messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "UnsortedSegmentSum" in messages[0] and "10" in messages[0]


def test_a_stitch_that_is_not_a_permutation_runs_its_members():
    """Duplicate stitch indices (the later part wins) and a row no part fills: the
    graph's values, from the nodes the fused ones stand for."""
    def build(s):
        a = s.placeholder(gf.int32, shape=[None])
        b = s.placeholder(gf.int32, shape=[None])
        da = s.placeholder(gf.float32, shape=[None, 3])
        db = s.placeholder(gf.float32, shape=[None, 3])
        seg = s.placeholder(gf.int32, shape=[None])
        y = s.unsorted_segment_sum(s.dynamic_stitch([a, b], [s.tanh(da), s.tanh(db)]), seg, 2)
        return [y], [a, b, da, db, seg]
    rng = np.random.default_rng(5)
    for a, b in (([0, 1], [1, 2]), ([0, 3], [1])):
        rows = max(a + b) + 1
        feeds = [np.array(a, np.int32), np.array(b, np.int32),
                 rng.normal(size=(len(a), 3)).astype(np.float32),
                 rng.normal(size=(len(b), 3)).astype(np.float32),
                 (np.arange(rows) % 2).astype(np.int32)]
        fast, types = run_calls(build, feeds)
        slow, _ = run_calls(build, feeds, optimize=False)
        assert fast == slow
        assert "_StitchSegmentSum" in types


def test_not_fused_where_the_merged_rows_are_fetched():
    rng = np.random.default_rng(6)
    feeds = _feeds(gf.float32, 3, 4, 9, 2, "column", rng)
    build = _moe(gf.float32, 3, 4, fetch_merged=True)
    fast, types = run_calls(build, feeds)
    slow, _ = run_calls(build, feeds, optimize=False)
    assert fast == slow
    assert "DynamicStitch" in types and "_StitchSegmentSum" not in types \
        and "_StitchProductSum" not in types


def test_parallel_stitch_and_before_the_loops_compile(monkeypatch):
    """ParallelDynamicStitch fuses too; before its loops are compiled a fused node runs
    its members, with the same bits."""
    rng = np.random.default_rng(8)
    feeds = _feeds(gf.float64, 3, 5, 11, 2, "column", rng)
    build = _moe(gf.float64, 3, 5, stitch="parallel_dynamic_stitch")
    slow, _ = run_calls(build, feeds, optimize=False)
    fast, types = run_calls(build, feeds)
    assert fast == slow and FUSED <= set(types)
    for loop in ("_SUM", "_PRODUCTS", "_SCALED"):
        monkeypatch.setattr(stitch_reduce, loop, _NotCompiled())
    members, types = run_calls(build, feeds)
    assert members == slow and FUSED <= set(types)



class _NotCompiled:
    """A loop whose compile has not finished."""

    def ready(self, *args, **kwargs) -> bool:
        return False
