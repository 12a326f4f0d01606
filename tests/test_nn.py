"""gf.nn.embedding_lookup: values against a plain numpy reference (and values recorded
from TensorFlow 2.21's tf.compat.v1.nn.embedding_lookup), static shapes, gradients
(central differences, IndexedSlices per shard, optimizer steps against np.add.at),
placement of each shard's gather, errors, and the lookup on a GPU."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError, InvalidDTypeError, UnimplementedError

from support.gpu_devices import GPU_KINDS, gpu_session_devices

SIZES = [5, 3, 4, 2]  # shard k of n has SIZES[k] rows: unequal on purpose
ROW = (2, 3)          # every shard's row shape


# -- the reference -------------------------------------------------------------------------
def locate(i: int, sizes: list[int], strategy: str) -> tuple[int, int]:
    """(shard, row) of id ``i``, from the rule as TensorFlow documents it: "mod" deals ids
    round-robin; "div" deals contiguous blocks, the first ``total % n`` one id bigger."""
    n = len(sizes)
    if strategy == "mod":
        return i % n, i // n
    total = sum(sizes)
    blocks = [total // n + (1 if p < total % n else 0) for p in range(n)]
    start = 0
    for p, size in enumerate(blocks):
        if start <= i < start + size:
            return p, i - start
        start += size
    return -1, -1  # past the last block: no shard


def reference(shards: list[np.ndarray], ids: np.ndarray, strategy: str) -> np.ndarray:
    rows = [shards[p][r] for p, r in (locate(int(i), [len(s) for s in shards], strategy)
                                      for i in np.ravel(ids))]
    return np.array(rows, shards[0].dtype).reshape(np.shape(ids) + shards[0].shape[1:])


def valid_ids(sizes: list[int], strategy: str) -> list[int]:
    """Every id whose row exists in its shard."""
    found = []
    for i in range(3 * sum(sizes)):
        p, r = locate(i, sizes, strategy)
        if p >= 0 and r < sizes[p]:
            found.append(i)
    return found


def make_shards(n: int, dtype=np.float32, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(SIZES[k],) + ROW).astype(dtype) for k in range(n)]


def as_params(scope: gf.Scope, shards: list[np.ndarray], kind: str):
    """The shards as variables, constants, or placeholders of unknown first dim (fed)."""
    if kind == "variable":
        return [scope.variable(s, name=f"shard{k}") for k, s in enumerate(shards)], {}
    if kind == "constant":
        return [scope.constant(s) for s in shards], {}
    params = [scope.placeholder(gf.as_dtype(s.dtype), shape=[None, *s.shape[1:]])
              for s in shards]
    return params, dict(zip(params, shards))


def run_all(graph: gf.Graph, fetches, feed=None):
    with gf.Session(graph) as sess:
        sess.run(gf.global_variables_initializer(graph))
        return sess.run(fetches, feed)


# -- values ------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", ["variable", "constant", "placeholder"])
def test_lookup_matches_reference(strategy, n, kind):
    """ids of rank 0..3 with duplicates, int32 and int64, in one graph."""
    g = gf.Graph()
    scope = gf.Scope(g)
    shards = make_shards(n)
    params, feed = as_params(scope, shards, kind)
    rng = np.random.default_rng(n)
    candidates = valid_ids(SIZES[:n], strategy)
    cases = []
    for rank in range(4):
        for dtype in (np.int32, np.int64):
            shape = (3, 2, 2)[:rank]
            ids = rng.choice(candidates, size=shape).astype(dtype)  # duplicates likely
            if rank:
                ids.flat[-1] = ids.flat[0]                            # and certain
            out = gf.nn.embedding_lookup(params, ids, partition_strategy=strategy)
            assert out.shape == gf.TensorShape([*shape, *ROW])
            assert out.dtype == gf.float32
            cases.append((out, ids))
    got = run_all(g, [out for out, _ in cases], feed)
    for value, (_, ids) in zip(got, cases):
        np.testing.assert_array_equal(value, reference(shards, ids, strategy))


@pytest.mark.parametrize("strategy, split", [
    ("mod", lambda table, n: [table[p::n] for p in range(n)]),
    ("div", lambda table, n: np.array_split(table, n)),   # the first total % n one row longer
])
@pytest.mark.parametrize("total, n", [(13, 5), (12, 4), (7, 3), (3, 3), (10, 1)])
def test_a_table_split_as_tensorflow_splits_it_looks_up_like_the_table(strategy, split,
                                                                         total, n):
    table = np.arange(total * 2, dtype=np.float64).reshape(total, 2)
    g = gf.Graph()
    scope = gf.Scope(g)
    shards = [scope.variable(s) for s in split(table, n)]
    ids = np.array([[total - 1, 0, 1], [total // 2, total - 1, 0]], np.int64)
    out = gf.nn.embedding_lookup(shards, ids, partition_strategy=strategy)
    np.testing.assert_array_equal(run_all(g, out), table[ids])


# Recorded from TensorFlow 2.21: tf.compat.v1.nn.embedding_lookup over three shards of
# 3, 2 and 2 rows (shard k holds 100k, 100k + 1, ...), ids [[0, 6, 3], [5, 5, 1]].
TF_RECORDED = {
    "mod": [[[0, 1], [4, 5], [2, 3]], [[202, 203], [202, 203], [100, 101]]],
    "div": [[[0, 1], [202, 203], [100, 101]], [[200, 201], [200, 201], [2, 3]]],
}


@pytest.mark.parametrize("strategy", sorted(TF_RECORDED))
@pytest.mark.parametrize("variables", [False, True])
def test_values_recorded_from_tensorflow(scope, strategy, variables):
    shards = [np.arange(k * 100, k * 100 + n * 2, dtype=np.float32).reshape(n, 2)
              for k, n in enumerate([3, 2, 2])]
    params = [scope.variable(s) if variables else scope.constant(s) for s in shards]
    ids = scope.constant(np.array([[0, 6, 3], [5, 5, 1]], np.int64))
    out = gf.nn.embedding_lookup(params, ids, partition_strategy=strategy)
    assert run_all(scope.graph, out).tolist() == TF_RECORDED[strategy]


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint64, np.bool_, np.complex64,
                                   object])
@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_tables_of_every_dtype(scope, dtype, strategy):
    base = np.arange(9 * 2).reshape(9, 2)
    table = np.array([[str(v).encode() for v in row] for row in base], object) \
        if dtype is object else (base % 2 == 1 if dtype is np.bool_ else base.astype(dtype))
    shards = [table[:4], table[4:7], table[7:]]
    valid = valid_ids([4, 3, 2], strategy)
    ids = np.array([[valid[-1], valid[0], valid[5]], [valid[5], valid[3], valid[1]]], np.int32)
    out = gf.nn.embedding_lookup([scope.constant(s) for s in shards], ids,
                                 partition_strategy=strategy)
    assert out.dtype == gf.as_dtype(shards[0].dtype)
    np.testing.assert_array_equal(run_all(scope.graph, out), reference(shards, ids, strategy))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 4), strategy=st.sampled_from(["mod", "div"]),
       sizes=st.lists(st.integers(0, 6), min_size=4, max_size=4), data=st.data())
def test_any_sizes_and_ids_match_reference(n, strategy, sizes, data):
    sizes = sizes[:n]
    if sum(sizes) < n and strategy == "div" and n > 1:
        sizes[0] += n  # fewer rows than shards: see test_div_with_fewer_rows_than_shards
    candidates = valid_ids(sizes, strategy)
    if not candidates:
        return
    ids = np.array(data.draw(st.lists(st.sampled_from(candidates), max_size=12)), np.int64)
    shards = [np.full((size, 2), 10 * k, np.int32) + np.arange(size)[:, None]
              for k, size in enumerate(sizes)]
    g = gf.Graph()
    scope = gf.Scope(g)
    out = gf.nn.embedding_lookup([scope.constant(s) for s in shards], ids,
                                 partition_strategy=strategy)
    np.testing.assert_array_equal(run_all(g, out), reference(shards, ids, strategy).reshape(-1, 2))


def test_static_and_run_time_shapes(scope):
    shards = make_shards(2)
    ids = scope.placeholder(gf.int64, shape=[None, 3])
    out = gf.nn.embedding_lookup([scope.constant(s) for s in shards], ids)
    assert out.shape == gf.TensorShape([None, 3, *ROW])
    # a shard with unknown row shape takes the others'; unknown everywhere: read at run time
    unknown = scope.placeholder(gf.float32, shape=None, name="unknown")
    out = gf.nn.embedding_lookup([unknown, scope.constant(shards[1])], ids,
                                 partition_strategy="div")
    assert out.shape == gf.TensorShape([None, 3, *ROW])
    unknown_too = scope.placeholder(gf.float32, name="unknown_too")
    only_unknown = gf.nn.embedding_lookup([unknown, unknown_too], ids, partition_strategy="div")
    assert only_unknown.shape.rank is None  # ids.shape + an unknown row shape, as TF's
    partial = scope.placeholder(gf.float32, shape=[None, None, ROW[1]], name="partial")
    some_known = gf.nn.embedding_lookup([unknown, partial], ids, partition_strategy="div")
    assert some_known.shape == gf.TensorShape([None, 3, None, ROW[1]])
    any_ids = scope.placeholder(gf.int32)
    assert gf.nn.embedding_lookup([scope.constant(s) for s in shards], any_ids).shape.rank \
        is None
    value = np.array([[0, 6, 2], [3, 3, 1]], np.int64)
    feed = {ids: value, unknown: shards[0]}
    got = run_all(scope.graph, [out, only_unknown, some_known],
                  {**feed, unknown_too: shards[1], partial: shards[1]})
    for g in got:
        np.testing.assert_array_equal(g, reference(shards, value, "div"))


def test_empty_ids_and_single_table(scope):
    shards = make_shards(3)
    empty = gf.nn.embedding_lookup([scope.variable(s) for s in shards],
                                   np.zeros((0, 4), np.int32))
    single = gf.nn.embedding_lookup(scope.constant(shards[0]), np.array([[4, 0], [4, 4]]))
    assert empty.shape == gf.TensorShape([0, 4, *ROW])
    got_empty, got_single = run_all(scope.graph, [empty, single])
    assert got_empty.shape == (0, 4, *ROW)
    np.testing.assert_array_equal(got_single, shards[0][[[4, 0], [4, 4]]])


# -- placement ---------------------------------------------------------------------------
def test_each_shard_is_gathered_and_updated_on_its_device(scope):
    devices = ["/cpu:0", "/gpu:0"]  # placement requests; soft placement runs both anywhere
    shards = [scope.with_device(d).variable(s, name=f"shard{k}")
              for k, (d, s) in enumerate(zip(devices, make_shards(2, np.float64)))]
    ids = scope.placeholder(gf.int32, shape=[None])
    out = gf.nn.embedding_lookup(shards, ids, scope=scope.with_sub_scope("model"))
    loss = scope.reduce_sum(scope.mul(out, out))
    grads = gf.gradients(loss, shards)
    train = gf.train.GradientDescentOptimizer(0.1).minimize(loss)
    graph = scope.graph
    gathers = [op for op in graph.operations() if op.type == "ResourceGather"]
    assert sorted((op.inputs[0].op.name, op.device) for op in gathers) == \
        [("shard0", "/device:CPU:0"), ("shard1", "/device:GPU:0")]
    assert all(op.name.startswith("model/embedding_lookup/") for op in gathers)
    stitch = next(op for op in graph.operations() if op.type == "ParallelDynamicStitch")
    assert stitch.device == ""  # the caller's scope
    for v, g in zip(shards, grads):
        assert isinstance(g, gf.IndexedSlices) and g.values.op.device == v.device
    updates = {op.inputs[0].op.name: op.device for op in graph.operations()
               if op.type == "ResourceScatterNdSub"}
    assert updates == {"shard0": "/device:CPU:0", "shard1": "/device:GPU:0"}
    assert train.type == "NoOp"


# -- gradients -----------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("n", [1, 3])
def test_gradients_match_central_differences(strategy, n):
    g = gf.Graph()
    scope = gf.Scope(g)
    shards = make_shards(n, np.float64, seed=3)
    params = [scope.placeholder(gf.float64, shape=s.shape) for s in shards]
    valid = valid_ids(SIZES[:n], strategy)
    ids = np.array([[valid[0], valid[-1], valid[0]], [valid[len(valid) // 2], valid[-1],
                                                      valid[1]]], np.int32)
    looked_up = gf.nn.embedding_lookup(params, ids, partition_strategy=strategy)
    y = scope.mul(looked_up, scope.constant(np.linspace(-1, 2, looked_up.shape.num_elements()
                                                        ).reshape(looked_up.shape.as_list())))
    for check in gf.gradient_check(y, params, shards):
        assert check.max_error < 1e-6, check


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_gradient_per_shard_is_indexed_slices_of_the_rows_looked_up(scope, strategy):
    shards = make_shards(3, np.float64, seed=1)
    params = [scope.variable(s, name=f"shard{k}") for k, s in enumerate(shards)]
    valid = valid_ids(SIZES[:3], strategy)
    ids_value = np.array([[valid[0], valid[4]], [valid[4], valid[7]], [valid[2], valid[2]]])
    weights_value = np.random.default_rng(2).normal(size=ids_value.shape + ROW)
    out = gf.nn.embedding_lookup(params, ids_value, partition_strategy=strategy)
    loss = scope.reduce_sum(scope.mul(out, weights_value))
    grads = gf.gradients(loss, params)
    assert all(isinstance(g, gf.IndexedSlices) for g in grads)
    got = run_all(scope.graph, [(g.values, g.indices, g.dense_shape) for g in grads])
    for k, (values, indices, dense_shape) in enumerate(got):
        looked = [(locate(int(i), SIZES[:3], strategy), w)
                  for i, w in zip(ids_value.ravel(), weights_value.reshape(-1, *ROW))]
        mine = [(r, w) for (p, r), w in looked if p == k]
        assert sorted(indices.tolist()) == sorted(r for r, _ in mine)  # only those rows
        assert dense_shape.tolist() == list(shards[k].shape)
        dense = np.zeros_like(shards[k])
        np.add.at(dense, indices, values)
        expected = np.zeros_like(shards[k])
        for r, w in mine:
            expected[r] += w
        np.testing.assert_allclose(dense, expected, rtol=1e-12)


@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_optimizer_step_updates_each_shard_in_place_like_np_add_at(scope, strategy, optimizer):
    shards = make_shards(3, np.float64, seed=4)
    params = [scope.variable(s, name=f"shard{k}") for k, s in enumerate(shards)]
    ids = scope.placeholder(gf.int64, shape=[None])
    targets = scope.placeholder(gf.float64, shape=[None, *ROW])
    error = scope.sub(gf.nn.embedding_lookup(params, ids, partition_strategy=strategy), targets)
    loss = scope.reduce_sum(scope.mul(error, error))
    rate = 0.1
    opt = gf.train.GradientDescentOptimizer(rate) if optimizer == "sgd" else \
        gf.train.AdagradOptimizer(rate, initial_accumulator_value=0.5)
    train = opt.minimize(loss)
    sparse = [op for op in scope.graph.operations()
              if op.type in ("ResourceScatterNdSub", "ResourceSparseApplyAdagrad")]
    assert len(sparse) == 3  # one sparse in-place update per shard, nothing dense
    assert not [op for op in scope.graph.operations()
                if op.type in ("AssignSubVariableOp", "ResourceApplyAdagrad")]
    valid = valid_ids(SIZES[:3], strategy)
    id_value = np.array([valid[i] for i in (0, 4, 4, 7, 2, 0, 10)], np.int64)
    target_value = np.random.default_rng(5).normal(size=(len(id_value), *ROW))
    with gf.Session(scope.graph) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        sess.run(train, {ids: id_value, targets: target_value})
        after = sess.run(params)
    where = [locate(int(i), SIZES[:3], strategy) for i in id_value]
    for k, shard in enumerate(shards):
        grad = np.zeros_like(shard)
        for (p, r), i, t in zip(where, id_value, target_value):
            if p == k:
                np.add.at(grad, r, 2 * (shard[r] - t))
        if optimizer == "sgd":
            expected = shard - rate * grad
        else:
            accum = 0.5 + grad * grad
            expected = np.where(grad != 0, shard - rate * grad / np.sqrt(accum), shard)
        np.testing.assert_allclose(after[k], expected, rtol=1e-12)
        untouched = [r for r in range(len(shard)) if (k, r) not in where]
        assert np.array_equal(after[k][untouched], shard[untouched])  # bit-identical


# -- errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy, bad_id, message", [
    # shard 0 holds ids 0, 2, 4, 6: id 8 is its row 4 (the 2nd id it gets)
    ("mod", 8, r"indices\[1\] = 4 is not in \[0, 4\) \[node embedding_lookup/Gather\]"),
    # shard 1 holds ids 1, 3, 5: id 9 is its row 4, and -1 its row -1
    ("mod", 9, r"indices\[1\] = 4 is not in \[0, 3\) \[node embedding_lookup/Gather_1\]"),
    ("mod", -1, r"indices\[1\] = -1 is not in \[0, 3\) \[node embedding_lookup/Gather_1\]"),
    # div: blocks of 4 and 3 ids; past them there is no shard: TensorFlow's words, from
    # either DynamicPartition (of the ids or of their positions), whichever runs first
    ("div", 8, (r"partitions\[2\] = 2 is not in \[0, 2\) "
               r"\[node embedding_lookup/Partition(Ids|Positions)\]")),
    ("div", -1, (r"partitions\[2\] = -1 is not in \[0, 2\) "
                r"\[node embedding_lookup/Partition(Ids|Positions)\]")),
])
def test_out_of_range_id_names_the_node_and_changes_no_shard(scope, strategy, bad_id, message):
    shards = [np.ones((4, 2)), np.ones((3, 2))]  # 7 rows: div blocks of 4 and 3
    params = [scope.variable(s, name=f"shard{k}") for k, s in enumerate(shards)]
    ids = scope.placeholder(gf.int64, shape=[None])
    out = gf.nn.embedding_lookup(params, ids, partition_strategy=strategy)
    train = gf.train.GradientDescentOptimizer(1.0).minimize(scope.reduce_sum(out))
    with gf.Session(scope.graph) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        for fetch in (out, train):
            with pytest.raises(InvalidArgumentError, match=message):
                sess.run(fetch, {ids: [0, 1, bad_id]})
        for v, s in zip(params, shards):
            np.testing.assert_array_equal(sess.run(v), s)
        assert sess.run(out, {ids: [0, 1]}).shape == (2, 2)  # the Session still works


def test_div_with_fewer_rows_than_shards_fails_only_when_it_looks_up(scope):
    """As TensorFlow: no id fits (0 ids per shard), an integer division by zero."""
    params = [scope.constant(np.ones((1, 2), np.float32)),
              scope.constant(np.ones((0, 2), np.float32))]
    ids = scope.placeholder(gf.int32, shape=[None])
    out = gf.nn.embedding_lookup(params, ids, partition_strategy="div")
    with gf.Session(scope.graph) as sess:
        assert sess.run(out, {ids: []}).shape == (0, 2)
        with pytest.raises(InvalidArgumentError, match="Integer division by zero"):
            sess.run(out, {ids: [0]})


@pytest.mark.parametrize("make, error, match", [
    (lambda s: ([], [0]), InvalidArgumentError, "params is an empty list"),
    (lambda s: (None, [0]), InvalidArgumentError, "params must be specified"),
    (lambda s: ([s.constant(np.ones((2, 3), np.float32)),
                 s.constant(np.ones((2, 3), np.float64))], [0]),
     InvalidDTypeError,
     r"params\[0\] \('Const:0'\) is float32 and params\[1\] \('Const_1:0'\) is float64"),
    (lambda s: ([s.variable(np.ones((2, 3))), s.constant(np.ones((2, 4)))], [0]),
     InvalidArgumentError,
     r"params\[1\] \('Const:0'\) has rows of shape \[4\] where the shards before it have \[3\]"),
    (lambda s: ([s.constant(1.0), s.constant(2.0)], [0]), InvalidArgumentError, "scalar"),
    (lambda s: ([s.constant(np.ones((2, 3)))], [1.0]), InvalidDTypeError,
     "ids must be int32 or int64, got float32"),
    (lambda s: ([s.constant(np.ones((2, 3)))], s.placeholder(gf.float64)), InvalidDTypeError,
     "ids 'Placeholder:0' must be int32 or int64, got float64"),
    (lambda s: ([s.constant(np.ones((2, 3)))], s.placeholder(gf.int16)), InvalidDTypeError,
     "got int16"),
    (lambda s: ([np.ones((2, 3)), np.ones(3)], [0]), InvalidArgumentError, "no graph"),
])
def test_bad_arguments_fail_at_build_time_adding_nothing(scope, make, error, match):
    params, ids = make(scope)
    before = len(list(scope.graph.operations()))
    with pytest.raises(error, match=match):
        gf.nn.embedding_lookup(params, ids)
    assert len(list(scope.graph.operations())) == before


@pytest.mark.parametrize("kwargs, error, match", [
    ({"partition_strategy": "bogus"}, InvalidArgumentError,
     "unrecognized partition strategy 'bogus'; must be one of 'mod', 'div'"),
    ({"partition_strategy": None}, TypeError, "partition_strategy must be a string"),
    ({"max_norm": 1.0}, UnimplementedError, "max_norm=1.0 is not implemented"),
    ({"name": 3}, TypeError, "name must be a string"),
    ({"scope": "model"}, TypeError, "scope must be a gf.Scope"),
])
@pytest.mark.parametrize("n", [1, 2])
def test_bad_options_fail_at_build_time(scope, kwargs, error, match, n):
    params = [scope.variable(np.ones((3, 2))) for _ in range(n)]
    before = len(list(scope.graph.operations()))
    with pytest.raises(error, match=match):
        gf.nn.embedding_lookup(params, [0], **kwargs)
    assert len(list(scope.graph.operations())) == before


def test_arguments_from_two_graphs(scope):
    other = gf.Scope(gf.Graph())
    with pytest.raises(InvalidArgumentError, match=r"ids is from another graph than params\[0\]"):
        gf.nn.embedding_lookup([scope.variable(np.ones((3, 2)))], other.constant([0]))
    with pytest.raises(InvalidArgumentError, match=r"params\[1\] is from another graph"):
        gf.nn.embedding_lookup([scope.constant(np.ones((3, 2))), other.constant(np.ones((3, 2)))],
                               [0])


def test_names_validate_indices_and_plain_values(scope):
    """TensorFlow's positional signature; plain arrays as shards become constants."""
    table = np.arange(12.0).reshape(6, 2)
    out = gf.nn.embedding_lookup([table[0::2], table[1::2]], scope.constant([5, 0, 3]), "mod",
                                 "lookup", False)
    assert out.op.name == "lookup/Reshape"
    again = gf.nn.embedding_lookup([table[0::2], table[1::2]], scope.constant([1]), name="lookup")
    assert again.op.name.startswith("lookup_1/")
    np.testing.assert_array_equal(run_all(scope.graph, out), table[[5, 0, 3]])


