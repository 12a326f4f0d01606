"""gf.import_tf_graph: TensorFlow-written GraphDefs run with TensorFlow's results.

The fixtures in tests/fixtures/tf/ were written by TensorFlow 2.21 with its results
(tests/fixtures/tf/generate.py); these tests need neither TensorFlow nor the script.
Tests that run TensorFlow themselves skip without it.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

pytest.importorskip("tensorboardX")

import graphflow as gf  # noqa: E402
from graphflow.errors import InvalidArgumentError, UnimplementedError  # noqa: E402
from graphflow.interop import tf_proto as tp  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tf")
FILES = {"scatter_v1": "scatter_v1.pb", "glue": "glue.pbtxt", "frozen": "frozen.pb",
         "variables_v1": "variables_v1.pb", "frozen_v2": "frozen_v2.pb",
         "function": "function.pb", "nested_function": "nested_function.pb",
         "consts": "consts.pb", "consts_uint": "consts_uint.pb",
         "devices_no_job": "devices_no_job.pb"}
#: fixtures that only TensorFlow's full schema (tensorboard's protos) reads: function
#: libraries, uint32_val/uint64_val
FULL_SCHEMA = {"function", "nested_function", "consts_uint"}


def _full_schema() -> bool:
    try:
        tp.protos("tensorboard")
        return True
    except ImportError:
        return False


def _expected(name: str):
    data = np.load(os.path.join(FIXTURES, name + ".npz"), allow_pickle=True)  # our own files
    feeds = {str(k): data[f"feed_{i}"] for i, k in enumerate(data["feed_names"])}
    fetches = {str(k): data[f"fetch_{i}"] for i, k in enumerate(data["fetch_names"])}
    return feeds, fetches, [str(k) for k in data["before"]]


def _same(got, want, what):
    got = np.asarray(got)
    assert got.shape == want.shape, what
    if want.dtype == object:
        assert got.dtype == object and got.ravel().tolist() == want.ravel().tolist(), what
    else:
        assert got.dtype == want.dtype, what
        assert got.tobytes() == want.tobytes(), (what, got, want)  # bit for bit


def _run_fixture(graph: gf.Graph, name: str):
    feeds, fetches, before = _expected(name)
    with gf.Session(graph) as sess:
        for target in before:  # initializers, updates: one run each, as TF ran them
            sess.run(target)
        got = sess.run(list(fetches), feeds)
    for (fetch, want), value in zip(fetches.items(), got):
        _same(value, want, f"{name}: {fetch}")


@pytest.mark.parametrize("name", sorted(FILES))
def test_fixture_gives_tensorflows_results(name):
    if name in FULL_SCHEMA and not _full_schema():
        with pytest.raises(UnimplementedError, match=r"graphflow\[tensorboard-full\]"):
            gf.import_tf_graph(os.path.join(FIXTURES, FILES[name]))
        return
    graph = gf.import_tf_graph(os.path.join(FIXTURES, FILES[name]))
    _run_fixture(graph, name)


@pytest.mark.parametrize("form", ["path", "pathlike", "bytes", "tensorboardX message",
                                  "tensorboard message"])
def test_sources(form, tmp_path):
    import pathlib

    path = os.path.join(FIXTURES, "frozen.pb")
    data = open(path, "rb").read()
    if form == "path":
        source = path
    elif form == "pathlike":
        source = pathlib.Path(path)
    elif form == "bytes":
        source = bytearray(data)
    else:
        which = form.split()[0]
        if which == "tensorboard" and not _full_schema():
            pytest.skip("tensorboard is not installed")
        source = tp.protos(which).GraphDef.FromString(data)
        before = source.SerializeToString()
    _run_fixture(gf.import_tf_graph(source), "frozen")
    if form.endswith("message"):
        assert source.SerializeToString() == before  # the caller's message is not modified


@pytest.mark.parametrize("reader", ["default", "tensorboardX"])
@pytest.mark.parametrize("name", ["scatter_v1", "consts"])
def test_text_and_binary_agree(tmp_path, monkeypatch, name, reader):
    """The binary fixture as text (TF's newer fields and DataTypes included) reads the same,
    also through tensorboardX's older schema."""
    from google.protobuf import text_format

    graph_def = tp.protos().GraphDef.FromString(open(os.path.join(FIXTURES, FILES[name]),
                                                     "rb").read())
    text = tmp_path / "g.pbtxt"
    text.write_text(text_format.MessageToString(graph_def))
    if reader == "tensorboardX":
        monkeypatch.setattr(tp, "protos", lambda source=None: tp._load("tensorboardX"))
    _run_fixture(gf.import_tf_graph(str(text)), name)


def test_names_devices_controls_and_shapes():
    g = gf.import_tf_graph(os.path.join(FIXTURES, "scatter_v1.pb"))
    assert g.operation("x").type == "Placeholder"
    assert g.output("x:0").shape.as_list() == [None]
    assert g.output("idx:0").shape.rank is None           # placeholder of unknown rank
    assert g.operation("scatter_nd").device == "/device:CPU:0"
    assert g.output("partition:1").op.type == "DynamicPartition"
    # tf.control_dependencies([p2]) on the stitch: TF put it on the stitch's constants
    assert [c.name for c in g.operation("stitch/indices_0").control_inputs] == ["partition"]
    done = g.operation("done")
    assert done.type == "NoOp" and [c.name for c in done.control_inputs] == ["ts_add"]
    feeds, _, _ = _expected("scatter_v1")
    with gf.Session(g) as sess:
        assert sess.run("done", feeds) is None             # an op name as a fetch
        out = sess.run(g.output("out_scatter_nd:0"), {g.output("idx:0"): feeds["idx:0"],
                                                      "upd:0": feeds["upd:0"]})
    _same(out, _expected("scatter_v1")[1]["out_scatter_nd:0"], "Output keys and name keys")


def test_variables_v1_graph():
    g = gf.import_tf_graph(os.path.join(FIXTURES, "variables_v1.pb"))
    assert g.operation("table").type == "VarHandleOp"
    assert g.operation("update").get_attr("dtype") == gf.float32   # TF's attr T
    with gf.Session(g) as sess:
        assert not sess.run("table/IsInitialized/VarIsInitializedOp:0")
        sess.run("init")
        assert sess.run("table/IsInitialized/VarIsInitializedOp:0")


def test_graphflow_export_then_import_runs_identically(tmp_path):
    """gf.export_tf_graph's file read back: the same results, variables included."""
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, [None], name="x")
    idx = s.placeholder(gf.int32, [None, 1], name="idx")
    y = s.tensor_scatter_add(x, idx, s.gather_nd(x, idx), name="y")
    parts = s.dynamic_partition(y, s.cast(s.greater(y, 2.0), gf.int32), num_partitions=2)
    first = s.range(0, s.size(parts[0]), 1)
    s.dynamic_stitch([first, s.add(s.range(0, s.size(parts[1]), 1), s.size(parts[0]))],
                     parts, name="z")
    v = s.variable(np.zeros(4, np.float32), name="v")
    update = v.scatter_nd_add(idx, s.gather_nd(x, idx))
    path = tmp_path / "model.pbtxt"
    gf.export_tf_graph(g, str(path))
    back = gf.import_tf_graph(str(path))
    feeds = {"x:0": np.float32([1, 5, 2, 7]), "idx:0": np.int32([[1], [3], [1]])}
    results = []
    for graph in (g, back):
        with gf.Session(graph) as sess:
            sess.run(v.initializer.name)
            out = sess.run(["y:0", "z:0"], feeds)
            sess.run(update.op.name, feeds)
            results.append(out + [sess.run("v/Read:0")])
    for mine, imported in zip(*results):
        _same(imported, mine, "round trip")
    want = np.zeros(4, np.float32)
    rows = feeds["idx:0"][:, 0]
    np.add.at(want, rows, feeds["x:0"][rows])
    _same(results[0][2], want, "the variable after the update")


