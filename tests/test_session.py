"""Session and executor: pruning, feeds, control dependencies, errors, threads, and a
kernel that uses its own Session (an error, not a deadlock)."""
import threading
import time

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import FailedPreconditionError, InvalidArgumentError, OpError

from support.threads import run_in_threads

EVENTS: list[str] = []
_events_lock = threading.Lock()

Record = gf.register_op("TestRecord", inputs=["x: T"], outputs=["y: T"],
                        attrs={"T": gf.TypeAttr(), "tag": gf.StringAttr(), "delay": gf.FloatAttr(0.0)},
                        stateful=True, doc="Identity that records its tag when it runs.")


@Record.shape_fn
def _record_shape(ctx):
    """same as x."""
    return ctx.shape("x")


@Record.kernel("cpu")
def _record(ctx, x):
    if ctx.attrs["delay"]:
        time.sleep(ctx.attrs["delay"])
    with _events_lock:
        EVENTS.append(ctx.attrs["tag"])
    return np.array(x, copy=True)


Fail = gf.register_op("TestFail", inputs=["x: T"], outputs=["y: T"],
                      attrs={"T": gf.TypeAttr(), "delay": gf.FloatAttr(0.0)}, stateful=True,
                      doc="Always fails.")


@Fail.kernel("cpu")
def _fail(ctx, x):
    time.sleep(ctx.attrs["delay"])
    raise InvalidArgumentError("deliberate failure")


@pytest.fixture(autouse=True)
def _clear_events():
    EVENTS.clear()


def test_runs_only_what_fetches_need(scope, run):
    x = scope.constant([1.0])
    bad = scope.test_fail(x)
    scope.test_record(bad, "never")
    good = scope.test_record(x, "good")
    np.testing.assert_array_equal(run(good), [1.0])
    assert EVENTS == ["good"]


def test_control_dependencies_order(scope, run):
    x = scope.constant(1)
    first = scope.test_record(x, "first", 0.02)
    second = scope.with_control_dependencies([first]).test_record(x, "second")
    third = scope.with_control_dependencies([second.op]).test_record(x, "third")
    run(third)
    assert EVENTS == ["first", "second", "third"]


def test_feed_replaces_any_output_and_prunes(scope, run):
    x = scope.constant([1.0, 2.0])
    mid = scope.test_record(x, "mid")
    out = scope.mul(mid, 2.0)
    np.testing.assert_array_equal(run(out, {mid: np.array([5.0, 6.0], np.float32)}), [10, 12])
    assert EVENTS == []  # the fed node's producer did not run
    np.testing.assert_array_equal(run(out), [2, 4])


def test_feed_checks(scope, run):
    x = scope.placeholder(gf.int32, shape=[None, 2])
    y = scope.identity(x)
    # TF1's Session rule: np.asarray(value, dtype=int32), so numpy's cast decides
    assert run(y, {x: np.array([[1.5, -2.7]])}).tolist() == [[1, -2]]
    assert run(y, {x: [[1.5, 2]]}).tolist() == [[1, 2]]
    with pytest.raises(InvalidArgumentError, match="Cannot feed value of shape \\(3,\\)"):
        run(y, {x: np.zeros(3, np.int32)})
    assert run(y, {x: [[1, 2]]}).tolist() == [[1, 2]]
    with pytest.raises(InvalidArgumentError, match="Cannot feed value"):
        run(y, {x: [["a", "b"]]})
    with pytest.raises(TypeError, match="cannot hold the value exactly"):
        run(y, {x: [[2 ** 40, 2]]})  # a Python int must fit, as TF1 requires


def test_unfed_placeholder(scope, run):
    x = scope.placeholder(gf.float32, shape=[3], name="x")
    with pytest.raises(InvalidArgumentError,
                       match="You must feed a value for placeholder tensor 'x' with dtype float32 "
                             "and shape \\[3\\]"):
        run(scope.identity(x))


def test_bad_fetches_and_feed_keys(scope, run):
    other = gf.Scope(gf.Graph()).constant(1)
    with pytest.raises(InvalidArgumentError, match="not an element of this session's graph"):
        run(other)
    x = scope.placeholder(gf.int32)
    with pytest.raises(InvalidArgumentError, match="Cannot interpret feed_dict key"):
        run(x, {42: 1})
    with pytest.raises(InvalidArgumentError, match="invalid type"):
        run(3.5)


