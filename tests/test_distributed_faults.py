"""Faults on a Dask cluster: a worker killed during a run, a worker that restarted
(its variables gone). Each leaves the cluster healthy (2 workers) for the next test."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import graphflow as gf
from support.cluster import healthy as _healthy, workers as _workers
from graphflow.errors import AbortedError, FailedPreconditionError, UnavailableError

pytest.importorskip("distributed")

#: How long a dead worker may take to be reported (the test cluster's
#: no-workers-timeout is 10 s; graphflow watches the scheduler's remove-worker events).
REPORT_WITHIN_S = 5.0





def _graph(name):
    scope = gf.Scope(gf.Graph()).with_sub_scope(name)
    v0 = scope.with_device("/job:worker/task:0").variable(np.zeros(4, np.float32), name="v0")
    v1 = scope.with_device("/job:worker/task:1").variable(np.zeros(4, np.float32), name="v1")
    up0 = v0.assign_add(np.ones(4, np.float32), read_value=False)
    # task 1's update runs after task 0's: task 0 has written when task 1 hangs
    up1 = scope.with_device("/job:worker/task:1").with_control_dependencies(
        [up0]).assign_add_variable_op(v1.handle, np.ones(4, np.float32), name="up1")
    return scope.graph, v0, v1, [up0, up1]


def test_killed_worker_is_reported_and_the_session_recovers(dask_client):
    graph, v0, v1, step = _graph("killed")
    with gf.Session(graph, gf.SessionConfig(cluster=dask_client)) as sess:
        sess.run(gf.global_variables_initializer(graph))
        sess.run(step)
        pid = dask_client.run(os.getpid, workers=[_workers(dask_client)[1]])
        pid = next(iter(pid.values()))
        os.kill(pid, signal.SIGSTOP)  # task 1 hangs: the run waits there
        outcome = {}

        def run():
            try:
                sess.run(step)
            except BaseException as e:  # noqa: BLE001 - checked below
                outcome["error"] = e
            outcome["at"] = time.monotonic()

        runner = threading.Thread(target=run)
        runner.start()
        time.sleep(0.5)  # the run is waiting for task 1
        assert runner.is_alive()
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        runner.join(REPORT_WITHIN_S + 5)
        assert not runner.is_alive()
        assert isinstance(outcome.get("error"), UnavailableError), outcome
        assert outcome["at"] - killed < REPORT_WITHIN_S
        assert "/job:worker/replica:0/task:1" in str(outcome["error"])
        _healthy(dask_client)  # the nanny started a new worker 1
        # task 0's write of the failed run was undone; task 1 restarted: detected, once
        with pytest.raises(AbortedError, match=r"task:1 restarted.*initializers"):
            sess.run([v0.read(), v1.read()])
        np.testing.assert_array_equal(sess.run(v0.read()), np.ones(4))
        with pytest.raises(FailedPreconditionError, match="uninitialized"):
            sess.run(v1.read())  # never silently re-initialized
        sess.run(v1.initializer)
        sess.run(step)
        np.testing.assert_array_equal(sess.run(v0.read()), np.full(4, 2.0))
        np.testing.assert_array_equal(sess.run(v1.read()), np.ones(4))


def test_restarted_worker_is_detected_between_runs(dask_client):
    graph, v0, v1, step = _graph("restarted")
    other = gf.Scope(gf.Graph())
    stateless = other.with_device("/job:worker/task:1").add(np.float32(1), np.float32(2))
    with gf.Session(graph, gf.SessionConfig(cluster=dask_client)) as sess, \
            gf.Session(other.graph, gf.SessionConfig(cluster=dask_client)) as plain:
        sess.run(gf.global_variables_initializer(graph))
        assert plain.run(stateless) == 3
        dask_client.restart_workers([_workers(dask_client)[1]])
        _healthy(dask_client)
        with pytest.raises(AbortedError, match=r"task:1 restarted"):
            sess.run(step)
        np.testing.assert_array_equal(sess.run(v0.read()), np.zeros(4))  # nothing ran
        assert plain.run(stateless) == 3  # a task without variables just carries on
        sess.run(v1.initializer)
        sess.run(step)
        np.testing.assert_array_equal(sess.run(v1.read()), np.ones(4))
