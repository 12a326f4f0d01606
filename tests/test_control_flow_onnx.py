"""gf.export_onnx of control flow (graphflow/interop/onnx_lowering_control.py): graphs
built with scope.cond and scope.while_loop become ONNX If / Loop models that pass
onnx's checker and run in onnxruntime and ONNX's reference evaluator with graphflow's
Session results, nested control flow, zero iterations, maximum_iterations, several
loop-variable dtypes and captured outer tensors included; what ONNX cannot express is
refused naming the node, also inside branches and bodies."""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import UnimplementedError

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx.reference import ReferenceEvaluator  # noqa: E402


def check(graph: gf.Graph, feeds: dict, outputs: list, tmp_path, opset: int = 18,
          reference: bool = True):
    """Export ``outputs``; onnxruntime (and the reference evaluator) must give
    graphflow's results exactly, dtype and shape included. Returns the model."""
    with gf.Session(graph, gf.SessionConfig(optimize=False)) as sess:
        want = sess.run(outputs, feeds)
    path = tmp_path / "model.onnx"
    model = gf.export_onnx(graph, list(feeds), outputs, path, opset=opset)  # checked there
    names, feed = [o.name for o in outputs], {k.name: np.asarray(v) for k, v in feeds.items()}
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    runs = {"onnxruntime": lambda names, feed: session.run(names, {  # strings as str there
        k: v.astype(str) if v.dtype == object else v for k, v in feed.items()})}
    if reference:
        runs["reference"] = ReferenceEvaluator(model).run
    for backend, run in runs.items():
        for out, w, g in zip(outputs, want, run(names, feed)):
            g = np.asarray(g)
            assert (g.dtype, g.shape) == (w.dtype, w.shape), f"{backend}: {out.name}"
            np.testing.assert_array_equal(g, w, err_msg=f"{backend}: {out.name}")
    return model


def _nodes(graph) -> list:
    """Every node of an ONNX graph, its subgraphs' included."""
    found = []
    for node in graph.node:
        found.append(node)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                found += _nodes(sub)
    return found


def _op_types(model) -> list[str]:
    return [n.op_type for n in _nodes(model.graph)]


# -- cond ---------------------------------------------------------------------------------------
def test_cond_both_branches(tmp_path):
    """A bool predicate, two outputs of different dtypes, a captured tensor per branch."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [3])
    n = s.placeholder(gf.int64, [])
    p = s.placeholder(gf.bool, [])
    y, k = s.cond(p, lambda: (x * 2.0, n + 1), lambda: (x + 1.0, n * n))
    for pred in (True, False):
        model = check(s.graph, {x: np.array([1, -2, 3], np.float32), n: np.int64(7),
                                p: np.array(pred)}, [y, k], tmp_path)
    assert _op_types(model).count("If") == 1


@pytest.mark.parametrize("dtype,values", [(gf.int32, (0, 5)), (gf.float32, (0.0, -0.5)),
                                          (gf.float64, (0.0, np.nan))])
def test_cond_numeric_predicate_is_non_zero(tmp_path, dtype, values):
    """TensorFlow's truth value: a number is true when non-zero (NaN too)."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [2])
    p = s.placeholder(dtype, [])
    y = s.cond(p, lambda: x * 3.0, lambda: x - 1.0)
    for value in values:
        check(s.graph, {x: np.array([1, 2], np.float32),
                        p: np.asarray(value, dtype.as_numpy_dtype)}, [y], tmp_path)


def test_cond_with_differently_shaped_branches(tmp_path):
    """The branches' shapes differ: the If's output shape is what the run gives."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [4])
    p = s.placeholder(gf.bool, [])
    y = s.cond(p, lambda: x[1:], lambda: s.concat([x, x], 0))
    for pred in (True, False):
        check(s.graph, {x: np.arange(4, dtype=np.float32), p: np.array(pred)}, [y], tmp_path)


# -- while_loop ---------------------------------------------------------------------------------
def _power_loop(s: gf.Scope, x, limit):
    return s.while_loop(lambda i, a: i < limit, lambda i, a: (i + 1, a * x),
                        [0, s.ones_like(x)])


def test_while_simple_with_a_captured_tensor(tmp_path):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [3])
    i, a = _power_loop(s, x, 5)
    model = check(s.graph, {x: np.array([1, 2, -3], np.float32)}, [i, a], tmp_path)
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    assert loop.input[0] == ""  # no maximum_iterations: the cond alone decides


def test_while_zero_iterations(tmp_path):
    """The cond is false on entry: the Loop gives back the initial values."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [2])
    n = s.placeholder(gf.int32, [])
    i, a = _power_loop(s, x, n)
    for limit in (0, -3, 2):
        check(s.graph, {x: np.array([2, 3], np.float32), n: np.int32(limit)}, [i, a], tmp_path)


