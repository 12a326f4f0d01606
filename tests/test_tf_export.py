"""gf.export_tf_graph: a graphflow graph as a TensorFlow GraphDef.

The structural tests need only tensorboardX (the message classes): op and attr names,
resource handles, `_output_shapes`, the lowerings, what is refused. The round trips
(skipped without TensorFlow) import the exported GraphDef into TensorFlow 2.21 with
`tf.compat.v1.import_graph_def`, run it there, and compare with graphflow's results:
TensorFlow is the judge.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError, UnimplementedError

pytest.importorskip("tensorboardX")

from graphflow.interop import tf_export, tf_proto  # noqa: E402


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tensorflow")


def nodes(graph_def) -> dict:
    return {n.name: n for n in graph_def.node}


def shapes_of(node) -> list:
    return [tf_proto.shape_from_proto(s).as_list() if not s.unknown_rank else None
            for s in node.attr["_output_shapes"].list.shape]


# -- graphs: each returns (graph, [fetches of each run], feeds, setup ops run first) ------
def scatter_family():
    g = gf.Graph()
    s = gf.Scope(g)
    idx = s.constant(np.array([[4], [3], [1], [4], [7]], np.int64))
    upd = s.constant(np.array([9, 10, 11, 12, 13], np.int32))
    out = [s.scatter_nd(idx, upd, np.array([8], np.int64))]
    t = s.placeholder(gf.float32, shape=[None, 3], name="t")
    rows = s.constant(np.array([[2], [0], [2]], np.int32))
    vals = s.constant(np.array([[1, -2, 3], [4, 5, -6], [7, 8, 9]], np.float32))
    for build in (s.tensor_scatter_update, s.tensor_scatter_add, s.tensor_scatter_sub,
                  s.tensor_scatter_min, s.tensor_scatter_max):
        out.append(build(t, rows, vals))
    out.append(s.scatter_nd([[0, 1], [1, 0], [0, 1]], np.array([1.5, 2.5, 3.5]), [2, 2]))
    feeds = {t: np.arange(12, dtype=np.float32).reshape(4, 3)}
    return g, [out], feeds, []


def gather_nd_family():
    g = gf.Graph()
    s = gf.Scope(g)
    params = s.constant(np.arange(2 * 3 * 4 * 2, dtype=np.float32).reshape(2, 3, 4, 2))
    ids = s.placeholder(gf.int32, shape=[2, 3, None, 2], name="ids")
    out = [s.gather_nd(params, [[1, 2], [0, 0]]),
           s.gather_nd(params, np.array([[[1], [0]], [[2], [2]]], np.int64), batch_dims=1),
           s.gather_nd(params, ids, batch_dims=2),
           s.gather_nd(params, np.array([[1, 0, 3]], np.int32))]
    rng = np.random.default_rng(0)
    feeds = {ids: np.stack([rng.integers(0, 4, (2, 3, 5)), rng.integers(0, 2, (2, 3, 5))],
                           axis=-1).astype(np.int32)}
    return g, [out], feeds, []


def partition_stitch():
    g = gf.Graph()
    s = gf.Scope(g)
    data = s.placeholder(gf.float64, shape=[2, 3, None], name="data")
    parts = s.constant(np.array([[0, 2, 1], [2, 2, 0]], np.int32))
    out = s.dynamic_partition(data, parts, num_partitions=3)
    out.append(s.dynamic_stitch([[0, 3, 1], [[3, 5]]],
                                [[1.0, 2.0, 3.0], [[4.0, 5.0]]]))  # 3 twice: the later wins
    out.append(s.parallel_dynamic_stitch([[1, 0], [2]], [[[1, 1], [2, 2]], [[3, 3]]]))
    out.append(s.dynamic_stitch([s.constant(np.array([2, 0], np.int32))],
                                [s.constant(np.array([["a"], ["b"]], object))]))
    feeds = {data: np.arange(24, dtype=np.float64).reshape(2, 3, 4)}
    return g, [out], feeds, []


def math_array():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[None, 4], name="x")
    n = s.constant(np.array([[7, -7, 5, -5]], np.int32))
    y = s.constant(np.array([1.5, -2.0, 0.5, 3.0], np.float32))
    mask = s.greater(x, y)
    parts = s.unpack(x, num=3, axis=0)
    out = [s.add(x, y), s.sub(x, y), s.mul(x, y), s.real_div(x, y), s.neg(x),
           s.floor_div(n, 3), s.floor_mod(n, 3), s.maximum(x, y), s.minimum(x, y),
           s.less(x, y), s.equal(x, y), s.not_equal(x, y),
           s.logical_and(mask, s.logical_not(s.less(x, 1.0))), s.logical_or(mask, mask),
           s.select_v2(mask, x, y), s.cast(x, gf.int32), s.reshape(x, [-1]),
           s.concat([x, x], 1), s.pack([y, y], axis=1), parts[1],
           s.squeeze(s.expand_dims(x, 0), [0]), s.slice(x, [1, 1], [2, -1]),
           s.pad(x, [[1, 0], [0, 2]]), s.fill([2, 3], 2.5), s.range(2, 11, 3),
           s.shape(x), s.size(x), s.rank(x), s.broadcast_to(y, [2, 4]),
           s.reduce_sum(x, [1], keep_dims=True), s.add_n([x, x, x]), s.zeros_like(x),
           s.ones_like(n), s.identity(y), s.stop_gradient(y),
           s.conj(s.constant(np.array([1 + 2j, -3j], np.complex64))),
           s.add(s.constant(np.array(["a", "b"], object)), s.constant(np.array("!", object)))]
    feeds = {x: np.array([[1.5, 2, -3, 4], [0, 0.5, 1, -1], [9, -2, 0.5, 3]], np.float32)}
    return g, [out], feeds, []


def variables():
    g = gf.Graph()
    s = gf.Scope(g)
    v = s.variable(np.arange(12, dtype=np.float32).reshape(6, 2), name="table")
    w = s.variable(np.array([5, 6, 7], np.int64), name="layer/counts")
    init = gf.global_variables_initializer(g)
    ids = s.placeholder(gf.int32, shape=[None], name="ids")
    after = v.scatter_nd_add([[1], [4], [1]], np.ones((3, 2), np.float32))
    after = after.scatter_nd_sub([[0]], [[0.5, 0.5]])
    after = after.scatter_nd_update([[5], [5]], [[1, 2], [3, 4]])
    after = after.scatter_nd_min([[2]], [[-1, 100]])
    after = after.scatter_nd_max([[3]], [[-1, 100]])
    counts = w.assign_add(np.array([1, 1, 1], np.int64)).assign_sub([2, 0, 1])
    out = [after.read(), after.sparse_read(ids), counts.read()]
    feeds = {ids: np.array([3, 0, 3], np.int32)}
    return g, [out], feeds, [init]


def gradients():
    g = gf.Graph()
    s = gf.Scope(g)
    params = s.placeholder(gf.float32, shape=[2, 3, 2], name="params")
    upd = s.placeholder(gf.float32, shape=[3, 2], name="upd")
    t = s.placeholder(gf.float32, shape=[4, 2], name="t")
    gathered = s.gather_nd(params, [[[1], [1]], [[0], [2]]], batch_dims=1)
    flat = s.gather_nd(params, [[1, 2], [1, 2], [0, 0]])
    scattered = s.scatter_nd([[1], [3], [1]], upd, [4, 2])
    added = s.tensor_scatter_add(t, [[0], [0]], s.slice(upd, [0, 0], [2, 2]))
    low, high = s.dynamic_partition(t, [1, 0, 1, 1], num_partitions=2)
    stitched = s.dynamic_stitch([[2], [[0, 2]]],   # row 2 twice: the later write wins
                                [s.mul(low, 2.0), s.reshape(s.slice(high, [0, 0], [2, 2]),
                                                            [1, 2, 2])])
    kept = s.tensor_scatter_update(t, [[3], [1], [3]], s.mul(upd, upd))  # row 3: last wins
    skipped = s.tensor_scatter_update(t, [[9], [0], [0]], upd, bad_indices_policy="IGNORE")
    loss = s.add_n([s.reduce_sum(s.mul(gathered, gathered)), s.reduce_sum(flat),
                    s.reduce_sum(s.mul(scattered, t)), s.reduce_sum(s.mul(added, added)),
                    s.reduce_sum(s.mul(stitched, 3.0)), s.reduce_sum(s.mul(kept, kept)),
                    s.reduce_sum(s.mul(skipped, 2.0))])
    grads = gf.gradients(loss, [params, upd, t])
    rng = np.random.default_rng(1)
    feeds = {p: rng.normal(size=p.shape.as_list()).astype(np.float32)
             for p in (params, upd, t)}
    return g, [[loss] + [gf.convert_to_tensor(d) for d in grads]], feeds, []


def training(optimizer):
    g = gf.Graph()
    s = gf.Scope(g)
    table = s.variable(np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32),
                       name="embedding")
    dense = s.variable(np.ones((3, 3), np.float32), name="dense")
    ids = s.placeholder(gf.int32, shape=[None], name="ids")
    target = s.placeholder(gf.float32, shape=[None, 3], name="target")
    rows = s.sum(s.mul(s.expand_dims(table.sparse_read(ids), 2), dense), [1])
    error = s.sub(rows, target)
    loss = s.reduce_sum(s.mul(error, error), name="loss")
    step = optimizer.minimize(loss)  # a sparse update of table, a dense one of dense
    init = gf.global_variables_initializer(g)
    feeds = {ids: np.array([1, 4, 1, 7], np.int32),
             target: np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)}
    # values read in a run of their own: a read beside the step may come before or after
    assert "ResourceSparseApplyAdagrad" in {op.type for op in g.operations()} or \
        isinstance(optimizer, gf.train.GradientDescentOptimizer)
    return g, [[loss, step]] * 3 + [[table.read(), dense.read()]], feeds, [init]


def empty_inputs():
    """No index tuples, no stitched rows: the lowerings' Reshapes and Ranges of nothing."""
    g = gf.Graph()
    s = gf.Scope(g)
    t = s.placeholder(gf.float32, [2, 2], name="t")
    u = s.placeholder(gf.float32, [None, 2], name="u")
    i = s.placeholder(gf.int32, [None], name="i")
    none = np.zeros((0, 1), np.int32)
    kept, top = s.tensor_scatter_update(t, none, u), s.tensor_scatter_max(t, none, u)
    stitched = s.dynamic_stitch([i, [0]], [u, [[5.0, 6.0]]])
    rows = s.gather_nd(s.reshape(u, [-1, 1, 2]), s.reshape(i, [-1, 1, 1]), batch_dims=1)
    loss = s.add_n([s.reduce_sum(s.mul(kept, kept)), s.reduce_sum(top),
                    s.reduce_sum(s.mul(stitched, stitched)), s.reduce_sum(rows)])
    feeds = {t: np.ones((2, 2), np.float32), u: np.zeros((0, 2), np.float32),
             i: np.zeros(0, np.int32)}
    return g, [[kept, top, stitched, rows] + gf.gradients(loss, [t, u])], feeds, []


