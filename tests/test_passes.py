"""The plan's passes (runtime/passes.py, runtime/folding.py), each on its own."""
import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.runtime import CPUDevice, passes
from graphflow.runtime.folding import MAX_FOLDED_BYTES, fold_constants
from graphflow.runtime.steps import CopyStep, KernelStep

from support.gpu_devices import SimulatedGPU

CPU = CPUDevice(0)
CONFIG = gf.SessionConfig(inter_op_threads=1)


def _chain():
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    a = scope.add(x, 1.0, name="a")
    b = scope.mul(a, a, name="b")
    scope.neg(b, name="unused")
    return scope, x, a, b


def test_prune_keeps_what_the_fetches_need_in_creation_order():
    scope, x, a, b = _chain()
    ops = passes.prune([b], set())
    assert [op.name for op in ops] == ["x", "a/y", "a", "b"]
    # a fed output needs nothing behind it
    assert [op.name for op in passes.prune([b], {a})] == ["b"]


def test_require_feeds_names_the_placeholder():
    scope, x, a, b = _chain()
    with pytest.raises(InvalidArgumentError, match="must feed a value for placeholder tensor 'x'"):
        passes.require_feeds(passes.prune([b], set()), set())
    passes.require_feeds(passes.prune([b], {x}), {x})


def test_locate_gives_each_device_that_reads_a_feed_one_copy_step():
    scope, x, a, b = _chain()
    gpu = SimulatedGPU(0)
    ops = passes.prune([b], {x})
    placement = {op: (gpu if op.name == "b" else CPU) for op in ops}
    layout = passes.locate(ops, placement, [x], [b], [CPU, gpu])
    copies = [s for s in layout.steps if isinstance(s, CopyStep)]
    assert [c.label for c in copies] == ["copy x:0 -> /device:CPU:0", "copy a:0 -> /device:GPU:0"]
    assert copies[0].source is None and not copies[0].fresh  # a feed: wherever it lives
    assert copies[1].source is CPU and copies[1].fresh
    assert layout.slot_device[layout.feed_slots[0]] is None
    assert layout.fetch_devices == [gpu]


def test_liveness_releases_after_the_last_reader_and_forwards_only_private_values():
    scope, x, a, b = _chain()
    c = scope.tensor_scatter_add(scope.add(b, 0.0), [[0]], [1.0])
    ops = passes.prune([c, a], {x})
    layout = passes.locate(ops, {op: CPU for op in ops}, [x], [c, a], [CPU])
    live = passes.liveness(layout)
    names = [s.label for s in layout.steps]
    slot_a = layout.fetch_slots[1]
    assert slot_a in live.pinned
    assert not any(slot_a in r for r in live.releases)           # fetched: never released
    scatter = names.index(c.op.name)
    assert live.forwardable[scatter][0] is True                   # Add's fresh result, read once
    assert live.forwardable[names.index("b")] == (False, False)   # a is fetched and read twice
    released = sorted(s for r in live.releases for s in r)
    assert len(released) == len(set(released))                   # each slot released once


def test_schedule_counts_producers_and_control_inputs():
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float32, shape=[2], name="x")
    first = scope.add(x, 1.0, name="first")
    second = scope.with_control_dependencies([first]).mul(x, 2.0, name="second")
    ops = passes.prune([second], {x})
    layout = passes.locate(ops, {op: CPU for op in ops}, [x], [second], [CPU])
    sched = passes.schedule(layout.steps)
    k = next(i for i, s in enumerate(layout.steps) if s.label == "second")
    # the copy of x, the constant 2.0, and the control input `first`
    assert sched.waiting[k] == 3
    assert all(k in sched.dependents[j] for j, s in enumerate(layout.steps)
               if s.label in ("first", "second/y", "copy x:0 -> /device:CPU:0"))