# -- on a GPU ------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("kind", GPU_KINDS)
def test_lookup_on_a_gpu_equals_the_cpu(kind, strategy):
    """Shards and the lookup's own ops (FloorMod/FloorDiv, partition, gathers, stitch)
    on a GPU: the CPU's values, and the CPU's zero-divisor error."""
    shards = make_shards(3, np.float64, seed=6)
    valid = valid_ids(SIZES[:3], strategy)
    ids = np.array([[valid[0], valid[9], valid[4]], [valid[4], valid[1], valid[-1]]])
    gpu = gf.Scope(gf.Graph()).with_device("/gpu:0")
    out = gf.nn.embedding_lookup([gpu.constant(s) for s in shards], ids,
                                 partition_strategy=strategy, scope=gpu)
    tiny = gf.nn.embedding_lookup([gpu.constant(np.ones((1, 2))), gpu.constant(np.ones((0, 2)))],
                                  [0], partition_strategy="div", scope=gpu)
    with gf.Session(gpu.graph, devices=gpu_session_devices(kind)) as sess:
        placement = {op.type: d.device_type for op, d in sess._plan([out], []).placement.items()}
        assert placement["ParallelDynamicStitch"] == "gpu"
        assert placement["FloorMod" if strategy == "mod" else "FloorDiv"] == "gpu"
        np.testing.assert_array_equal(sess.run(out), reference(shards, ids, strategy))
        with pytest.raises(InvalidArgumentError, match="Integer division by zero"):
            sess.run(tiny)


