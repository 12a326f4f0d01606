"""Tiered compilation (ops/tiering.py): a fused node whose kernel is not
compiled yet runs its nodes one by one while numba compiles it in the background,
then switches to the compiled kernel; the results are the same bits either way."""
from __future__ import annotations

import time
from concurrent.futures import Future

import numba
import numpy as np
import pytest

import graphflow as gf
from graphflow.runtime import fusion


@pytest.fixture
def tiered(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHFLOW_TIERED", "1")
    monkeypatch.setenv("GRAPHFLOW_CACHE_DIR", str(tmp_path))  # a cold cache
    fusion._KERNELS.clear()
    yield
    fusion._KERNELS.clear()


def _fused_step(sess, fetch, feed):
    plan = sess._plan([fetch], [feed])
    (step,) = [s for s in plan.steps if s.op is not None and s.op.type == "_FusedElementwise"]
    return step


def test_first_call_runs_node_by_node_then_the_compiled_kernel(tiered, scope):
    x = scope.placeholder(gf.float32, shape=[5])
    y = scope.mul(scope.sub(scope.add(x, 1.5), x), 3.0)
    v = np.array([1.0, -0.0, np.nan, 3e38, -7.25], np.float32)
    want = ((v + np.float32(1.5)) - v) * np.float32(3.0)
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1)) as sess:
        f = sess.make_callable(y, [x])
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(f(v), want)  # the nodes' own kernels
        step = _fused_step(sess, y, x)
        assert step.ctx.cache["per_node_runs"] == 1
        deadline = time.monotonic() + 120
        runs = step.ctx.cache["per_node_runs"]
        while True:  # until the background compile is done: then a call adds no run
            with np.errstate(all="ignore"):
                np.testing.assert_array_equal(f(v), want)
            if step.ctx.cache["per_node_runs"] == runs:
                break
            runs = step.ctx.cache["per_node_runs"]
            assert time.monotonic() < deadline, "the background compile never finished"
            time.sleep(0.05)
        for _ in range(3):
            with np.errstate(all="ignore"):
                np.testing.assert_array_equal(f(v), want)
        assert step.ctx.cache["per_node_runs"] == runs  # compiled from now on


def test_off_the_first_call_waits_for_the_compiler(monkeypatch, scope, tmp_path):
    monkeypatch.setenv("GRAPHFLOW_TIERED", "0")
    x = scope.placeholder(gf.int32, shape=[4])
    y = scope.neg(scope.add(x, 2))
    with gf.Session(scope.graph) as sess:
        np.testing.assert_array_equal(sess.run(y, {x: np.arange(4, dtype=np.int32)}),
                                      [-2, -3, -4, -5])
        assert "per_node_runs" not in _fused_step(sess, y, x).ctx.cache


def test_a_graph_run_once_never_starts_the_compiler(tiered, scope):
    """The first call of a fused node runs its nodes and starts no compile (numba would
    share the GIL with it); the second call starts it."""
    from graphflow.ops import tiering
    x = scope.placeholder(gf.float64, shape=[3])
    y = scope.sub(scope.mul(scope.add(x, 0.25), x), 7.0)
    v = np.array([1.0, 2.0, -3.0])
    with gf.Session(scope.graph) as sess:
        f = sess.make_callable(y, [x])
        before = len(tiering._compiling)
        np.testing.assert_array_equal(f(v), (v + 0.25) * v - 7.0)
        assert len(tiering._compiling) == before
        np.testing.assert_array_equal(f(v), (v + 0.25) * v - 7.0)
        assert len(tiering._compiling) == before + 1


