"""RunOptions(trace=True): per-node events, the Chrome trace, and a RunMetadata that
holds one run."""
import json

import numpy as np
import pytest

import graphflow as gf


def _graph():
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float32, shape=[None], name="x")
    y = scope.add(x, 1.0, name="plus_one")
    z = scope.mul(y, y, name="square")
    return scope, x, z


@pytest.mark.parametrize("threads", [1, 2])
def test_trace_events_match_the_nodes_that_ran(threads):
    scope, x, z = _graph()
    scope.neg(z, name="not_fetched")
    md = gf.RunMetadata()
    # unfused: one event per node (tests/test_fusion.py traces a fused step)
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=threads, optimize=False)) as sess:
        got = sess.run(z, {x: np.arange(3, dtype=np.float32)},
                       options=gf.RunOptions(trace=True), run_metadata=md)
    np.testing.assert_array_equal(got, [1, 4, 9])
    by_name = {e.node: e for e in md.events}
    assert set(by_name) == {"plus_one/y", "plus_one", "square"}
    square = by_name["square"]
    assert square.op_type == "Mul" and square.device == "/device:CPU:0"
    assert square.output_shapes == [[3]] and square.bytes_allocated == 12
    assert square.end_us >= square.start_us >= by_name["plus_one"].end_us
    assert by_name["plus_one/y"].bytes_allocated == 0  # a constant allocates nothing


def test_chrome_trace_format(tmp_path):
    scope, x, z = _graph()
    md = gf.RunMetadata()
    with gf.Session(scope.graph, gf.SessionConfig(optimize=False)) as sess:
        sess.run(z, {x: np.ones(2, np.float32)}, options=gf.RunOptions(trace=True), run_metadata=md)
    path = tmp_path / "trace.json"
    md.save_chrome_trace(path)
    trace = json.loads(path.read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["name"] for e in complete) == ["plus_one", "plus_one/y", "square"]
    assert all(e["dur"] > 0 and e["ts"] >= 0 for e in complete)
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert names == ["/device:CPU:0"]


def test_untraced_run_records_nothing():
    scope, x, z = _graph()
    md = gf.RunMetadata()
    with gf.Session(scope.graph) as sess:
        sess.run(z, {x: np.ones(2, np.float32)}, run_metadata=md)
        assert md.events == []
        with pytest.raises(gf.errors.InvalidArgumentError, match="needs a run_metadata"):
            sess.run(z, {x: np.ones(2, np.float32)}, options=gf.RunOptions(trace=True))


def test_callable_with_accept_options_traces_and_plain_callable_refuses_keywords():
    scope, x, z = _graph()
    with gf.Session(scope.graph, gf.SessionConfig(optimize=False)) as sess:
        f = sess.make_callable(z, [x], accept_options=True)
        md = gf.RunMetadata()
        np.testing.assert_array_equal(
            f(np.ones(2, np.float32), options=gf.RunOptions(trace=True), run_metadata=md), [4, 4])
        assert {e.node for e in md.events} == {"plus_one/y", "plus_one", "square"}
        untraced = gf.RunMetadata()
        f(np.ones(2, np.float32), run_metadata=untraced)
        assert untraced.events == []
        with pytest.raises(gf.errors.InvalidArgumentError, match="needs a run_metadata"):
            f(np.ones(2, np.float32), options=gf.RunOptions(trace=True))
        with pytest.raises(TypeError):
            sess.make_callable(z, [x])(np.ones(2, np.float32), options=gf.RunOptions(trace=True))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("via", ["run", "make_callable"])
def test_run_metadata_holds_the_last_run_only(threads, via):
    scope, x, z = _graph()
    trace = gf.RunOptions(trace=True)
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=threads, optimize=False)) as sess:
        f = sess.make_callable(z, [x], accept_options=True)

        def call(options=None, metadata=None):
            if via == "run":
                return sess.run(z, {x: [1.0, 2.0]}, options=options, run_metadata=metadata)
            return f([1.0, 2.0], options=options, run_metadata=metadata)
        md = gf.RunMetadata()
        call(trace, md)
        first = sorted(e.node for e in md.events)
        assert {"plus_one", "square"} <= set(first) and len(first) == len(set(first))  # one run's nodes
        call(trace, md)
        assert sorted(e.node for e in md.events) == first  # replaced, not accumulated
        call(None, md)
        assert md.events == []  # an untraced run holds no events, as in TensorFlow




def test_saving_an_empty_trace_warns(tmp_path, caplog):
    import logging
    with caplog.at_level(logging.WARNING, logger="graphflow.runtime.tracing"):
        gf.RunMetadata().save_chrome_trace(tmp_path / "t.json")
    assert "is empty" in caplog.text