# -- on a Dask cluster (tests/conftest.py's dask_client: 2 worker processes) --------------
WORKER_TASKS = ["/job:worker/task:0", "/job:worker/task:1"]


def _cluster_scope(request) -> gf.Scope:
    """A root scope named after the test: variables on workers are shared by name across
    graphs and Sessions (a parameter server's), so every test keeps its own."""
    pytest.importorskip("distributed")
    name = "".join(c if c.isalnum() else "_" for c in request.node.name)
    return gf.Scope(gf.Graph()).with_sub_scope(name)


def _sharded_model(scope, shards, strategy, devices):
    """Shard k on devices[k] (or anywhere), a lookup, a loss and an SGD step."""
    params = [(scope.with_device(devices[k]) if devices else scope).variable(s, name=f"shard{k}")
              for k, s in enumerate(shards)]
    ids = scope.placeholder(gf.int64, shape=[None, 2], name="ids")
    out = gf.nn.embedding_lookup(params, ids, partition_strategy=strategy)
    loss = scope.reduce_sum(scope.mul(out, out))
    return params, ids, out, gf.train.GradientDescentOptimizer(0.25).minimize(loss)


@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("n", [2, 3])
def test_sharded_lookup_and_step_on_the_cluster_equal_one_process(request, dask_client,
                                                                  strategy, n):
    """Shard k on task k % 2: the lookup, then a training step (each shard's sparse update
    on its own worker), equal to the same graph on one process."""
    shards = make_shards(n, np.float64, seed=7)
    valid = valid_ids(SIZES[:n], strategy)
    id_value = np.random.default_rng(n).choice(valid, size=(6, 2))
    id_value[-1] = id_value[0]  # duplicates
    results = []
    for devices, config in ((None, None),
                            ([WORKER_TASKS[k % 2] for k in range(n)],
                             gf.SessionConfig(cluster=dask_client))):
        scope = _cluster_scope(request)
        params, ids, out, step = _sharded_model(scope, shards, strategy, devices)
        with gf.Session(scope.graph, config) as sess:
            sess.run(gf.global_variables_initializer(scope.graph))
            looked_up = sess.run(out, {ids: id_value})
            sess.run(step, {ids: id_value})
            results.append((looked_up, sess.run(params)))
    (one_lookup, one_after), (cluster_lookup, cluster_after) = results
    np.testing.assert_array_equal(one_lookup, reference(shards, id_value, strategy))
    np.testing.assert_array_equal(cluster_lookup, one_lookup)
    for a, b in zip(cluster_after, one_after):
        np.testing.assert_array_equal(a, b)