def sharded_embedding():
    """gf.nn.embedding_lookup over two shards, trained: partition, gathers, a parallel
    stitch and its gradient's _StitchWinners, sparse updates of each shard."""
    g = gf.Graph()
    s = gf.Scope(g)
    rng = np.random.default_rng(2)
    shards = [s.variable(rng.normal(size=(5, 3)).astype(np.float32), name=f"shard{k}")
              for k in range(2)]
    ids = s.placeholder(gf.int32, [None], name="ids")
    rows = gf.nn.embedding_lookup(shards, ids, partition_strategy="mod")
    loss = s.reduce_sum(s.mul(rows, rows), name="loss")
    step = gf.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = gf.global_variables_initializer(g)
    feeds = {ids: np.array([1, 4, 1, 7, 9, 0], np.int32)}
    return g, [[loss, step]] * 3 + [[v.read() for v in shards]], feeds, [init]


def training_sgd():
    return training(gf.train.GradientDescentOptimizer(0.05))


def training_adagrad():
    return training(gf.train.AdagradOptimizer(0.3))


def min_max_gradients():
    """TensorScatterMin/Max's gradient splits ties evenly (and a NaN in the tensor keeps
    its element): graphflow's _ScatterMinMaxShares, lowered."""
    g = gf.Graph()
    s = gf.Scope(g)
    t = s.placeholder(gf.float32, shape=[4, 2], name="t")
    upd = s.placeholder(gf.float32, shape=[4, 2], name="upd")
    top = s.tensor_scatter_max(t, [[1], [1], [3], [0]], upd)
    low = s.tensor_scatter_min(t, [[2], [2], [0], [9]], upd, bad_indices_policy="IGNORE")
    weights = s.constant(np.arange(8, dtype=np.float32).reshape(4, 2))
    loss = s.add(s.reduce_sum(s.mul(top, weights)), s.reduce_sum(s.mul(low, weights)))
    grads = gf.gradients(loss, [t, upd])
    assert "_ScatterMinMaxShares" in {op.type for op in g.operations()}
    feeds = {t: np.array([[1, 5], [2, 2], [np.nan, 0], [7, 7]], np.float32),
             upd: np.array([[2, 1], [2, 3], [7, 7], [0, 5]], np.float32)}  # ties
    return g, [[top, low] + grads], feeds, []


