"""`graphflow convert IN OUT`: between .json, .pb/.pbtxt and .onnx (output only).

Each converted graph is run and compared with the original's results; the errors are
one line with exit status 1 (a failure) or 2 (bad usage), and nothing is written then.
"""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf
from graphflow.tools.cli import main

pytest.importorskip("tensorboardX")


def inference_graph():
    """Scatter, gather, partition and stitch with duplicates; one placeholder."""
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[None, 2], name="x")
    added = s.tensor_scatter_add(x, [[0], [2], [0]], [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    rows = s.gather_nd(added, [[2], [0]], name="rows")
    low, high = s.dynamic_partition(rows, [1, 0], num_partitions=2)
    s.dynamic_stitch([[1], [0]], [s.mul(low, 2.0), high], name="out")
    return g


FEED = {"x:0": np.arange(6, dtype=np.float32).reshape(3, 2)}


def results(graph: gf.Graph, fetches=("out:0", "rows:0")) -> list:
    with gf.Session(graph) as sess:
        return sess.run(list(fetches), FEED)


def convert(*argv) -> int:
    return main(["convert", *map(str, argv)])


@pytest.mark.parametrize("chain", [
    ["g.json", "g.pb", "back.json"],
    ["g.json", "g.pbtxt", "g2.pb", "g2.json"],
])
def test_conversions_keep_the_graphs_results(tmp_path, chain, capsys):
    original = inference_graph()
    original.save(tmp_path / chain[0])
    for src, dst in zip(chain, chain[1:]):
        assert convert(tmp_path / src, tmp_path / dst) == 0
        assert f"wrote {tmp_path / dst}" in capsys.readouterr().err
        read = gf.load_graph(tmp_path / dst) if dst.endswith(".json") else \
            gf.import_tf_graph(tmp_path / dst)
        for got, want in zip(results(read), results(original)):
            np.testing.assert_array_equal(got, want)


def test_pbtxt_is_text(tmp_path):
    inference_graph().save(tmp_path / "g.json")
    assert convert(tmp_path / "g.json", tmp_path / "g.pbtxt") == 0
    text = (tmp_path / "g.pbtxt").read_text()
    assert 'op: "TensorScatterAdd"' in text and "versions" in text


def test_onnx_takes_placeholders_and_unconsumed_outputs_or_the_flags(tmp_path):
    onnx = pytest.importorskip("onnx")
    inference_graph().save(tmp_path / "g.json")
    assert convert(tmp_path / "g.json", tmp_path / "all.onnx") == 0
    model = onnx.load(tmp_path / "all.onnx")
    assert [i.name for i in model.graph.input] == ["x:0"]
    assert [o.name for o in model.graph.output] == ["out:0"]
    assert convert(tmp_path / "g.json", tmp_path / "rows.onnx", "--input", "x",
                   "--output", "rows", "--output", "out:0", "--opset", "19") == 0
    model = onnx.load(tmp_path / "rows.onnx")
    assert [o.name for o in model.graph.output] == ["rows:0", "out:0"]
    assert {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")} == {19}
    reference = pytest.importorskip("onnx.reference")
    got = reference.ReferenceEvaluator(model).run(None, {"x:0": FEED["x:0"]})
    for a, b in zip(got, results(inference_graph(), ("rows:0", "out:0"))):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("argv, status, message", [
    (["g.onnx", "out.json"], 2, "ONNX is an output format only"),
    (["g.json", "out.txt"], 2, "cannot tell the format of OUT 'out.txt'"),
    (["g.h5", "out.json"], 2, "cannot tell the format of IN"),
    (["g.json", "out.pb", "--output", "out"], 2, "apply to an .onnx OUT only"),
    (["missing.json", "out.pb"], 1, "cannot read"),
    (["missing.pb", "out.json"], 1, "cannot read"),
    (["junk.pb", "out.json"], 1, "junk.pb"),
    (["g.json", "taken.pb"], 1, "exists; not overwriting it (use --force)"),
    (["g.json", "nodir/out.pb"], 1, "no directory"),
])
def test_errors_are_one_line_and_write_nothing(tmp_path, monkeypatch, capsys, argv, status,
                                               message):
    monkeypatch.chdir(tmp_path)
    inference_graph().save("g.json")
    (tmp_path / "junk.pb").write_bytes(b"\x0a\xff\xff not a GraphDef")
    (tmp_path / "taken.pb").write_bytes(b"keep")
    before = sorted(p.name for p in tmp_path.iterdir())
    if status == 2:
        with pytest.raises(SystemExit) as e:
            convert(*argv)
        assert e.value.code == 2
    else:
        assert convert(*argv) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "taken.pb").read_bytes() == b"keep"


def test_force_overwrites(tmp_path):
    inference_graph().save(tmp_path / "g.json")
    (tmp_path / "out.pb").write_bytes(b"old")
    assert convert(tmp_path / "g.json", tmp_path / "out.pb", "--force") == 0
    assert (tmp_path / "out.pb").read_bytes() != b"old"
    for got, want in zip(results(gf.import_tf_graph(tmp_path / "out.pb")),
                         results(inference_graph())):
        np.testing.assert_array_equal(got, want)


USER_OP = gf.register_op("TestConvertUserOp", inputs=["x: T"], outputs=["y: T"],
                         attrs={"T": gf.TypeAttr()}, doc="Identity, for the convert tests.")


@USER_OP.shape_fn
def _user_shape(ctx):
    """same as x."""
    return ctx.shape("x")


def test_an_op_tensorflow_lacks_is_named(tmp_path, capsys):
    g = gf.Graph()
    s = gf.Scope(g)
    s.test_convert_user_op(s.placeholder(gf.float32, shape=[3], name="t"), name="mine")
    g.save(tmp_path / "g.json")
    assert convert(tmp_path / "g.json", tmp_path / "g.pb") == 1
    err = capsys.readouterr().err
    assert "TestConvertUserOp" in err and "mine" in err and err.count("\n") == 1
    assert not (tmp_path / "g.pb").exists()