def test_a_lean_kernel_of_a_new_signature_is_compiled_away_from_the_call(tiered):
    """A lean kernel whose compiled loop has no code for its argument types yet (a
    specialized plan's scatter of whole rows) writes nothing and leaves the work to the
    full kernel until the loop is compiled in the background; then it writes."""
    from graphflow.ops import scatter_loops, tiering
    add = scatter_loops.checked_row_adder("add", np.dtype(np.uint16))
    out = np.zeros((4, 3), np.uint16)
    column = np.array([1, 3, 1], np.uint8)  # a signature nothing else compiles
    rows = np.arange(9, dtype=np.uint16).reshape(3, 3)
    signature = tuple(numba.typeof(a) for a in (out, column, rows, False))
    if signature in scatter_loops._add_rows_checked.overloads:
        pytest.skip("compiled already in this process")
    for _ in range(tiering.COMPILE_AFTER_CALLS):
        assert add(out, column, rows) is False
        assert not out.any()  # nothing written: the caller's full kernel does the work
    deadline = time.monotonic() + 120
    while not add(out, column, rows):
        assert time.monotonic() < deadline, "the background compile never finished"
        time.sleep(0.05)
    expected = np.zeros((4, 3), np.uint16)
    np.add.at(expected, column, rows)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("cached", [False, True])
def test_a_loop_that_should_not_wait_loads_from_the_disk_cache_never_compiles(tiered, cached,
                                                                            monkeypatch):
    """``Tiered.ready_or_cached`` (a loop whose other way costs far more than a load):
    a kernel numba's disk cache holds is loaded in the call; one it does not hold is
    not compiled in the call (the caller runs the members while it compiles away)."""
    from graphflow.ops import gather_reduce, tiering
    fn = gather_reduce._bucket_by_segment  # not first_bad: test_compile_worker reads its index
    # a signature nothing else asks for (one per case: a second ask starts a compile)
    args = (np.array([3, 1], np.uint32 if cached else np.uint16), 4)
    signature = tuple(numba.typeof(a) for a in args)
    if signature in fn.overloads:
        pytest.skip("compiled already in this process")
    monkeypatch.setattr(tiering, "in_disk_cache", lambda f, sig: cached and sig == signature)
    assert tiering.Tiered(fn).ready_or_cached(*args) is cached
    assert (signature in fn.overloads) is cached


def test_a_loop_the_background_thread_loads_is_not_loaded_in_the_call_too(tiered,
                                                                           monkeypatch):
    """Once a compile of the kernel is under way in the background, ``ready_or_cached``
    leaves the load to it (the caller runs the other way meanwhile), also when the
    worker's compile is in the disk cache already."""
    from graphflow.ops import gather_reduce, tiering
    fn = gather_reduce._bucket_by_segment
    args = (np.array([3, 1], np.int16), 4)
    signature = tuple(numba.typeof(a) for a in args)
    if signature in fn.overloads:
        pytest.skip("compiled already in this process")
    monkeypatch.setattr(tiering, "in_disk_cache", lambda f, sig: True)
    monkeypatch.setitem(tiering._compiling, (fn, signature), Future())  # never done
    assert tiering.Tiered(fn).ready_or_cached(*args) is False
    assert signature not in fn.overloads


def test_a_lean_kernel_asks_again_when_its_inputs_turn_read_only(tiered):
    """Once ready for writeable inputs, a lean kernel's loop given read-only ones (a
    later call's folded constant or segment output: another numba type) is not called
    until that type is compiled in the background: numba never compiles in the call (a
    warm MoE step stalled 400 ms so at its 8th call)."""
    from graphflow.ops import scatter_loops, tiering
    add = scatter_loops.checked_row_adder("add", np.dtype(np.uint16))
    out = np.zeros((4, 3), np.uint16)
    column = np.array([1, 3, 1], np.uint16)  # a signature nothing else compiles
    rows = np.arange(9, dtype=np.uint16).reshape(3, 3)
    frozen_column, frozen_rows = column.copy(), rows.copy()
    frozen_column.flags.writeable = frozen_rows.flags.writeable = False
    signatures = [tuple(numba.typeof(a) for a in (out, c, r, False))
                  for c, r in ((column, rows), (frozen_column, frozen_rows))]
    if any(s in scatter_loops._add_rows_checked.overloads for s in signatures):
        pytest.skip("compiled already in this process")
    deadline = time.monotonic() + 120
    while not add(out, column, rows):
        assert time.monotonic() < deadline, "the background compile never finished"
        time.sleep(0.05)
    out[:] = 0
    calls = 0
    while not add(out, frozen_column, frozen_rows):
        calls += 1
        assert signatures[1] not in scatter_loops._add_rows_checked.overloads \
            or tiering.compiles_pending() == 0
        assert not out.any()
        assert time.monotonic() < deadline, "the background compile never finished"
        time.sleep(0.05)
    assert calls >= tiering.COMPILE_AFTER_CALLS - 1  # it asked, and waited for the compile
    expected = np.zeros((4, 3), np.uint16)
    np.add.at(expected, column, rows)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("build", ["segment_sum", "row_scale"])
