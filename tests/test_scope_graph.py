"""Graph, Operation, Output and Scope: names, devices, control deps, constants."""
import networkx as nx
import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError

from support.threads import run_in_threads


def test_unique_names_and_sub_scopes(scope):
    a = scope.constant(1)
    b = scope.constant(2)
    assert (a.op.name, b.op.name) == ("Const", "Const_1")
    layer = scope.with_sub_scope("layer")
    c = layer.add(a, b)
    assert c.op.name == "layer/Add"
    assert scope.with_sub_scope("layer").make_op_name("Add") == "layer_1/Add"
    named = scope.with_name("total").add(a, b)
    assert named.op.name == "total"
    assert scope.with_name("total").add(a, b).op.name == "total_1"
    assert scope.add(a, b, name="explicit").op.name == "explicit"
    assert scope.graph.operation("layer/Add") is c.op
    assert c.name == "layer/Add:0" and c.as_output() is c


def test_scopes_are_immutable(scope):
    gpu = scope.with_device("/GPU:0")
    assert scope.device == "" and gpu.device == "/device:GPU:0"
    assert gpu.with_device("cpu:0").device == "/device:CPU:0"
    x = gpu.constant(1.0)
    assert x.op.device == "/device:GPU:0"
    assert scope.constant(1.0).op.device == ""


@pytest.mark.parametrize("bad", ["/tpu:0", "gpu:x", "/device:GPU:0:1", "nonsense"])
def test_malformed_device(scope, bad):
    with pytest.raises(InvalidArgumentError, match="Malformed device"):
        scope.with_device(bad)


def test_control_dependencies_recorded(scope):
    a = scope.constant(1)
    noop = scope.no_op()
    dep = scope.with_control_dependencies([a, noop])
    b = dep.identity(a)
    assert b.op.control_inputs == (a.op, noop)
    g = scope.graph.to_networkx()
    assert isinstance(g, nx.DiGraph)
    assert g.edges["Const", "Identity"]["kind"] == "data"
    assert g.edges["NoOp", "Identity"]["kind"] == "control"
    assert list(nx.topological_sort(g))[-1] == "Identity"


@pytest.mark.parametrize("value, dtype", [
    (1, gf.int32), (2**40, gf.int64), (1.5, gf.float32), (True, gf.bool), ([1, 2], gf.int32),
    ([[1.0]], gf.float32), (np.array([1, 2], np.int64), gf.int64),
    (np.float64(1), gf.float64), ("abc", gf.string), ([b"a", "b"], gf.string), (1j, gf.complex128),
])
def test_constant_dtype_rules(scope, run, value, dtype):
    c = scope.constant(value)
    assert c.dtype is dtype
    got = run(c)
    assert got.shape == np.shape(value)
    if dtype is gf.string:
        assert got.dtype == object and all(isinstance(v, bytes) for v in got.reshape(-1))


def test_constant_is_copied_and_read_only(scope, run):
    value = np.arange(4, dtype=np.int32)
    c = scope.constant(value)
    value[0] = 99
    got = run(c)
    assert got.tolist() == [0, 1, 2, 3]
    got[1] = 42  # the caller's copy is writable, and does not touch the constant
    assert run(c).tolist() == [0, 1, 2, 3]


def test_raw_values_follow_bound_dtype(scope):
    x = scope.placeholder(gf.float64, shape=[2])
    y = scope.add(x, 1)
    assert y.dtype is gf.float64 and y.op.inputs[1].op.name == "Add/y"
    with pytest.raises(gf.errors.InvalidDTypeError, match="Cannot convert 1.5"):
        scope.add(scope.constant([1, 2]), 1.5)


def test_mixed_dtypes_rejected(scope):
    with pytest.raises(gf.errors.InvalidDTypeError, match="does not match type int32"):
        scope.add(scope.constant([1]), scope.constant([1.0]))
    with pytest.raises(TypeError):  # also a TypeError, as in TensorFlow
        scope.add(scope.constant([1]), scope.constant([1.0]))


def test_unknown_and_mistyped_attrs(scope):
    x = scope.constant([1.0])
    with pytest.raises(InvalidArgumentError, match="Unknown argument 'axis'"):
        scope.identity(x, axis=1)
    with pytest.raises(InvalidArgumentError, match="expected an int"):
        scope.pack([x, x], axis="0")
    with pytest.raises(InvalidArgumentError, match="missing required attr 'DstT'"):
        scope.cast(x)
    with pytest.raises(gf.errors.InvalidDTypeError):
        scope.cast(x, "not-a-type")


def test_input_from_another_graph(scope):
    other = gf.Scope(gf.Graph()).constant(1)
    with pytest.raises(InvalidArgumentError, match="same graph"):
        scope.identity(other)


def test_creation_site_recorded(scope):
    c = scope.constant(1)
    assert c.op.site.endswith(f"test_scope_graph.py:{test_creation_site_recorded.__code__.co_firstlineno + 1}")


def test_graph_queries(scope):
    a = scope.constant(1)
    b = scope.identity(a)
    g = scope.graph
    assert g.operations() == [a.op, b.op] and len(g) == 2
    assert g.output("Identity:0") is b and g.output("Identity") is b
    assert a.consumers() == [b.op]
    with pytest.raises(gf.errors.NotFoundError):
        g.operation("missing")


def test_graph_thread_safe_creation():
    g = gf.Graph()
    scope = gf.Scope(g)

    def build(_):
        for _ in range(200):
            scope.constant(1)
    assert not run_in_threads(build, 8)
    names = [op.name for op in g.operations()]
    assert len(names) == 1600 == len(set(names))
    assert [op.position for op in g.operations()] == list(range(1600))
