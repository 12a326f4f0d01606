"""Runs on a Dask cluster (2 worker processes, tests/conftest.py `dask_client`): values
that cross workers, sharded variables against numpy, big values, errors that name the
node and its task, all-or-nothing runs, tracing. Skipped without the extra."""
import pickle
import sys
import threading
import time

import numpy as np
import pytest

import graphflow as gf
from support.cluster import workers as _workers
from graphflow.errors import InvalidArgumentError, FailedPreconditionError

pytest.importorskip("distributed")

W0, W1 = "/job:worker/task:0", "/job:worker/task:1"
CPU0, CPU1 = W0.replace("task:0", "replica:0/task:0") + "/device:CPU:0", \
    W1.replace("task:1", "replica:0/task:1") + "/device:CPU:0"


@pytest.fixture
def cluster(dask_client):
    """A config for the shared cluster."""
    return gf.SessionConfig(cluster=dask_client)


@pytest.fixture
def scope(request):
    """A root scope whose ops are named under this test's own name: the workers' variables
    are shared by name across graphs and Sessions, as a parameter server's."""
    name = "".join(c if c.isalnum() else "_" for c in request.node.name)
    return gf.Scope(gf.Graph()).with_sub_scope(name)



def test_value_from_worker_1_feeds_an_op_on_worker_0(scope, cluster, dask_client):
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    a = scope.with_device(W1).mul(x, 3.0, name="a")
    b = scope.with_device(W0).add(a, 1.0, name="b")
    md = gf.RunMetadata()
    with gf.Session(scope.graph, cluster) as sess:
        value = np.arange(5, dtype=np.float32)
        got = sess.run(b, {x: value}, options=gf.RunOptions(trace=True), run_metadata=md)
        np.testing.assert_array_equal(got, value * 3 + 1)
        np.testing.assert_array_equal(sess.run(b, {x: -value}), -value * 3 + 1)  # cached plan
    where = {e.node: (e.device, e.worker) for e in md.events}
    first, second = _workers(dask_client)
    assert where[a.op.name] == (CPU1, second) and where[b.op.name] == (CPU0, first)
    trace = md.chrome_trace()["traceEvents"]
    processes = {e["args"]["name"] for e in trace if e["name"] == "process_name"}
    assert processes == {f"/job:worker/replica:0/task:0 ({first})",
                         f"/job:worker/replica:0/task:1 ({second})"}


def _sharded(scope, table: np.ndarray, n_shards: int):
    """The rows of ``table`` split over the tasks; shard k is task k mod 2."""
    return [scope.with_device(f"/job:worker/task:{k % 2}").variable(part, name=f"shard{k}")
            for k, part in enumerate(table)]


