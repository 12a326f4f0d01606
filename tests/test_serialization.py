"""GraphDef round trips (every op, random graphs, every dtype), identical runs after
import, and atomic rejection of malformed files."""
from __future__ import annotations

import base64
import copy
import json
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.serialization import decode_tensor, encode_tensor, to_json
from support.serialization_control_flow import EXAMPLES as CONTROL_FLOW_EXAMPLES
from support.serialization_wave4 import EXAMPLES as WAVE4_EXAMPLES

I32, F32 = np.int32, np.float32

# -- one small graph per op type -------------------------------------------------------
# Each builds its op in `s` and returns (fetches, feed_dict); ops not registered yet
# (the scatter and partition families may land later) are skipped.
EXAMPLES = {
    "Const": lambda s: (s.constant(np.array([[1, 2]], I32)), {}),
    "Placeholder": lambda s: (s.placeholder(gf.float32, shape=[None, 2]),
                              {"Placeholder:0": np.ones((3, 2), F32)}),
    "Identity": lambda s: (s.identity([1.5, -0.0]), {}),
    "NoOp": lambda s: (s.with_control_dependencies([s.constant(1)]).no_op(), {}),
    "Shape": lambda s: (s.shape(np.zeros((2, 3), F32), gf.int64), {}),
    "Size": lambda s: (s.size(np.zeros((2, 3), F32)), {}),
    "Rank": lambda s: (s.rank(np.zeros((2, 3), F32)), {}),
    "Reshape": lambda s: (s.reshape(np.arange(6, dtype=I32), [3, -1]), {}),
    "Range": lambda s: (s.range(0.5, 3.0, 0.5), {}),
    "Cast": lambda s: (s.cast([1.7, -2.2], gf.int32, True), {}),
    "Fill": lambda s: (s.fill([2, 2], np.int8(7)), {}),
    "ZerosLike": lambda s: (s.zeros_like(np.array([b"a", b"\xff"], dtype=object)), {}),
    "OnesLike": lambda s: (s.ones_like(np.array([1 + 2j], np.complex64)), {}),
    "ExpandDims": lambda s: (s.expand_dims([1, 2], -1), {}),
    "Squeeze": lambda s: (s.squeeze(np.zeros((1, 2, 1), F32), [0]), {}),
    "ConcatV2": lambda s: (s.concat([[1, 2], [3], [4, 5]], 0), {}),
    "Pack": lambda s: (s.pack([[1, 2], [3, 4]], axis=1), {}),
    "Add": lambda s: (s.add(np.array([b"x"], dtype=object), np.array([b"\x00y"], dtype=object)), {}),
    "Sub": lambda s: (s.sub(np.uint8(5), np.uint8(3)), {}),
    "Mul": lambda s: (s.mul(np.array([1.5], np.float16), np.array([2], np.float16)), {}),
    "RealDiv": lambda s: (s.real_div([1.0, 0.0], [0.0, 0.0]), {}),
    "Maximum": lambda s: (s.maximum([1, 5], [4, 2]), {}),
    "Minimum": lambda s: (s.minimum(np.array([1, 5], np.int64), np.array([4, 2], np.int64)), {}),
    "Equal": lambda s: (s.equal([1, 2], [1, 3]), {}),
    "NotEqual": lambda s: (s.not_equal([1.0, np.nan], [1.0, np.nan]), {}),
    "Less": lambda s: (s.less([1, 2], [2, 2]), {}),
    "Greater": lambda s: (s.greater([1, 2], [2, 1]), {}),
    "FloorDiv": lambda s: (s.floor_div(np.array([7, -7], np.int64), [2, 2]), {}),
    "FloorMod": lambda s: (s.floor_mod([7, -7], np.array([-2], I32)), {}),
    "Neg": lambda s: (s.neg(np.array([1 - 1j], np.complex128)), {}),
    "LogicalAnd": lambda s: (s.logical_and([True, False], [True, True]), {}),
    "LogicalOr": lambda s: (s.logical_or([True, False], [False, False]), {}),
    "LogicalNot": lambda s: (s.logical_not([True, False]), {}),
    "SelectV2": lambda s: (s.select_v2([True, False], [1, 2], [3, 4]), {}),
    "Conj": lambda s: (s.conj(np.array([1 - 2j], np.complex64)), {}),
    "StopGradient": lambda s: (s.stop_gradient([1.5, -0.0]), {}),
    # reductions and slicing
    "Sum": lambda s: (s.reduce_sum(s.placeholder(gf.float64), keepdims=False),
                      {"Placeholder:0": np.ones((2, 3))}),
    "AddN": lambda s: (s.add_n([np.int8([100]), np.int8([100])]), {}),
    "BroadcastTo": lambda s: (s.broadcast_to([b"a", b"b"], np.array([2, 2], np.int64)), {}),
    "BroadcastGradientArgs": lambda s: (s.broadcast_gradient_args([2, 3, 5], [3, 1]), {}),
    "Slice": lambda s: (s.slice(np.arange(6, dtype=I32).reshape(2, 3), [1, 0], [-1, 2]), {}),
    "Pad": lambda s: (s.pad(np.array([[True]]), [[1, 0], [0, 2]]), {}),
    "Unpack": lambda s: (s.unstack(np.arange(6, dtype=F32).reshape(2, 3), axis=-1), {}),
    # TensorFlow's glue ops (ops/tf_glue_ops.py)
    "StridedSlice": lambda s: (s.strided_slice(np.arange(24, dtype=F32).reshape(2, 3, 4),
                                               [0, 1, 2, 3], [2, 0, 0, 0], [1, 1, -1, 1],
                                               begin_mask=1, end_mask=4, new_axis_mask=2,
                                               shrink_axis_mask=8), {}),
    "StridedSliceGrad": lambda s: (s.strided_slice_grad([3, 4], [1, 0], [3, 4], [1, 2],
                                                        np.ones((2, 2), F32)), {}),
    "GatherV2": lambda s: (s.gather(np.arange(12, dtype=I32).reshape(3, 4), [[1, 0], [2, 3],
                                    [0, 0]], 1, batch_dims=1), {}),
    "Prod": lambda s: (s.prod(np.arange(1, 7, dtype=I32).reshape(2, 3), [1], keep_dims=True), {}),
    "Transpose": lambda s: (s.transpose(np.arange(6, dtype=F32).reshape(1, 2, 3), [2, 0, 1]), {}),
    "Tile": lambda s: (s.tile(np.array([[b"a", b"\xff"]], dtype=object), [2, 1]), {}),
    "VarIsInitializedOp": lambda s: (s.var_is_initialized_op(
        s.var_handle_op(dtype=gf.float32, shape=[2], name="v")), {}),
    # scatter family
    "ScatterNd": lambda s: (s.scatter_nd([[4], [3], [1], [7]], [9, 10, 11, 12], [8]), {}),
    "TensorScatterUpdate": lambda s: (s.tensor_scatter_update([1, 2, 3], [[0]], [9]), {}),
    "TensorScatterAdd": lambda s: (s.tensor_scatter_add([1, 2, 3], [[0], [0]], [9, 1]), {}),
    "TensorScatterSub": lambda s: (s.tensor_scatter_sub([1, 2, 3], [[2]], [9]), {}),
    "TensorScatterMin": lambda s: (s.tensor_scatter_min([1, 2, 3], [[1]], [0]), {}),
    "TensorScatterMax": lambda s: (s.tensor_scatter_max([1, 2, 3], [[1]], [7]), {}),
    "GatherNd": lambda s: (s.gather_nd([[1, 2], [3, 4]], [[1, 0]]), {}),
    # partition family
    "DynamicPartition": lambda s: (s.dynamic_partition([10, 20, 30], [1, 0, 1],
                                                       num_partitions=2), {}),
    "DynamicStitch": lambda s: (s.dynamic_stitch([[0, 2], [1]], [[1, 3], [2]]), {}),
    "ParallelDynamicStitch": lambda s: (s.parallel_dynamic_stitch([[0, 2], [1]],
                                                                  [[1, 3], [2]]), {}),
    # variables: each run initializes, updates, then reads (values live in the Session)
    "VarHandleOp": lambda s: (s.var_handle_op(dtype=gf.float32, shape=[2], name="v"), {}),
    "ReadVariableOp": lambda s: (_variable_update(s, None), {}),
    "ResourceGather": lambda s: (_gather(s), {}),
    "AssignVariableOp": lambda s: (_variable_update(s, "AssignVariableOp", -F32(_TABLE)), {}),
    "AssignAddVariableOp": lambda s: (_variable_update(s, "AssignAddVariableOp", F32(_TABLE)),
                                      {}),
    "AssignSubVariableOp": lambda s: (_variable_update(s, "AssignSubVariableOp", F32(_TABLE)),
                                      {}),
    **{f"ResourceScatterNd{kind}": (lambda kind: lambda s: (_variable_update(
        s, f"ResourceScatterNd{kind}", [[1], [0], [1]], F32([[5, -1], [0, 9], [7, 7]])), {}))(kind)
       for kind in ("Update", "Add", "Sub", "Min", "Max")},
    "ResourceApplyAdagrad": lambda s: (_adagrad(s, False), {}),
    "ResourceSparseApplyAdagrad": lambda s: (_adagrad(s, True), {}),
}
_TABLE = [[1.5, -2.0], [3.0, 0.25]]