def test_function_library_is_inlined():
    if not _full_schema():
        pytest.skip("the function library needs tensorboard's protos")
    g = gf.import_tf_graph(os.path.join(FIXTURES, "function.pb"))
    types = {op.name: op.type for op in g.operations()}
    assert types["PartitionedCall"] == "Identity"          # stands for the call's result
    assert types["PartitionedCall/TensorScatterUpdate"] == "TensorScatterUpdate"
    assert "PartitionedCall" not in set(types.values())


def test_nested_functions_with_two_results_are_inlined():
    if not _full_schema():
        pytest.skip("the function library needs tensorboard's protos")
    g = gf.import_tf_graph(os.path.join(FIXTURES, "nested_function.pb"))
    call = g.operation("PartitionedCall")   # two results: a NoOp waiting for the function
    assert call.type == "NoOp" and call.control_inputs
    assert g.operation("PartitionedCall/PartitionedCall").type == "Identity"  # one result
    assert g.operation("PartitionedCall/PartitionedCall/GatherV2").type == "GatherV2"
    assert g.operation("Identity_1").inputs[0].op.name == "PartitionedCall/Identity_1"


def _function_graph_def():
    full = tp.protos("tensorboard")
    return full.GraphDef.FromString(open(os.path.join(FIXTURES, "function.pb"), "rb").read())