def glue_ops():
    """TF's glue ops that import_tf_graph brought into graphflow go back as themselves."""
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.int64, shape=[None, 3, 4], name="x")
    v = s.variable(np.ones(2, np.float32), name="v")
    out = [s.strided_slice(x, [0, 2, 1], [2, 0, 4], [1, -1, 2], begin_mask=1,
                           shrink_axis_mask=0, new_axis_mask=0),
           s.strided_slice(x, [1], [2], [1], shrink_axis_mask=1),
           s.gather_v2(x, [[2, 0]], 1), s.gather_v2(x, [[1], [0]], 2, batch_dims=1),
           s.prod(x, [0, 2], keep_dims=True), s.transpose(x, [2, 0, 1]),
           s.tile(x, [1, 2, 1]),
           s.strided_slice_grad([2, 3, 4], [0, 1, 0], [2, 3, 4], [1, 1, 2], s.constant(
               np.arange(8, dtype=np.float32).reshape(2, 2, 2))),
           s.var_is_initialized_op(v.handle)]
    feeds = {x: np.arange(24, dtype=np.int64).reshape(2, 3, 4) - 5}
    return g, [out], feeds, []


CASES = {f.__name__: f for f in (scatter_family, gather_nd_family, partition_stitch,
                                 math_array, glue_ops, variables, gradients,
                                 min_max_gradients, empty_inputs, training_sgd,
                                 training_adagrad, sharded_embedding)}


