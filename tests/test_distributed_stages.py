"""Level-1 placement (a task per op) and stage cutting: pure functions of the graph,
checked without dask, with hypothesis over random DAGs."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.runtime.distributed.stage_graph import StageSpec, sink_ops, stage_graph
from graphflow.runtime.distributed.stages import PICK_BYTES, cut_stages, hop_levels, routes
from graphflow.runtime.distributed.cluster import task_map
from graphflow.runtime.distributed.tasks import DEFAULT_TASK, Task, assign_tasks
from graphflow.runtime.passes import prune

W0, W1, W2 = Task("worker", 0), Task("worker", 1), Task("worker", 2)


def _placed(fetches, feeds=()):
    ops = prune(fetches, set(feeds))
    return ops, assign_tasks(ops, feeds)


def test_task_k_is_the_k_th_worker_by_name():
    workers = {f"tcp://w{k}": {"name": k} for k in (10, 2, 0, 1)}  # numbers by value
    assert task_map(workers) == {W0: "tcp://w0", W1: "tcp://w1", W2: "tcp://w2",
                                 Task("worker", 3): "tcp://w10"}
    named = {"tcp://a": {"name": "ps:0"}, "tcp://b": {"name": "beta"},
             "tcp://c": {"name": "alpha"}, "tcp://d": {"name": "ps:1"}}
    assert task_map(named) == {Task("ps", 0): "tcp://a", Task("ps", 1): "tcp://d",
                               W0: "tcp://c", W1: "tcp://b"}
    explicit = {"tcp://a": {"name": "worker:1"}, "tcp://b": {"name": "other"}}
    assert task_map(explicit) == {W1: "tcp://a"}  # job worker is exactly the named ones
    with pytest.raises(InvalidArgumentError, match="Two workers claim /job:ps"):
        task_map({"tcp://a": {"name": "ps:0"}, "tcp://b": {"name": "ps:0"}})


def test_request_inputs_and_consumers(scope):
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    c = scope.constant(np.float32(2), name="c")        # no request, no input: its consumer's
    a = scope.with_device("/job:worker/task:1").mul(x, c, name="a")
    b = scope.add(a, 1.0, name="b")                       # its input's task
    d = scope.with_device("/task:2/cpu:0").neg(b, name="d")  # a task alone is of job worker
    e = scope.with_device("/job:ps").identity(d, name="e")   # a job alone is its task 0
    ops, task = _placed([e], [x])
    by_name = {op.name: t for op, t in task.items()}
    assert by_name["c"] == W1 and by_name["a"] == W1 and by_name["b"] == W1
    assert by_name["d"] == W2 and by_name["e"] == Task("ps", 0)
    assert str(W1) == "/job:worker/replica:0/task:1"


def test_unplaced_graph_runs_on_task_0(scope):
    y = scope.add(scope.constant(1.0), scope.constant(2.0))
    _, task = _placed([y])
    assert set(task.values()) == {DEFAULT_TASK}


def test_variables_colocate_their_ops(scope):
    v = scope.with_device("/job:worker/task:1").variable(np.zeros((4, 2), np.float32), name="v")
    ids = scope.with_device("/job:worker/task:0").constant(np.array([1, 2]), name="ids")
    rows = v.sparse_read(ids)                                  # on the variable's task
    plain = scope.resource_gather(v.handle, ids, dtype=gf.float32, name="plain")  # no request
    _, task = _placed([rows, plain, v.initializer])
    by_name = {op.name: t for op, t in task.items()}
    assert by_name["v"] == by_name["v/SparseRead"] == by_name["plain"] == W1
    assert by_name["v/Initializer"] == W1 and by_name["ids"] == W0


def test_variable_without_device_follows_its_ops(scope):
    v = scope.variable(np.zeros(3, np.float32), name="v")
    _, task = _placed([v.initializer, v.read()])
    assert {t for t in task.values()} == {DEFAULT_TASK}


def test_explicit_request_against_the_variable_is_an_error(scope):
    v = scope.with_device("/job:worker/task:1").variable(np.zeros(3, np.float32), name="v")
    read = scope.with_device("/job:worker/task:0").read_variable_op(v.handle, dtype=gf.float32,
                                                                   name="read")
    with pytest.raises(InvalidArgumentError, match="read.*lives on /job:worker/replica:0/task:1"):
        _placed([read])


def test_replica_other_than_0_is_an_error(scope):
    y = scope.with_device("/job:worker/replica:1/task:0").constant(1.0, name="y")
    with pytest.raises(InvalidArgumentError, match="one replica"):
        _placed([y])


def test_stages_of_a_ping_pong(scope):
    """0 -> 1 -> 0: three stages, the last one of task 0 after the hop."""
    w0, w1 = scope.with_device("/task:0"), scope.with_device("/task:1")
    a = w0.constant(np.float32(1), name="a")
    b = w1.add(a, 1.0, name="b")
    c = w0.add(b, a, name="c")
    ops, task = _placed([c])
    stages = cut_stages(ops, task, (), [c])
    assert [(s.task, s.hop) for s in stages] == [(W0, 0), (W1, 1), (W0, 2)]
    assert [o.name for o in stages[0].outputs] == ["a:0"]
    assert stages[2].inputs == (b, a) and stages[2].upstream == (0, 1)
    assert [o.name for o in stages[2].outputs] == ["c:0"]


def test_feeds_enter_where_read_and_fetched_feeds_need_no_stage(scope):
    x = scope.placeholder(gf.float32, shape=[3], name="x")
    y = scope.with_device("/task:1").neg(x, name="y")
    ops, task = _placed([y, x], [x])
    stages = cut_stages(ops, task, [x], [y, x])
    assert len(stages) == 1 and stages[0].inputs == (x,) and stages[0].outputs == (y,)


def test_routes_pick_only_what_travels(scope):
    """A stage feeding another task and the client: a consumer gets the whole result
    unless what it does not need is known to be big; on its own task it always does."""
    w0, w1 = scope.with_device("/task:0"), scope.with_device("/task:1")
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    batch = w0.neg(x, name="batch")                      # size known at run time only
    big = w0.fill([(PICK_BYTES >> 2) + 1], np.float32(0), name="big")  # known to be big
    to_1 = w0.add(batch, 1.0, name="to_1")
    out = w1.mul(to_1, 2.0, name="out")
    back = w0.add(out, to_1, name="back")
    fetches = [back, big]
    ops, task = _placed(fetches, [x])
    stages = cut_stages(ops, task, [x], fetches)
    assert [(s.task, s.hop) for s in stages] == [(W0, 0), (W1, 1), (W0, 2)]
    found = {(r.producer, r.consumer): r for r in routes(stages, fetches)}
    to_worker_1 = found[(0, W1)]          # would carry `big` for nothing: picked
    assert to_worker_1.needs == (to_1,) and to_worker_1.picks == (stages[0].outputs.index(to_1),)
    assert found[(0, W0)].picks is None   # same task: nothing moves
    assert found[(0, None)].needs == (big,) and found[(0, None)].picks is None  # rest: small
    assert found[(1, W0)].picks is None and found[(2, None)].picks is None

    small = scope.with_sub_scope("small")
    w0, w1 = small.with_device("/task:0"), small.with_device("/task:1")
    first = w0.neg(x, name="first")
    extra = w0.add(first, 1.0, name="extra")            # unknown size: taken as small
    fetches = [w1.neg(first, name="second"), extra]
    ops, task = _placed(fetches, [x])
    stages = cut_stages(ops, task, [x], fetches)
    assert all(r.picks is None for r in routes(stages, fetches))


def test_control_dependency_across_tasks_orders_stages(scope):
    w0, w1 = scope.with_device("/task:0"), scope.with_device("/task:1")
    first = w1.no_op(name="first")
    second = w0.with_control_dependencies([first]).constant(1.0, name="second")
    ops, task = _placed([second])
    stages = cut_stages(ops, task, (), [second])
    assert [(s.task, s.hop) for s in stages] == [(W1, 0), (W0, 1)]
    assert stages[1].upstream == (0,)
    route = next(r for r in routes(stages, [second]) if r.producer == 0)
    assert route.consumer == W0 and route.needs == () and route.picks in (None, ())


def test_stage_graph_keeps_names_and_replaces_inputs(scope):
    w0, w1 = scope.with_device("/task:0"), scope.with_device("/task:1/cpu:0")
    a = w0.constant(np.arange(3, dtype=np.float32), name="a")
    b = w1.mul(a, a, name="b")
    c = w1.with_control_dependencies([a.op]).neg(b, name="c")
    ops, task = _placed([c])
    stage = cut_stages(ops, task, (), [c])[1]
    spec = StageSpec("k", "g", 0, str(W1), tuple(op.name for op in stage.ops),
                     (("a", 0, "float32", (3,)),), ((0, 0),), (("c", 0),),
                     tuple(op.name for op in sink_ops(stage.ops, stage.outputs)), False, False)
    graph, feeds, fetches = stage_graph(scope.graph.as_graph_def(), spec)
    assert [op.name for op in graph.operations()] == ["Recv/0", "b", "c"]
    assert graph.operation("b").device == "/device:CPU:0"  # the task is the worker itself
    assert graph.operation("c").control_inputs == ()
    with gf.Session(graph) as sess:
        got = sess.run(fetches, {feeds[0]: np.arange(3, dtype=np.float32)})
    np.testing.assert_array_equal(got[0], -np.arange(3, dtype=np.float32) ** 2)


# -- random DAGs -----------------------------------------------------------------------------
@st.composite
def placed_dags(draw):
    """A random DAG of Add/Neg/NoOp nodes over up to 4 tasks, with control edges, some
    nodes unplaced, some values fed."""
    scope = gf.Scope(gf.Graph())
    n = draw(st.integers(1, 14))
    outputs, ops = [], []
    for k in range(n):
        device = draw(st.sampled_from(["", "/task:0", "/task:1", "/task:2", "/job:ps"]))
        s = scope.with_device(device) if device else scope
        controls = draw(st.lists(st.sampled_from(ops), max_size=2, unique=True)) if ops else []
        if controls:
            s = s.with_control_dependencies(controls)
        inputs = draw(st.lists(st.sampled_from(outputs), max_size=3)) if outputs else []
        if not inputs:
            out = s.placeholder(gf.float32, shape=[2], name=f"n{k}")
        elif len(inputs) == 1:
            out = s.neg(inputs[0], name=f"n{k}")
        else:
            out = s.add_n(inputs, name=f"n{k}")
        outputs.append(out)
        ops.append(out.op)
    fetches = draw(st.lists(st.sampled_from(outputs), min_size=1, max_size=3, unique=True))
    placeholders = [o for o in outputs if o.op.type == "Placeholder"]
    fed = draw(st.lists(st.sampled_from(outputs), max_size=2, unique=True)) + placeholders
    return fetches, list(dict.fromkeys(fed))


@settings(max_examples=150, deadline=None)
@given(placed_dags())
def test_stages_are_acyclic_and_every_edge_goes_forward(dag):
    fetches, fed = dag
    ops, task = _placed(fetches, fed)
    stages = cut_stages(ops, task, fed, fetches)
    stage_of = {op: s.index for s in stages for op in s.ops}
    assert set(stage_of) == set(ops) and sum(len(s.ops) for s in stages) == len(ops)
    hop = hop_levels(ops, task, fed)
    for s in stages:
        assert len({task[op] for op in s.ops}) == 1 and all(hop[op] == s.hop for op in s.ops)
        assert all(u < s.index for u in s.upstream)  # the run order is topological
    for op in ops:
        # a control edge from a fed Placeholder waits for nothing: it is not in the plan
        deps = [i.op for i in op.inputs if i not in fed] + [
            c for c in op.control_inputs if not (c.outputs and all(o in fed for o in c.outputs))]
        for p in deps:
            here, there = stage_of[op], stage_of[p]
            if task[p] == task[op]:
                assert hop[p] <= hop[op]              # same task: within or to a later stage
                assert here == there or there in stages[here].upstream
            else:
                assert hop[p] < hop[op]               # a hop: a strictly later stage
                assert there in stages[here].upstream
    # every value a stage reads comes from an earlier stage or a feed
    produced = {o: s.index for s in stages for o in s.outputs}
    for s in stages:
        for i in s.inputs:
            assert i in fed or produced[i] < s.index
    for f in fetches:
        assert f in fed or f in produced


@settings(max_examples=60, deadline=None)
@given(placed_dags())
def test_routes_cover_every_value_that_travels(dag):
    fetches, fed = dag
    ops, task = _placed(fetches, fed)
    stages = cut_stages(ops, task, fed, fetches)
    found = {(r.producer, r.consumer): r for r in routes(stages, fetches)}
    producer = {o: s.index for s in stages for o in s.outputs}
    for s in stages:
        for i in s.inputs:
            if i not in fed:
                r = found[(producer[i], s.task)]
                assert i in r.needs
                assert r.picks is None or [stages[r.producer].outputs[k] for k in r.picks] == \
                    list(r.needs)
        for u in s.upstream:
            assert (u, s.task) in found