@pytest.mark.parametrize("call", ["StatefulPartitionedCall", "by name"])
def test_other_call_forms(call):
    """StatefulPartitionedCall, and the function's name as the op (TF 1.x's Defun)."""
    if not _full_schema():
        pytest.skip("the function library needs tensorboard's protos")
    graph_def = _function_graph_def()
    node = next(n for n in graph_def.node if n.op == "PartitionedCall")
    if call == "by name":
        node.op = node.attr["f"].func.name
        for key in list(node.attr):
            del node.attr[key]
    else:
        node.op = call
    g = gf.import_tf_graph(graph_def)
    _run_fixture(g, "function")
    assert g.operation(node.name).type == "Identity"


def test_recursive_function_is_refused():
    if not _full_schema():
        pytest.skip("the function library needs tensorboard's protos")
    graph_def = _function_graph_def()
    function = graph_def.library.function[0]
    body = next(n for n in function.node_def if n.op == "Mul")
    body.op = function.signature.name  # the function calls itself
    for key in list(body.attr):
        del body.attr[key]
    with pytest.raises(UnimplementedError, match="calls itself"):
        gf.import_tf_graph(graph_def)


def test_make_callable_with_tf_names():
    feeds, fetches, _ = _expected("frozen")
    g = gf.import_tf_graph(os.path.join(FIXTURES, "frozen.pb"))
    with gf.Session(g) as sess:
        run = sess.make_callable(["out:0", "score:0"], feed_list=["ids:0"])
        for got, (name, want) in zip(run(feeds["ids:0"]), fetches.items()):
            _same(got, want, name)


@pytest.mark.parametrize("name,what", [("function", "PartitionedCall|library"),
                                       ("consts_uint", "uint32_val")])
@pytest.mark.parametrize("as_text", [False, True], ids=["binary", "text"])
def test_full_schema_needed_says_what_to_install(monkeypatch, tmp_path, name, what, as_text):
    from google.protobuf import text_format

    source = os.path.join(FIXTURES, FILES[name])
    if as_text:
        if not _full_schema():
            pytest.skip("writing the text needs tensorboard's protos")
        full = tp.protos("tensorboard").GraphDef.FromString(open(source, "rb").read())
        source = tmp_path / f"{name}.pbtxt"
        source.write_text(text_format.MessageToString(full))
    monkeypatch.setattr(tp, "protos", lambda source=None: tp._load("tensorboardX"))
    with pytest.raises(UnimplementedError, match=f"({what}).*graphflow\\[tensorboard-full\\]"):
        gf.import_tf_graph(str(source))


def test_unknown_ops_are_listed_in_one_error():
    with pytest.raises(UnimplementedError) as info:
        gf.import_tf_graph(os.path.join(FIXTURES, "unknown_ops.pbtxt"))
    message = str(info.value)
    for part in ("3 op type(s)", "Cos (nodes: Cos)", "Cumsum (nodes: cs, cs2)",
                 "Einsum (nodes: einsum/Einsum)"):
        assert part in message


def test_a_keras_dense_softmax_classifier_imports_and_gives_tensorflows_results():
    """Dense(relu) -> Dense(softmax), frozen by TF 2.21 (MatMul with TF's grad_a/grad_b
    hints, BiasAdd, Relu, Softmax): TF's probabilities within float32 rounding (Eigen's
    and numpy's exp and sums differ in the last bits)."""
    g = gf.import_tf_graph(os.path.join(FIXTURES, "keras_dense.pb"))
    feeds, fetches, _ = _expected("keras_dense")
    with gf.Session(g) as sess:
        for name, want in fetches.items():
            got = sess.run(name, feeds)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert {op.type for op in g.operations()} >= {"MatMul", "BiasAdd", "Relu", "Softmax"}


def test_input_map_replaces_a_tensor_with_a_constant():
    feeds, fetches, _ = _expected("frozen")
    g = gf.import_tf_graph(os.path.join(FIXTURES, "frozen.pb"), input_map={"ids:0": feeds["ids:0"]})
    with gf.Session(g) as sess:
        _same(sess.run("out:0"), fetches["out:0"], "input_map")
    with pytest.raises(InvalidArgumentError, match="not found in the GraphDef: nope:0"):
        gf.import_tf_graph(os.path.join(FIXTURES, "frozen.pb"), input_map={"nope:0": 1})
    with pytest.raises(InvalidArgumentError, match="does not fit"):
        gf.import_tf_graph(os.path.join(FIXTURES, "frozen.pb"), input_map={"ids:0": [[1]]})


