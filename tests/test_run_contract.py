"""What a run promises, whatever the plan compiler made of the graph (compiled
segments, shape-specialized plans, simplification, the buffer pool), checked on the
calls users make after everything compiled:

- a fetched Operation runs once per call, also when values that wait on it are fetched;
- a fetched array is the caller's own: it shares no memory with a feed, a constant, a
  variable or another fetch, unless it is read-only;
- a call that fails costs no memory: the process making many stays flat;
- a plan's caches are bounded, and an internal failure is never the user's error.

Compiled segments are on here (tests/conftest.py turns them off elsewhere); graphs
keep to a few fixed shapes so that their segments' sources repeat and compile once.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba.core.runtime import _nrt_python, rtsys

import graphflow as gf
from graphflow.errors import InternalError, InvalidArgumentError, OpError
from graphflow.runtime import memory
from graphflow.runtime.specialize import MAX_SIGHTINGS

CALLS = 5  # the first call runs the steps one by one, the second compiles, then the rest
SLOW = settings(max_examples=12, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def segments_on(monkeypatch):
    monkeypatch.setenv("GRAPHFLOW_SEGMENTS", "1")


def _segments_ran(sess) -> bool:
    plans = [p for plan in sess._plans.values()
             for p in [plan, *(q for q in plan.specialized.values() if q is not None)]]
    return any(seg.runs for p in plans for seg in p.segments)


# -- 1. a fetched Operation runs once per call ------------------------------------------------
@pytest.mark.parametrize("segments", ["1", "0"])
@pytest.mark.parametrize("ids_shape", [[None, 1], [1, 1]], ids=["specialized", "static"])
def test_a_fetched_update_runs_once_per_call(monkeypatch, segments, ids_shape):
    monkeypatch.setenv("GRAPHFLOW_SEGMENTS", segments)
    s = gf.Scope(gf.Graph())
    table = s.variable(np.zeros((4, 2), np.float32))
    ids = s.placeholder(gf.int32, shape=ids_shape)
    upd = s.placeholder(gf.float32, shape=[None, 2])
    step = table.scatter_nd_add(ids, upd)
    with gf.Session(s.graph) as sess:
        sess.run(table.initializer)
        f = sess.make_callable([step.op, step.read()], [ids, upd])
        rows = [f(np.array([[1]], np.int32), np.ones((1, 2), np.float32))[1][1, 0]
                for _ in range(CALLS)]
    assert rows == [1, 2, 3, 4, 5]  # TF and optimize=False


def test_a_training_loop_applies_its_gradient_once_per_call():
    """``sess.run([train, with_control_dependencies([train]).identity(w)])`` with a
    partially known batch: one step per call, as optimize=False and TF."""
    def losses(optimize):
        s = gf.Scope(gf.Graph())
        w = s.variable(np.array([1.0, -2.0, 0.5, 3.0], np.float32), name="w")
        x = s.placeholder(gf.float32, shape=[None, 4])
        loss = s.reduce_sum(s.mul(s.mul(x, w), s.mul(x, w)))
        train = gf.train.GradientDescentOptimizer(0.01).minimize(loss)
        after = s.with_control_dependencies([train]).identity(w)
        xv = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            sess.run(w.initializer)
            return [sess.run([train, after], {x: xv})[1] for _ in range(CALLS)]
    for got, want in zip(losses(True), losses(False)):
        np.testing.assert_array_equal(got, want)


_UPDATES = ["scatter_nd_add", "scatter_nd_sub", "scatter_nd_max", "scatter_nd_update",
            "assign_add"]


def _apply(kind: str, table: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> None:
    if kind == "assign_add":
        table += np.float32(1)
        return
    rows = rows * np.float32(1.5)
    if kind == "scatter_nd_update":
        table[ids[:, 0]] = rows  # ids are distinct: no last-writer question
    else:
        ufunc = {"scatter_nd_add": np.add, "scatter_nd_sub": np.subtract,
                 "scatter_nd_max": np.maximum}[kind]
        ufunc.at(table, ids[:, 0], rows)


@SLOW
@given(kinds=st.lists(st.sampled_from(_UPDATES), min_size=1, max_size=2),
       fetch_ops=st.booleans(), read_after=st.booleans(), specialized=st.booleans(),
       n=st.integers(1, 3))
def test_property_fetched_updates_run_once_per_call(kinds, fetch_ops, read_after, specialized,
                                                    n):
    """(c) Any mix of fetched update Operations, their values read after them and a read
    under a control dependency: each update runs once per call, on every call."""
    s = gf.Scope(gf.Graph())
    start = np.arange(12, dtype=np.float32).reshape(6, 2)
    table = s.variable(start)
    ids = s.placeholder(gf.int32, shape=[None, 1] if specialized else [n, 1])
    rows = s.placeholder(gf.float32, shape=[None, 2] if specialized else [n, 2])
    fetches = []
    for kind in kinds:  # each update after a lowered step: together, a compiled segment
        update = table.assign_add(np.ones((6, 2), np.float32)) if kind == "assign_add" \
            else getattr(table, kind)(ids, s.mul(rows, np.float32(1.5)))
        fetches += [update.op] if fetch_ops else []
        fetches += [update.read()] if read_after else []
        s = s.with_control_dependencies([update.op])
    fetches.append(s.identity(table))
    idv = np.arange(n, dtype=np.int32)[::-1].reshape(n, 1) + 1
    rowv = np.linspace(-3, 3, 2 * n, dtype=np.float32).reshape(n, 2)
    want = start.copy()
    with gf.Session(s.graph) as sess:
        sess.run(table.initializer)
        f = sess.make_callable(fetches, [ids, rows])
        for _ in range(CALLS):
            got = f(idv, rowv)[-1]
            for kind in kinds:
                _apply(kind, want, idv, rowv)
            np.testing.assert_array_equal(got, want)


# -- 2, 3, 6. a fetched array is the caller's own ------------------------------------------------
def test_a_fetched_view_of_a_feed_from_a_segment_is_not_the_callers_array():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[6])
    z = s.reshape(s.expand_dims(s.reshape(x, [2, 3]), 0), [3, 2])
    with gf.Session(s.graph) as sess:
        f = sess.make_callable(z, [x])
        xv = np.arange(6, dtype=np.float32)
        for _ in range(CALLS):
            got = f(xv)
        assert _segments_ran(sess)
        assert got.flags.writeable is False or not np.shares_memory(got, xv)
        if got.flags.writeable:
            got[0, 0] = 99
        assert xv[0] == 0


@pytest.mark.parametrize("waits", [False, True], ids=["preloaded", "control-input"])
def test_a_fetched_view_of_a_constant_cannot_change_later_runs(waits):
    s = gf.Scope(gf.Graph())
    start = s.no_op() if waits else None
    c_scope = s.with_control_dependencies([start]) if waits else s
    c = c_scope.constant(np.zeros(400_000, np.float32))
    y = s.expand_dims(s.reshape(c, [400, 1000]), 0)
    with gf.Session(s.graph) as sess:
        f = sess.make_callable(y, [])
        for _ in range(CALLS):
            got = f()
            if got.flags.writeable:
                got += 100
            assert f()[0, 0, 0] == 0
    with gf.Session(s.graph, gf.SessionConfig(optimize=False)) as fresh:
        assert fresh.run(y)[0, 0, 0] == 0  # the graph's own value is as built


@pytest.mark.parametrize("optimize", [True, False])
def test_two_fetches_are_two_arrays(optimize):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[3])
    y = s.add(x, 1.0)
    with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
        for _ in range(CALLS):
            a, b, c, r = sess.run([y, s.mul(y, 1.0), y, s.reshape(y, [1, 3])],
                                  {x: np.ones(3, np.float32)})
            for p, q in [(a, b), (a, c), (b, c), (a, r), (b, r), (c, r)]:
                assert not np.shares_memory(p, q)


_VIEWS = ["reshape", "flatten", "expand", "add", "mul", "scatter", "gather", "read"]


@SLOW
@given(ops=st.lists(st.tuples(st.sampled_from(_VIEWS), st.integers(0, 20)),
                    min_size=2, max_size=5),
       fetch=st.lists(st.integers(0, 40), min_size=1, max_size=4),
       specialized=st.booleans())
def test_property_no_fetch_shares_writable_memory(ops, fetch, specialized):
    """(a) Random graphs of the lowered ops over a fed, a constant and a variable input:
    no fetched array shares memory with a feed, the constant, the variable or another
    fetch unless it is read-only, and writing every writable one changes no later call."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[None, 3] if specialized else [2, 3])
    cv = np.arange(6, dtype=np.float32).reshape(2, 3)
    c = s.constant(cv)
    table = s.variable(np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3), name="table")
    ids = s.placeholder(gf.int32, shape=[2, 1])
    values = [x, c, s.gather_nd(table, np.array([[3], [1]], np.int32))]  # all [2, 3]
    views = []  # the inner views, of other shapes: fetched, not operands
    for kind, k in ops:
        h = values[k % len(values)]
        other = values[(k + 1) % len(values)]
        if kind == "reshape":
            views.append(s.reshape(h, [3, 2]))
            values.append(s.reshape(views[-1], [2, 3]))
        elif kind == "flatten":
            views.append(s.reshape(h, [6]))
            values.append(s.reshape(views[-1], [2, 3]))
        elif kind == "expand":
            views.append(s.expand_dims(h, 0))
            values.append(s.squeeze(views[-1], [0]))
        elif kind == "add":
            values.append(s.add(h, other))
        elif kind == "mul":
            values.append(s.mul(h, np.float32(2)))
        elif kind == "scatter":
            values.append(s.tensor_scatter_add(h, ids, s.reshape(other, [2, 3])))
        elif kind == "gather":
            values.append(s.gather_nd(h, ids))
        else:
            views.append(table.read())
    fetchable = values + views
    fetches = [fetchable[k % len(fetchable)] for k in fetch]
    xv = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    idv = np.array([[1], [0]], np.int32)
    with gf.Session(s.graph, gf.SessionConfig(optimize=False)) as plain:
        plain.run(table.initializer)
        want = plain.run(fetches, {x: xv, ids: idv})
    with gf.Session(s.graph) as sess:
        sess.run(table.initializer)
        f = sess.make_callable(fetches, [x, ids])
        state = sess.resources.variable(table.handle.op.name)
        for _ in range(CALLS):
            got = f(xv, idv)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
            writable = [g for g in got if g.flags.writeable]
            for g in writable:
                for held in [xv, idv, cv, c.op.attrs["value"], state.value]:
                    assert not np.shares_memory(g, held)
                assert sum(np.shares_memory(g, other) for other in got) == 1  # itself
            for g in writable:
                g[...] = 7


