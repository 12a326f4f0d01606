"""Load: many threads building graphs and running sessions at once, threads sharing
one session, and a soak of many small runs with flat memory.

Every result is compared with the same graph run sequentially, element for element.
The soak runs 3000 times in CI; the full 10**5-run soak is marked slow:
``pytest -m slow -s tests/test_load.py`` runs it and prints runs/s and RSS.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError

from support.threads import run_in_threads

THREADS = 32
SECONDS = 1.5  # per load test: bounded time, whatever the machine's speed
FEEDS = 4      # distinct feeds per graph, cycled


def _build(seed: int, n: int = 64):
    """A small graph of the whole op family, shaped by ``seed``: partition / +1 /
    stitch, ScatterNd, TensorScatterAdd (forwarded), GatherNd. Returns the graph,
    its placeholders (x, mask) and a dict of fetches."""
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[n], name="x")
    mask = scope.placeholder(gf.bool, shape=[n], name="mask")
    parts = scope.cast(mask, gf.int32)
    a, b = scope.dynamic_partition(x, parts, num_partitions=2)
    ids = scope.dynamic_partition(scope.range(0, n, 1), parts, num_partitions=2)
    stitched = scope.dynamic_stitch(ids, [a, scope.add(b, float(seed))])
    idx = np.random.default_rng(seed).integers(0, n, size=(n // 2, 1))
    scattered = scope.scatter_nd(idx, scope.gather_nd(stitched, idx), [n])
    added = scope.tensor_scatter_add(scope.mul(scattered, 2.0), idx, scope.gather_nd(x, idx))
    return scope.graph, (x, mask), {"stitched": stitched, "added": added,
                                    "parts": [a, b]}


def _feeds(seed: int, n: int = 64):
    rng = np.random.default_rng(1000 + seed)
    return [(rng.standard_normal(n), rng.random(n) < 0.5) for _ in range(FEEDS)]


def _assert_same(got, want):
    assert got.keys() == want.keys()
    for k in want:
        g, w = (got[k], want[k]) if k != "parts" else (np.concatenate(got[k]),
                                                      np.concatenate(want[k]))
        np.testing.assert_array_equal(g, w)


def _sequential(seed: int) -> list[dict]:
    graph, (x, mask), fetches = _build(seed)
    with gf.Session(graph, gf.SessionConfig(inter_op_threads=1)) as sess:
        return [sess.run(fetches, {x: v, mask: m}) for v, m in _feeds(seed)]


def test_threads_building_and_running_their_own_graphs():
    expected = {seed: _sequential(seed) for seed in range(THREADS)}
    runs = [0] * THREADS
    deadline = time.perf_counter() + SECONDS

    def worker(seed):
        graph, (x, mask), fetches = _build(seed)  # built concurrently with the others
        feeds = _feeds(seed)
        with gf.Session(graph) as sess:
            f = sess.make_callable(fetches, [x, mask])
            while True:
                for i, (v, m) in enumerate(feeds):
                    got = sess.run(fetches, {x: v, mask: m}) if i % 2 else f(v, m)
                    _assert_same(got, expected[seed][i])
                    runs[seed] += 1
                if time.perf_counter() > deadline:
                    break
    assert not run_in_threads(worker, THREADS)
    assert min(runs) >= FEEDS


def test_threads_sharing_one_session():
    n = 1 << 17  # heavy: the plan is parallel, so the pool is shared too
    graph, (x, mask), fetches = _build(7, n)
    feeds = _feeds(7, n)
    with gf.Session(graph, gf.SessionConfig(inter_op_threads=1)) as seq:
        expected = [seq.run(fetches, {x: v, mask: m}) for v, m in feeds]
    small_graph, (sx, smask), small = _build(8)
    small_feeds = _feeds(8)
    with gf.Session(small_graph, gf.SessionConfig(inter_op_threads=1)) as seq:
        small_expected = [seq.run(small, {sx: v, smask: m}) for v, m in small_feeds]
    deadline = time.perf_counter() + SECONDS
    with gf.Session(graph, gf.SessionConfig(inter_op_threads=2)) as sess, \
            gf.Session(small_graph) as small_sess:
        assert sess._plan(list(_flat(fetches)), [x, mask]).parallel
        f = sess.make_callable(fetches, [x, mask])
        g = small_sess.make_callable(small, [sx, smask])

        def worker(t):
            i = t
            while time.perf_counter() < deadline or i < t + FEEDS:
                k = i % FEEDS
                if t % 2:  # half the threads run the heavy graph, half the small one
                    v, m = feeds[k]
                    _assert_same(f(v, m) if i % 2 else sess.run(fetches, {x: v, mask: m}),
                                 expected[k])
                else:
                    v, m = small_feeds[k]
                    _assert_same(g(v, m), small_expected[k])
                    if i % 5 == 0:  # failures from other threads must not disturb anyone
                        with pytest.raises(InvalidArgumentError):
                            small_sess.run(small, {sx: v, smask: m[:3]})
                i += 1
        assert not run_in_threads(worker, 16)


def _flat(fetches):
    for v in fetches.values():
        yield from (v if isinstance(v, list) else [v])


# -- soak -------------------------------------------------------------------------------
def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        return None


def _soak(runs: int, traced: bool) -> dict:
    """``runs`` small runs (run and make_callable alternating; one in 100 fails on a
    bad index) on one session; returns runs/s, RSS and (if ``traced``) the Python
    heap's growth over the second half of the runs."""
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float32, shape=[None])
    idx = scope.placeholder(gf.int32, shape=[None, 1])
    out = scope.tensor_scatter_add(scope.mul(x, 2.0), idx, scope.gather_nd(x, idx))
    total = scope.scatter_nd(idx, scope.gather_nd(out, idx), scope.shape(x))
    v = np.arange(8, dtype=np.float32)
    good, bad = np.array([[4], [3], [1], [7]], np.int32), np.array([[4], [9]], np.int32)
    with gf.Session(scope.graph) as sess:
        f = sess.make_callable(total, [x, idx])
        want = f(v, good)

        def one(i):
            if i % 100 == 99:
                try:
                    sess.run(total, {x: v, idx: bad})
                except InvalidArgumentError:
                    return
                raise AssertionError("a bad index did not fail")
            got = f(v, good) if i % 2 else sess.run(total, {x: v, idx: good})
            if i % 997 == 0:
                np.testing.assert_array_equal(got, want)
        if traced:  # started before the warm-up: tracing's first allocations are not growth
            tracemalloc.start()
        for i in range(1000):  # warm-up: caches, allocator pools
            one(i)
        gc.collect()
        rss_before = _rss_bytes()
        heap = []
        start = time.perf_counter()
        for half in (range(runs // 2), range(runs // 2, runs)):
            gc.collect()  # cyclic garbage not collected yet is no leak: count what lives
            heap.append(tracemalloc.get_traced_memory()[0] if traced else 0)
            for i in half:
                one(i)
        elapsed = time.perf_counter() - start
        gc.collect()
        heap.append(tracemalloc.get_traced_memory()[0] if traced else 0)
        if traced:
            tracemalloc.stop()
        rss_after = _rss_bytes()
        # A leak grows the heap in both halves alike; free lists filling up (tuples,
        # numpy's caches) only in the first.
        heap_growth = heap[2] - heap[1] if traced else None
    return {"runs": runs, "seconds": elapsed, "runs_per_s": runs / elapsed,
            "rss_before": rss_before, "rss_after": rss_after, "heap_growth": heap_growth}


def _report(figures: dict) -> None:
    mb = lambda b: "n/a" if b is None else f"{b / 2 ** 20:.1f} MB"  # noqa: E731
    heap = figures["heap_growth"]
    print(f"\nsoak: {figures['runs']} runs in {figures['seconds']:.2f} s "
          f"({figures['runs_per_s']:.0f} runs/s); RSS {mb(figures['rss_before'])} -> "
          f"{mb(figures['rss_after'])}" + ("" if heap is None else
                                          f"; traced heap growth over the second half "
                                          f"{heap} bytes"))


def test_soak_short(tmp_path):
    """In a process of its own: tracemalloc sees every thread, and a test cluster's
    event loop (tests/conftest.py) allocates in the background of this one."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_load; "
            "print(json.dumps(test_load._soak(3000, traced=True)))")
    proc = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    _report(figures)
    assert figures["heap_growth"] < 16 * 1024  # flat: 1500 runs keep < 11 bytes each
    if figures["rss_before"] is not None:
        assert figures["rss_after"] - figures["rss_before"] < 8 * 2 ** 20


@pytest.mark.slow
def test_soak_full():
    """10**5 runs; RSS must stay flat. Run with ``pytest -m slow -s``."""
    figures = _soak(10 ** 5, traced=False)
    _report(figures)
    if figures["rss_before"] is not None:
        assert figures["rss_after"] - figures["rss_before"] < 8 * 2 ** 20
    traced = _soak(10 ** 4, traced=True)
    _report(traced)
    assert traced["heap_growth"] < 16 * 1024


def test_threads_share_compiled_kernels_and_buffer_pools():
    """Eight threads run one plan of compiled (numba, nogil) kernels at once, with
    intermediates big enough to go through the plan's buffer pool: every result is
    exactly the sequential one, and buffers were reused while they ran."""
    n = 1 << 15
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[n], name="x")
    idx = scope.placeholder(gf.int64, shape=[n // 2, 1], name="idx")
    mask = scope.cast(scope.less(x, 0.0), gf.int32)
    a, b = scope.dynamic_partition(x, mask, num_partitions=2)
    rows = scope.dynamic_partition(scope.range(0, n, 1), mask, num_partitions=2)
    stitched = scope.dynamic_stitch(rows, [scope.mul(a, 3.0), scope.add(b, 1.0)])
    scattered = scope.scatter_nd(idx, scope.gather_nd(stitched, idx), [n])
    out = scope.tensor_scatter_add(scope.sub(scope.mul(scattered, 2.0), x), idx,
                                   scope.gather_nd(x, idx))
    rng = np.random.default_rng(7)
    feeds = [(rng.standard_normal(n), rng.integers(0, n, size=(n // 2, 1)))
             for _ in range(FEEDS)]
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1)) as sess:
        want = [sess.run(out, {x: v, idx: i}) for v, i in feeds]
    with gf.Session(scope.graph) as sess:
        f = sess.make_callable(out, [x, idx])

        def worker(t: int) -> None:
            for r in range(40):
                k = (t + r) % FEEDS
                np.testing.assert_array_equal(f(*feeds[k]), want[k])
        errors = run_in_threads(worker, 8)
        assert not errors, errors[0]
        (plan,) = sess._plans.values()
        assert plan.buffers.reused > 0
