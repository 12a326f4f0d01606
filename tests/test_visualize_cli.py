"""DOT text of a known graph, rendering when Graphviz is installed, and every CLI
verb (`python -m graphflow ...`): the entry point in a new interpreter, the verbs
through ``graphflow.tools.cli.main`` in this one."""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import graphflow as gf
from graphflow.tools import visualize

needs_dot = pytest.mark.skipif(visualize.dot_binary() is None,
                               reason="Graphviz's `dot` is not installed")


def _known_graph() -> gf.Graph:
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.with_device("/gpu:0").placeholder(gf.float32, shape=[None, 2])
    c = s.with_device("/cpu:0").constant(np.array([1.0, 2.0], np.float32))
    total = s.with_name("total").add(x, c)
    s.with_control_dependencies([total]).no_op()
    return g


# -- DOT --------------------------------------------------------------------------------
def test_dot_text_of_a_known_graph():
    dot = _known_graph().to_dot()
    lines = [line.strip() for line in dot.splitlines()]
    assert lines[0] == "digraph graphflow {" and lines[-1] == "}"
    assert ('"Placeholder" [label="Placeholder\\nfloat32 [?,2]\\n/device:GPU:0", '
            'fillcolor="#d5e8d4"];') in lines
    assert ('"Const" [label="Const\\nfloat32 [2]\\n= [1., 2.]\\n/device:CPU:0", '
            'fillcolor="#dae8fc", fontsize=8, color=gray50];') in lines
    assert '"total" [label="total\\n(Add)\\nfloat32 [?,2]", fillcolor="#ffffff"];' in lines
    assert '"Placeholder" -> "total" [label="[?,2]"];' in lines
    assert '"Const" -> "total" [label="[2]"];' in lines
    assert '"total" -> "NoOp" [style=dashed, color=gray40, arrowhead=odot];' in lines
    assert "subgraph cluster_legend {" in lines
    assert '"_legend_gpu" [label="requested GPU", fillcolor="#d5e8d4"];' in lines


def test_dot_multi_output_ports_and_no_legend():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.int32, shape=[3])
    s.with_sub_scope("layer").concat([x, x], 0)
    dot = g.to_dot(legend=False)
    assert "cluster_legend" not in dot
    assert '"Placeholder" -> "layer/ConcatV2" [label="[3]"];' in dot
    assert dot.count('"Placeholder" -> "layer/ConcatV2"') == 2
    if "DynamicPartition" in {d.name for d in gf.registered_ops()}:
        parts = s.dynamic_partition(x, [0, 1, 0], num_partitions=2)
        s.identity(parts[1])
        dot = g.to_dot()
        assert '0: int32 [?]\\n1: int32 [?]' in dot
        assert '"DynamicPartition" -> "Identity" [label=":1 [?]"];' in dot


def test_dot_name_scopes_are_clusters():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[3])
    outer = s.with_sub_scope("outer")
    y = outer.with_sub_scope("inner").add(x, np.float32(1.0))  # outer/inner/Add and Add/y
    outer.identity(y)                                           # outer/Identity
    lines = [line.strip() for line in g.to_dot(legend=False).splitlines()]
    style = 'style="rounded,dashed"; color=gray60; fontcolor=gray30;'
    starts = {line.split(";")[0]: i for i, line in enumerate(lines) if line.endswith(style)}
    assert set(starts) == {'label="outer"', 'label="inner"'}
    o, i = starts['label="outer"'], starts['label="inner"']
    assert lines[o - 1].startswith("subgraph cluster_") and o < i

    def end(start):  # the "}" that closes the cluster opened on line start - 1
        depth = 0
        for k in range(start - 1, len(lines)):
            depth += lines[k].endswith("{") - (lines[k] == "}")
            if depth == 0:
                return k
    at = {line.split(" [")[0]: k for k, line in enumerate(lines) if " [label=" in line
          and " -> " not in line}
    assert i < at['"outer/inner/Add"'] < end(i) and i < at['"outer/inner/Add/y"'] < end(i)
    assert o < at['"outer/Identity"'] < end(o) and not i < at['"outer/Identity"'] < end(i)
    assert not o < at['"Placeholder"'] < end(o)
    assert '"outer/inner/Add" [label="Add\\nfloat32 [3]", fillcolor="#ffffff"];' in lines
    assert '"outer/Identity" [label="Identity\\nfloat32 [3]", fillcolor="#ffffff"];' in lines
    assert any(line.startswith('"outer/inner/Add/y" [label="Add/y\\n(Const)\\nfloat32 []')
               for line in lines)
    assert '"outer/inner/Add" -> "outer/Identity" [label="[3]"];' in lines


