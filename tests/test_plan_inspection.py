"""The plan compiler as something to read: the IR after any pass (``graphflow inspect
--after``), the segments of the built plan, and the invariants checked after every pass
(GRAPHFLOW_CHECK_PASSES=1)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InternalError
from graphflow.graph import PlanNode
from graphflow.runtime import inspection, pipeline


def _graph():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, [8], name="x")
    s.reduce_max(s.abs(x * 2.0 + 1.0) - s.gather_v2(x, s.constant([1, 2, 3, 4, 5, 6, 7, 0]), 0),
                 name="top")
    return g


def test_the_ir_after_each_pass():
    names = inspection.stage_names(_graph())
    assert names[0] == "initial"
    assert names[-4:] == ["fuse_pass", "require_feeds_pass", "place_pass", "segments"]
    placed = inspection.after(_graph(), "place_pass")
    assert "DEVICE" in placed and "/device:CPU:0" in placed
    fused = inspection.after(_graph(), "fuse")
    assert fused.startswith("# the plan IR after fuse_pass")
    assert "_FusedElementwise" in fused and "Mul " not in fused
    assert "Mul " in inspection.after(_graph(), "initial")


def test_the_segments_of_the_built_plan():
    assert inspection.plan_segments(_graph()) == [["GatherV2", "Sub/fused", "top"]]


def test_cli_inspect_after(tmp_path, capsys):
    from graphflow.tools.cli import main
    path = tmp_path / "g.json"
    _graph().save(str(path))
    assert main(["inspect", str(path), "--after", "segments"]) in (0, None)
    assert "segment 0: 3 steps: GatherV2, Sub/fused, top" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["inspect", str(path), "--after", "nothing"])
    assert "no plan pass named 'nothing'" in capsys.readouterr().err


def test_a_pass_that_breaks_the_order_is_named(monkeypatch):
    monkeypatch.setenv("GRAPHFLOW_CHECK_PASSES", "1")
    g = _graph()
    ir = pipeline.initial_ir(*inspection.default_signature(g))

    def reverse_ops(ir):
        return dataclasses.replace(ir, ops=tuple(reversed(ir.ops)))
    with pytest.raises(InternalError, match="'reverse_ops' broke an invariant.*no earlier op"):
        pipeline.run_pipeline(ir, [reverse_ops])


def test_a_pass_that_changes_the_users_graph_is_named(monkeypatch):
    monkeypatch.setenv("GRAPHFLOW_CHECK_PASSES", "1")
    g = _graph()
    ir = pipeline.initial_ir(*inspection.default_signature(g))

    def rewire(ir):
        top = g.operation("top")
        top.control_inputs = (g.operation("x"),)
        return ir
    with pytest.raises(InternalError, match="'rewire'.*changed the user's graph: \\['top'\\]"):
        pipeline.run_pipeline(ir, [rewire])


def test_every_optimizing_pass_keeps_the_invariants(monkeypatch):
    """A graph with everything the passes rewrite: a fold, a simplification, a control
    dependency a rewrite must keep, a partition-stitch, a gather-reduce, fusion."""
    monkeypatch.setenv("GRAPHFLOW_CHECK_PASSES", "1")
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [6], name="x")
    v = s.variable(np.zeros(6, np.float32))
    waits = s.with_control_dependencies([v.assign_add(x)])
    folded = waits.mul(s.constant(np.float32(2)), s.constant(np.float32(3)))
    parts = s.dynamic_partition(x, s.constant([0, 1, 0, 1, 1, 0]), 2)
    stitched = s.dynamic_stitch([s.constant([0, 2, 5]), s.constant([1, 3, 4])],
                                [parts[0] * 2.0, parts[1] + 1.0])
    summed = s.unsorted_segment_sum(s.gather_v2(x, s.constant([0, 1, 1, 5]), 0),
                                    s.constant([0, 0, 1, 1]), 2)
    y = s.reduce_sum(s.tanh(stitched * 1.0 + folded)) + s.reduce_sum(summed)
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        for _ in range(3):
            got = sess.run(y, {x: np.arange(6, dtype=np.float32)})
    assert np.isfinite(got)


def test_the_ir_is_rewired_and_its_nodes_are_values():
    """After the passes every op reads its inputs directly (no substitution map to look
    through); the nodes a pass made are PlanNodes, which no one can change; the user's
    graph keeps its own nodes, as they were."""
    g = _graph()
    ir = inspection.plan_stages(g)[-1][1]
    computed = {o for op in ir.ops for o in op.outputs} | set(ir.feeds)
    assert all(i in computed for op in ir.ops for i in op.inputs)
    made = [op for op in ir.ops if isinstance(op, PlanNode)]
    assert made and all(op not in g.operations() for op in made)
    assert not any(isinstance(op, PlanNode) for op in g.operations())
    with pytest.raises(AttributeError, match="immutable"):
        made[0].inputs = ()
    assert set(ir.placement) == set(ir.ops)


def _extending_example():
    """The pass of docs/extending.md, from the page itself."""
    import pathlib
    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    block = text.split("# the pass of docs/extending.md")[1].split("```")[0].split("\n", 1)[1]
    namespace: dict = {}
    exec(compile(block, "docs/extending.md", "exec"), namespace)  # noqa: S102
    return namespace["double_to_add"]


def test_the_extending_pages_pass_works(monkeypatch):
    monkeypatch.setenv("GRAPHFLOW_CHECK_PASSES", "1")
    double_to_add = _extending_example()
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [4], name="x")
    y = s.tanh(x * 2.0)
    ir = pipeline.run_pipeline(pipeline.initial_ir([y], [x]), [double_to_add])
    assert [op.type for op in ir.ops if op.type in ("Mul", "Add")] == ["Add"]
    monkeypatch.setattr(pipeline, "optimizing_passes",
                        lambda devices, config, real=pipeline.optimizing_passes:
                        (double_to_add, *real(devices, config)))
    values = np.array([1.5, -0.0, np.inf, np.nan], np.float32)
    with gf.Session(s.graph) as sess, \
            gf.Session(s.graph, gf.SessionConfig(optimize=False)) as plain:
        for _ in range(3):
            got, want = sess.run(y, {x: values}), plain.run(y, {x: values})
            assert got.tobytes() == want.tobytes()