def test_lean_kernels_give_the_same_bits_before_and_after_their_loop_compiles(tiered, scope,
                                                                              build):
    """A specialized plan's lean kernels (a segment sum's checked fold, a row times its own
    scalar) do the work another way until their compiled loop is ready, with the same
    bits on every call, before, during and after the background compile."""
    from graphflow.ops import tiering
    x = scope.placeholder(gf.float64, shape=[None, 48])
    if build == "segment_sum":
        y = scope.unsorted_segment_sum(x, np.arange(600) % 7, 7)
    else:
        y = x * scope.reshape(scope.reduce_sum(x, 1), [-1, 1])
    v = np.random.default_rng(3).standard_normal((600, 48))
    with gf.Session(scope.graph, gf.SessionConfig(optimize=False)) as sess:
        want = sess.run(y, {x: v})
    with gf.Session(scope.graph) as sess:
        f = sess.make_callable(y, [x])
        for _ in range(6):
            np.testing.assert_array_equal(f(v), want)
        for future in list(tiering._compiling.values()):
            future.result(timeout=120)
        for _ in range(3):
            np.testing.assert_array_equal(f(v), want)


def test_partition_and_stitch_give_the_same_values_before_their_loops_compile(tiered):
    """DynamicPartition and DynamicStitch run numpy's sort and assignment until their
    loops are compiled in the background (a graph run once never waits for numba), the
    same values either way: the later of duplicate stitch indices wins."""
    from graphflow.ops import partition_loops
    data = np.arange(30, dtype=np.int8).reshape(10, 3)  # rows of 3 bytes: words of 1
    ids = np.array([2, 0, 1, 2, 2, 0, 1, 1, 0, 2], np.int32)
    s = gf.Scope(gf.Graph())
    d = s.placeholder(gf.int8, shape=[10, 3])
    p = s.placeholder(gf.int32, shape=[10])
    parts = s.dynamic_partition(d, p, 3)
    stitched = s.dynamic_stitch([s.constant([3, 1, 3]), s.constant([0, 1, 2])],
                                [parts[0], parts[1]])
    signature = (partition_loops.readonly(ids), 0, ids.size, np.zeros(3, np.int64))
    fresh = tuple(numba.typeof(a) for a in signature) not in \
        partition_loops.count_partitions.overloads
    with gf.Session(s.graph) as sess:
        first = sess.run([*parts, stitched], {d: data, p: ids})
        deadline = time.monotonic() + 120
        while fresh and not partition_loops.count_partitions.overloads:
            assert time.monotonic() < deadline, "the background compile never finished"
            sess.run([*parts, stitched], {d: data, p: ids})
            time.sleep(0.05)
        later = sess.run([*parts, stitched], {d: data, p: ids})
    want = [data[ids == k] for k in range(3)]
    # row 1: the later input wins; row 3: the later of one input's duplicates
    stitch_want = np.stack([want[1][0], want[1][1], want[1][2], want[0][2]])
    for got in (first, later):
        for g, w in zip(got, [*want, stitch_want]):
            np.testing.assert_array_equal(g, w)