def _initialized(s, name: str = "v"):
    """(a scope that runs after ``name``'s initializer, the Variable)."""
    v = s.variable(F32(_TABLE), name=name)
    return s.with_control_dependencies([v.initializer]), v


def _variable_update(s, op_type: str | None, *args):
    """A variable initialized, updated by ``op_type`` (if any), then read."""
    after_init, v = _initialized(s)
    after = after_init
    if op_type is not None:
        after = s.with_control_dependencies([after_init.create_op(op_type, v.handle, *args)])
    return after.read_variable_op(v.handle, dtype=gf.float32)


def _gather(s):
    after_init, v = _initialized(s)
    return after_init.resource_gather(v.handle, [1, 0, 1], dtype=gf.float32)


def _adagrad(s, sparse: bool):
    v = s.variable(F32(_TABLE), name="var")
    accum = s.variable(F32([[0.1, 0.1], [0.1, 0.1]]), name="accum")
    after_init = s.with_control_dependencies([v.initializer, accum.initializer])
    if sparse:
        step = after_init.resource_sparse_apply_adagrad(
            v.handle, accum.handle, F32(0.5), F32([[1, 2], [3, 4], [5, 6]]), [1, 0, 1])
    else:
        step = after_init.resource_apply_adagrad(v.handle, accum.handle, F32(0.5),
                                                 F32([[1, -2], [3, 4]]))
    after = s.with_control_dependencies([step])
    return [after.read_variable_op(x.handle, dtype=gf.float32) for x in (v, accum)]