# -- bad input: InvalidArgumentError naming the node, nothing returned -------------------
def _graph_def(*nodes):
    ps = tp.protos()
    gd = ps.GraphDef()
    for name, op, inputs, attrs in nodes:
        n = gd.node.add(name=name, op=op)
        n.input.extend(inputs)
        for k, (kind, v) in attrs.items():
            n.attr[k].CopyFrom(tp.attr_to_proto(kind, v, ps))
    return gd


def _const(name, value):
    value = np.asarray(value)
    return (name, "Const", [], {"value": ("tensor", value),
                                "dtype": ("type", gf.as_dtype(value.dtype))})


F32 = ("type", gf.float32)
BAD = {
    "missing input": (_graph_def(_const("a", 1.0), ("b", "Identity", ["nothere"], {"T": F32})),
                      "b", "input 'nothere' names no node"),
    "missing control input": (_graph_def(_const("a", 1.0),
                                         ("b", "Identity", ["a", "^gone"], {"T": F32})),
                              "b", r"control input '\^gone'"),
    "cycle": (_graph_def(("a", "Identity", ["b"], {"T": F32}), ("b", "Identity", ["a"], {"T": F32}),
                         ("c", "Identity", ["a"], {"T": F32})), "a|b", "cycle"),
    "wrong attr kind": (_graph_def(_const("a", 1.0), ("b", "Identity", ["a"], {"T": ("int", 1)})),
                        "b", "type 'int' when 'type' expected for attr 'T'"),
    "wrong attr type": (_graph_def(_const("a", 1.0), ("b", "Identity", ["a"],
                                                      {"T": ("type", gf.int32)})),
                        "b", "attr T is int32 but the inputs give float64"),
    "duplicate name": (_graph_def(_const("a", 1.0), _const("a", 2.0)), "a", "duplicate"),
    "output out of range": (_graph_def(_const("a", 1.0), ("b", "Identity", ["a:1"], {"T": F32})),
                            "b", "names output 1 of 'a', which has 1 outputs"),
    "control before data": (_graph_def(_const("a", 1.0), ("b", "Identity", ["^a", "a"],
                                                          {"T": F32})), "b", "control inputs"),
    "unknown attr": (_graph_def(_const("a", 1.0), ("b", "Identity", ["a"],
                                                   {"T": F32, "bogus": ("int", 3)})),
                     "b", "attr 'bogus' not in Op<name=Identity>"),
    "input count": (_graph_def(_const("a", 1.0), ("b", "Identity", ["a", "a"], {"T": F32})),
                    "b", "takes 1 inputs"),
    "bad device": (_graph_def(("a", "Const", [], {"value": ("tensor", np.float32(1)),
                                                  "dtype": F32})), "a", None),
    "shape error": (_graph_def(_const("a", np.zeros((2, 3), np.float32)), _const("i", [[5]]),
                               _const("u", [1.0]),
                               ("s", "TensorScatterUpdate", ["a", "i", "u"], {})),
                    "s", "updates"),
}


def test_device_strings_are_kept_and_placed_softly():
    gd = _graph_def(_const("c", np.float32([1, 2])), ("n", "Identity", ["c"], {"T": F32}))
    gd.node[0].device = "/job:localhost/replica:0/task:0/cpu:0"   # the local process
    gd.node[1].device = "/device:GPU:3"                            # absent: soft placement
    g = gf.import_tf_graph(gd)
    assert g.operation("c").device == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert g.operation("n").device == "/device:GPU:3"
    with gf.Session(g) as sess:
        _same(sess.run("n:0"), np.float32([1, 2]), "device strings")


def test_list_inputs_without_their_length_attr():
    """A hand-written DynamicStitch without N: its inputs split between its two lists."""
    indices, data = [np.int32([0, 2]), np.int32([1, 2])], [np.float32([1, 3]), np.float32([2, 4])]
    gd = _graph_def(*[_const(f"i{k}", v) for k, v in enumerate(indices)],
                    *[_const(f"d{k}", v) for k, v in enumerate(data)],
                    ("s", "DynamicStitch", ["i0", "i1", "d0", "d1"], {}))
    want = np.zeros(3, np.float32)
    for i, d in zip(indices, data):  # later lists win
        want[i] = d
    with gf.Session(gf.import_tf_graph(gd)) as sess:
        _same(sess.run("s:0"), want, "DynamicStitch without N")