def test_nested_fetches_and_names(scope, run):
    a = scope.constant(1, name="a")
    b = scope.constant([2, 3], name="b")
    noop = scope.no_op()
    got = run({"a": a, "pair": (b, [a, noop]), "by_name": "b:0"})
    assert got["a"] == 1 and got["pair"][0].tolist() == [2, 3]
    assert isinstance(got["pair"], tuple) and got["pair"][1][1] is None
    assert got["by_name"].tolist() == [2, 3]
    assert isinstance(run(a), np.ndarray)


def test_errors_name_node_and_creation_site(scope, run):
    x = scope.constant([1.0])
    y = scope.test_fail(x, name="broken")
    line = test_errors_name_node_and_creation_site.__code__.co_firstlineno + 2
    with pytest.raises(InvalidArgumentError) as info:
        run(y)
    err = info.value
    assert err.node_name == "broken" and err.op_type == "TestFail"
    assert "deliberate failure [node broken]" in str(err)
    assert f"test_session.py:{line}" in str(err)


def test_numpy_error_becomes_op_error(scope, run):
    p = scope.placeholder(gf.float32)
    q = scope.placeholder(gf.float32)
    with pytest.raises(InvalidArgumentError) as info:
        run(scope.add(p, q), {p: np.zeros(2, np.float32), q: np.zeros(3, np.float32)})
    assert info.value.node_name == "Add"


def test_failed_run_leaves_session_usable(scope):
    x = scope.placeholder(gf.int32, shape=[2])
    y = scope.reshape(x, [2, 1])
    bad = scope.reshape(x, scope.placeholder(gf.int32, shape=[1], name="s"))
    with gf.Session(scope.graph) as sess:
        for _ in range(3):
            with pytest.raises(InvalidArgumentError):
                sess.run(bad, {x: [1, 2], "s:0": [5]})
            assert sess.run(y, {x: [1, 2]}).tolist() == [[1], [2]]


def test_plans_are_cached(scope):
    x = scope.placeholder(gf.float32, shape=[])
    y = scope.add(x, 1.0)
    with gf.Session(scope.graph) as sess:
        for i in range(5):
            assert sess.run(y, {x: np.float32(i)}) == i + 1
        assert sess.stats.plans_compiled == 1
        f = sess.make_callable(y, [x])
        assert f(np.float32(2)) == 3 and sess.stats.plans_compiled == 1


def test_make_callable(scope):
    x = scope.placeholder(gf.int32, shape=[None])
    y = scope.mul(x, 2)
    with gf.Session(scope.graph) as sess:
        f = sess.make_callable([y, {"sum": scope.add(y, x)}], feed_list=[x])
        doubled, extra = f(np.array([1, 2], np.int32))
        assert doubled.tolist() == [2, 4] and extra["sum"].tolist() == [3, 6]
        with pytest.raises(InvalidArgumentError, match="takes 1 feed values"):
            f()


def test_many_threads_one_session_agree_with_sequential(scope):
    x = scope.placeholder(gf.float64, shape=[None])
    h = x
    for i in range(10):
        h = scope.add(scope.mul(h, 1.5), float(i))
    out = scope.concat([h, scope.neg(h)], 0)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(100) for _ in range(50)]
    with gf.Session(scope.graph) as sess:
        expected = [sess.run(out, {x: v}) for v in inputs]
        results: dict[int, list] = {}

        def worker(t):
            results[t] = [sess.run(out, {x: v}) for v in inputs]
        errors = run_in_threads(worker, 8)
    assert not errors, errors[0]
    for t in range(8):
        for got, want in zip(results[t], expected):
            np.testing.assert_array_equal(got, want)


def test_parallel_executor_matches_sequential(scope):
    big = np.arange(1 << 18, dtype=np.float64)
    x = scope.placeholder(gf.float64, shape=[1 << 18])
    branches = [scope.mul(scope.add(x, float(i)), 2.0) for i in range(6)]
    total = branches[0]
    for b in branches[1:]:
        total = scope.add(total, b)
    # optimize=False: fusion would make the whole graph one kernel
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=4, optimize=False)) as par, \
            gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1)) as seq:
        plan = par._plan([total], [x])
        assert plan.parallel and not seq._plan([total], [x]).parallel
        np.testing.assert_array_equal(par.run(total, {x: big}), seq.run(total, {x: big}))