EXAMPLES.update(WAVE4_EXAMPLES)
EXAMPLES.update(CONTROL_FLOW_EXAMPLES)

# graphflow's own ops (test modules register ops of their own)
REGISTERED = {d.name for d in gf.registered_ops()
              if d.kernels and d.kernels[0].fn.__module__.startswith("graphflow.ops")}


def _fetchable(fetches):
    """Fetches as names, so they can be looked up in the imported graph."""
    if isinstance(fetches, list):
        return [f.name for f in fetches]
    return fetches.name


def _round_trip(graph: gf.Graph) -> gf.Graph:
    """Through JSON text and back, checking the description is a fixed point."""
    text = to_json(graph.as_graph_def())
    again = gf.import_graph_def(json.loads(text))
    new_graph = next(iter(again.values())).graph if again else gf.Graph()
    assert new_graph.as_graph_def() == graph.as_graph_def()
    return new_graph


def _assert_identical(a, b):
    if isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_identical(x, y)
        return
    if a is None:
        assert b is None
        return
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype == object:
        assert a.tolist() == b.tolist()
    else:  # bitwise: nan payloads and -0.0 included
        assert a.tobytes() == b.tobytes()


def _same_graph(a: gf.Graph, b: gf.Graph):
    assert [op.name for op in a.operations()] == [op.name for op in b.operations()]
    for x, y in zip(a.operations(), b.operations()):
        assert x.type == y.type and x.device == y.device
        assert [o.name for o in x.inputs] == [o.name for o in y.inputs]
        assert x.arg_lengths == y.arg_lengths
        assert [c.name for c in x.control_inputs] == [c.name for c in y.control_inputs]
        assert [(o.dtype, o.shape) for o in x.outputs] == [(o.dtype, o.shape) for o in y.outputs]