# -- 4. failing calls cost no memory -----------------------------------------------------------
def _gather_step(s):
    p = s.placeholder(gf.float32, shape=[1 << 16])
    ids = s.placeholder(gf.int32, shape=[4, 1])
    return s.add(s.gather_nd(s.reshape(s.mul(p, 2.0), [1 << 16, 1]), ids), 1.0), p, ids


def test_a_call_failing_inside_a_segment_leaks_nothing():
    """numba emits no cleanup when compiled code raises: a lowering must not raise. Every
    fed array of a failing call is freed, and numba's allocations balance."""
    _nrt_python.memsys_enable_stats()
    s = gf.Scope(gf.Graph())
    y, p, ids = _gather_step(s)
    bad = np.full((4, 1), 1 << 20, np.int32)
    with gf.Session(s.graph) as sess:
        f = sess.make_callable(y, [p, ids])
        for _ in range(CALLS):
            f(np.ones(1 << 16, np.float32), np.zeros((4, 1), np.int32))
        assert _segments_ran(sess)
        gc.collect()
        before = rtsys.get_allocation_stats()
        fed = []
        for _ in range(20):
            value = np.ones(1 << 16, np.float32)
            fed.append(weakref.ref(value))
            with pytest.raises(InvalidArgumentError, match="does not index into"):
                f(value, bad)
            del value
        gc.collect()
        after = rtsys.get_allocation_stats()
        assert [r() for r in fed] == [None] * 20, "a failing call kept its feed"
        assert after.alloc - before.alloc == after.free - before.free
        assert after.mi_alloc - before.mi_alloc == after.mi_free - before.mi_free


