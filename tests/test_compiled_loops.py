"""Compiled while loops (runtime/compiled_loops.py): a While whose cond and body are all
lowered runs as one numba loop, with the step-by-step loop's results bit for bit, its
errors in its words, and the step-by-step loop wherever it cannot be compiled."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.runtime import compiled_loops

CALLS = 4  # the loop's source is generated at its second call, compiled then (untiered)


@pytest.fixture(autouse=True)
def segments_on(monkeypatch):
    """tests/conftest.py turns segments (and with them compiled loops) off elsewhere."""
    monkeypatch.setenv("GRAPHFLOW_SEGMENTS", "1")


def compiled_loops_of(sess: gf.Session) -> list:
    return [loop for plan in sess._plans.values() for loop in plan.functions.compiled_loops()]


def run_both(build, feeds, calls: int = CALLS):
    """Each call's results with optimize (compiled loops) and without, and the compiled
    loops of the optimized session."""
    results = {}
    for optimize in (True, False):
        s = gf.Scope(gf.Graph())
        fetches, placeholders = build(s)
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            step = sess.make_callable(fetches, placeholders)
            results[optimize] = [step(*feeds) for _ in range(calls)]
            if optimize:
                loops = compiled_loops_of(sess)
    return results[True], results[False], loops


def assert_bits_equal(got, want):
    for g_call, w_call in zip(got, want):
        for g, w in zip(g_call, w_call):
            g, w = np.asarray(g), np.asarray(w)
            assert g.dtype == w.dtype and g.shape == w.shape
            assert g.tobytes() == w.tobytes(), (g, w)


def affine(s):
    n = s.placeholder(gf.int32, shape=[], name="n")
    x = s.placeholder(gf.float32, shape=[16], name="x")
    i, y = s.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 0.5 + 1.0), [0, x])
    return [i, y], [n, x]


def fibonacci(s):
    """Loop variables swapped each iteration, int64 and a bool flag."""
    n = s.placeholder(gf.int64, shape=[], name="n")
    out = s.while_loop(lambda k, a, b, odd: k < n,
                       lambda k, a, b, odd: (k + 1, b, a + b, s.logical_not(odd)),
                       [s.constant(np.int64(0)), s.constant(np.int64(0)),
                        s.constant(np.int64(1)), s.constant(False)])
    return list(out), [n]


def bounded(s):
    """maximum_iterations and a captured tensor (a loop variable the body passes on)."""
    x = s.placeholder(gf.float64, shape=[3, 2], name="x")
    scale = s.placeholder(gf.float64, shape=[2], name="scale")
    out = s.while_loop(lambda y: s.reduce_max(y) < 1e6, lambda y: (y * scale + 1.0,),
                       [x], maximum_iterations=40)
    return list(out), [x, scale]


def nested(s):
    """A loop in a loop's body: the inner loop compiles inside the outer body's plan."""
    n = s.placeholder(gf.int32, shape=[], name="n")

    def body(i, total):
        _, inner = s.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + j), [0, total])
        return i + 1, inner
    out = s.while_loop(lambda i, t: i < n, body, [0, 0])
    return list(out), [n]


def propagation(s):
    """Label propagation's loop: rows gathered along edges, summed into nodes (one fused
    gather-scale-sum), scaled, until the largest change is small."""
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 12, 40), rng.integers(0, 12, 40)
    scale = 1.0 / np.maximum(np.bincount(dst, minlength=12), 1).astype(np.float32)[:, None]
    y = s.placeholder(gf.float32, shape=[12, 3], name="y")

    def body(step, labels, change):
        summed = s.unsorted_segment_sum(s.gather_v2(labels, s.constant(src), 0),
                                        s.constant(dst), 12)
        updated = summed * s.constant(scale) * 0.9 + 0.1 * y
        return step + 1, updated, s.reduce_max(s.abs(updated - labels))
    out = s.while_loop(lambda step, labels, change: change > 1e-5, body,
                       [0, y, s.constant(np.float32(np.inf))], maximum_iterations=500)
    return list(out), [y]


LOOPS = [(affine, [np.int32(1000), np.linspace(-3, 3, 16, dtype=np.float32)]),
         (affine, [np.int32(0), np.ones(16, np.float32)]),  # no iteration at all
         (fibonacci, [np.int64(90)]),
         (bounded, [np.arange(6.0).reshape(3, 2), np.array([3.0, -2.5])]),
         (nested, [np.int32(12)]),
         (propagation, [np.random.default_rng(1).random((12, 3), np.float32)])]


@pytest.mark.parametrize("build, feeds", LOOPS,
                         ids=[f"{b.__name__}-{k}" for k, (b, _) in enumerate(LOOPS)])
def test_compiled_loop_matches_step_by_step(build, feeds):
    got, want, loops = run_both(build, feeds)
    assert_bits_equal(got, want)
    assert loops and any(loop.runs for loop in loops), "no loop ran compiled"
    assert all(loop.source is not None for loop in loops if loop.runs)


def test_generated_source_is_kept_and_readable():
    _, _, loops = run_both(affine, LOOPS[0][1])
    (loop,) = loops
    assert "def loop(loop_limit, x0, x1, x2" in loop.source
    assert "while loop_n < loop_limit:" in loop.source


def test_chunks_of_iterations_give_the_same_result(monkeypatch):
    monkeypatch.setattr(compiled_loops, "CHUNK_ITERATIONS", 7)
    got, want, loops = run_both(affine, [np.int32(100), np.ones(16, np.float32)])
    assert_bits_equal(got, want)
    assert any(loop.runs for loop in loops)


def test_an_error_in_a_compiled_body_is_the_step_by_step_loops():
    """A gather index out of range in iteration 3: the compiled loop declines and the loop
    runs again step by step, whose kernel names the node and the iteration."""
    def build(s):
        n = s.placeholder(gf.int32, shape=[], name="n")
        table = s.constant(np.array([1.5, 2.5, 4.0], np.float32))
        out = s.while_loop(lambda i, q: i < n,
                           lambda i, q: (i + 1, q + s.gather_v2(table, i, 0, name="pick")),
                           [0, s.constant(np.float32(0))], name="loop")
        return list(out), [n]

    for optimize in (True, False):
        s = gf.Scope(gf.Graph())
        fetches, placeholders = build(s)
        with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
            step = sess.make_callable(fetches, placeholders)
            for _ in range(CALLS):
                assert [float(v) for v in step(np.int32(3))] == [3, 8.0]
                with pytest.raises(InvalidArgumentError) as info:
                    step(np.int32(5))
                assert info.value.node_name == "pick"
                assert "in iteration 3 of the while loop 'loop' (body)" in str(info.value)
            if optimize:
                assert any(loop.runs for loop in compiled_loops_of(sess))


def test_a_stateful_body_is_not_compiled():
    s = gf.Scope(gf.Graph())
    v = s.variable(np.float32(0), name="v")
    def body(i):
        v.assign_add(1.0)  # ordered in the body by its automatic control dependencies
        return (i + 1,)
    out = s.while_loop(lambda i: i < 5, body, [0])
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        for _ in range(CALLS):
            sess.run(out)
        assert compiled_loops_of(sess) == []
        assert float(sess.run(v.read())) == 5.0 * CALLS
        assert int(sess.run(out)[0]) == 5


@pytest.fixture(scope="module")
def affine_step():
    """One compiled affine loop, shared by the examples below (compiled once)."""
    import os
    previous = os.environ.get("GRAPHFLOW_SEGMENTS")
    os.environ["GRAPHFLOW_SEGMENTS"] = "1"
    s = gf.Scope(gf.Graph())
    fetches, placeholders = affine(s)
    sess = gf.Session(s.graph)
    step = sess.make_callable(fetches, placeholders)
    for _ in range(CALLS):
        step(np.int32(3), np.zeros(16, np.float32))
    yield step, sess
    sess.close()
    if previous is None:
        del os.environ["GRAPHFLOW_SEGMENTS"]
    else:
        os.environ["GRAPHFLOW_SEGMENTS"] = previous


@given(n=st.integers(-3, 60),
       x=st.lists(st.floats(-1e6, 1e6, width=32), min_size=16, max_size=16))
def test_compiled_loop_is_the_recurrence(affine_step, n, x):
    step, sess = affine_step
    x = np.array(x, np.float32)
    i, y = step(np.int32(n), x)
    want = x.copy()
    for _ in range(max(n, 0)):
        want = want * np.float32(0.5) + np.float32(1.0)
    assert int(i) == max(n, 0)
    assert y.tobytes() == want.tobytes()
    assert any(loop.runs for loop in compiled_loops_of(sess))