@pytest.mark.parametrize("op_type", sorted(EXAMPLES))
def test_every_op_round_trips_and_runs_identically(op_type):
    if op_type not in REGISTERED:
        pytest.skip(f"{op_type} is not registered yet")
    g = gf.Graph()
    fetches, feeds = EXAMPLES[op_type](gf.Scope(g))
    assert op_type in {op.type for op in g.operations()}
    g2 = _round_trip(g)
    _same_graph(g, g2)
    names = _fetchable(fetches) if not isinstance(fetches, gf.Operation) else fetches.name
    with gf.Session(g) as s1, gf.Session(g2) as s2:
        _assert_identical(s1.run(names, feeds), s2.run(names, feeds))


def test_every_registered_op_has_a_round_trip_example():
    missing = sorted(REGISTERED - set(EXAMPLES))
    assert not missing, f"add a graph using {missing} to EXAMPLES in tests/test_serialization.py"


def test_attrs_devices_control_inputs_and_scopes_survive():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.with_device("/gpu:0").placeholder(gf.float32, shape=None)
    y = s.with_device("/cpu:0").placeholder(gf.int64, shape=[None, 1, 1])
    layer = s.with_sub_scope("layer")
    a = layer.with_name("first").identity(x)
    layer.with_control_dependencies([a, y]).squeeze(y, squeeze_dims=[-1, 1])
    g2 = _round_trip(g)
    _same_graph(g, g2)
    sq = g2.operation("layer/Squeeze")
    assert sq.attrs["squeeze_dims"] == (-1, 1)
    assert g2.operation("Placeholder").attrs["shape"].rank is None
    assert g2.operation("Placeholder_1").attrs["shape"] == gf.TensorShape([None, 1, 1])
    assert g2.operation("Placeholder").device == "/device:GPU:0"


# -- constants of every dtype: exact --------------------------------------------------
SPECIAL = {
    "float": [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-8, -1.5],
    "complex": [complex(-0.0, np.nan), complex(np.inf, -0.0), 1 - 2j],
}


def _array_of(dtype: gf.DType) -> np.ndarray:
    if dtype.is_string:
        return np.array([b"", b"\xff\xfe\x00bin", "π".encode(), b"x" * 300],
                        dtype=object).reshape(2, 2)
    if dtype.is_bool:
        return np.array([[True, False, True]])
    np_type = dtype.as_numpy_dtype
    if dtype.is_floating:
        return np.array(SPECIAL["float"], np_type)
    if dtype.is_complex:
        return np.array(SPECIAL["complex"], np_type)
    info = np.iinfo(np_type)
    return np.array([info.min, 0, 1, info.max], np_type).reshape(2, 2, 1)


@pytest.mark.parametrize("dtype", gf.dtypes.ALL_TYPES, ids=lambda t: t.name)
def test_constants_of_every_dtype_round_trip_exactly(dtype):
    value = _array_of(dtype)
    for v in (value, value[:0], value.reshape(-1)[0] if dtype.is_string else value.flat[0]):
        g = gf.Graph()
        gf.Scope(g).constant(np.asarray(v, dtype=value.dtype), dtype)
        g2 = _round_trip(g)
        got = g2.operation("Const").attrs["value"]
        _assert_identical(g.operation("Const").attrs["value"], got)
        assert not got.flags.writeable