@SLOW
@given(calls=st.lists(st.tuples(st.integers(-6, 9), st.integers(0, 7)), min_size=4,
                      max_size=10))
def test_property_failing_calls_keep_memory_flat(calls):
    """(b) Calls with ids in and out of bounds, in any order, after the compile: each
    gives optimize=False's result or error, and numba's allocations balance."""
    _nrt_python.memsys_enable_stats()
    s = gf.Scope(gf.Graph())
    table = s.variable(np.arange(16, dtype=np.float32).reshape(8, 2), name="table")
    ids = s.placeholder(gf.int32, shape=[2, 1])
    rows = s.add(s.gather_nd(table, ids), np.float32(1))
    step = table.scatter_nd_add(ids, s.mul(rows, np.float32(0.5)))
    fetches = [step.op, s.with_control_dependencies([step.op]).identity(table)]

    def outcomes(optimize):
        results = []
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            sess.run(table.initializer)
            f = sess.make_callable(fetches, [ids])
            for _ in range(CALLS):  # compiled from here on
                f(np.array([[0], [1]], np.int32))
            # no gc.collect(): what a call allocates is freed by reference counts alone
            before = rtsys.get_allocation_stats()
            for a, b in calls:
                try:
                    results.append(("ok", f(np.array([[a], [b]], np.int32))[1].tolist()))
                except OpError as e:
                    results.append(("error", type(e).__name__, e.node_name))
            after = rtsys.get_allocation_stats()
            assert after.alloc - before.alloc == after.free - before.free
        return results
    assert outcomes(True) == outcomes(False)


