"""Faults: a kernel that raises while other branches run, KeyboardInterrupt inside
a kernel, closing a session with runs in flight.

A failed run must stop promptly (no node starts once the failure is known),
report the first error with its node, leak neither threads nor buffers, and
leave the session able to run again. (tests/test_session.py has the basic
cases; these push on the parallel executor.)
"""
import gc
import threading
import time
import tracemalloc

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import FailedPreconditionError, InternalError, InvalidArgumentError

from support import probe_ops
from support.probe_ops import RAISED, STARTS

N = 1 << 17  # elements: every branch counts as heavy, so the plan is parallel
THREADS = 2
SLEEPERS = 20
SLEEP = 0.05


@pytest.fixture(autouse=True)
def _reset():
    probe_ops.reset()


def _wide_graph(fail="InvalidArgument", fail_delay=0.01, sleep=SLEEP, sleepers=SLEEPERS):
    """x -> [one probe that fails, `sleepers` probes that sleep] -> their sum.
    The failing probe is created (and so submitted) first."""
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[N], name="x")
    bad = scope.reliability_probe(x, fail_delay, fail, name="bad")
    total = bad
    for i in range(sleepers):
        total = scope.add(total, scope.reliability_probe(x, sleep, name=f"sleep{i}"))
    return scope.graph, x, total


def _session(graph, threads=THREADS):
    return gf.Session(graph, gf.SessionConfig(inter_op_threads=threads))


FAIL = np.full(N, -1.0)
GOOD = np.ones(N)


def test_failure_stops_the_run_promptly():
    graph, x, total = _wide_graph()
    with _session(graph) as sess:
        assert sess._plan([total], [x]).parallel
        with pytest.raises(InvalidArgumentError, match=r"x\[0\] is negative \[node bad\]"):
            sess.run(total, {x: FAIL})
        failed_at = RAISED["bad"]
        late = [name for t, name in STARTS if t > failed_at]
        # Only a node whose worker checked for a failure just before it was raised may
        # start after it; the other sleepers never start (counted, not timed: a busy
        # machine stretches wall time, not the number of nodes started).
        assert len(late) <= THREADS - 1, late
        assert len(STARTS) <= THREADS + 1
        probe_ops.reset()
        np.testing.assert_array_equal(sess.run(total, {x: GOOD}), np.full(N, SLEEPERS + 1.0))
        assert len(STARTS) == SLEEPERS + 1


def test_first_error_is_reported_with_node_context():
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[N])
    first = scope.reliability_probe(x, 0.01, "InvalidArgument", name="first")
    second = scope.reliability_probe(x, 0.05, "RuntimeError", name="second")
    line = test_first_error_is_reported_with_node_context.__code__.co_firstlineno + 3
    with _session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError) as info:
            sess.run([second, first], {x: FAIL})
        err = info.value
        assert (err.node_name, err.op_type) == ("first", "ReliabilityProbe")
        assert f"test_faults.py:{line}" in str(err)
        assert set(RAISED) == {"first", "second"}  # both were in flight; the first wins
        with pytest.raises(InternalError, match=r"RuntimeError: probe failed \[node second\]"):
            sess.run(second, {x: FAIL})


@pytest.mark.parametrize("threads", [1, THREADS])
def test_many_failing_runs_leak_no_threads_and_no_buffers(threads):
    graph, x, total = _wide_graph(fail_delay=0.0, sleep=0.0, sleepers=4)
    with _session(graph, threads) as sess:
        assert sess._plan([total], [x]).parallel == (threads > 1)
        for _ in range(20):  # warm up: the pool's threads, plan caches, numpy's allocator
            with pytest.raises(InvalidArgumentError):
                sess.run(total, {x: FAIL})
        threads_before = threading.active_count()
        gc.collect()
        gc.disable()  # a reference cycle holding a run's buffers would show as growth
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(200):
                try:
                    sess.run(total, {x: FAIL})
                except InvalidArgumentError:
                    pass
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
            gc.enable()
        assert grown < N * 8, f"{grown} bytes kept by 200 failed runs"  # not one buffer
        assert threading.active_count() == threads_before
        np.testing.assert_array_equal(sess.run(total, {x: GOOD}), np.full(N, 5.0))


def test_sessions_opened_and_closed_leak_no_threads():
    graph, x, total = _wide_graph(fail_delay=0.0, sleep=0.0, sleepers=3)
    baseline = threading.active_count()
    for _ in range(20):
        with _session(graph) as sess:
            with pytest.raises(InvalidArgumentError):
                sess.run(total, {x: FAIL})
            sess.run(total, {x: GOOD})
    assert threading.active_count() == baseline


@pytest.mark.parametrize("threads", [1, THREADS])
def test_keyboard_interrupt_in_a_kernel_propagates(threads):
    graph, x, total = _wide_graph(fail="KeyboardInterrupt", sleepers=4)
    with _session(graph, threads) as sess:
        for _ in range(2):
            probe_ops.reset()
            with pytest.raises(KeyboardInterrupt):
                sess.run(total, {x: FAIL})
            late = [name for t, name in STARTS if t > RAISED["bad"]]
            assert len(late) <= threads - 1, late
            np.testing.assert_array_equal(sess.run(total, {x: GOOD}), np.full(N, 5.0))
        f = sess.make_callable(total, [x])
        with pytest.raises(KeyboardInterrupt):
            f(FAIL)
        assert f(GOOD)[0] == 5.0
    assert sess.closed  # close() did not wait for a run that never ended


def test_closed_session_refuses_runs_and_callables():
    graph, x, total = _wide_graph(sleep=0.0, sleepers=2)
    sess = _session(graph)
    f = sess.make_callable(total, [x])
    assert f(GOOD)[0] == 3.0
    sess.close()
    sess.close()  # closing twice is harmless
    with pytest.raises(FailedPreconditionError, match="closed Session"):
        sess.run(total, {x: GOOD})
    with pytest.raises(FailedPreconditionError, match="closed Session"):
        f(GOOD)


def test_close_waits_for_parallel_runs_from_many_threads():
    graph, x, total = _wide_graph(sleep=0.02, sleepers=4)
    sess = _session(graph)
    started = threading.Barrier(5)
    results, refused, others = [], [], []

    def worker(i):
        started.wait()
        try:
            for _ in range(50):
                feed = FAIL if i == 0 else GOOD  # one thread keeps failing meanwhile
                try:
                    results.append(sess.run(total, {x: feed})[0])
                except InvalidArgumentError:
                    pass
        except FailedPreconditionError:
            refused.append(i)
        except BaseException as e:  # noqa: BLE001
            others.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.1)
    sess.close()
    closed_at = time.perf_counter()
    for t in threads:
        t.join()
    assert not others
    assert max(t for t, _ in STARTS) < closed_at  # no kernel ran after close() returned
    assert sorted(refused) == [0, 1, 2, 3]  # every thread was refused, none hung
    assert results and all(r == 5.0 for r in results)