def test_nan_payloads_are_kept_and_data_is_little_endian():
    value = np.array([0x7FC00001, 0xFFF00002], np.uint32).view(np.float32)
    assert decode_tensor(encode_tensor(value)).tobytes() == value.tobytes()
    assert encode_tensor(np.array([1], np.int32))["data"] == base64.b64encode(b"\1\0\0\0").decode()


def test_float_attrs_with_nan_and_inf_are_strict_json():
    from graphflow.registry import FloatAttr
    from graphflow.serialization import decode_attr, encode_attr

    for x in (np.nan, np.inf, -np.inf, -0.0, 0.1):
        encoded = json.loads(json.dumps(encode_attr("float", x), allow_nan=False))
        back = decode_attr(FloatAttr(), encoded)
        assert np.array_equal(back, x, equal_nan=True) and np.signbit(back) == np.signbit(x)


# -- random graphs ------------------------------------------------------------------------
_DTYPES = [gf.float32, gf.float64, gf.int32, gf.int64, gf.float16, gf.uint8, gf.complex64]


@st.composite
def random_graphs(draw):
    """A small graph of Consts, Placeholders and element-wise / shape ops."""
    g = gf.Graph()
    s = gf.Scope(g)
    dtype = draw(st.sampled_from(_DTYPES))
    n = draw(st.integers(1, 3))
    pool = []
    feeds = {}
    for i in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            element = st.integers(0, 100) if dtype.is_integer else \
                st.one_of(st.floats(-100, 100, width=16), st.just(float("nan")))
            raw = draw(st.lists(element, min_size=n, max_size=n))
            pool.append(s.constant(np.array(raw, dtype.as_numpy_dtype)))
        else:
            p = s.placeholder(dtype, shape=draw(st.sampled_from([[n], [None], None])))
            feeds[p.name] = np.arange(n).astype(dtype.as_numpy_dtype)
            pool.append(p)
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["add", "mul", "identity", "concat", "pack", "cast",
                                     "control", "device", "equal"]))
        a, b = draw(st.sampled_from(pool)), draw(st.sampled_from(pool))
        if kind in ("add", "mul"):
            out = getattr(s, kind)(a, b)
        elif kind == "identity":
            out = s.with_sub_scope(draw(st.sampled_from(["a", "b"]))).identity(a)
        elif kind == "concat":
            out = s.concat([a, b], 0)
        elif kind == "pack":
            out = s.pack([a, a], axis=draw(st.integers(0, 1)))
        elif kind == "cast":
            out = s.cast(s.cast(a, gf.float64), dtype)
        elif kind == "control":
            out = s.with_control_dependencies([b]).identity(a)
        elif kind == "device":
            out = s.with_device(draw(st.sampled_from(["/cpu:0", "/gpu:0"]))).neg(a) \
                if dtype is not gf.uint8 else a
        else:
            s.equal(a, b)
            out = a
        if out.shape.is_compatible_with([n]):  # element-wise ops on the pool never fail
            pool.append(out)
    return g, feeds, [o.name for o in pool]


@settings(max_examples=50, deadline=None)
@given(random_graphs())
def test_random_graphs_round_trip_and_run_identically(case):
    g, feeds, fetches = case
    g2 = _round_trip(g)
    _same_graph(g, g2)
    with gf.Session(g) as s1, gf.Session(g2) as s2:
        try:
            expected = s1.run(fetches, feeds)
        except gf.errors.OpError as e:  # e.g. mismatched lengths at run time: same error
            with pytest.raises(type(e)):
                s2.run(fetches, feeds)
            return
        _assert_identical(expected, s2.run(fetches, feeds))


# -- importing into a graph, save/load ---------------------------------------------------
def _example_graph() -> gf.Graph:
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.int32, shape=[None])
    y = s.with_name("total").add(x, [10, 20, 30])
    s.with_control_dependencies([y]).no_op()
    return g