# -- 5, 8. bounded caches, internal failures -------------------------------------------------------
def test_signatures_seen_once_are_bounded():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[None])
    y = s.add(x, 1.0)
    with gf.Session(s.graph) as sess:
        f = sess.make_callable(y, [x])
        for n in range(4 * MAX_SIGHTINGS):
            np.testing.assert_array_equal(f(np.zeros(n, np.float32)), np.ones(n, np.float32))
        (plan,) = sess._plans.values()
        assert len(plan._sightings) <= MAX_SIGHTINGS


def test_the_pool_evicts_past_a_shape_whose_buffers_were_taken():
    """Past its limit the pool drops the least recently released shapes; one whose
    buffers were all taken again (an empty list) is skipped, not popped from."""
    pool = memory.BufferPool(limit=3 << 16)
    big, other = (1 << 13,), (1 << 14,)  # 64 KiB and 128 KiB of float64
    f8 = np.dtype(np.float64)
    for shape in (big, other):
        assert pool.take(shape, f8) is None  # asked for: the pool keeps these shapes
    pool.give(np.empty(big))
    assert pool.take(big, f8) is not None  # its list is empty now, and first in line
    pool.give(np.empty(other))
    pool.give(np.empty(other))  # 256 KiB > 192 KiB: an eviction
    assert pool.nbytes <= pool.limit


def test_an_internal_failure_is_not_the_users_error(monkeypatch):
    def broken(self, buffer):
        raise IndexError("pop from empty list")
    monkeypatch.setattr(memory.BufferPool, "give", broken)
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[1 << 16])
    y = s.mul(s.add(s.mul(x, 2.0), 1.0), s.sub(x, 1.0))  # intermediates the pool takes
    with gf.Session(s.graph, gf.SessionConfig(optimize=False)) as sess:
        with pytest.raises(InternalError, match="buffer pool"):
            for _ in range(CALLS):
                sess.run(y, {x: np.ones(1 << 16, np.float32)})