def run_graphflow(graph, steps, feeds, setup):
    """The values of each list of fetches in ``steps``, one run each, in one Session."""
    with gf.Session(graph) as sess:
        for op in setup:
            sess.run(op)
        return [sess.run(fetches, feeds) for fetches in steps]


def run_tensorflow(tf, graph_def, steps, feeds, setup):
    """The same in TensorFlow, the GraphDef imported by tf.compat.v1.import_graph_def."""
    tg = tf.Graph()
    with tg.as_default():
        tf.compat.v1.import_graph_def(
            tf.compat.v1.GraphDef.FromString(graph_def.SerializeToString()), name="")
    tf_feeds = {k.name: v for k, v in feeds.items()}
    with tf.compat.v1.Session(graph=tg) as sess:
        for op in setup:
            sess.run(tg.get_operation_by_name(op.name))
        return [sess.run([f.name for f in fetches], tf_feeds) for fetches in steps]


def assert_same(tf_values, gf_values, what):
    for k, (a, b) in enumerate(zip(tf_values, gf_values)):
        if b is None:  # a fetched Operation
            assert a is None
            continue
        a = np.asarray(a)
        assert a.dtype == b.dtype and a.shape == b.shape, (what, k, a, b)
        if b.dtype.kind == "f" or b.dtype.kind == "c":
            np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-6, err_msg=f"{what}[{k}]")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"{what}[{k}]")


# -- round trips through TensorFlow ---------------------------------------------------------
@pytest.mark.parametrize("case", list(CASES))
def test_tensorflow_runs_the_export_with_graphflows_results(tf, case, tmp_path):
    graph, steps, feeds, setup = CASES[case]()
    if case == "gradients":  # every lowering is exercised
        assert {"_BatchIndexTuples", "_StitchWinners", "_ScatterWinners"} <= {
            op.type for op in graph.operations()}
    path = tmp_path / "model.pb"
    gf.export_tf_graph(graph, path)
    graph_def = tf_proto.protos().GraphDef.FromString(path.read_bytes())
    expected = run_graphflow(graph, steps, feeds, setup)
    got = run_tensorflow(tf, graph_def, steps, feeds, setup)
    for step, (a, b) in enumerate(zip(got, expected)):
        assert_same(a, b, f"{case} run {step}")
    if case.startswith("training") or case == "sharded_embedding":  # updates happened
        assert expected[2][0] < expected[0][0]


