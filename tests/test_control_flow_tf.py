"""Control flow across the TensorFlow boundary: gf.import_tf_graph of TF 2's If/While
(library functions as gf.Functions, recursively) and of TF 1.x's Switch/Merge conds and
Enter/Exit while frames (converted to If/While); gf.export_tf_graph of scope.cond and
scope.while_loop (a FunctionDef per gf.Function).

The fixtures control_flow.pb and control_flow_v1.pb are TF 2.21's
(tests/fixtures/tf/generate_control_flow.py) and need no TensorFlow; the tests that run
TensorFlow itself skip without it.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("tensorboardX")

import graphflow as gf  # noqa: E402
from graphflow.errors import UnimplementedError  # noqa: E402
from graphflow.interop import tf_export  # noqa: E402
from graphflow.interop import tf_proto as tp  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tf")
V1_OPS = {"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond"}


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tensorflow")


def _full_schema():
    if not tp.protos().full:
        pytest.skip("a function library needs TensorFlow's full schema")


def _expected(name: str):
    data = np.load(os.path.join(FIXTURES, name + ".npz"), allow_pickle=True)  # our own files
    feeds = {str(k): data[f"feed_{i}"] for i, k in enumerate(data["feed_names"])}
    fetches = {str(k): data[f"fetch_{i}"] for i, k in enumerate(data["fetch_names"])}
    return feeds, fetches


def _bitwise(got, want, what: str = "") -> None:
    for value, expected in zip(got, want):
        value, expected = np.asarray(value), np.asarray(expected)
        assert value.dtype == expected.dtype and value.shape == expected.shape, what
        assert value.tobytes() == expected.tobytes(), (what, value, expected)


def _ops_inside(graph: gf.Graph) -> list[str]:
    """The op types of ``graph`` and of every function its ops hold, recursively."""
    from graphflow.interop.tf_export_functions import function_ops
    return [op.type for op in function_ops(graph.operations())]


# -- TF 2: If/While with their library functions -----------------------------------------
def test_tf2_cond_and_while_import_and_run_bit_for_bit():
    _full_schema()
    g = gf.import_tf_graph(os.path.join(FIXTURES, "control_flow.pb"))
    types = _ops_inside(g)
    assert {"StatelessIf", "StatelessWhile"} <= {op.type for op in g.operations()}
    assert types.count("StatelessIf") == 2  # the loop body's cond, inside the body function
    feeds, fetches = _expected("control_flow")
    with gf.Session(g) as sess:
        _bitwise(sess.run(list(fetches), feeds), fetches.values())


def test_missing_ops_inside_functions_name_the_function(tf):
    @tf.function
    def f(x):
        return tf.cond(x[0] > 0, lambda: tf.math.cos(x), lambda: x)

    graph_def = f.get_concrete_function(tf.TensorSpec([2], tf.float32)).graph.as_graph_def()
    with pytest.raises(UnimplementedError, match=r"Cos \(nodes: cond_true_\d+/cond/Cos\)"):
        gf.import_tf_graph(graph_def.SerializeToString())


def test_tf2_results_match_tf_for_both_branches(tf):
    graph_def = tf.compat.v1.GraphDef()
    with open(os.path.join(FIXTURES, "control_flow.pb"), "rb") as f:
        graph_def.ParseFromString(f.read())
    g = gf.import_tf_graph(graph_def)
    x = np.float32([0.5, 2.0, 9.0])
    with tf.Graph().as_default() as tg:
        tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=tg) as sess:
            want = [sess.run("Identity:0", {"x:0": x, "p:0": p}) for p in (True, False)]
    with gf.Session(g) as sess:
        got = [sess.run("Identity:0", {"x:0": x, "p:0": p}) for p in (True, False)]
    _bitwise(got, want)


# -- TF 1.x: Switch/Merge and Enter/Exit converted ---------------------------------------
def test_v1_cond_and_while_with_an_invariant_and_a_nested_cond():
    g = gf.import_tf_graph(os.path.join(FIXTURES, "control_flow_v1.pb"))
    assert not V1_OPS & set(_ops_inside(g))
    loop = next(op for op in g.operations() if op.type == "StatelessWhile")
    assert len(loop.inputs) == 3  # i, v and the loop-invariant x (an is_constant Enter)
    assert "StatelessIf" in {op.type for op in loop.attrs["body"].graph.operations()}
    feeds, fetches = _expected("control_flow_v1")  # fetched by TF's names: cond/Merge...
    with gf.Session(g) as sess:
        _bitwise(sess.run(list(fetches), feeds), fetches.values())


def _v1_graph(tf, build):
    tf.compat.v1.disable_control_flow_v2()
    try:
        g = tf.Graph()
        with g.as_default():
            fetches = build(tf.compat.v1)
    finally:
        tf.compat.v1.enable_control_flow_v2()
    return g.as_graph_def(), [t.name for t in fetches]


def _same_as_tf(tf, graph_def, fetches, feeds) -> None:
    with tf.Graph().as_default() as tg:
        tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=tg) as sess:
            want = sess.run(fetches, feeds)
    with gf.Session(gf.import_tf_graph(graph_def.SerializeToString())) as sess:
        _bitwise(sess.run(fetches, feeds), want, str(fetches))


@pytest.mark.parametrize("p", [True, False])
def test_v1_simple_cond_matches_tf(tf, p):
    def build(v1):
        x = v1.placeholder(tf.float32, [None], name="x")
        pred = v1.placeholder(tf.bool, [], name="p")
        a, b = v1.cond(pred, lambda: (x * 2.0, tf.constant(1)), lambda: (x + 1.0, tf.constant(2)))
        return [a, b]
    graph_def, fetches = _v1_graph(tf, build)
    _same_as_tf(tf, graph_def, fetches, {"x:0": np.float32([0.5, 3.0]), "p:0": p})


def test_v1_while_loops_match_tf(tf):
    def build(v1):
        x = v1.placeholder(tf.float32, [None], name="x")
        i, a = v1.while_loop(lambda i, a: i < 5, lambda i, a: (i + 1, a * x + 1.0),
                             [tf.constant(0), tf.ones_like(x)], name="simple")

        def outer(j, s):  # a loop inside a loop: converted innermost first
            _, t = v1.while_loop(lambda k, t: k < j, lambda k, t: (k + 1, t + x), [0, s])
            return j + 1, t
        _, s = v1.while_loop(lambda j, s: j < 3, outer, [tf.constant(0), x], name="outer")
        return [i, a, s]
    graph_def, fetches = _v1_graph(tf, build)
    _same_as_tf(tf, graph_def, fetches, {"x:0": np.float32([0.5, -2.0, 3.0])})


def _hand_graph(nodes: list[tuple]) -> bytes:
    ps = tp.protos()
    graph_def = ps.GraphDef()
    for name, op, inputs, attrs in nodes:
        n = graph_def.node.add(name=name, op=op)
        n.input.extend(inputs)
        for key, (kind, value) in attrs.items():
            n.attr[key].CopyFrom(tp.attr_to_proto(kind, value, ps))
    return graph_def.SerializeToString()


def test_v1_shapes_not_converted_are_refused_naming_the_node():
    f32 = {"T": ("type", gf.float32)}
    base = [("x", "Placeholder", [], {"dtype": ("type", gf.float32)}),
            ("p", "Placeholder", [], {"dtype": ("type", gf.bool)}),
            ("sw", "Switch", ["x", "p"], f32)]
    value_index = base + [("m", "Merge", ["sw", "sw:1"], {**f32, "N": ("int", 2)}),
                          ("i", "Identity", ["m:1"], {"T": ("type", gf.int32)})]
    with pytest.raises(UnimplementedError, match="value_index") as info:
        gf.import_tf_graph(_hand_graph(value_index))
    assert info.value.node_name == "m"
    lone = base + [("y", "Identity", ["sw:1"], f32)]  # a Switch no Merge joins
    with pytest.raises(UnimplementedError, match="TF 1.x control flow") as info:
        gf.import_tf_graph(_hand_graph(lone))
    assert info.value.node_name == "sw"


# -- export --------------------------------------------------------------------------------
def _cond_and_loop():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, [3], name="x")
    p = s.placeholder(gf.bool, [], name="p")
    y = s.cond(p, lambda: s.sqrt(x) + 1.0, lambda: x * x)
    _, a = s.while_loop(lambda i, a: i < 5, lambda i, a: (
        i + 1, s.cond(i < 2, lambda: a * x, lambda: a + x)), [0, y], maximum_iterations=4)
    return g, [y.name, a.name]


def test_export_writes_a_function_per_branch_and_body_and_imports_again():
    _full_schema()
    g, fetches = _cond_and_loop()
    graph_def = tf_export.tf_graph_def(g)
    kinds = {n.op for n in graph_def.node}
    assert {"StatelessIf", "StatelessWhile"} <= kinds
    assert len(graph_def.library.function) == 6  # 2 branches, cond, body, its 2 branches
    again = gf.import_tf_graph(graph_def.SerializeToString())
    for p in (True, False):
        feeds = {"x:0": np.float32([1, 2, 3]), "p:0": p}
        with gf.Session(g) as sess, gf.Session(again) as sess2:
            _bitwise(sess2.run(fetches, feeds), sess.run(fetches, feeds))


def test_exported_control_flow_runs_in_tensorflow_with_graphflows_results(tf, tmp_path):
    g, fetches = _cond_and_loop()
    path = tmp_path / "cf.pb"
    gf.export_tf_graph(g, path)
    graph_def = tf.compat.v1.GraphDef.FromString(path.read_bytes())
    with tf.Graph().as_default() as tg:
        tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=tg) as sess, gf.Session(g) as gsess:
            for p in (True, False):
                feeds = {"x:0": np.float32([1, 2, 3]), "p:0": p}
                _bitwise(sess.run(fetches, feeds), gsess.run(fetches, feeds), f"p={p}")


def test_a_while_loops_gradient_is_refused_by_name():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [3], name="x")
    _, y = s.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * x), [0, x])
    gf.gradients(s.reduce_sum(y), [x])
    with pytest.raises(UnimplementedError, match="_WhileGrad"):
        tf_export.tf_graph_def(s.graph)