def test_parallel_failure_reports_first_error_and_recovers(scope):
    x = scope.placeholder(gf.float64, shape=[1 << 18])
    slow = scope.test_record(x, "slow", 0.05)
    bad = scope.test_fail(scope.add(x, 1.0), 0.0, name="bad")
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=4)) as sess:
        feed = {x: np.zeros(1 << 18)}
        with pytest.raises(InvalidArgumentError, match="node bad"):
            sess.run([slow, bad], feed)
        assert sess.run(slow, feed).shape == (1 << 18,)


def test_closed_session(scope):
    sess = gf.Session(scope.graph)
    c = scope.constant(1)
    sess.close()
    with pytest.raises(FailedPreconditionError):
        sess.run(c)
    assert issubclass(FailedPreconditionError, OpError)


def test_close_waits_for_runs_in_flight(scope):
    x = scope.constant(1.0)
    slow = scope.test_record(x, "slow", 0.2)
    sess = gf.Session(scope.graph)
    t = threading.Thread(target=sess.run, args=(slow,))
    t.start()
    time.sleep(0.05)
    sess.close()
    assert EVENTS == ["slow"]  # close returned only after the run finished
    t.join()


def test_values_are_freed_after_last_use(scope):
    x = scope.constant(np.ones(4))
    a = scope.add(x, 1.0)
    b = scope.mul(a, 2.0)
    c = scope.add(b, 1.0)
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1)) as sess:
        plan = sess._plan([c], [])
        slots = list(plan._initial)  # constants are in their slots when a run starts
        for step in plan.steps:
            step.run(slots)
        live = [s for s in slots if s is not None]
        assert len(live) == 1 and live[0].tolist() == [5.0] * 4  # only the fetched value


# -- a kernel that uses its own Session ----------------------------------------------------------
REENTER: dict = {}


def _reenter_kernel(ctx, x):
    action = REENTER.get("action")
    if action == "run":
        REENTER["session"].run(REENTER["fetch"])
    elif action == "callable":
        REENTER["callable"]()
    elif action == "close":
        REENTER["session"].close()
    elif action == "other session":
        assert REENTER["other"].run(REENTER["other fetch"]) == 1.0
    return np.array(x, copy=True)


Reenter = gf.register_op("TestReenter", inputs=["x: T"], outputs=["y: T"],
                         attrs={"T": gf.TypeAttr()}, stateful=True,
                         doc="Copy of x; its kernel uses a Session on the way (tests only).")
Reenter.kernel("cpu")(_reenter_kernel)


def _in_thread(fn):
    """``fn()``'s result or error, from a thread given a minute: a deadlock fails the
    test instead of hanging the suite."""
    out: dict = {}

    def target():
        try:
            out["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "deadlock: the run never returned"
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("action", ["run", "callable", "close"])
def test_a_kernel_that_reenters_its_session_gets_an_error(threads, action):
    g = gf.Graph()
    s = gf.Scope(g)
    n = 1 << 17  # heavy: with 2 threads the two kernels run on the pool
    x = s.placeholder(gf.float32, shape=[n], name="x")
    out = s.add(s.test_reenter(x, name="a"), s.test_reenter(x, name="b"))
    c = s.constant(1.0)
    sess = gf.Session(g, gf.SessionConfig(inter_op_threads=threads))
    REENTER.clear()
    REENTER.update(session=sess, fetch=c, callable=sess.make_callable(c))
    assert sess._plan([out], [x]).parallel == (threads > 1)
    REENTER["action"] = action
    result = _in_thread(lambda: sess.run(out, {x: np.ones(n, np.float32)}))
    err = result.get("error")
    assert isinstance(err, FailedPreconditionError), result
    verb = "close()" if action == "close" else "run()"
    assert f"Session.{verb} called from inside a kernel" in str(err)
    assert err.node_name in ("a", "b") and err.op_type == "TestReenter"
    REENTER["action"] = None
    assert (sess.run(out, {x: np.ones(n, np.float32)}) == 2.0).all()  # still usable
    sess.close()
    assert sess.closed


def test_a_kernel_may_run_another_session():
    g = gf.Graph()
    s = gf.Scope(g)
    y = s.test_reenter(s.constant([1.0, 2.0]))
    other = gf.Graph()
    REENTER.clear()
    REENTER.update(action="other session", other=gf.Session(other),
                   **{"other fetch": gf.Scope(other).constant(1.0)})
    with gf.Session(g) as sess:
        assert _in_thread(lambda: sess.run(y))["result"].tolist() == [1.0, 2.0]
    REENTER["other"].close()