def test_import_under_a_scope_keeps_names_under_the_prefix():
    target = gf.Graph()
    s = gf.Scope(target)
    init = s.constant(1)
    mapping = gf.import_graph_def(_example_graph().as_graph_def(),
                                  s.with_sub_scope("imported").with_control_dependencies([init]))
    assert {k: v.name for k, v in mapping.items()} == {
        "Placeholder": "imported/Placeholder", "total/y": "imported/total/y",
        "total": "imported/total", "NoOp": "imported/NoOp"}
    # the scope's control dependencies go on the imported nodes that depend on nothing
    assert [c.name for c in mapping["Placeholder"].control_inputs] == ["Const"]
    assert mapping["total"].control_inputs == ()
    with gf.Session(target) as sess:
        out = sess.run("imported/total:0", {"imported/Placeholder:0": np.array([1, 2, 3], I32)})
    assert out.tolist() == [11, 22, 33]


def test_import_twice_uniquifies_names():
    target = gf.Graph()
    d = _example_graph().as_graph_def()
    gf.import_graph_def(d, target)
    second = gf.import_graph_def(d, target)
    assert second["total"].name == "total_1"
    assert second["total"].inputs[0].op is second["Placeholder"]


def test_save_and_load(tmp_path):
    g = _example_graph()
    path = tmp_path / "graph.json"
    g.save(path)
    text = path.read_text()
    assert json.loads(text)["format"] == "graphflow.GraphDef" and "NaN" not in text
    g2 = gf.load_graph(str(path))
    _same_graph(g, g2)
    feed = {"Placeholder:0": np.array([1, 2, 3], I32)}
    with gf.Session(g2) as sess:
        assert sess.run("total:0", feed).tolist() == [11, 22, 33]


def test_nodes_in_any_order_are_sorted_topologically():
    d = _example_graph().as_graph_def()
    d["nodes"].reverse()
    g = gf.import_graph_def(d)["total"].graph
    # inputs first, otherwise file order
    assert [op.name for op in g.operations()] == ["total/y", "Placeholder", "total", "NoOp"]


# -- malformed files: rejected, nothing half-imported --------------------------------------
def _def():
    return copy.deepcopy(_example_graph().as_graph_def())


def _node(d, name):
    return next(n for n in d["nodes"] if n["name"] == name)


_DELETE = object()


def _put(container, key, value):
    if value is _DELETE:
        del container[key]
    else:
        container[key] = value


def top(key, value=_DELETE):
    """An edit of a top-level field."""
    return lambda d: _put(d, key, value)


def node(which, *path, value=_DELETE):
    """An edit of a field of the node named (or numbered) ``which``."""
    def edit(d):
        target = d["nodes"][which] if isinstance(which, int) else _node(d, which)
        for key in path[:-1]:
            target = target[key]
        _put(target, path[-1], value)
    return edit


_BAD_DATA = {"tensor": {"dtype": "int32", "shape": [3], "data": base64.b64encode(b"\0" * 8).decode()}}

