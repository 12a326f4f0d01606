"""What a cluster Session keeps and checks across runs (issue 28, items 7, 9-11): one
client-side plan per signature, one compiled stage per signature on a worker however
the graph grows, a variable name reused with another shape refused, and a closed
Client reported as graphflow's error. On the shared loopback LocalCluster."""
import time

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import FailedPreconditionError, InvalidArgumentError

distributed = pytest.importorskip("distributed")

W0, W1 = "/job:worker/task:0", "/job:worker/task:1"


def _stages_held(dask_worker):
    from graphflow.runtime.distributed.worker import worker_state
    return len(worker_state(dask_worker)._stages)


def test_one_plan_and_one_stage_per_signature_while_the_graph_grows(dask_client):
    scope = gf.Scope(gf.Graph()).with_sub_scope("grows")
    x = scope.placeholder(gf.float32, shape=[2], name="x")
    y = scope.with_device(W0).add(scope.with_device(W1).mul(x, 2.0), 1.0, name="y")
    with gf.Session(scope.graph, gf.SessionConfig(cluster=dask_client)) as sess:
        sess.run(y, {x: np.ones(2, np.float32)})
        plan = sess._cluster.plan([y], [x])
        before = dask_client.run(_stages_held)
        for k in range(8):
            scope.constant(np.float32(k), name=f"more{k}")  # a new graph version each run
            np.testing.assert_array_equal(sess.run(y, {x: np.full(2, k, np.float32)}),
                                          np.full(2, 2 * k + 1))
        assert sess._cluster.plan([y], [x]) is plan  # not rebuilt per run
        after = dask_client.run(_stages_held)
        # not one stage per version (earlier tests' graphs may leave meanwhile: at most)
        assert all(after[w] <= before[w] for w in before), (before, after)


def test_a_variable_name_reused_with_another_shape_is_refused(dask_client):
    """Workers share variables by name across graphs: a second graph's variable of that
    name with shape [3] read the first's [5] value under its static shape [3]."""
    first = gf.Scope(gf.Graph()).with_device(W1)
    v5 = first.variable(np.arange(5, dtype=np.float32), name="reused_shape")
    second = gf.Scope(gf.Graph()).with_device(W1)
    v3 = second.variable(np.zeros(3, np.float32), name="reused_shape")
    config = gf.SessionConfig(cluster=dask_client)
    with gf.Session(first.graph, config) as a, gf.Session(second.graph, config) as b:
        a.run(v5.initializer)
        with pytest.raises(InvalidArgumentError, match=r"'reused_shape' as shape \[3\].*"
                                                       r"shape \[5\]") as info:
            b.run(v3.read())
        assert info.value.node_name == v3.handle.op.name
        with pytest.raises(InvalidArgumentError, match="shape"):
            b.run(v3.assign_add(np.ones(3, np.float32)))
        with pytest.raises(InvalidArgumentError, match=r"shape \[5\].*shape \[3\]"):
            b.run(v3.initializer)  # the assign kernel's own check
        np.testing.assert_array_equal(a.run(v5.read()), np.arange(5))


def test_a_run_after_the_client_closed_is_a_failed_precondition(dask_client):
    scope = gf.Scope(gf.Graph())
    y = scope.with_device(W1).add(np.float32(1), np.float32(2), name="y")
    other = distributed.Client(dask_client.scheduler.address, set_as_default=False)
    try:
        sess = gf.Session(scope.graph, gf.SessionConfig(cluster=other))
        assert sess.run(y) == 3
    finally:
        other.close()
    for fetch in (y, [y, y]):  # a cached plan and a new one
        with pytest.raises(FailedPreconditionError, match="client .* is closed"):
            sess.run(fetch)
    sess.close()


def test_a_hung_worker_does_not_hold_runs_that_do_not_use_it(dask_client):
    """Worker 1 stopped (SIGSTOP): a graph that grew is shipped without waiting for it
    (register_plugin waited for every worker), and a new client's first run, which
    reads the workers' incarnations, does not wait for it either."""
    import os
    import signal
    info = dask_client.scheduler_info()["workers"]
    second = next(a for a, i in info.items() if int(i["name"]) == 1)
    pid = next(iter(dask_client.run(os.getpid, workers=[second]).values()))
    scope = gf.Scope(gf.Graph()).with_sub_scope("hung")
    v = scope.with_device(W0).variable(np.zeros(2, np.float32), name="v")
    x = scope.placeholder(gf.float32, shape=[2], name="x")
    warm = gf.Scope(gf.Graph()).with_device(W0).add(np.float32(1), np.float32(1))
    with gf.Session(warm.graph, gf.SessionConfig(cluster=dask_client)) as sess:
        sess.run(warm)  # the worker has imported what a stage needs
    os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with distributed.Client(dask_client.scheduler.address, set_as_default=False) as other, \
                gf.Session(scope.graph, gf.SessionConfig(cluster=other)) as sess:
            sess.run(v.initializer)
            for k in range(3):  # the graph grows: shipped again each run
                y = scope.with_device(W0).add(v.read(), x, name=f"y{k}")
                np.testing.assert_array_equal(sess.run(y, {x: np.full(2, k, np.float32)}),
                                              np.full(2, k))
            took = time.monotonic() - start
    finally:
        os.kill(pid, signal.SIGCONT)
    assert took < 5, took


