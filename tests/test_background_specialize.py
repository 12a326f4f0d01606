"""A shape-specialized plan is built on a background thread (runtime/executor.py,
ops/background.py) while the general plan runs the calls: building it
never stalls a call. The general plan's runs meanwhile start no compile (its kernels
are not the ones that will run), and what goes wrong in the build leaves the general
plan running, in its words."""
from __future__ import annotations

import sys
import time

import numba
import numpy as np
import pytest

import graphflow as gf
from graphflow.ops import background, tiering
from graphflow.runtime import executor


@pytest.fixture
def tiered(monkeypatch):
    """Tiered compilation on, with the suite's kernel cache (a compile worker started
    with another cache folder would fill that one for the rest of the session)."""
    monkeypatch.setenv("GRAPHFLOW_TIERED", "1")


def _wait_for_background(deadline_s: float = 120) -> None:
    deadline = time.monotonic() + deadline_s
    while tiering.compiles_pending():
        assert time.monotonic() < deadline, "the background work never finished"
        time.sleep(0.02)


def _model(scope):
    """A [None, 3] feed whose Shape-driven Reshape folds once the shape is known."""
    x = scope.placeholder(gf.float32, shape=[None, 3])
    flat = scope.reshape(x, scope.stack([scope.multiply(scope.shape(x)[0], 3)]))
    return x, scope.reduce_sum(scope.multiply(scope.add(flat, 1.0), 2.0))


def _reference(v: np.ndarray) -> np.float32:
    return np.sum((v.reshape(-1) + np.float32(1)) * np.float32(2), dtype=np.float32)


def test_the_second_call_runs_the_general_plan_while_the_specialized_one_is_built(
        tiered, scope):
    x, y = _model(scope)
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1)) as sess:
        f = sess.make_callable(y, [x])
        plan = sess._plan([y], [x])
        for _ in range(2):
            np.testing.assert_allclose(f(v), _reference(v), rtol=1e-6)
        assert plan.specialized == {}  # call 2 ran the general plan; the build is elsewhere
        _wait_for_background()
        for _ in range(4):  # the 3rd and later calls: the specialized plan, compiled
            np.testing.assert_allclose(f(v), _reference(v), rtol=1e-6)
        (built,) = plan.specialized.values()
        assert isinstance(built, executor.Plan) and built is not plan


def test_a_build_that_fails_leaves_the_general_plan_running(tiered, scope, monkeypatch):
    real = executor.compile_ir

    def failing(*args, feed_shapes=None, **kwargs):
        if feed_shapes is not None:
            raise RuntimeError("a pass broke")
        return real(*args, **kwargs)

    monkeypatch.setattr(executor, "compile_ir", failing)
    x, y = _model(scope)
    v = np.ones((2, 3), np.float32)
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1)) as sess:
        f = sess.make_callable(y, [x])
        for _ in range(2):
            np.testing.assert_allclose(f(v), _reference(v))
        _wait_for_background()
        for _ in range(3):
            np.testing.assert_allclose(f(v), _reference(v))
        assert list(sess._plan([y], [x]).specialized.values()) == [None]


def test_the_general_plans_errors_are_its_own_while_standing_in(tiered, scope):
    ids = scope.placeholder(gf.int32, shape=[None, 1])
    y = scope.scatter_nd(ids, scope.ones_like(scope.cast(ids, gf.float32))[:, 0], [4])
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1)) as sess:
        f = sess.make_callable(y, [ids])
        good = np.array([[0], [3]], np.int32)
        np.testing.assert_array_equal(f(good), [1, 0, 0, 1])
        with pytest.raises(gf.errors.InvalidArgumentError, match="ScatterNd"):
            f(np.array([[0], [9]], np.int32))  # the general plan, standing in
        np.testing.assert_array_equal(f(good), [1, 0, 0, 1])
        _wait_for_background()
        for _ in range(3):
            np.testing.assert_array_equal(f(good), [1, 0, 0, 1])


@numba.njit(cache=False)
def _twice(a):
    return a * 2


def test_a_run_standing_in_starts_no_compile(tiered):
    args = (np.ones(3),)
    with tiering.standing_in():
        for _ in range(tiering.COMPILE_AFTER_CALLS + 1):
            assert not tiering.compiled_for(_twice, args)
    signature = tiering._signature(_twice, args)
    assert (_twice, signature) not in tiering._compiling
    assert (_twice, signature) not in tiering._asked  # nor counted towards one
    for _ in range(tiering.COMPILE_AFTER_CALLS):
        tiering.compiled_for(_twice, args)
    assert (_twice, signature) in tiering._compiling  # asked as often outside: it starts
    _wait_for_background()
    assert tiering.compiled_for(_twice, args)


def test_background_work_is_paced_to_its_share(monkeypatch):
    slept = []
    monkeypatch.setattr(background.time, "sleep", slept.append)

    def work():
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
        background.pace()
        return "done"

    assert background.in_background(work).result(timeout=60) == "done"
    (pause,) = slept
    assert pause >= 0.02 * (1 / background.BACKGROUND_SHARE - 1) * 0.99
    background.pace()  # on the caller's thread: nothing
    assert len(slept) == 1


def test_short_switch_intervals_nest_across_threads():
    usual = sys.getswitchinterval()
    first, second = background.switching_often(), background.switching_often()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # left first, while the other is still inside
    assert sys.getswitchinterval() <= background.SWITCH_INTERVAL_S
    second.__exit__(None, None, None)
    assert sys.getswitchinterval() == usual


def test_a_parallel_plan_stands_in_serially_with_its_values(tiered, scope):
    """A plan that runs its heavy steps on the pool stands in on the calling thread (its
    straight-line function, which releases each value after its last reader)."""
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    x = scope.placeholder(gf.float32, shape=[None, 512])
    y = scope.add(scope.reduce_sum(scope.relu(scope.matmul(x, w1))),
                  scope.reduce_sum(scope.relu(scope.matmul(x, w2))))
    v = rng.standard_normal((512, 512)).astype(np.float32)
    want = np.maximum(v @ w1, 0).sum() + np.maximum(v @ w2, 0).sum()
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=2)) as sess:
        f = sess.make_callable(y, [x])
        plan = sess._plan([y], [x])
        assert plan.parallel and plan._serial is None
        np.testing.assert_allclose(f(v), want, rtol=1e-4)
        assert plan._serial is not None  # made after call 1, for the calls standing in
        np.testing.assert_allclose(f(v), want, rtol=1e-4)
        assert plan.specialized == {}  # call 2 stood in
        _wait_for_background()
        for _ in range(3):
            np.testing.assert_allclose(f(v), want, rtol=1e-4)
        assert len(plan.specialized) == 1