def _split(ids: np.ndarray, total: int, n: int, strategy: str):
    """TensorFlow's embedding_lookup rules: (shard, row in shard) of each id."""
    if strategy == "mod":
        return ids % n, ids // n
    per, extra = divmod(total, n)
    cut = extra * (per + 1)
    shard = np.where(ids < cut, ids // (per + 1), extra + (ids - cut) // max(per, 1))
    row = np.where(ids < cut, ids % (per + 1), (ids - cut) % max(per, 1))
    return shard, row


def _shard_rows(table: np.ndarray, n: int, strategy: str) -> list[np.ndarray]:
    ids = np.arange(len(table))
    shard, row = _split(ids, len(table), n, strategy)
    return [table[ids[shard == k]][np.argsort(row[shard == k])] for k in range(n)]


@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("n_shards", [2, 3])
def test_sharded_lookup_equals_one_process(scope, cluster, strategy, n_shards):
    """Partition the ids by shard, gather on each shard's task, stitch back: the
    operator set of embedding_lookup, across workers."""
    rng = np.random.default_rng(n_shards)
    table = rng.standard_normal((11, 3)).astype(np.float32)
    shards = _sharded(scope, _shard_rows(table, n_shards, strategy), n_shards)
    shard = scope.placeholder(gf.int32, shape=[None], name="shard")
    row = scope.placeholder(gf.int64, shape=[None], name="row")
    positions = scope.range(0, scope.size(row), 1)
    rows = scope.dynamic_partition(row, shard, num_partitions=n_shards)
    where = scope.dynamic_partition(positions, shard, num_partitions=n_shards)
    looked_up = scope.dynamic_stitch(where, [v.sparse_read(r) for v, r in zip(shards, rows)])
    ids = rng.integers(0, len(table), 40)
    s, r = _split(ids, len(table), n_shards, strategy)
    with gf.Session(scope.graph, cluster) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        got = sess.run(looked_up, {shard: s.astype(np.int32), row: r})
    np.testing.assert_array_equal(got, table[ids])


def _sharded_update_graph(scope, n_rows=8, dim=3):
    """Two shards (mod 2) on the two tasks and a scatter-add of fed (ids, updates)."""
    shards = _sharded(scope, [np.zeros((n_rows // 2, dim), np.float32)] * 2, 2)
    ids = scope.placeholder(gf.int64, shape=[None], name="ids")
    updates = scope.placeholder(gf.float32, shape=[None, dim], name="updates")
    shard = scope.cast(scope.floor_mod(ids, 2), gf.int32)
    rows = [scope.expand_dims(r, -1)
            for r in scope.dynamic_partition(scope.floor_div(ids, 2), shard, num_partitions=2)]
    parts = scope.dynamic_partition(updates, shard, num_partitions=2)
    step = [v.scatter_nd_add(r, p, read_value=False) for v, r, p in zip(shards, rows, parts)]
    return shards, ids, updates, step, rows, parts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sharded_sparse_update_equals_np_add_at(scope, cluster, seed):
    rng = np.random.default_rng(seed)
    shards, ids, updates, step, _, _ = _sharded_update_graph(scope)
    expected = np.zeros((8, 3), np.float32)
    with gf.Session(scope.graph, cluster) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        for _ in range(3):
            batch = rng.integers(0, 8, 12)  # duplicates on both shards
            values = rng.standard_normal((12, 3)).astype(np.float32)
            sess.run(step, {ids: batch, updates: values})
            np.add.at(expected, batch, values)
        got = sess.run([v.read() for v in shards])
    np.testing.assert_array_equal(got[0], expected[0::2])
    np.testing.assert_array_equal(got[1], expected[1::2])


@pytest.mark.parametrize("order", ["shard 0 writes first", "independent"])
def test_out_of_range_id_names_node_and_task_and_changes_no_shard(scope, cluster, order):
    shards, ids, updates, step, rows, parts = _sharded_update_graph(scope)
    if order == "shard 0 writes first":  # shard 0's update has surely run when shard 1 fails
        bad = scope.with_control_dependencies([step[0]]).resource_scatter_nd_add(
            shards[1].handle, rows[1], parts[1], name="bad")
    else:
        bad = step[1]
    feeds = {ids: np.array([0, 41]), updates: np.ones((2, 3), np.float32)}  # 41: shard 1, row 20
    with gf.Session(scope.graph, cluster) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        sess.run(step, {ids: np.array([0, 3]), updates: np.ones((2, 3), np.float32)})
        before = sess.run([v.read() for v in shards])
        with pytest.raises(InvalidArgumentError) as info:
            sess.run([step[0], bad], feeds)
        after = sess.run([v.read() for v in shards])
        message = str(info.value)
        assert info.value.node_name == bad.name
        assert CPU1 in message and "test_distributed.py" in message
        assert "does not index into shape [4,3]" in message
        for b, a in zip(before, after):
            np.testing.assert_array_equal(a, b)  # shard 0's update of this run was undone
        # the Session stays usable: the same signature succeeds
        sess.run([step[0], bad], {ids: np.array([0, 1]), updates: np.ones((2, 3), np.float32)})
        got = sess.run([v.read() for v in shards])
    np.testing.assert_array_equal(got[0][0], before[0][0] + 1)
    np.testing.assert_array_equal(got[1][0], before[1][0] + 1)


def test_user_errors_are_not_logged_as_worker_faults(scope, cluster, dask_client):
    """dask logs a failed task as 'Compute Failed' at ERROR; a bad id of the user's is
    no fault of the worker, so its log keeps only graphflow's own failures."""
    ids = scope.placeholder(gf.int32, shape=[None], name="ids")
    table = scope.constant(np.zeros((2, 2), np.float32), name="table")
    bad = scope.with_device(W1).gather_nd(table, scope.reshape(ids, [-1, 1]), name="bad")
    with gf.Session(scope.graph, cluster) as sess:
        for _ in range(2):
            with pytest.raises(InvalidArgumentError, match="bad"):
                sess.run(bad, {ids: np.array([7], np.int32)})
        token = sess._cluster.token
    logs = dask_client.get_worker_logs(n=200)[_workers(dask_client)[1]]
    assert not [message for _, message in logs if token in message]


def test_failed_run_takes_back_several_writes_of_one_stage(scope, cluster):
    """Assign, then a sparse update, then a failing update, all on task 1: the whole
    run is undone, in reverse order."""
    w1 = scope.with_device(W1)
    v = w1.variable(np.arange(6, dtype=np.float32).reshape(3, 2), name="v")
    assign = v.assign(np.full((3, 2), 7, np.float32), read_value=False)
    add = w1.with_control_dependencies([assign]).resource_scatter_nd_add(
        v.handle, [[1]], np.ones((1, 2), np.float32), name="add")
    bad = w1.with_control_dependencies([add]).resource_scatter_nd_add(
        v.handle, [[5]], np.ones((1, 2), np.float32), name="bad")
    with gf.Session(scope.graph, cluster) as sess:
        sess.run(v.initializer)
        with pytest.raises(InvalidArgumentError, match=r"/bad\]"):
            sess.run(bad)
        np.testing.assert_array_equal(sess.run(v.read()), np.arange(6).reshape(3, 2))
        sess.run(add)  # assign, then add: both stay
        np.testing.assert_array_equal(sess.run(v.read()), [[7, 7], [8, 8], [7, 7]])


def test_100_mb_fetch_and_a_big_feed(scope, cluster):
    n = 25_000_000  # 100 MB of float32
    big = scope.with_device(W1).fill([n], np.float32(1.5), name="big")
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    y = scope.with_device(W1).mul(x, 2.0, name="y")
    with gf.Session(scope.graph, cluster) as sess:
        got = sess.run(big)
        assert got.shape == (n,) and got.dtype == np.float32 and got.flags.writeable
        assert got[0] == got[-1] == 1.5 and float(got.sum(dtype=np.float64)) == 1.5 * n
        del got
        feed = np.arange(1 << 20, dtype=np.float32)  # 4 MB: scattered to task 1
        np.testing.assert_array_equal(sess.run(y, {x: feed}), feed * 2)


def test_variables_live_on_the_workers_across_sessions(scope, cluster, dask_client):
    """As a parameter server's: a new Session of the graph sees the values; close()
    leaves the client and the cluster running."""
    v = scope.with_device(W1).variable(np.zeros(3, np.float32), name="shared_v")
    inc = v.assign_add(np.ones(3, np.float32), read_value=False)
    with gf.Session(scope.graph, cluster) as sess:
        sess.run(v.initializer)
        sess.run(inc)
    assert dask_client.status == "running" and len(_workers(dask_client)) == 2
    with gf.Session(scope.graph, cluster) as other:
        other.run(inc)
        np.testing.assert_array_equal(other.run(v.read()), [2, 2, 2])


def _graphflow_keys(dask_scheduler, prefix):
    return sorted(k for k in dask_scheduler.tasks if str(k).startswith(prefix))


def _journals(dask_worker):
    from graphflow.runtime.distributed.worker import worker_state
    return sorted(worker_state(dask_worker)._journals)


def test_close_waits_for_the_commits_and_leaves_no_task_behind(scope, cluster, dask_client):
    """Every run that writes commits on its workers; once the Session is closed no
    worker keeps a journal of its runs and the scheduler keeps none of its tasks (a
    fire_and_forget commit could stay there forever)."""
    v0 = scope.with_device(W0).variable(np.zeros(2, np.float32), name="v0")
    v1 = scope.with_device(W1).variable(np.zeros(2, np.float32), name="v1")
    both = [v0.assign_add(np.ones(2, np.float32), read_value=False),
            v1.assign_add(np.ones(2, np.float32), read_value=False)]
    with gf.Session(scope.graph, cluster) as sess:
        sess.run([v0.initializer, v1.initializer])
        for _ in range(3):
            sess.run(both)
        token = sess._cluster.token
    assert all(not any(run.startswith(token) for run in journals)
               for journals in dask_client.run(_journals).values())
    prefix = f"graphflow-commit-{token}"
    for _ in range(100):  # the client releases its futures through its batched stream
        if not dask_client.run_on_scheduler(_graphflow_keys, prefix=prefix):
            break
        time.sleep(0.02)
    assert dask_client.run_on_scheduler(_graphflow_keys, prefix=prefix) == []


def _set_orphan_grace(seconds):
    from graphflow.runtime.distributed import worker
    before, worker.ORPHAN_GRACE_S = worker.ORPHAN_GRACE_S, seconds
    return before


def test_journal_of_a_run_whose_client_left_is_freed(scope, dask_client, monkeypatch):
    """A client that leaves after its stages ran but before it committed: once the
    scheduler releases its futures, each worker rolls the run back and drops its journal
    instead of keeping it forever (a run commits only when its client says so)."""
    distributed = pytest.importorskip("distributed")
    from graphflow.runtime.distributed.plan import DistributedPlan
    v = scope.with_device(W1).variable(np.zeros(2, np.float32), name="orphan_v")
    inc = v.assign_add(np.ones(2, np.float32), read_value=False)
    before = dask_client.run(_set_orphan_grace, 0.05)
    try:
        with distributed.Client(dask_client.scheduler.address, set_as_default=False) as other:
            sess = gf.Session(scope.graph, gf.SessionConfig(cluster=other))
            sess.run(v.initializer)
            monkeypatch.setattr(DistributedPlan, "_finish", lambda *args, **kwargs: None)
            sess.run(inc)  # its client never commits: it "dies" next
            token = sess._cluster.token
            journals = dask_client.run(_journals)
            assert any(run.startswith(token) for run in journals[_workers(dask_client)[1]])
        for _ in range(100):
            if not any(run.startswith(token) for js in dask_client.run(_journals).values()
                       for run in js):
                break
            time.sleep(0.02)
        assert not any(run.startswith(token) for js in dask_client.run(_journals).values()
                       for run in js)
    finally:
        dask_client.run(_set_orphan_grace, next(iter(before.values())))
    monkeypatch.undo()
    with gf.Session(scope.graph, gf.SessionConfig(cluster=dask_client)) as sess:
        np.testing.assert_array_equal(sess.run(v.read()), [0, 0])  # rolled back


def _set_replace_wait(seconds):
    from graphflow.runtime.distributed import worker
    before, worker._REPLACE_S = worker._REPLACE_S, seconds
    return before


def _graphs_held(dask_worker):
    from graphflow.runtime.distributed.worker import worker_state
    return sorted(worker_state(dask_worker)._graph_texts)


def _poll(check, tries=100):
    for _ in range(tries):
        if check():
            return True
        time.sleep(0.02)
    return check()


def test_a_graph_let_go_leaves_the_scheduler_and_the_workers(cluster, dask_client):
    """A graph's plugin (its GraphDef) goes from the scheduler and the workers, with its
    compiled stages, once the client's Graph is garbage; a graph that grew keeps its
    new version past the old one's teardown."""
    import gc

    from graphflow.runtime.distributed.cluster import graph_id
    before = dask_client.run(_set_replace_wait, 0.05)
    try:
        kept = gf.Scope(gf.Graph())
        y = kept.with_device(W1).neg(np.float32(2), name="y")
        gone = gf.Scope(gf.Graph())
        z = gone.with_device(W1).neg(np.float32(3), name="z")
        with gf.Session(kept.graph, cluster) as a, gf.Session(gone.graph, cluster) as b:
            assert a.run(y) == -2 and b.run(z) == -3
            w = kept.with_device(W0).mul(y, y, name="w")  # kept grows: a new version
            assert a.run(w) == 4
        key, gone_key = graph_id(kept.graph), graph_id(gone.graph)
        del gone, z, b
        gc.collect()

        def plugins():
            return dask_client.run_on_scheduler(
                lambda dask_scheduler: sorted(dask_scheduler.worker_plugins))
        assert _poll(lambda: f"graphflow-{gone_key}" not in plugins())
        assert _poll(lambda: all(gone_key not in held
                                 for held in dask_client.run(_graphs_held).values()))
        time.sleep(0.1)  # past the old version's teardown
        assert f"graphflow-{key}" in plugins()
        with gf.Session(kept.graph, cluster) as a:
            assert a.run(w) == 4
    finally:
        dask_client.run(_set_replace_wait, next(iter(before.values())))


def test_a_graph_that_grows_between_runs(scope, cluster):
    """The workers get the new version of the graph; plans of the old one keep working."""
    x = scope.placeholder(gf.float32, shape=[2], name="x")
    y = scope.with_device(W1).neg(x, name="y")
    with gf.Session(scope.graph, cluster) as sess:
        value = np.array([1, 2], np.float32)
        np.testing.assert_array_equal(sess.run(y, {x: value}), -value)
        z = scope.with_device(W0).mul(y, y, name="z")  # added after the first run
        np.testing.assert_array_equal(sess.run(z, {x: value}), value ** 2)
        np.testing.assert_array_equal(sess.run(y, {x: value}), -value)


def test_saver_reaches_the_workers(scope, cluster, tmp_path):
    """A checkpoint written by one process restores into the cluster's variable (through
    one run), and the cluster's value saves back (tests/test_distributed_saver.py has more)."""
    v = scope.with_device(W1).variable(np.ones(2, np.float32), name="saved")
    local = gf.Scope(gf.Graph()).with_sub_scope(scope._prefix.rstrip("/"))
    twin = local.variable(np.full(2, 5, np.float32), name="saved")  # same name, one process
    with gf.Session(local.graph) as one:
        one.run(twin.initializer)
        gf.train.Saver().save(one, str(tmp_path / "ckpt"))
    with gf.Session(scope.graph, cluster) as sess:
        sess.run(v.initializer)
        saver = gf.train.Saver()
        saver.restore(sess, str(tmp_path / "ckpt"))
        np.testing.assert_array_equal(sess.run(v.read()), [5, 5])
        sess.run(v.assign_add(np.ones(2, np.float32)))
        saver.save(sess, str(tmp_path / "again"))
    with gf.Session(local.graph) as one:
        gf.train.Saver().restore(one, str(tmp_path / "again"))
        np.testing.assert_array_equal(one.run(twin), [6, 6])


def test_each_session_config_holds_on_the_workers(scope, dask_client):
    """Two Sessions of one graph with different configs: each stage runs under its own
    Session's config (a worker caches a compiled stage per config)."""
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    y = scope.with_device(W1).mul(x, 2.0, name="y")
    value = np.ones(1000, np.float32)
    for limit, fails in [(None, False), (100, True), (None, False)]:
        config = gf.SessionConfig(cluster=dask_client, memory_limit_bytes=limit)
        with gf.Session(scope.graph, config) as sess:
            if fails:
                with pytest.raises(gf.errors.ResourceExhaustedError, match="y"):
                    sess.run(y, {x: value})
            else:
                np.testing.assert_array_equal(sess.run(y, {x: value}), value * 2)


def test_uninitialized_variable_on_a_worker(scope, cluster):
    v = scope.with_device(W1).variable(np.zeros(2, np.float32), name="never_initialized")
    with gf.Session(scope.graph, cluster) as sess:
        with pytest.raises(FailedPreconditionError, match="never_initialized.*uninitialized"):
            sess.run(v.read())


def test_fetch_structures_feeds_and_targets(scope, cluster):
    x = scope.placeholder(gf.int32, shape=[2], name="x")
    y = scope.with_device(W1).add(x, 1, name="y")
    noop = scope.with_device(W0).no_op(name="noop")
    with gf.Session(scope.graph, cluster) as sess:
        got = sess.run({"y": y, "both": [x, noop]}, {x: np.array([1, 2], np.int32)})
    np.testing.assert_array_equal(got["y"], [2, 3])
    np.testing.assert_array_equal(got["both"][0], [1, 2])
    assert got["both"][1] is None


def test_a_task_the_cluster_does_not_have(scope, cluster):
    y = scope.with_device("/job:worker/task:7").constant(1.0, name="far")
    with gf.Session(scope.graph, cluster) as sess:
        with pytest.raises(InvalidArgumentError, match=r"far.*task:7.*has /job:worker/replica:0/"
                                                       r"task:0 .*task:1"):
            sess.run(y)


def test_concurrent_runs_of_one_session(scope, cluster):
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    y = scope.with_device(W0).add(scope.with_device(W1).mul(x, 2.0), 1.0, name="y")
    errors = []

    def work(k):
        try:
            for _ in range(3):
                value = np.full(4, k, np.float32)
                np.testing.assert_array_equal(sess.run(y, {x: value}), value * 2 + 1)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with gf.Session(scope.graph, cluster) as sess:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors


def test_cluster_must_be_a_client():
    with pytest.raises(TypeError, match="distributed.Client"):
        gf.SessionConfig(cluster="tcp://127.0.0.1:8786")


def test_without_the_extra_config_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    with pytest.raises(ImportError, match=r"pip install 'graphflow\[distributed\]'"):
        gf.SessionConfig(cluster=object())


@pytest.mark.parametrize("cls", [c for c in vars(gf.errors).values()
                                 if isinstance(c, type) and issubclass(c, gf.errors.OpError)])
def test_errors_survive_pickling(cls):
    err = cls("bad value", "node", "Op", site="model.py:12",
              detail="device: /job:worker/replica:0/task:1/device:CPU:0")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and str(back) == str(err)
    assert (back.node_name, back.op_type, back.site, back.detail) == \
        (err.node_name, err.op_type, err.site, err.detail)