def _trip_input(model) -> np.ndarray | None:
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    init = {t.name: t for t in model.graph.initializer}
    return None if not loop.input[0] else onnx.numpy_helper.to_array(init[loop.input[0]])


@pytest.mark.parametrize("maximum", [0, 3, 10])
def test_while_constant_maximum_iterations_is_the_trip_count(tmp_path, maximum):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [2])
    i, a = s.while_loop(lambda i, a: i < 6, lambda i, a: (i + 1, a + x), [0, s.zeros_like(x)],
                        maximum_iterations=maximum)
    model = check(s.graph, {x: np.array([1, 2], np.float32)}, [i, a], tmp_path)
    assert _trip_input(model) == maximum


def test_while_fed_maximum_iterations(tmp_path):
    """maximum_iterations known only at run time: no trip count, the cond bounds it."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [2])
    m = s.placeholder(gf.int64, [])
    i, a = s.while_loop(lambda i, a: i < 6, lambda i, a: (i + 1, a + x), [0, s.zeros_like(x)],
                        maximum_iterations=m)
    for maximum in (0, 2, 9):
        model = check(s.graph, {x: np.array([1, 2], np.float32), m: np.int64(maximum)},
                      [i, a], tmp_path)
    assert _trip_input(model) is None


def test_while_loop_vars_of_several_dtypes(tmp_path):
    """int32, int64, float32, float64 and bool loop variables, one of each, and a
    captured tensor the cond reads."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, [2])
    stop = s.placeholder(gf.int64, [])

    def body(i, j, f, d, b):
        return (i + 2, j * 3, f * 0.5, d + x, s.logical_not(b))
    outs = s.while_loop(lambda i, j, f, d, b: j < stop, body,
                        [s.constant(np.int32(1)), s.constant(np.int64(1)),
                         s.constant(np.float32([8, 4])), s.zeros_like(x),
                         s.constant(np.array(True))])
    check(s.graph, {x: np.array([0.25, -1.5]), stop: np.int64(100)}, list(outs), tmp_path)


def test_while_with_a_shape_that_changes(tmp_path):
    """A loop variable that grows (unknown dim) and one whose rank changes (invariant of
    unknown rank): ONNX's loop-carried values may change shape."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [2])
    i, grown, nested = s.while_loop(
        lambda i, g, e: i < 3, lambda i, g, e: (i + 1, s.concat([g, g], 0), s.expand_dims(e, 0)),
        [0, x, x], shape_invariants=[gf.TensorShape([]), gf.TensorShape([None]),
                                     gf.TensorShape(None)])
    check(s.graph, {x: np.array([1, 2], np.float32)}, [i, grown, nested], tmp_path)


# -- nested control flow --------------------------------------------------------------------------
def test_cond_inside_a_loop_body(tmp_path):
    """A cond in the body, its branches capturing an outer tensor through the body."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [3])
    n = s.placeholder(gf.int32, [])

    def body(i, a):
        even = s.equal(s.floor_mod(i, 2), 0)
        return i + 1, s.cond(even, lambda: a * x, lambda: a + x)
    i, a = s.while_loop(lambda i, a: i < n, body, [0, s.ones_like(x)])
    for limit in (0, 1, 4):
        model = check(s.graph, {x: np.array([1, 2, -1], np.float32), n: np.int32(limit)},
                      [i, a], tmp_path)
    assert _op_types(model).count("If") == 1 and _op_types(model).count("Loop") == 1


