"""The task list follows the cluster (issue 28, items 3-4): a worker that joins is its
task at once, in running and new Sessions; while a worker is away its task is an
UnavailableError and the others keep their tasks; a worker back under its name is
its task again; a restart of several tasks is one AbortedError naming them all.

On the shared loopback LocalCluster (tests/conftest.py, workers named 0 and 1), with
extra workers named 2 and 3 started in this process (a worker joining, leaving and
coming back in well under a second, where a new worker process takes seconds); the
cluster is left with its 2 workers."""
import contextlib
import time

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import AbortedError, InvalidArgumentError, UnavailableError

distributed = pytest.importorskip("distributed")


@contextlib.contextmanager
def _extra_workers(client, names):
    """Workers named ``names`` in this process, joined to ``client``'s cluster; closed
    on exit. Yields a function that (re)starts one by name: its address."""
    running = {}

    def start(name):
        async def make():
            return await distributed.Worker(client.scheduler.address, name=name, nthreads=1,
                                            dashboard=False, host="127.0.0.1")
        if name in running:
            stop(name)
        running[name] = client.sync(make)
        _wait(client, lambda names: name in names)
        return running[name].address

    def stop(name):
        client.sync(running.pop(name).close)
        _wait(client, lambda names: name not in names)

    try:
        yield start, stop
    finally:
        for name in list(running):
            stop(name)


def _wait(client, ready, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready({int(i["name"]) for i in client.scheduler_info()["workers"].values()}):
            return
        time.sleep(0.02)
    raise AssertionError("the cluster did not change as expected")


def _where(sess, fetch, feeds):
    md = gf.RunMetadata()
    sess.run(fetch, feeds, options=gf.RunOptions(trace=True), run_metadata=md)
    return {e.worker for e in md.events if e.node == fetch.op.name}


@pytest.fixture
def ops():
    scope = gf.Scope(gf.Graph()).with_sub_scope("membership")
    x = scope.placeholder(gf.float32, shape=[], name="x")
    on = [scope.with_device(f"/job:worker/task:{k}").add(x, np.float32(k), name=f"on{k}")
          for k in range(4)]
    return scope.graph, x, on


def test_a_joined_worker_is_its_task_at_once(dask_client, ops):
    graph, x, on = ops
    with gf.Session(graph, gf.SessionConfig(cluster=dask_client)) as sess:
        assert sess.run(on[1], {x: 1}) == 2
        with pytest.raises(InvalidArgumentError, match="no such task"):
            sess.run(on[2], {x: 1})  # the cluster never had a task 2
        with _extra_workers(dask_client, [2]) as (start, _):
            address = start(2)
            assert _where(sess, on[2], {x: 1}) == {address}  # the same Session
            with gf.Session(graph, gf.SessionConfig(cluster=dask_client)) as fresh:
                assert _where(fresh, on[2], {x: 1}) == {address}
        with pytest.raises(UnavailableError, match=r"task:2 now \(its worker, named 2, left"):
            sess.run(on[2], {x: 1})  # it left: unavailable, not a user error


def test_a_worker_away_keeps_the_others_tasks_and_is_its_task_when_back(dask_client, ops):
    graph, x, on = ops
    with gf.Session(graph, gf.SessionConfig(cluster=dask_client)) as sess, \
            _extra_workers(dask_client, [2, 3]) as (start, stop):
        start(2)
        three = start(3)
        assert sess.run(on[3], {x: 1}) == 4
        stop(2)
        with pytest.raises(UnavailableError, match="task:2 now"):
            sess.run(on[2], {x: 1})
        assert _where(sess, on[3], {x: 1}) == {three}  # task 3 did not become task 2
        back = start(2)
        assert _where(sess, on[2], {x: 1}) == {back}
        assert _where(sess, on[3], {x: 1}) == {three}


def test_every_restarted_task_is_in_one_aborted_error(dask_client):
    scope = gf.Scope(gf.Graph()).with_sub_scope("restart_all")
    v2 = scope.with_device("/job:worker/task:2").variable(np.zeros(2, np.float32), name="v2")
    v3 = scope.with_device("/job:worker/task:3").variable(np.zeros(2, np.float32), name="v3")
    init = gf.global_variables_initializer(scope.graph)
    step = [v2.assign_add(np.ones(2, np.float32)), v3.assign_add(np.ones(2, np.float32))]
    with _extra_workers(dask_client, [2, 3]) as (start, stop), \
            gf.Session(scope.graph, gf.SessionConfig(cluster=dask_client)) as sess:
        start(2)
        start(3)
        sess.run(init)
        sess.run(step)
        start(2)  # both restart (new processes, in effect): their variables are gone
        start(3)
        with pytest.raises(AbortedError) as info:
            sess.run(init)
        message = str(info.value)
        assert "task:2" in message and "task:3" in message and "initializers" in message
        sess.run(init)  # reported once, for both
        sess.run(step)
        np.testing.assert_array_equal(sess.run(v2.read()), np.ones(2))
        np.testing.assert_array_equal(sess.run(v3.read()), np.ones(2))


def test_a_variable_without_a_device_has_one_home_for_every_run_and_session(dask_client):
    """Placed once per graph (TensorFlow places a graph once): the initializer run alone
    and a read built under task 1 find the variable on one task (the read's, its only
    request), in this Session and the next (the initializer ran on task 0 and the read
    on task 1: FailedPreconditionError 'uninitialized')."""
    scope = gf.Scope(gf.Graph()).with_sub_scope("one_home")
    v = scope.variable(np.arange(3, dtype=np.float32), name="v")  # no device
    read = scope.with_device("/job:worker/task:1").read_variable_op(v.handle, dtype=gf.float32,
                                                                   name="read1")
    add = v.assign_add(np.ones(3, np.float32), read_value=False)
    workers = {int(i["name"]): a for a, i in dask_client.scheduler_info()["workers"].items()}
    with gf.Session(scope.graph, gf.SessionConfig(cluster=dask_client)) as sess:
        sess.run(v.initializer)
        np.testing.assert_array_equal(sess.run(read), [0, 1, 2])
        sess.run(add)
        assert _where(sess, read, None) == {workers[1]}
    with gf.Session(scope.graph, gf.SessionConfig(cluster=dask_client)) as other:
        np.testing.assert_array_equal(other.run(v.read()), [1, 2, 3])  # same home
    later = scope.with_device("/job:worker/task:0").read_variable_op(v.handle, dtype=gf.float32,
                                                                    name="read0")
    with gf.Session(scope.graph, gf.SessionConfig(cluster=dask_client)) as sess:
        with pytest.raises(InvalidArgumentError, match=r"read0.*lives on .*task:1"):
            sess.run(later)  # added later: the home stays, the request is refused