def test_dot_escapes_quotes_in_string_constants():
    g = gf.Graph()
    gf.Scope(g).constant([b'say "hi"\\'])
    dot = g.to_dot()
    assert '\\"hi\\"' in dot and '"hi"' not in dot.replace('\\"hi\\"', "")


@needs_dot
def test_render_svg(tmp_path):
    path = tmp_path / "g.svg"
    visualize.render(_known_graph().to_dot(), path)
    assert path.read_text().lstrip().startswith(("<?xml", "<svg"))


def test_readme_picture_shows_the_partition_stitch_example(tmp_path):
    """docs/partition_stitch.svg (in README) draws the graph the example builds now."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    saved = tmp_path / "ps.json"
    done = subprocess.run([sys.executable, "examples/partition_stitch.py", "--save", str(saved)],
                          capture_output=True, text=True, cwd=root, timeout=120)
    assert done.returncode == 0, done.stderr
    svg = (root / "docs" / "partition_stitch.svg").read_text()
    titles = set(re.findall(r"<title>([^<]*)</title>", svg))
    graph = gf.load_graph(saved)
    assert {op.name for op in graph.operations()} <= titles
    for op in graph.operations():
        for src in op.inputs:
            assert f"{src.op.name}&#45;&gt;{op.name}" in titles
    assert "docs/partition_stitch.svg" in (root / "README.md").read_text()


def test_render_rejects_unknown_formats(tmp_path):
    with pytest.raises(gf.errors.InvalidArgumentError, match="Cannot render to 'bmp'"):
        visualize.render("digraph {}", tmp_path / "g.bmp")


# -- CLI ----------------------------------------------------------------------------------
# Run from outside the repository: from its root, `python -m graphflow` would
# import the source folder graphflow/ (which has no ops/) instead of the install.
OUTSIDE = tempfile.gettempdir()


def graphflow_process(*args: str) -> subprocess.CompletedProcess:
    """``python -m graphflow ARGS`` in a new interpreter: the installed entry point."""
    return subprocess.run([sys.executable, "-m", "graphflow", *map(str, args)],
                          capture_output=True, text=True, cwd=OUTSIDE, timeout=60)


def graphflow(*args: str) -> subprocess.CompletedProcess:
    """What ``python -m graphflow ARGS`` prints and exits with, run in this process (a
    new interpreter per call costs seconds; the entry point itself is tested above)."""
    from graphflow.tools.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse: usage errors, --help, --version
            code = e.code if isinstance(e.code, int) else 1
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "graph.json"
    _known_graph().save(path)
    return path


def test_cli_version_and_help():
    done = graphflow_process("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"graphflow {gf.__version__}"
    done = graphflow("--help")
    assert done.returncode == 0
    for verb in ("show", "inspect", "run", "ops"):
        assert verb in done.stdout


def test_cli_bad_usage_exits_2():
    assert graphflow_process().returncode == 2
    done = graphflow("frobnicate")
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_cli_inspect(saved):
    done = graphflow("inspect", saved)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:-1]}
    assert set(rows) == {"Placeholder", "Const", "total", "NoOp"}
    assert "Add" in rows["total"] and "float32 [?,2]" in rows["total"]
    assert "Placeholder:0, Const:0" in rows["total"]
    assert "^total" in rows["NoOp"] and "/device:GPU:0" in rows["Placeholder"]
    assert done.stdout.splitlines()[-1] == "4 nodes"


def test_cli_show_dot(saved, tmp_path):
    done = graphflow("show", saved)
    assert done.returncode == 0 and done.stdout == gf.load_graph(saved).to_dot()
    out = tmp_path / "g.dot"
    assert graphflow("show", saved, "-o", out).returncode == 0
    assert out.read_text().startswith("digraph graphflow {")


@needs_dot
@pytest.mark.parametrize("fmt, magic", [("svg", b"<"), ("png", b"\x89PNG")])
def test_cli_show_renders(saved, tmp_path, fmt, magic):
    out = tmp_path / f"g.{fmt}"
    done = graphflow("show", saved, "-o", out)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes().lstrip().startswith(magic)


def test_cli_show_without_dot_says_how_to_install(saved, tmp_path):
    import os

    env = dict(os.environ, PATH=str(tmp_path))  # no `dot` on this PATH
    done = subprocess.run([sys.executable, "-m", "graphflow", "show", str(saved), "-o",
                           str(tmp_path / "g.svg")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert "install Graphviz" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_cli_show_unknown_extension_is_usage_error(saved, tmp_path):
    done = graphflow("show", saved, "-o", tmp_path / "g.bmp")
    assert done.returncode == 2 and "cannot tell the format" in done.stderr


def test_cli_run_prints_and_saves(saved, tmp_path):
    feed = tmp_path / "x.npy"
    np.save(feed, np.array([[10, 20], [30, 40]], np.float32))
    trace = tmp_path / "trace.json"
    done = graphflow("run", saved, "--fetch", "total", "--fetch", "Const:0",
                     "--feed", f"Placeholder:0={feed}", "--save", tmp_path / "out",
                     "--trace", trace)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "total:0  float32 [2, 2]"
    assert "[[11. 22.]" in lines[1]
    assert "Const:0  float32 [2]" in lines
    saved_value = np.load(tmp_path / "out" / "total_0.npy")
    np.testing.assert_array_equal(saved_value, [[11, 22], [31, 42]])
    assert "traceEvents" in json.loads(trace.read_text())


def test_cli_run_errors(saved, tmp_path):
    done = graphflow("run", saved, "--fetch", "total")  # placeholder not fed
    assert done.returncode == 1
    assert done.stderr.startswith("graphflow run: error: You must feed a value")
    done = graphflow("run", saved, "--fetch", "nope:0")
    assert done.returncode == 1 and "nope" in done.stderr
    assert graphflow("run", saved, "--fetch", "total", "--feed", "oops").returncode == 2
    assert graphflow("run", saved).returncode == 2  # --fetch is required
    missing = graphflow("run", saved, "--fetch", "total", "--feed",
                        f"Placeholder:0={tmp_path / 'none.npy'}")
    assert missing.returncode == 1 and "cannot read --feed" in missing.stderr


def test_cli_rejects_malformed_and_missing_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "graphflow.GraphDef", "version": 99, "nodes": []}))
    done = graphflow("inspect", bad)
    assert done.returncode == 1 and "newer" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    done = graphflow("inspect", tmp_path / "missing.json")
    assert done.returncode == 1 and "No such file" in done.stderr


def _package_ops():
    """The ops graphflow itself registers (other tests register their own in this process)."""
    from graphflow.tools.cli import _family

    return [d for d in gf.registered_ops() if _family(d) != "other"]


def test_cli_ops_text_markdown_and_one_op():
    done = graphflow("ops")
    assert done.returncode == 0
    for d in _package_ops():
        assert d.signature in done.stdout
    assert "kernels: cpu" in done.stdout
    md = graphflow("ops", "--markdown")
    assert md.returncode == 0 and md.stdout.startswith("# graphflow op reference")
    for d in _package_ops():
        assert f"### {d.name}\n" in md.stdout
    one = graphflow("ops", "concat")  # an alias finds ConcatV2
    assert one.returncode == 0 and one.stdout.startswith("ConcatV2(values: N * T")
    assert "shape:" in one.stdout
    unknown = graphflow("ops", "Frobnicate")
    assert unknown.returncode == 1 and "no op named 'Frobnicate'" in unknown.stderr


def test_docs_ops_md_is_up_to_date():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "ops.md"
    if not path.exists():
        pytest.skip("docs/ops.md not generated yet")
    text = path.read_text()
    missing = [d.name for d in _package_ops() if f"### {d.name}\n" not in text]
    assert not missing, f"regenerate docs/ops.md (graphflow ops --markdown); missing {missing}"
