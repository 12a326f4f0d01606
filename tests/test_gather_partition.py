"""A gather partitioned runs as one node that writes the rows once, in partition order
(runtime/gather_partition.py): the graph's values and dtypes on every call after the
compile, its errors naming its nodes, not fused where the gathered rows are needed."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from support.plan_steps import bits, step_types

import graphflow as gf

CALLS = 3


def _build(dtype, row_shape, k, fetch_rows=False):
    def build(s):
        params = s.placeholder(dtype, shape=[None, *row_shape])
        ids = s.placeholder(gf.int32, shape=[None])
        partitions = s.placeholder(gf.int32, shape=[None])
        rows = s.gather_v2(params, ids, 0)
        parts = s.dynamic_partition(rows, partitions, k)
        return list(parts) + ([rows] if fetch_rows else []), [params, ids, partitions]
    return build


def _run(build, feeds, optimize=True, calls=CALLS):
    s = gf.Scope(gf.Graph())
    fetches, placeholders = build(s)
    with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
        f = sess.make_callable(fetches, placeholders)
        return [bits(f(*feeds)) for _ in range(calls)], step_types(sess, general=True)


def _feeds(dtype, row_shape, rows, n, k, rng):
    params = (rng.normal(size=(rows, *row_shape)) * 100).astype(dtype.as_numpy_dtype)
    return [params, rng.integers(0, max(rows, 1), n).astype(np.int32),
            rng.integers(0, k, n).astype(np.int32)]


@pytest.mark.parametrize("dtype", [gf.float32, gf.int64, gf.bool_])
@pytest.mark.parametrize("row_shape", [(), (5,), (64,), (2, 3)], ids=str)
def test_fused_gives_the_graphs_values(dtype, row_shape):
    rng = np.random.default_rng(len(row_shape))
    feeds = _feeds(dtype, row_shape, 50, 300, 4, rng)
    fast, types = _run(_build(dtype, row_shape, 4), feeds)
    slow, _ = _run(_build(dtype, row_shape, 4), feeds, optimize=False)
    assert fast == slow
    assert "_GatherPartition" in types and "DynamicPartition" not in types


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 30), n=st.integers(0, 60), k=st.integers(1, 6),
       width=st.integers(0, 9), seed=st.integers(0, 2 ** 16))
def test_any_ids_give_the_graphs_values(rows, n, k, width, seed):
    rng = np.random.default_rng(seed)
    feeds = _feeds(gf.float32, (width,), rows, n, k, rng)
    fast, _ = _run(_build(gf.float32, (width,), k), feeds)
    slow, _ = _run(_build(gf.float32, (width,), k), feeds, optimize=False)
    assert fast == slow


@pytest.mark.parametrize("bad,message", [
    (1, r"indices\[7\] = 50 is not in \[0, 50\) \[node GatherV2\]"),
    (2, r"partitions\[7\] = 4 is not in \[0, 4\) \[node DynamicPartition\]")])
def test_bad_ids_are_the_graphs_errors_and_the_session_recovers(bad, message):
    rng = np.random.default_rng(1)
    feeds = _feeds(gf.float32, (8,), 50, 40, 4, rng)
    wrong = list(feeds)
    wrong[bad] = feeds[bad].copy()
    wrong[bad][7] = 50 if bad == 1 else 4
    s = gf.Scope(gf.Graph())
    fetches, placeholders = _build(gf.float32, (8,), 4)(s)
    with gf.Session(s.graph) as sess:
        f = sess.make_callable(fetches, placeholders)
        first = bits(f(*feeds))
        for _ in range(CALLS):
            f(*feeds)
        with pytest.raises(gf.errors.InvalidArgumentError, match=message):
            f(*wrong)
        assert bits(f(*feeds)) == first
        assert "_GatherPartition" in step_types(sess, general=True)


def test_not_fused_where_the_gathered_rows_are_fetched():
    rng = np.random.default_rng(2)
    feeds = _feeds(gf.float32, (3,), 10, 20, 3, rng)
    fast, types = _run(_build(gf.float32, (3,), 3, fetch_rows=True), feeds)
    slow, _ = _run(_build(gf.float32, (3,), 3, fetch_rows=True), feeds, optimize=False)
    assert fast == slow and "_GatherPartition" not in types


def test_covered_calls_run_the_gather_not_the_members(monkeypatch):
    from graphflow.ops import fused_elementwise
    rng = np.random.default_rng(3)
    feeds = _feeds(gf.float32, (16,), 100, 500, 5, rng)
    slow, _ = _run(_build(gf.float32, (16,), 5), feeds, optimize=False)

    def no_members(*args):
        raise AssertionError("a covered call ran the members")
    monkeypatch.setattr(fused_elementwise, "members_runner", no_members)
    fast, types = _run(_build(gf.float32, (16,), 5), feeds)
    assert fast == slow and "_GatherPartition" in types


def test_before_the_loop_compiles(monkeypatch):
    """Until its loop is compiled the node partitions the ids and gathers them in order:
    the same values, and the same errors."""
    from graphflow.ops import gather_partition

    class NotCompiled:
        def ready(self, *args, **kwargs) -> bool:
            return False
    monkeypatch.setattr(gather_partition, "_GATHER", NotCompiled())
    rng = np.random.default_rng(4)
    feeds = _feeds(gf.int64, (6,), 30, 200, 3, rng)
    fast, types = _run(_build(gf.int64, (6,), 3), feeds)
    slow, _ = _run(_build(gf.int64, (6,), 3), feeds, optimize=False)
    assert fast == slow and "_GatherPartition" in types
    feeds[2] = feeds[2].copy()
    feeds[2][3] = -1
    with pytest.raises(gf.errors.InvalidArgumentError, match=r"partitions\[3\] = -1"):
        _run(_build(gf.int64, (6,), 3), feeds)