def _set_owner_check(seconds):
    from graphflow.runtime.distributed import worker
    before, worker.OWNER_CHECK_S = worker.OWNER_CHECK_S, seconds
    return before


def _graphs_held(dask_worker):
    from graphflow.runtime.distributed.worker import worker_state
    return sorted(worker_state(dask_worker)._graph_texts)


def _plugin_registered(dask_scheduler, name):
    return name in dask_scheduler.worker_plugins


def test_a_graph_of_a_closed_client_leaves_the_scheduler_and_the_workers(dask_client):
    """The Graph object lives on, but the only Client that shipped it closed: the
    workers see its lease gone and unregister the graph's plugin (it stayed on the
    scheduler and every worker, and reached workers that joined later)."""
    from graphflow.runtime.distributed.cluster import graph_id
    from graphflow.runtime.distributed.worker import plugin_name
    scope = gf.Scope(gf.Graph()).with_sub_scope("closed_client")
    y = scope.with_device(W1).add(scope.placeholder(gf.float32, shape=[], name="x"), 1.0)
    key = graph_id(scope.graph)
    before = dask_client.run(_set_owner_check, 0.05)
    try:
        with distributed.Client(dask_client.scheduler.address, set_as_default=False) as other:
            with gf.Session(scope.graph, gf.SessionConfig(cluster=other)) as sess:
                assert sess.run(y, {y.op.inputs[0]: 1.0}) == 2
            assert dask_client.run_on_scheduler(_plugin_registered, name=plugin_name(key))
            time.sleep(0.3)  # its client lives: the graph stays
            assert all(key in held for held in dask_client.run(_graphs_held).values())
        for _ in range(200):
            if not dask_client.run_on_scheduler(_plugin_registered, name=plugin_name(key)) \
                    and not any(key in h for h in dask_client.run(_graphs_held).values()):
                break
            time.sleep(0.05)
        assert not dask_client.run_on_scheduler(_plugin_registered, name=plugin_name(key))
        assert not any(key in held for held in dask_client.run(_graphs_held).values())
    finally:
        dask_client.run(_set_owner_check, next(iter(before.values())))


def test_big_initial_values_go_only_to_their_variables_worker(dask_client):
    """A 1 MB initial value is not in the graph shipped to every worker (a 16 MB table
    made a 21 MB plugin, sent again after each graph change): the initializer's run
    sends it to the variable's task; the variable then works as any."""
    import json

    from graphflow.runtime.distributed.cluster import shipped_graph_def
    scope = gf.Scope(gf.Graph()).with_sub_scope("big_initial")
    start = np.arange(256 * 1024, dtype=np.float32).reshape(-1, 4)
    v = scope.with_device(W1).variable(start, name="table")
    small = scope.with_device(W0).variable(np.ones(3, np.float32), name="small")
    add = v.scatter_nd_add([[2]], np.ones((1, 4), np.float32), read_value=False)
    assert len(json.dumps(shipped_graph_def(scope.graph))) < 20_000
    with gf.Session(scope.graph, gf.SessionConfig(cluster=dask_client)) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        sess.run(add)
        got, got_small = sess.run([v.read(), small.read()])
    expected = start.copy()
    expected[2] += 1
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got_small, np.ones(3))
    initial = scope.graph.operation(v.initializer.inputs[1].op.name)
    np.testing.assert_array_equal(initial.attrs["value"], start)  # not modified


def test_variable_homes_do_not_keep_their_graph_alive():
    """The per-graph homes cache holds names, not ops (ops hold their graph, which
    then never left the weak cache, nor the cluster: its plugin goes when it dies)."""
    import gc
    import weakref

    from graphflow.runtime.distributed.plan import variable_homes_of
    from graphflow.runtime.passes import prune
    scope = gf.Scope(gf.Graph())
    v = scope.with_device(W1).variable(np.zeros(2, np.float32), name="v")
    read = scope.with_device(W1).read_variable_op(v.handle, dtype=gf.float32)
    homes = variable_homes_of(scope.graph, prune([read], set()))
    assert [(op.name, str(t)) for op, t in homes.items()] == [("v", W1.replace(
        "task", "replica:0/task"))]
    graph = weakref.ref(scope.graph)
    del scope, v, read, homes
    gc.collect()
    assert graph() is None
