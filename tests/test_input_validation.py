"""Every public entry point checks its arguments: a one-line TypeError (or the OpError
TensorFlow's counterpart raises) naming what is wrong, before any work; Session,
SessionConfig, run, make_callable and control dependencies alike.
"""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import FailedPreconditionError, NotFoundError
from graphflow.ops import DynamicPartition, ScatterNd


def _graph():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[2], name="x")
    y = s.add(x, 1.0, name="y")
    return g, s, x, y


def _closed_session(g):
    sess = gf.Session(g)
    sess.close()
    return sess


BAD_CALLS = {
    "Session(graph='abc')": (lambda g, s, x, y, sess: gf.Session("abc"), TypeError,
                             "must be a gf.Graph, got str"),
    "Session(config='x')": (lambda g, s, x, y, sess: gf.Session(g, config="x"), TypeError,
                            "config must be a gf.SessionConfig, got str"),
    "Session(devices='cpu')": (lambda g, s, x, y, sess: gf.Session(g, devices="cpu"),
                               TypeError, "devices must be a list of Devices"),
    "Session(devices=[1])": (lambda g, s, x, y, sess: gf.Session(g, devices=[1]), TypeError,
                             "devices must be Devices"),
    "Scope('abc')": (lambda g, s, x, y, sess: gf.Scope("abc"), TypeError, "gf.Graph, got str"),
    "Op.create(graph)": (lambda g, s, x, y, sess: ScatterNd.create(g, [[1]], [1.0], [4]),
                         TypeError, r"takes a gf.Scope first, got Graph \(wrap it"),
    "run(feed_dict=list)": (lambda g, s, x, y, sess: sess.run(y, [(x, [1.0, 2.0])]), TypeError,
                            "feed_dict must be a dict"),
    "run(options=str)": (lambda g, s, x, y, sess: sess.run(y, {x: [1.0, 2.0]}, options="trace"),
                         TypeError, "options must be a gf.RunOptions, got str"),
    "run(run_metadata={})": (lambda g, s, x, y, sess: sess.run(y, {x: [1.0, 2.0]},
                                                               run_metadata={}),
                             TypeError, "run_metadata must be a gf.RunMetadata, got dict"),
    "callable(options=str)": (
        lambda g, s, x, y, sess: sess.make_callable(y, [x], accept_options=True)(
            [1.0, 2.0], options="trace"), TypeError, "options must be a gf.RunOptions"),
    "RunOptions(trace='yes')": (lambda g, s, x, y, sess: gf.RunOptions(trace="yes"), TypeError,
                                "RunOptions.trace must be a bool, got str"),
    "make_callable(feed_list=x)": (lambda g, s, x, y, sess: sess.make_callable(y, x),
                                   TypeError, "feed_list must be a list of Outputs"),
    "make_callable(accept_options='yes')": (
        lambda g, s, x, y, sess: sess.make_callable(y, [x], accept_options="yes"), TypeError,
        "accept_options must be a bool"),
    "run('y:abc')": (lambda g, s, x, y, sess: sess.run("y:abc"), ValueError,
                     "'y:abc' looks like an output name, but is not a valid one"),
    "run('y:')": (lambda g, s, x, y, sess: sess.run("y:"), ValueError, "not a valid one"),
    "feed_dict key 'x:abc'": (lambda g, s, x, y, sess: sess.run(y, {"x:abc": [1.0, 2.0]}),
                              ValueError, "not a valid one"),
    "make_callable on a closed Session": (
        lambda g, s, x, y, sess: _closed_session(g).make_callable(y, [x]),
        FailedPreconditionError, "closed Session"),
    "import_graph_def(d, 'abc')": (
        lambda g, s, x, y, sess: gf.import_graph_def(g.as_graph_def(), "abc"), TypeError,
        "imports into a gf.Scope or a gf.Graph, got str"),
    "with_name(5)": (lambda g, s, x, y, sess: s.with_name(5), TypeError,
                     "with_name.. needs a string, got int 5"),
    "with_sub_scope(5)": (lambda g, s, x, y, sess: s.with_sub_scope(5), TypeError,
                          "needs a string, got int"),
    "with_device(5)": (lambda g, s, x, y, sess: s.with_device(5), TypeError,
                       "needs a string, got int"),
    "builder name=5": (lambda g, s, x, y, sess: s.add(x, x, name=5), TypeError,
                       "op name must be a string, got int"),
    "with_control_dependencies(output)": (
        lambda g, s, x, y, sess: s.with_control_dependencies(y), TypeError,
        "takes a list of Operations or Outputs, got Output 'y:0': pass it in a list"),
    "with_control_dependencies(op)": (
        lambda g, s, x, y, sess: s.with_control_dependencies(y.op), TypeError,
        "got Operation 'y'"),
    "with_control_dependencies(wrapper)": (
        lambda g, s, x, y, sess: s.with_control_dependencies(ScatterNd.create(s, [[1]], [1.], [4])),
        TypeError, "got ScatterNd"),
    "with_control_dependencies('y')": (
        lambda g, s, x, y, sess: s.with_control_dependencies("y"), TypeError, "got str"),
    "with_control_dependencies([5])": (
        lambda g, s, x, y, sess: s.with_control_dependencies([5]), TypeError,
        "Control dependency 5 must be an Operation or an Output"),
    "op.output(1)": (lambda g, s, x, y, sess: y.op.output(1), NotFoundError,
                     r"Operation 'y' \(Add\) has 1 outputs; there is no output 1"),
    "op.output(-2)": (lambda g, s, x, y, sess: y.op.output(-2), NotFoundError, "no output -2"),
    "op.output(2**70)": (lambda g, s, x, y, sess: y.op.output(2 ** 70), NotFoundError,
                         "no output"),
    "op.output('0')": (lambda g, s, x, y, sess: y.op.output("0"), TypeError,
                       "output index of 'y' must be an int, got str"),
    "op.output(True)": (lambda g, s, x, y, sess: y.op.output(True), TypeError, "got bool"),
    "graph.operation(5)": (lambda g, s, x, y, sess: g.operation(5), TypeError,
                           "operation name must be a string, got int 5"),
    "graph.operation(['y'])": (lambda g, s, x, y, sess: g.operation(["y"]), TypeError,
                               "got list"),
    "graph.unique_name(None)": (lambda g, s, x, y, sess: g.unique_name(None), TypeError,
                                "node name must be a string, got NoneType"),
    "run(fetch nested 5000 deep)": (lambda g, s, x, y, sess: sess.run(_nested(5000, y)),
                                    ValueError, "more than 100 levels deep"),
    "run(fetch holding itself)": (lambda g, s, x, y, sess: sess.run(_holding_itself(y)),
                                  ValueError, r"more than 100 levels deep \(or holds itself\)"),
    "make_callable(dict holding itself)": (
        lambda g, s, x, y, sess: sess.make_callable(_holding_itself({"y": y})), ValueError,
        "or holds itself"),
}