MALFORMED = {
    "newer version": (top("version", 2), "version", None, "newer"),
    "wrong format": (top("format", "tf.GraphDef"), "format", None, "graphflow.GraphDef"),
    "missing nodes": (top("nodes"), "nodes", None, "missing"),
    "missing op": (node("total", "op"), "nodes[2].op", "total", "missing"),
    "missing name": (node(1, "name"), "nodes[1].name", None, "missing"),
    "unknown op type": (node("total", "op", value="Frobnicate"), "nodes[2].op", "total",
                        "not registered"),
    "unknown field": (node("total", "input", value=[]), "nodes[2].input", "total", "unknown field"),
    "unknown attr": (node("total", "attrs", "U", value={"type": "int32"}), "nodes[2].attrs.U",
                     "total", "not an attr"),
    "bad attr kind": (node("total", "attrs", "T", value={"int": 3}), "nodes[2].attrs.T", "total",
                      "kind"),
    "bad dtype name": (node("total", "attrs", "T", value={"type": "int33"}), "nodes[2].attrs.T",
                       "total", "dtype name"),
    "attr disagrees with inputs": (node("total", "attrs", "T", value={"type": "float32"}),
                                   "nodes[2].attrs.T", "total", "inputs give"),
    "bad shape attr": (node("Placeholder", "attrs", "shape", value={"shape": [-3]}),
                       "nodes[0].attrs.shape", "Placeholder", "dims"),
    "missing required attr": (node("total/y", "attrs", "value"),
                              "nodes[1].attrs.value", "total/y", "missing"),
    "missing input node": (node("total", "inputs", value=["Placeholder:0", "nope:0"]),
                           "nodes[2].inputs[1]", "total", "names no node"),
    "bad output index": (node("total", "inputs", value=["Placeholder:0", "total/y:1"]),
                         "nodes[2].inputs[1]", "total", "has 1 outputs"),
    "malformed input": (node("total", "inputs", value=["Placeholder:0", "total/y:x"]),
                        "nodes[2].inputs[1]", "total", "name:index"),
    "wrong input count": (node("total", "inputs", value=["Placeholder:0"]), "nodes[2].inputs",
                          "total", "takes 2 inputs"),
    "missing control input": (node("NoOp", "control_inputs", value=["ghost"]),
                              "nodes[3].control_inputs[0]", "NoOp", "names no node"),
    "bad device": (node("total", "device", value="/tpu:0"), "nodes[2].device", "total", "device"),
    "wrong data size": (node("total/y", "attrs", "value", value=_BAD_DATA), "nodes[1].attrs.value",
                        "total/y", "needs 12 bytes, got 8"),
    "bad base64": (node("total/y", "attrs", "value",
                        value={"tensor": {"dtype": "int32", "shape": [3], "data": "!!"}}),
                   "nodes[1].attrs.value", "total/y", "base64"),
    "duplicate name": (node(1, "name", value="Placeholder"), "nodes[1].name", "Placeholder",
                       "duplicate"),
    "cycle": (node("Placeholder", "control_inputs", value=["NoOp"]), ".inputs", None, "cycle"),
    "error at build": (node("total/y", "attrs", "dtype", value={"type": "float32"}),
                       "nodes[1]", "total/y", "Const value has dtype int32"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_graph_defs_are_rejected_and_nothing_is_imported(case):
    edit, field, node, words = MALFORMED[case]
    d = _def()
    edit(d)
    target = gf.Graph()
    s = gf.Scope(target)
    s.constant(1)
    before = target.as_graph_def()
    with pytest.raises(InvalidArgumentError) as info:
        gf.import_graph_def(d, s)
    message = str(info.value)
    assert field in message and words in message, message
    if node is not None:
        assert info.value.node_name == node
    assert target.as_graph_def() == before
    s.constant(2)  # naming in the target is unaffected by the failed import
    assert [op.name for op in target.operations()] == ["Const", "Const_1"]


def test_a_failing_late_node_leaves_an_empty_target_empty():
    d = _def()
    _node(d, "NoOp")["attrs"]["bogus"] = {"int": 1}
    target = gf.Graph()
    with pytest.raises(InvalidArgumentError):
        gf.import_graph_def(d, target)
    assert len(target) == 0


def test_load_graph_rejects_non_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"format": ')
    with pytest.raises(InvalidArgumentError, match="not GraphDef JSON"):
        gf.load_graph(path)


def test_the_seed_example_graph_round_trips_and_runs_identically():
    import importlib
    import sys
    from pathlib import Path

    examples = Path(__file__).resolve().parents[1] / "examples"
    sys.path.insert(0, str(examples))
    try:
        example = importlib.import_module("partition_stitch")
    except ImportError as e:
        pytest.skip(f"examples/partition_stitch.py does not import: {e}")
    finally:
        sys.path.remove(str(examples))
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[None], name="x")
    parts, result = example.build(s.with_sub_scope("increment_where_set"), x)
    g2 = _round_trip(g)
    _same_graph(g, g2)
    fetches = [result.name] + [p.name for p in parts]
    feed = {"x:0": np.array(example.X, F32)}
    with gf.Session(g) as s1, gf.Session(g2) as s2:
        expected = s1.run(fetches, feed)
        _assert_identical(expected, s2.run(fetches, feed))
    np.testing.assert_allclose(expected[0], example.EXPECTED, rtol=1e-6)


def _by_name(fetches):
    """Outputs and Operations (nested in lists, tuples, dicts) -> their names."""
    if isinstance(fetches, (list, tuple)):
        return [_by_name(f) for f in fetches]
    if isinstance(fetches, dict):
        return {k: _by_name(v) for k, v in fetches.items()}
    if isinstance(fetches, (str, gf.Operation)):
        return fetches if isinstance(fetches, str) else fetches.name
    return fetches.as_output().name  # an Output, or an Operand such as a gf.Variable


def _flat(values):
    if isinstance(values, (list, tuple)):
        return [v for x in values for v in _flat(x)]
    if isinstance(values, dict):
        return [v for k in sorted(values) for v in _flat(values[k])]
    return [values]


EXAMPLE_SCRIPTS = sorted(p.name for p in
                         (pathlib.Path(__file__).resolve().parents[1] / "examples").glob("*.py")
                         if not p.name.startswith("_"))
#: Arguments for the examples whose defaults start a Dask cluster: here on one process
EXAMPLE_ARGS = {"sharded_embeddings.py": ["--local", "--rows", "300", "--steps", "5"],
                "gcn_karate.py": ["--steps", "10"],
                "moe.py": ["--tokens", "64", "--steps", "10"],
                "word2vec.py": ["--vocab", "300", "--steps", "10", "--batch", "64"]}


@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS)
def test_every_example_graph_round_trips_and_runs_identically(script, monkeypatch, capsys):
    """Each example's Sessions, replayed in order on their graphs after a JSON round trip:
    every sess.run and checkpoint restore, in one new Session per original Session (its
    variables carry over from run to run, as they did in the example)."""
    import runpy
    import sys

    examples = pathlib.Path(__file__).resolve().parents[1] / "examples"
    events = []  # (original Session, "run" or "restore", what, result)
    original_run, original_restore = gf.Session.run, gf.train.Saver.restore

    def recording_run(self, fetches, feed_dict=None, *args, **kwargs):
        result = original_run(self, fetches, feed_dict, *args, **kwargs)
        events.append((self, "run", (_by_name(fetches),
                                     {_by_name(k): v for k, v in (feed_dict or {}).items()}),
                       result))
        return result

    def recording_restore(saver, sess, save_path):
        original_restore(saver, sess, save_path)
        events.append((sess, "restore", save_path, None))
    original_callable = gf.Session.make_callable

    def recording_callable(self, fetches, feed_list=None, *args, **kwargs):
        call = original_callable(self, fetches, feed_list, *args, **kwargs)
        names = [_by_name(f) for f in (feed_list or [])]

        def recorded(*values, **options):  # replayed as the sess.run it stands for
            result = call(*values, **options)
            events.append((self, "run", (_by_name(fetches), dict(zip(names, values))), result))
            return result
        return recorded
    monkeypatch.setattr(gf.Session, "run", recording_run)
    monkeypatch.setattr(gf.Session, "make_callable", recording_callable)
    monkeypatch.setattr(gf.train.Saver, "restore", recording_restore)
    monkeypatch.setattr(sys, "argv", [script, *EXAMPLE_ARGS.get(script, [])])
    monkeypatch.syspath_prepend(str(examples))
    runpy.run_path(str(examples / script), run_name="__main__")
    capsys.readouterr()
    assert any(kind == "run" for _, kind, _, _ in events), f"{script} ran no session"
    replays: dict[int, gf.Session] = {}
    try:
        for sess, kind, what, expected in events:
            if id(sess) not in replays:
                again = _round_trip(sess.graph)
                _same_graph(sess.graph, again)
                replays[id(sess)] = gf.Session(again, sess.config)
            replay = replays[id(sess)]
            if kind == "restore":
                original_restore(gf.train.Saver(), replay, what)
                continue
            fetches, feeds = what
            got = original_run(replay, fetches, feeds)
            _assert_identical(_flat(expected), _flat(got))
    finally:
        for replay in replays.values():
            replay.close()
