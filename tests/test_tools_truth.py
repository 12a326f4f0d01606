"""Tools that tell the truth (issue 38): the examples say "folded" when constant folding
replaced nodes (and nothing about partitions where there are none); `graphflow show
--collapse/--depth` draw name scopes as one box each; an empty trace is a warning;
long work logs its progress; `graphflow cache` says where the kernel cache is and
empties it; the package ships py.typed and a LICENSE matching pyproject's."""
from __future__ import annotations

import logging
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import graphflow as gf
from graphflow.tools.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _example(name: str, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, f"examples/{name}", *args], capture_output=True,
                          text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done


# -- the examples' optimizer lines ------------------------------------------------------
def test_seed_example_says_folded_not_partitions():
    out = _example("partition_stitch.py").stdout
    optimized = out.split("-- optimized")[1]
    assert "optimizer: folded " in optimized and "increment_where_set/DynamicStitch" in optimized
    assert "partitions it replaces" not in out and "runs as one Const" not in out
    assert "optimizer:" not in out.split("-- optimized")[0]  # as written: nothing replaced


@pytest.mark.parametrize("name", ["scatter_basics.py", "stitch_basics.py"])
def test_examples_without_partitions_say_nothing_about_partitions(name):
    out = _example(name).stdout
    assert "partition" not in out.lower() and "optimizer: folded" in out


def test_optimizer_lines_name_each_kind_of_rewrite():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from _show import optimizer_lines
        from partition_stitch import build
    finally:
        sys.path.remove(str(ROOT / "examples"))
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, [6], name="x")
    _, result = build(s, x)
    with gf.Session(g) as sess:
        lines = optimizer_lines(sess._plan([result], [x]).substitutions)
    assert any("partition -> element-wise -> stitch as one select" in line for line in lines)
    assert lines[-1].startswith("SessionConfig(optimize=False)")
    assert optimizer_lines({}) == []


# -- show --collapse / --depth -----------------------------------------------------------
@pytest.fixture
def trained(tmp_path) -> pathlib.Path:
    """A model with its gradient graph: scopes layer/, gradients/, GradientDescent/."""
    g = gf.Graph()
    s = gf.Scope(g)
    layer = s.with_sub_scope("layer")
    x = s.placeholder(gf.float32, [None, 4], name="x")
    w = layer.variable(np.ones((4, 3), np.float32), name="w")
    h = layer.relu(layer.matmul(x, w))
    loss = s.reduce_sum(s.mul(h, h), name="loss")
    gf.train.GradientDescentOptimizer(0.1).minimize(loss)
    g.save(tmp_path / "train.json")
    return tmp_path / "train.json"


def _nodes(dot: str) -> list[str]:
    return re.findall(r'^\s*"([^"]+)" \[label=', dot, re.M)


def test_collapse_draws_a_scope_as_one_box(trained, capsys):
    assert main(["show", str(trained), "--no-legend"]) == 0
    full = capsys.readouterr().out
    assert main(["show", str(trained), "--no-legend", "--collapse", "gradients"]) == 0
    dot = capsys.readouterr().out
    nodes = _nodes(dot)
    assert "gradients:" in nodes and not any(n.startswith("gradients/") for n in nodes)
    count = sum(n.startswith("gradients/") for n in _nodes(full))
    assert f'label="gradients\\n({count} ops)", shape=box3d' in dot
    assert len(dot) < len(full) / 2
    edges = re.findall(r'^\s*"([^"]+)" -> "([^"]+)" \[label', dot, re.M)
    boxed = [e for e in edges if "gradients:" in e]
    assert ("loss", "gradients:") in boxed and len(boxed) == len(set(boxed))  # merged
    assert not any(a == b for a, b in edges)


def test_depth_closes_scopes_below_n_levels(trained, capsys):
    assert main(["show", str(trained), "--no-legend", "--depth", "0"]) == 0
    nodes = _nodes(capsys.readouterr().out)
    assert {"layer:", "gradients:", "GradientDescent:"} <= set(nodes)
    assert not any(n.startswith(("layer/", "gradients/", "GradientDescent/")) for n in nodes)
    assert "GradientDescent" in nodes  # the op stays beside the scope of the same name
    assert main(["show", str(trained), "--no-legend", "--depth", "1"]) == 0
    nodes = _nodes(capsys.readouterr().out)
    assert any(n.startswith("gradients/") and n.endswith(":") for n in nodes)


def test_collapse_of_an_unknown_scope_is_an_error(trained, capsys):
    assert main(["show", str(trained), "--collapse", "nope"]) == 1
    err = capsys.readouterr().err
    assert "no such scope" in err and "gradients" in err
    with pytest.raises(SystemExit):
        main(["show", str(trained), "--depth", "-1"])


def test_to_dot_collapse_keeps_fused_regions_outside_the_box(trained):
    g = gf.load_graph(trained)
    dot = g.to_dot(fused=True, collapse=["gradients"])
    assert '"gradients:"' in dot and '"gradients/' not in dot
    everywhere = g.to_dot(fused=True).count("fused: ")
    assert 0 < dot.count("fused: ") < everywhere  # the regions outside the box still drawn