def test_text_format_imports_into_tensorflow(tf, tmp_path):
    from google.protobuf import text_format

    graph, steps, feeds, setup = scatter_family()
    gf.export_tf_graph(graph, tmp_path / "model.pbtxt")
    graph_def = text_format.Parse((tmp_path / "model.pbtxt").read_text(),
                                  tf.compat.v1.GraphDef())
    got = run_tensorflow(tf, graph_def, steps, feeds, setup)
    assert_same(got[0], run_graphflow(graph, steps, feeds, setup)[0], "pbtxt")


def test_attr_names_are_tensorflows(tf):
    """Every op written as itself has exactly TF 2.21's attrs (our defaults included)."""
    from tensorflow.python.framework import op_def_registry

    for case in CASES.values():
        graph_def = tf_export.tf_graph_def(case()[0])
        for node in graph_def.node:
            op_def = op_def_registry.get(node.op)
            assert op_def is not None, node.op
            want = {a.name for a in op_def.attr}
            have = {k for k in node.attr if not k.startswith("_")}
            assert have == want, (node.name, node.op, have ^ want)


def test_the_tables_match_tensorflows_op_defs(tf):
    """Every op written as itself: graphflow's attrs, renamed and completed with TF_DEFAULTS
    (less what a lowering drops), are exactly TF 2.21's, inputs and outputs in number."""
    from tensorflow.python.framework import op_def_registry

    for name in sorted(tf_export.SAME_AS_TF | tf_export.RESOURCE_OPS):
        ours, theirs = gf.op_def(name), op_def_registry.get(name)
        attrs = set(ours.attrs) - set(tf_export.DROPPED.get(name, ()))
        if name in tf_export.RESOURCE_OPS:
            attrs = attrs - {"dtype"} | {"T"}
        attrs |= set(tf_export.TF_DEFAULTS.get(name, {}))
        assert attrs == {a.name for a in theirs.attr}, name
        assert len(ours.inputs) == len(theirs.input_arg), name
        assert len(ours.outputs) == len(theirs.output_arg), name


@pytest.mark.parametrize("build", [
    lambda s, i: s.scatter_nd(i, [1.0, 2.0], [4]),
    lambda s, i: s.gather_nd(s.constant(np.zeros((4, 2))), i),
    lambda s, i: s.dynamic_stitch([s.reshape(i, [-1])], [[1.0, 2.0]]),
], ids=["scatter_nd", "gather_nd", "dynamic_stitch"])
def test_a_bad_index_fails_in_both(tf, build):
    g = gf.Graph()
    s = gf.Scope(g)
    i = s.placeholder(gf.int32, [2, 1], name="i")
    out = build(s, i)
    bad = {i: np.array([[1], [-3]], np.int32)}
    with pytest.raises(InvalidArgumentError):
        run_graphflow(g, [[out]], bad, [])
    with pytest.raises(tf.errors.InvalidArgumentError):
        run_tensorflow(tf, tf_export.tf_graph_def(g), [[out]], bad, [])


def test_a_failing_check_fails_in_tensorflow_too(tf):
    """The gradients' _AssertEqual is lowered to an Assert: a grad_ys of the wrong shape
    fed at run time fails in both."""
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[None], name="x")
    dy = s.placeholder(gf.float32, shape=[None], name="dy")
    y = s.mul(x, 3.0)
    dx, = gf.gradients(y, [x], grad_ys=[dy])
    assert any(op.type == "_AssertEqual" for op in g.operations())
    graph_def = tf_export.tf_graph_def(g)
    good = {x: np.ones(3, np.float32), dy: np.arange(3, dtype=np.float32)}
    assert_same(run_tensorflow(tf, graph_def, [[dx]], good, [])[0],
                run_graphflow(g, [[dx]], good, [])[0], "check passes")
    bad = {x: np.ones(3, np.float32), dy: np.ones(2, np.float32)}
    with pytest.raises(InvalidArgumentError):
        run_graphflow(g, [[dx]], bad, [])
    with pytest.raises(tf.errors.InvalidArgumentError, match="grad_ys"):
        run_tensorflow(tf, graph_def, [[dx]], bad, [])