def test_dtypes_graphflow_lacks_and_unknown_ops_attrs():
    ps = tp.protos()
    gd = _graph_def(("r", "Placeholder", [], {}))
    gd.node[0].attr["dtype"].type = 20  # DT_RESOURCE
    with pytest.raises(UnimplementedError, match="DT_RESOURCE") as info:
        gf.import_tf_graph(gd)
    assert info.value.node_name == "r"
    # an op graphflow lacks is listed, whatever its attrs hold
    gd = _graph_def(_const("a", 1.0), ("m", "FancyOp", ["a"], {}))
    gd.node[1].attr["T"].type = 14  # DT_BFLOAT16
    with pytest.raises(UnimplementedError, match=r"FancyOp \(nodes: m\)"):
        gf.import_tf_graph(ps.GraphDef.FromString(gd.SerializeToString()))


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_graph_defs(case):
    graph_def, node, message = BAD[case]
    if case == "bad device":
        graph_def.node[0].device = "/device:CPU:0:junk"
        message = "device"
    data = graph_def.SerializeToString()
    with pytest.raises(InvalidArgumentError, match=message) as info:
        gf.import_tf_graph(graph_def)
    assert info.value.node_name is not None and re.fullmatch(node, info.value.node_name)
    assert graph_def.SerializeToString() == data  # the caller's message is untouched


_FROZEN = open(os.path.join(FIXTURES, "frozen.pb"), "rb").read()


@pytest.mark.parametrize("data,message", [
    (_FROZEN[:len(_FROZEN) // 2], "could not be parsed"),
    (_FROZEN[:-1], "could not be parsed"),
    (b"\xff\xff\xff\xff", "could not be parsed"),
    (b'{"format": "graphflow.GraphDef", "nodes": []}', "not a GraphDef|could not be parsed"),
], ids=["truncated in a node", "truncated in a varint", "garbage", "json"])
def test_not_a_graph_def(data, message):
    with pytest.raises(InvalidArgumentError, match=message):
        gf.import_tf_graph(data)


def test_mutated_bytes_import_or_fail_cleanly():
    """Random byte edits of the fixtures: each either imports or is refused with graphflow's
    errors (never a KeyError, IndexError... from half-read input)."""
    from graphflow.errors import ResourceExhaustedError

    rng = np.random.default_rng(24)
    sources = [open(os.path.join(FIXTURES, FILES[n]), "rb").read()
               for n in ("frozen", "scatter_v1", "consts", "variables_v1")]
    refused = 0
    for trial in range(120):
        data = bytearray(sources[trial % len(sources)])
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(data)))
            edit = int(rng.integers(0, 3))
            if edit == 0:
                data[at] = int(rng.integers(0, 256))
            elif edit == 1:
                del data[at:at + int(rng.integers(1, 8))]
            else:
                data[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 5)), dtype=np.uint8))
        try:
            gf.import_tf_graph(bytes(data))
        except (InvalidArgumentError, UnimplementedError, ResourceExhaustedError) as e:
            refused += 1
            assert "GraphDef" in str(e) or e.node_name is not None
    assert refused > 60


def test_bad_text_and_wrong_types(tmp_path):
    bad = tmp_path / "bad.pbtxt"
    bad.write_text('node { name: "a" op: "Const" attr { key: "value" value { tenso')
    with pytest.raises(InvalidArgumentError, match="bad.pbtxt is not a text GraphDef"):
        gf.import_tf_graph(str(bad))
    with pytest.raises(TypeError, match="path .* bytes or a GraphDef"):
        gf.import_tf_graph(12)
    with pytest.raises(TypeError, match="takes a GraphDef message, got a tensorboardX.NodeDef"):
        gf.import_tf_graph(tp.protos("tensorboardX").NodeDef())


# -- TensorFlow as the judge, at test time (skipped without it) ---------------------------
def test_tensorflow_graph_def_message_directly():
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(3)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float64, [None, 5], name="x")
        i = tf.compat.v1.placeholder(tf.int32, [None], name="i")
        y = tf.tensor_scatter_nd_max(tf.transpose(x)[:, 1:], tf.expand_dims(i, 1),
                                     tf.tile(tf.gather(x, [0])[..., 2:], [3, 1]))
        tf.identity(tf.reduce_prod(y, axis=0) + tf.cast(tf.size(i), tf.float64), name="out")
    feeds = {"x:0": rng.normal(size=(4, 5)), "i:0": np.int32([2, 0, 2])}
    with tf.compat.v1.Session(graph=g) as sess:
        want = sess.run("out:0", feeds)
    mine = gf.import_tf_graph(g.as_graph_def())          # TensorFlow's own GraphDef class
    with gf.Session(mine) as sess:
        got = sess.run("out:0", feeds)
    np.testing.assert_allclose(got, want, rtol=1e-12)