# -- 7, 9. bits and words ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [gf.complex64, gf.complex128])
@pytest.mark.parametrize("op", ["mul", "real_div"])
def test_complex_identities_keep_the_bits(op, dtype):
    """``x * 1`` and ``x / 1`` are not identities for complex numbers: (inf+0j) * 1 is
    inf+nanj, as TF's kernels (and optimize=False) compute it."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(dtype, shape=[3])
    y = getattr(s, op)(x, s.constant(np.ones(3), dtype=dtype))
    xv = np.array([complex(np.inf, 0), complex(-0.0, 1), complex(np.nan, -0.0)],
                  dtype.as_numpy_dtype)
    got = [gf.Session(s.graph, gf.SessionConfig(optimize=o)).run(y, {x: xv}) for o in (True, False)]
    assert got[0].tobytes() == got[1].tobytes()


def test_squeeze_and_expand_dims_out_of_range_in_tensorflows_words():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[2, 3])
    with pytest.raises(InvalidArgumentError,
                       match=r"Tried to squeeze dim index 5 for tensor with 2 dimensions\."):
        s.squeeze(x, [5])
    with pytest.raises(InvalidArgumentError,
                       match=r"Tried to expand dim index 4 for tensor with 2 dimensions\."):
        s.expand_dims(x, 4)


def test_a_control_edge_from_a_fed_placeholder_waits_for_nothing():
    """TF keeps the edge to the feed: waiting on a fed Placeholder needs no kernel of it
    (graphflow ran it, which asked to be fed; apply_gradients of a fed gradient did)."""
    s = gf.Scope(gf.Graph())
    p = s.placeholder(gf.float32, shape=[2])
    y = s.with_control_dependencies([p.op]).add(s.constant(np.ones(2, np.float32)), 1.0)
    for optimize in (True, False):
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            np.testing.assert_array_equal(sess.run(y, {p: np.zeros(2, np.float32)}), [2, 2])
            with pytest.raises(InvalidArgumentError, match="must feed a value"):
                sess.run(y)  # not fed: the edge still needs it, as in TF


# -- serial or parallel, by measurement ---------------------------------------------------------
def _two_heavy_branches(s):
    x = s.placeholder(gf.float32, shape=[1 << 17])
    return [s.mul(s.add(x, 1.0), 2.0), s.sub(s.mul(x, x), 0.5)], x


def _drive(modes, seconds_of, calls: int) -> list[str]:
    """The modes of ``calls`` calls of a RunModes whose calls take ``seconds_of(mode)``."""
    ran = []
    for _ in range(calls):
        mode, timed = modes.next_call(serial_ready=True)
        ran.append(mode)
        if timed:
            modes.record(mode, seconds_of(mode))
    return ran


def test_a_wrong_mode_choice_is_undone_once_the_other_mode_is_faster(monkeypatch):
    """A choice made on a disturbed measurement (serial looked slower) is checked again:
    one call in RECHECK_CALLS runs the other mode, and once its median beats the
    chosen one's by the margin, it takes over; a mode that stays slower never does."""
    from graphflow.runtime import run_modes
    monkeypatch.delenv("GRAPHFLOW_RUN_MODE", raising=False)
    modes = run_modes.RunModes()
    disturbed = {"serial": 0.030, "parallel": 0.025}
    _drive(modes, disturbed.get, run_modes.WARMUP_CALLS + 2 * run_modes.SAMPLES)
    assert modes.choice == "parallel"
    steady = {"serial": 0.017, "parallel": 0.025}
    ran = _drive(modes, steady.get, 3 * run_modes.RECHECK_CALLS)
    assert modes.choice == "serial"
    after = ran[ran.index("serial") + run_modes.SAMPLES:]  # the checks that switched it
    # then parallel runs only as the rare check
    assert after.count("parallel") <= len(after) // run_modes.RECHECK_CALLS + 1
    # the slower mode never takes over again, however often it is checked
    _drive(modes, steady.get, 5 * run_modes.RECHECK_CALLS)
    assert modes.choice == "serial"


def test_background_work_that_outlasts_the_measurement_still_gets_a_measured_choice(
        monkeypatch):
    """Calls beside background compiles are not timed; past MAX_MEASURED_CALLS they are,
    so the choice rests on times (serial here), never on none."""
    from graphflow.runtime import run_modes
    monkeypatch.delenv("GRAPHFLOW_RUN_MODE", raising=False)
    monkeypatch.setattr(run_modes, "compiles_pending", lambda: 1)  # never done
    modes = run_modes.RunModes()
    speed = {"serial": 0.010, "parallel": 0.015}
    _drive(modes, speed.get, run_modes.MAX_MEASURED_CALLS)
    assert modes.choice is None and not any(modes.measured.values())
    _drive(modes, speed.get, 2 * run_modes.SAMPLES + 2)
    assert modes.choice == "serial"


@pytest.mark.parametrize("forced", ["", "serial", "parallel"])
def test_a_parallel_plan_measures_its_modes_and_keeps_the_bits(monkeypatch, forced):
    """A plan that could run in parallel times both modes after its warm-up calls and
    keeps the faster (runtime/run_modes.py); every call gives the same bits either way,
    and GRAPHFLOW_RUN_MODE fixes the mode."""
    from graphflow.runtime import run_modes
    monkeypatch.setenv("GRAPHFLOW_RUN_MODE", forced)
    s = gf.Scope(gf.Graph())
    fetches, x = _two_heavy_branches(s)
    xv = np.linspace(-3, 3, 1 << 17, dtype=np.float32)
    with gf.Session(s.graph, gf.SessionConfig(optimize=False)) as plain:
        want = plain.run(fetches, {x: xv})
    with gf.Session(s.graph, gf.SessionConfig(inter_op_threads=2)) as sess:
        f = sess.make_callable(fetches, [x])
        (plan,) = sess._plans.values()
        assert plan.parallel and plan.modes is not None
        calls = run_modes.WARMUP_CALLS + 2 * run_modes.SAMPLES + 4
        for _ in range(calls):
            for got, w in zip(f(xv), want):
                assert got.tobytes() == w.tobytes()
        if forced:
            assert plan.modes.choice == forced
        else:
            assert plan.modes.choice in ("serial", "parallel")
            assert all(len(t) == run_modes.SAMPLES for t in plan.modes.measured.values())