# -- structure (no TensorFlow) -------------------------------------------------------------
def test_every_table_entry_is_a_registered_op():
    registered = {d.name for d in gf.registered_ops(include_internal=True)}
    table = tf_export.SAME_AS_TF | tf_export.RESOURCE_OPS | set(tf_export.LOWERINGS)
    assert table <= registered, table - registered
    for name in table:
        assert tf_export.has_tf_counterpart(name)


def test_resource_ops_use_tensorflows_attr_names():
    g, *_ = variables()
    by_name = nodes(tf_export.tf_graph_def(g))
    handle = by_name["table"]
    assert handle.op == "VarHandleOp"
    assert handle.attr["shared_name"].s == b"table"
    assert handle.attr["dtype"].type == tf_proto.tf_enum(gf.float32)
    assert tf_proto.shape_from_proto(handle.attr["shape"].shape).as_list() == [6, 2]
    assert set(handle.attr) == {"dtype", "shape", "shared_name", "container", "debug_name",
                                "allowed_devices", "_output_shapes"}
    scatters = [n for n in by_name.values() if n.op.startswith("ResourceScatterNd")]
    assert {n.op for n in scatters} == {f"ResourceScatterNd{k}"
                                        for k in ("Add", "Sub", "Update", "Min", "Max")}
    for n in scatters:
        assert "dtype" not in n.attr and n.attr["T"].type == tf_proto.tf_enum(gf.float32)
        assert n.attr["Tindices"].type == tf_proto.tf_enum(gf.int32)
        assert n.attr["use_locking"].b is True
        assert n.input[0] == "table"
    gather = next(n for n in by_name.values() if n.op == "ResourceGather")
    assert gather.attr["batch_dims"].i == 0 and gather.attr["validate_indices"].b
    assert by_name["table/Initializer"].attr["validate_shape"].b is False


def test_nodes_keep_inputs_controls_devices_and_static_shapes():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[None, 3], name="x")
    parts = s.with_device("/cpu:0").dynamic_partition(x, [0, 1, 1, 0], num_partitions=2,
                                                     name="part")
    first = s.with_control_dependencies([parts[0].op]).identity(parts[1], name="second")
    by_name = nodes(tf_export.tf_graph_def(g))
    assert list(by_name["second"].input) == ["part:1", "^part"]
    assert by_name["part"].device == "/device:CPU:0"
    assert shapes_of(by_name["x"]) == [[None, 3]]
    assert shapes_of(by_name["part"]) == [[None, 3], [None, 3]]
    assert by_name["part"].attr["num_partitions"].i == 2
    assert list(nodes(tf_export.tf_graph_def(g, clear_devices=True))["part"].device) == []
    assert "_output_shapes" not in nodes(tf_export.tf_graph_def(g, add_shapes=False))["x"].attr
    assert first.op.name == "second"


def test_batch_dims_are_lowered_and_the_graph_is_untouched():
    g, *_ = gather_nd_family()
    before = [(op.name, op.type) for op in g.operations()]
    graph_def = tf_export.tf_graph_def(g)
    assert [(op.name, op.type) for op in g.operations()] == before
    for node in graph_def.node:
        assert not node.op.startswith("_")
        if node.op == "GatherNd":
            assert "batch_dims" not in node.attr
    names = [n.name for n in graph_def.node]
    assert len(names) == len(set(names))
    for op in g.operations():  # every graphflow node is still there, under its name
        assert op.name in names


def test_ops_without_a_tf_counterpart_are_refused_naming_every_node(tmp_path):
    g = gf.Graph()
    s = gf.Scope(g)
    t = s.placeholder(gf.float32, shape=[4], name="t")
    s.test_export_user_op(t, name="mine")
    s.test_export_user_op(s.test_export_other_op(t, name="other"), name="mine_again")
    path = tmp_path / "out.pb"
    with pytest.raises(UnimplementedError) as e:
        gf.export_tf_graph(g, path)
    message = str(e.value)
    assert "3 nodes" in message
    assert "TestExportUserOp (nodes 'mine', 'mine_again')" in message
    assert "TestExportOtherOp (node 'other')" in message
    assert e.value.node_name is None  # several nodes: each is in the message
    assert not path.exists()
    for internal in ("_FusedElementwise", "_PartitionedSelect"):  # only inside plans
        assert not tf_export.has_tf_counterpart(internal)