def _nested(depth, leaf):
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def _holding_itself(leaf):
    if isinstance(leaf, dict):
        leaf["self"] = leaf
        return leaf
    loop = [leaf]
    loop.append(loop)
    return loop


def test_a_fetch_nested_100_deep_still_runs():
    g, s, x, y = _graph()
    with gf.Session(g) as sess:
        got = sess.run(_nested(100, y), {x: [1.0, 2.0]})
    for _ in range(100):
        (got,) = got
    assert got.tolist() == [2.0, 3.0]


@pytest.mark.parametrize("name", BAD_CALLS)
def test_entry_points_check_their_arguments(name):
    call, error, message = BAD_CALLS[name]
    g, s, x, y = _graph()
    with gf.Session(g) as sess:
        with pytest.raises(error, match=message) as info:
            call(g, s, x, y, sess)
        assert "\n" not in str(info.value)  # one line
        assert sess.run(y, {x: [1.0, 2.0]}).tolist() == [2.0, 3.0]  # nothing broken


CONFIG_FIELDS = {"inter_op_threads": ["2", 2.5, True], "memory_limit_bytes": ["1", 1.5, False],
                 "allow_soft_placement": [1, "yes", None], "log_device_placement": [0, "no"],
                 "deterministic": [1, None], "optimize": [0, "False"]}


@pytest.mark.parametrize("field, value", [(f, v) for f, values in CONFIG_FIELDS.items()
                                          for v in values])
def test_session_config_fields_have_their_types(field, value):
    with pytest.raises(TypeError, match=f"SessionConfig.{field} must be an? (int|bool)"):
        gf.SessionConfig(**{field: value})


def test_session_config_takes_numpy_scalars_as_their_python_values():
    config = gf.SessionConfig(inter_op_threads=np.int64(2), memory_limit_bytes=np.int32(1000),
                              optimize=np.bool_(False))
    assert (config.inter_op_threads, config.memory_limit_bytes, config.optimize) == (2, 1000, False)
    assert type(config.inter_op_threads) is int and type(config.optimize) is bool


def test_control_dependencies_still_take_lists_of_ops_outputs_and_wrappers():
    g, s, x, y = _graph()
    parts = s.dynamic_partition(x, np.array([0, 1], np.int32), num_partitions=2)
    wrapper = ScatterNd.create(s, [[1]], [1.0], [4])
    several = DynamicPartition.create(s, x, np.array([1, 0], np.int32), num_partitions=2)
    scoped = s.with_control_dependencies([y, y.op, wrapper, parts[0], several])
    assert scoped.control_dependencies == (y.op, wrapper.op, parts[0].op, several.op)