def test_fold_constants_computes_constant_subgraphs_once():
    scope = gf.Scope(gf.Graph())
    seed = scope.scatter_nd([[4], [3], [1], [7]], np.array([9, 10, 11, 12], np.int32), [8])
    x = scope.placeholder(gf.int32, shape=[8])
    y = scope.add(seed, x)
    ops = passes.prune([y], {x})
    folded = fold_constants(ops, {x}, [CPU], CONFIG)
    assert set(folded) == {seed}
    const = folded[seed].op
    assert const.type == "Const" and not const.attrs["value"].flags.writeable
    np.testing.assert_array_equal(const.attrs["value"], [0, 11, 0, 10, 9, 0, 0, 12])
    with gf.Session(scope.graph) as sess:
        np.testing.assert_array_equal(sess.run(y, {x: np.ones(8, np.int32)}),
                                      [1, 12, 1, 11, 10, 1, 1, 13])


def test_fold_constants_leaves_errors_big_values_and_gpus_to_run_time():
    scope = gf.Scope(gf.Graph())
    bad = scope.scatter_nd([[9]], [1.0], [8], name="bad")
    big = scope.fill([MAX_FOLDED_BYTES // 4 + 1], np.float32(1), name="big")
    ok = scope.add(scope.constant(1.0), 2.0, name="ok")
    ops = passes.prune([bad, big, ok], set())
    assert set(fold_constants(ops, set(), [CPU], CONFIG)) == {ok}
    assert fold_constants(ops, set(), [CPU, SimulatedGPU(0)], CONFIG) == {}
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError, match=r"indices\[0\] = \[9\].*\[node bad\]"):
            sess.run(bad)
        assert sess.run(ok) == 3.0


def test_a_folded_fetch_is_the_callers_own_array():
    scope = gf.Scope(gf.Graph())
    y = scope.add(scope.constant(np.arange(3.0)), 1.0)
    with gf.Session(scope.graph) as sess:
        first = sess.run(y)
        first[...] = -1
        np.testing.assert_array_equal(sess.run(y), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("optimize", [True, False])
def test_straight_line_run_matches_the_step_loop(optimize):
    """The generated serial function and the traced step-by-step loop agree, and a
    failing step is named the same way by both."""
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[None], name="x")
    idx = scope.placeholder(gf.int64, shape=[None, 1], name="idx")
    parts = scope.dynamic_partition(x, scope.cast(scope.less(x, 0.5), gf.int32), 2)
    y = scope.tensor_scatter_add(scope.mul(parts[0], 2.0), idx, scope.gather_nd(x, idx), name="y")
    z = scope.add(scope.neg(parts[1]), 1.0)
    feeds = {x: np.linspace(0, 1, 10), idx: np.array([[0], [1]])}
    config = gf.SessionConfig(inter_op_threads=1, optimize=optimize)
    with gf.Session(scope.graph, config) as sess:
        plain = sess.run([y, z], feeds)
        traced = sess.run([y, z], feeds, options=gf.RunOptions(trace=True),
                          run_metadata=gf.RunMetadata())
        for p, t in zip(plain, traced):
            np.testing.assert_array_equal(p, t)
        bad = {x: feeds[x], idx: np.array([[0], [99]])}
        for options in (None, gf.RunOptions(trace=True)):
            with pytest.raises(InvalidArgumentError, match=r"\[node GatherNd\]"):
                sess.run([y, z], bad, options=options, run_metadata=gf.RunMetadata())


def test_steps_are_typed():
    scope, x, a, b = _chain()
    with gf.Session(scope.graph, gf.SessionConfig(optimize=False)) as sess:
        plan = sess._plan([b], [x])
        assert {type(s) for s in plan.steps} == {KernelStep, CopyStep}
        assert all(s.op is None for s in plan.steps if isinstance(s, CopyStep))


def test_a_plan_with_nothing_to_run():
    """Every fetch is fed: the plan has no step, and hands the feed back as a copy."""
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float32, shape=[2])
    feed = np.array([1.0, 2.0], np.float32)
    with gf.Session(scope.graph) as sess:
        got = sess.run(x, {x: feed})
        np.testing.assert_array_equal(got, feed)
        got[0] = 7
        assert feed[0] == 1.0
