"""What graphflow writes to disk: ``graph.save`` honours the umask, replaces its target
atomically and names the target path in its errors; the CLI's ``--save`` gives each fetch
its own file and never overwrites; ``--trace`` and ``-o`` onto a directory fail in one
line before any work; a closed pipe stops the CLI quietly.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.tools import cli


def _small_graph() -> gf.Graph:
    g = gf.Graph()
    gf.Scope(g).constant(np.arange(3, dtype=np.int32))
    return g


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002, 0o000])
def test_save_honours_the_umask(umask, tmp_path):
    old = os.umask(umask)
    try:
        _small_graph().save(tmp_path / "g.json")
        (tmp_path / "reference").write_text("")  # what open() gives, the reference
    finally:
        os.umask(old)
    mode = os.stat(tmp_path / "g.json").st_mode & 0o777
    assert mode == os.stat(tmp_path / "reference").st_mode & 0o777 == 0o666 & ~umask


def test_save_replaces_atomically_and_keeps_a_symlink(tmp_path):
    real = tmp_path / "real.json"
    link = tmp_path / "link.json"
    real.write_text("old")
    link.symlink_to(real)
    _small_graph().save(link)
    assert link.is_symlink() and gf.load_graph(real).as_graph_def()["nodes"] \
        == _small_graph().as_graph_def()["nodes"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


@pytest.mark.parametrize("where, error", [
    ("missing/g.json", FileNotFoundError), ("folder", IsADirectoryError)])
def test_save_errors_name_the_target_path(where, error, tmp_path):
    (tmp_path / "folder").mkdir()
    path = tmp_path / where
    with pytest.raises(error) as info:
        _small_graph().save(path)
    assert info.value.filename == str(path) and str(path) in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]  # no temp file left


def _two_named_alike(tmp_path) -> str:
    """A graph with ops 'a/b' and 'a_b', which a plain replace('/', '_') confuses."""
    g = gf.Graph()
    s = gf.Scope(g)
    s.with_sub_scope("a").with_name("b").constant(np.array([1, 2], np.int32))
    s.with_name("a_b").constant(np.array([3], np.int32))
    s.with_name("fails").reshape(s.placeholder(gf.int32, shape=[None]), [2])
    path = str(tmp_path / "g.json")
    g.save(path)
    return path


def test_cli_save_gives_each_fetch_its_own_file(tmp_path, capsys):
    graph = _two_named_alike(tmp_path)
    out = tmp_path / "out"
    assert cli.main(["run", graph, "--fetch", "a/b", "--fetch", "a_b:0", "--fetch", "a_b",
                     "--save", str(out)]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted({cli.save_file_name("a/b:0"), cli.save_file_name("a_b:0")})
    np.testing.assert_array_equal(np.load(out / cli.save_file_name("a/b:0")), [1, 2])
    np.testing.assert_array_equal(np.load(out / cli.save_file_name("a_b:0")), [3])
    assert capsys.readouterr().err.count("wrote") == 2  # a fetch named twice, written once


@settings(max_examples=100, deadline=None)
@given(names=st.lists(st.from_regex(r"[A-Za-z0-9.][A-Za-z0-9_.\-/>]{0,6}", fullmatch=True),
                      min_size=2, max_size=6, unique=True),
       index=st.integers(0, 12))
def test_save_file_names_are_one_per_output(names, index):
    outputs = {f"{n}:{i}" for n in names for i in (0, index)}
    files = {cli.save_file_name(o) for o in outputs}
    assert len(files) == len(outputs)
    assert all("/" not in f and f not in (".", "..") and f.endswith(".npy") for f in files)


def test_cli_save_refuses_to_overwrite_before_running(tmp_path, capsys):
    graph = _two_named_alike(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    existing = out / cli.save_file_name("a_b:0")
    existing.write_bytes(b"precious")
    assert cli.main(["run", graph, "--fetch", "a/b", "--fetch", "a_b", "--save", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing ran, nothing printed
    assert captured.err.strip().count("\n") == 0 and "not overwriting" in captured.err
    assert existing.read_bytes() == b"precious"
    assert sorted(p.name for p in out.iterdir()) == [existing.name]


def test_cli_save_onto_a_file_is_an_error(tmp_path, capsys):
    graph = _two_named_alike(tmp_path)
    (tmp_path / "plain").write_text("")
    assert cli.main(["run", graph, "--fetch", "a_b", "--save", str(tmp_path / "plain")]) == 1
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["run", "--fetch", "fails", "--trace"], ["show", "-o"]])
@pytest.mark.parametrize("where", ["folder", "missing/trace.json"])
def test_cli_output_onto_a_directory_fails_before_any_work(option, where, tmp_path, capsys):
    """The fetch 'fails' would raise (its placeholder is not fed): the path error comes
    first, in one line."""
    graph = _two_named_alike(tmp_path)
    (tmp_path / "folder").mkdir()
    verb, *flags = option
    argv = [verb, graph, *flags, str(tmp_path / where)]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert "\n" not in err and err.startswith(f"graphflow {verb}: error: {flags[-1]}: "), err
    assert str(tmp_path / where) in err


def test_cli_trace_to_a_file_still_works(tmp_path, capsys):
    graph = _two_named_alike(tmp_path)
    trace = tmp_path / "trace.json"
    assert cli.main(["run", graph, "--fetch", "a_b", "--trace", str(trace)]) == 0
    assert "traceEvents" in json.loads(trace.read_text())


@pytest.mark.parametrize("value", ["-1", str(2 ** 63), str(10 ** 22), "1.5", "many"])
def test_cli_threshold_out_of_range_is_a_usage_error(value, tmp_path, capsys):
    """Past int64 numpy's printing crashed with a bare TypeError; negative was taken."""
    graph = _two_named_alike(tmp_path)
    with pytest.raises(SystemExit) as info:
        cli.main(["run", graph, "--fetch", "a_b", "--threshold", value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--threshold" in err and value in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["0", str(2 ** 63 - 1)])
def test_cli_threshold_bounds_are_accepted(value, tmp_path, capsys):
    graph = _two_named_alike(tmp_path)
    assert cli.main(["run", graph, "--fetch", "a/b", "--threshold", value]) == 0
    assert "[1 2]" in capsys.readouterr().out or value == "0"


def test_cli_stops_quietly_on_a_closed_pipe(tmp_path):
    """`graphflow run ... | head`: BrokenPipeError is an OSError, and the OSError clause
    caught it first, printing 'error: [Errno 32] Broken pipe'."""
    g = gf.Graph()
    gf.Scope(g).with_name("big").fill([100_000], 1.5)
    graph = str(tmp_path / "big.json")
    g.save(graph)
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphflow", "run", graph, "--fetch", "big",
         "--threshold", "1000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=tmp_path)  # outside the repository: its graphflow/ folder is not the package
    assert proc.stdout.read(10) == b"big:0  flo"
    proc.stdout.close()  # more than a pipe buffer is still to come
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 1
    assert "Broken pipe" not in err and "Traceback" not in err, err