def test_loops_inside_a_cond_and_a_loop(tmp_path):
    """A loop in a branch, and a loop in a loop's body (the inner one bounded by the outer
    counter)."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [2])
    p = s.placeholder(gf.bool, [])
    y = s.cond(p, lambda: _power_loop(s, x, 3)[1], lambda: x - 1.0)

    def outer(i, total):
        _, inner = s.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + x), [0, total],
                                maximum_iterations=4)
        return i + 1, inner
    _, z = s.while_loop(lambda i, t: i < 5, outer, [0, s.zeros_like(x)])
    for pred in (True, False):
        model = check(s.graph, {x: np.array([2, -0.5], np.float32), p: np.array(pred)},
                      [y, z], tmp_path)
    assert _op_types(model).count("Loop") == 3


# -- what ONNX cannot express, and variables -----------------------------------------------------
def test_unsupported_ops_inside_functions_are_reported(tmp_path):
    """One UnimplementedError naming the nodes inside a branch and a body (function/node),
    a state update in a body too."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.int32, [2])
    p = s.placeholder(gf.bool, [])
    v = s.variable(np.float32(0), name="v")
    y = s.cond(p, lambda: s.broadcast_gradient_args(x, x)[0], lambda: x)

    def body(i):
        s.assign_add_variable_op(v.handle, s.constant(np.float32(1)))
        return i + 1
    [w] = s.while_loop(lambda i: i < 3, body, [0])
    with pytest.raises(UnimplementedError) as err:
        gf.export_onnx(s.graph, [x, p], [y, w], tmp_path / "m.onnx")
    message = str(err.value)
    then_fn = y.op.attrs["then_branch"].name
    body_fn = w.op.attrs["body"].name
    assert f"BroadcastGradientArgs (no ONNX lowering): {then_fn}/BroadcastGradientArgs" \
        in message
    assert f"AssignAddVariableOp (it updates state; an ONNX graph is for inference): " \
           f"{body_fn}/AssignAddVariableOp" in message


def test_string_predicate_needs_opset_19(tmp_path):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [2])
    p = s.placeholder(gf.string, [])
    y = s.cond(p, lambda: x * 2.0, lambda: x, name="pick")
    with pytest.raises(UnimplementedError, match=r"StatelessIf with a string cond .*opset=19.*"
                                                 r": pick"):
        gf.export_onnx(s.graph, [x, p], [y], tmp_path / "m.onnx")
    for value in (b"", b"yes"):
        check(s.graph, {x: np.array([1, 2], np.float32), p: np.array(value, object)}, [y],
              tmp_path, opset=19, reference=False)


def test_variables_read_in_functions_are_frozen(tmp_path):
    """A variable read in a branch and in a loop body: its session value, as a constant
    (its handle is bound, not passed: no ONNX value)."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [2])
    p = s.placeholder(gf.bool, [])
    v = s.variable(np.float32([3, -1]), name="v")
    y = s.cond(p, lambda: x * s.read_variable_op(v.handle, gf.float32), lambda: x)
    _, z = s.while_loop(lambda i, a: i < 2,
                        lambda i, a: (i + 1, a + s.read_variable_op(v.handle, gf.float32)),
                        [0, x])
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        want = sess.run([y, z], {x: np.array([1, 2], np.float32), p: np.array(True)})
        gf.export_onnx(s.graph, [x, p], [y, z], tmp_path / "m.onnx", session=sess)
    got = onnxruntime.InferenceSession(str(tmp_path / "m.onnx")).run(
        [y.name, z.name], {x.name: np.array([1, 2], np.float32), p.name: np.array(True)})
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_a_branch_returning_a_handle_is_refused(tmp_path):
    s = gf.Scope(gf.Graph())
    v = s.variable(np.float32(0), name="v")
    p = s.placeholder(gf.bool, [])
    h = s.cond(p, lambda: v.handle, lambda: v.handle, name="pick")
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        with pytest.raises(UnimplementedError, match="then_branch returns a variable's handle "
                                                     r"\(ONNX has no handles\): pick"):
            gf.export_onnx(s.graph, [p], [s.read_variable_op(h, gf.float32)],
                           tmp_path / "m.onnx", session=sess)


def test_while_numeric_cond_is_non_zero(tmp_path):
    """A cond returning a number: the loop runs while it is non-zero."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.int32, [])
    [i] = s.while_loop(lambda i: 5 - i, lambda i: i + 1, [x])
    for start in (1, 5):
        check(s.graph, {x: np.int32(start)}, [i], tmp_path)