def test_out_of_range_id_on_the_cluster_names_node_and_task_and_changes_no_shard(
        request, dask_client):
    scope = _cluster_scope(request)
    shards = [np.ones((4, 2)), np.ones((3, 2))]
    params, ids, out, step = _sharded_model(scope, shards, "mod", WORKER_TASKS)
    with gf.Session(scope.graph, gf.SessionConfig(cluster=dask_client)) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        for fetch in (out, step):
            with pytest.raises(InvalidArgumentError) as info:
                sess.run(fetch, {ids: [[0, 1], [2, 9]]})  # 9: shard 1, row 4 of 3
            message = str(info.value)
            assert info.value.node_name.endswith("embedding_lookup/Gather_1")
            assert "/job:worker/replica:0/task:1/device:CPU:0" in message
            assert "indices[1] = 4 is not in [0, 3)" in message
        for v, s in zip(params, shards):
            np.testing.assert_array_equal(sess.run(v), s)  # no shard changed
        sess.run(step, {ids: [[0, 1], [2, 3]]})  # the Session still works
        after = sess.run(params)
    # d(sum x^2)/dx = 2x: rows looked up go from 1 to 1 - 0.25 * 2 = 0.5, the others stay
    np.testing.assert_array_equal(after[0][:, 0], [0.5, 0.5, 1, 1])
    np.testing.assert_array_equal(after[1][:, 0], [0.5, 0.5, 1])