USER_OP = gf.register_op("TestExportUserOp", inputs=["x: T"], outputs=["y: T"],
                         attrs={"T": gf.TypeAttr()}, doc="Identity, for the export tests.")


OTHER_OP = gf.register_op("TestExportOtherOp", inputs=["x: T"], outputs=["y: T"],
                          attrs={"T": gf.TypeAttr()}, doc="Identity, for the export tests.")


@USER_OP.shape_fn
@OTHER_OP.shape_fn
def _user_shape(ctx):
    """same as x."""
    return ctx.shape("x")


def test_a_user_op_is_refused_by_name_but_shown_in_the_graph_view():
    g = gf.Graph()
    s = gf.Scope(g)
    s.test_export_user_op(s.constant([1.0]), name="mine")
    with pytest.raises(UnimplementedError, match="TestExportUserOp.*'mine'") as e:
        tf_export.tf_graph_def(g)
    assert e.value.node_name == "mine"
    view = nodes(tf_export.tf_graph_def(g, strict=False))
    assert view["mine"].op == "TestExportUserOp"


def test_pbtxt_is_text_of_the_same_message(tmp_path):
    from google.protobuf import text_format

    g, *_ = math_array()
    binary = gf.export_tf_graph(g, tmp_path / "a.pb")
    text = gf.export_tf_graph(g, tmp_path / "a.PBTXT")
    assert binary == text
    parsed = text_format.Parse((tmp_path / "a.PBTXT").read_text(), tf_proto.protos().GraphDef())
    assert parsed == tf_proto.protos().GraphDef.FromString((tmp_path / "a.pb").read_bytes())
    assert parsed.versions.producer == tf_export.TF_PRODUCER


@pytest.mark.parametrize("bad", [None, "graph", gf.Scope(gf.Graph())])
def test_not_a_graph(bad, tmp_path):
    with pytest.raises(TypeError, match="gf.Graph"):
        gf.export_tf_graph(bad, tmp_path / "x.pb")


def test_constants_round_trip_exactly():
    g = gf.Graph()
    s = gf.Scope(g)
    values = [np.array([np.nan, -0.0, 1e-45], np.float32), np.array([[1, 2]], np.uint16),
              np.array([b"\xff\x00", b""], object), np.float16(3.5), np.array([True, False]),
              np.array([1 - 1j], np.complex128), np.zeros((0, 3), np.int64)]
    consts = [s.constant(v) for v in values]
    by_name = nodes(tf_export.tf_graph_def(g))
    for c, v in zip(consts, values):
        back = tf_proto.tensor_from_proto(by_name[c.op.name].attr["value"].tensor)
        v = np.asarray(v)
        assert back.dtype == v.dtype and back.shape == v.shape
        assert back.tobytes() == v.tobytes() if v.dtype != object else list(back) == list(v)


# -- TensorFlow-written graphs: import, export, and back ----------------------------------
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tf")
#: unknown_ops and cond_while use ops graphflow lacks (cond_while: Cos, Sin, Atan inside its
#: If/While functions; tests/test_import_fixes.py checks they are listed)
TF_WRITTEN = sorted(f for f in os.listdir(FIXTURES) if f.endswith((".pb", ".pbtxt"))
                    and not f.startswith(("unknown_ops", "cond_while.")))


def _fixture(file: str):
    """(graph imported from the TF-written file, feeds, {fetch: TF's value}, before)."""
    data = np.load(os.path.join(FIXTURES, file.split(".")[0] + ".npz"), allow_pickle=True)
    try:
        graph = gf.import_tf_graph(os.path.join(FIXTURES, file))
    except UnimplementedError as e:  # a function library without tensorboard's schema
        pytest.skip(str(e))
    feeds = {str(k): data[f"feed_{i}"] for i, k in enumerate(data["feed_names"])}
    fetches = {str(k): data[f"fetch_{i}"] for i, k in enumerate(data["fetch_names"])}
    return graph, feeds, fetches, [str(k) for k in data["before"]]