# -- an empty trace ----------------------------------------------------------------------
def test_an_empty_trace_is_a_warning(tmp_path, capsys):
    s = gf.Scope(gf.Graph())
    s.add(s.constant([1.0, 2.0]), 1.0, name="y")
    s.graph.save(tmp_path / "folded.json")
    trace = tmp_path / "t.json"
    assert main(["run", str(tmp_path / "folded.json"), "--fetch", "y", "--trace", str(trace)]) == 0
    err = capsys.readouterr().err
    assert "warning: the trace" in err and "is empty" in err and "--no-optimize" in err
    assert trace.exists()
    trace.unlink()
    assert main(["run", str(tmp_path / "folded.json"), "--fetch", "y", "--trace", str(trace),
                 "--no-optimize"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert '"y"' in trace.read_text()


# -- progress through logging ---------------------------------------------------------------
def test_sharded_example_prints_progress_and_logs_its_phases():
    done = _example("sharded_embeddings.py", "--local", "--rows", "200", "--steps", "20",
                    "--batch", "8")
    steps = [line for line in done.stdout.splitlines() if ": step " in line]
    assert len(steps) == 20 and steps[0].startswith("sharded: step  2/20")
    assert "first step (compiling its plan) took" in done.stderr
    quiet = _example("sharded_embeddings.py", "--local", "--rows", "200", "--steps", "4",
                     "--batch", "8", "--quiet")
    assert "first step" not in quiet.stderr


def test_long_compiles_are_logged_at_info(monkeypatch, caplog):
    from graphflow.ops import codegen, jit

    monkeypatch.setattr(jit, "LONG_COMPILE_SECONDS", 0.0)
    source = ("from graphflow.ops.jit import kernel\n\n@kernel(cache=False)\n"
              f"def twice_{id(caplog)}(x):\n    return x * 2 + {len(caplog.records)}\n")
    fn, _ = codegen.load_numba(source, f"twice_{id(caplog)}")
    with caplog.at_level(logging.INFO, logger="graphflow.jit"):
        assert fn(np.float64(2.0)) >= 4.0
    compiled = [r for r in caplog.records if r.name == "graphflow.jit" and "compiled" in
                r.getMessage()]
    assert compiled and compiled[0].levelno == logging.INFO
    assert f"twice_{id(caplog)}(float64)" in compiled[0].getMessage()


# -- graphflow cache ---------------------------------------------------------------------
def _cache_cli(env_dir: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, GRAPHFLOW_CACHE_DIR=str(env_dir))
    return subprocess.run([sys.executable, "-m", "graphflow", "cache", *args], env=env,
                          capture_output=True, text=True, timeout=120,
                          cwd=tempfile.gettempdir())  # not the checkout's graphflow/


def test_cache_verb_says_where_and_how_big_and_clears(tmp_path):
    import numba

    root = tmp_path / "cache"
    folder = root / f"numba-{numba.__version__}"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "k.nbc").write_bytes(b"x" * 2_000_000)
    (root / "numba-0.1.0").mkdir()
    (root / "numba-0.1.0" / "old.nbi").write_bytes(b"y" * 10)
    (root / "keep.txt").write_text("not ours")
    done = _cache_cli(root)
    assert done.returncode == 0, done.stderr
    assert f"kernel cache: {folder}" in done.stdout
    assert "on; 1 files, 2.0 MB" in done.stdout and "GRAPHFLOW_JIT_CACHE=0" in done.stdout
    assert "numba-0.1.0" in done.stdout
    done = _cache_cli(root, "--clear")
    assert done.returncode == 0, done.stderr
    assert "2 files" in done.stdout
    assert sorted(p.name for p in root.iterdir()) == ["keep.txt"]  # only numba's folders


# -- packaging -----------------------------------------------------------------------------
def test_py_typed_license_and_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    assert (ROOT / "graphflow" / "py.typed").exists()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == {"text": "Apache-2.0"}
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    shipped = project["tool"]["setuptools"]["package-data"]["graphflow"]
    assert "py.typed" in shipped and "*.pyi" in shipped


def test_every_package_folder_is_installed_and_the_script_resolves():
    """pyproject lists every package (graphflow/tools/ and graphflow/interop/ included),
    so ``pip install .`` ships them all, and the ``graphflow`` script names a real main."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    import importlib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dirs = project["tool"]["setuptools"]["package-dir"]
    folders = {"graphflow": ROOT / "graphflow"} | {n: ROOT / d for n, d in dirs.items()}
    found = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            if name == "graphflow" and parts and parts[0] in {"ops", "runtime"}:
                continue
            found.add(".".join((name, *parts)))
    assert {"graphflow.tools", "graphflow.interop"} <= found
    assert found == set(project["tool"]["setuptools"]["packages"])
    module, _, function = project["project"]["scripts"]["graphflow"].partition(":")
    assert getattr(importlib.import_module(module), function) is main