def _bitwise(got, want, what):
    got = np.asarray(got)
    assert got.shape == want.shape, what
    if want.dtype == object:
        assert [bytes(x) for x in got.ravel()] == want.ravel().tolist(), what
    else:
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (what, got, want)


@pytest.mark.parametrize("file", TF_WRITTEN)
def test_tf_written_graphs_export_and_import_again(file, tmp_path):
    graph, feeds, fetches, before = _fixture(file)
    gf.export_tf_graph(graph, tmp_path / "again.pb")
    again = gf.import_tf_graph(tmp_path / "again.pb")
    with gf.Session(again) as sess:
        for target in before:
            sess.run(target)
        got = sess.run(list(fetches), feeds)
    for (name, want), value in zip(fetches.items(), got):
        if file in WITHIN_ROUNDING:
            np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-7, err_msg=name)
        else:
            _bitwise(value, want, f"{file}: {name}")


#: TF-written graphs whose math graphflow computes within float rounding, not bit for bit
#: (Softmax's exp and sum: numpy's and Eigen's differ in the last bits)
WITHIN_ROUNDING = {"keras_dense.pb"}


@pytest.mark.parametrize("file", TF_WRITTEN)
def test_tf_written_graphs_exported_again_give_tfs_results_bit_for_bit(tf, file):
    from tensorflow.core.protobuf import rewriter_config_pb2

    graph, feeds, fetches, before = _fixture(file)
    graph_def = tf_export.tf_graph_def(graph)
    plain = tf.compat.v1.ConfigProto(graph_options=tf.compat.v1.GraphOptions(  # no Grappler
        rewrite_options=rewriter_config_pb2.RewriterConfig(disable_meta_optimizer=True)))
    with tf.Graph().as_default() as tg:
        tf.compat.v1.import_graph_def(
            tf.compat.v1.GraphDef.FromString(graph_def.SerializeToString()), name="")
        with tf.compat.v1.Session(graph=tg, config=plain) as sess:
            for target in before:
                sess.run(target if ":" in target else tg.get_operation_by_name(target))
            got = sess.run(list(fetches), feeds)
    for (name, want), value in zip(fetches.items(), got):
        _bitwise(value, want, f"{file}: {name}")


def test_batch_dims_with_indices_of_unknown_rank_is_refused_by_name():
    g = gf.Graph()
    s = gf.Scope(g)
    ids = s.placeholder(gf.int32, shape=None, name="ids")
    s.gather_nd(s.constant(np.zeros((2, 3), np.float32)), ids, batch_dims=1, name="rows")
    with pytest.raises(UnimplementedError, match="unknown rank") as e:
        tf_export.tf_graph_def(g)
    assert e.value.node_name == "rows"


@pytest.mark.parametrize("optimizer", ["adam", "momentum", "rmsprop"])
def test_the_new_optimizers_train_alike_in_tensorflow(tf, optimizer):
    """Sparse (a gathered table) and dense updates by Adam, Momentum and RMSProp, exported:
    TF 1.x runs the same three steps to the same variables (Adam's sparse update is
    written as the ops TF's AdamOptimizer builds)."""
    g = gf.Graph()
    s = gf.Scope(g)
    table = s.variable(np.arange(12, dtype=np.float32).reshape(6, 2) / 7, name="table")
    w = s.variable(np.float32([0.5, -1.0]), name="w")
    ids = s.placeholder(gf.int32, shape=[None], name="ids")
    loss = s.reduce_sum(s.square(s.mul(table.sparse_read(ids), w)))
    make = {"adam": lambda: gf.train.AdamOptimizer(0.1),
            "momentum": lambda: gf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
            "rmsprop": lambda: gf.train.RMSPropOptimizer(0.1, momentum=0.5, centered=True)}
    train = make[optimizer]().minimize(loss)
    feeds = {ids: np.int32([1, 4, 1])}  # a duplicate row: summed first, as TF's optimizer
    steps = [[train], [train], [train], [table.read(), w.read()]]
    init = [gf.global_variables_initializer(g)]
    want = run_graphflow(g, steps, feeds, init)
    got = run_tensorflow(tf, tf_export.tf_graph_def(g), steps, feeds, init)
    assert_same(got[-1], want[-1], optimizer)
