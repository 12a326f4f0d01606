"""Hardening of files, the CLI and build-time folding (issue #15, items 11, 12, 14).

- A malformed graph file is rejected whole, naming the node and the field: values
  past int64, list lengths past int32, dims whose product passes int64, non-ASCII
  digits, non-UTF-8 bytes, JSON nested too deeply. Attr limits live in the attr
  declaration, so a value built in Python meets the same check as one from a file.
- ``graph.save`` honours the umask and names the target path in its errors; the
  CLI's ``--save`` gives each fetch its own file and never overwrites; ``--trace``
  and ``-o`` onto a directory fail in one line before any work.
- Shape inference never materializes a large constant to learn a shape.
"""
from __future__ import annotations

import copy
import json
import math
import os
import re
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow import cli, inference, registry
from graphflow.errors import InvalidArgumentError
from graphflow.serialization import as_graph_def

INT64_MIN, INT64_MAX, INT32_MAX = -2 ** 63, 2 ** 63 - 1, 2 ** 31 - 1


# -- item 11: malformed files ---------------------------------------------------------------
def _graph_def() -> dict:
    """Const "x", Const "p", DynamicPartition "part", Placeholder "ph", Squeeze "sq"."""
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.with_name("x").constant(np.array([1, 2, 3], np.int32))
    p = s.with_name("p").constant(np.array([0, 1, 0], np.int32))
    s.with_name("part").dynamic_partition(x, p, num_partitions=2)
    ph = s.with_name("ph").placeholder(gf.float32, shape=[None, 1])
    s.with_name("sq").squeeze(ph, [1])
    return as_graph_def(g)


def _node(d: dict, name: str) -> dict:
    return next(n for n in d["nodes"] if n["name"] == name)


def _set(name: str, *path_and_value):
    """An edit that sets ``node[path...] = value`` on the node called ``name``."""
    *path, value = path_and_value

    def edit(d):
        target = _node(d, name)
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


# case: (edit, field named, node named, words in the message)
MALFORMED = {
    "dims 2**62 x 4": (_set("x", "attrs", "value", "tensor", "shape", [2 ** 62, 4]),
                       "nodes[0].attrs.value", "x", "too large"),
    "dim 2**63": (_set("x", "attrs", "value", "tensor", "shape", [2 ** 63]),
                  "nodes[0].attrs.value", "x", "too large"),
    "dim 2**64": (_set("x", "attrs", "value", "tensor", "shape", [2 ** 64, 1]),
                  "nodes[0].attrs.value", "x", "too large"),
    "dims product past int64": (_set("x", "attrs", "value", "tensor", "shape",
                                     [2 ** 32, 2 ** 32]), "nodes[0].attrs.value", "x", "too large"),
    "huge dims and a 0": (_set("x", "attrs", "value", "tensor", "shape", [2 ** 40, 2 ** 40, 0]),
                          "nodes[0].attrs.value", "x", "too large"),
    "a 0 and huge dims": (_set("x", "attrs", "value", "tensor", "shape", [0, 2 ** 62, 4]),
                          "nodes[0].attrs.value", "x", "too large"),
    "rank 65": (_set("x", "attrs", "value", "tensor", "shape", [1] * 65),
                "nodes[0].attrs.value", "x", "rank 65"),
    "input index '²'": (_set("part", "inputs", 0, "x:²"), "nodes[2].inputs[0]", "part",
                        "ASCII digits"),
    "input index '٠' (not 0)": (_set("part", "inputs", 0, "x:٠"), "nodes[2].inputs[0]",
                                "part", "ASCII digits"),
    "input index of 5000 digits": (_set("part", "inputs", 0, "x:" + "9" * 5000),
                                   "nodes[2].inputs[0]", "part", "not of the form"),
    "input index -1": (_set("part", "inputs", 0, "x:-1"), "nodes[2].inputs[0]", "part",
                       "not of the form"),
    "num_partitions 10**30": (_set("part", "attrs", "num_partitions", {"int": 10 ** 30}),
                              "nodes[2].attrs.num_partitions", "part", "out of range"),
    "num_partitions 2**63": (_set("part", "attrs", "num_partitions", {"int": 2 ** 63}),
                             "nodes[2].attrs.num_partitions", "part", "out of range"),
    "num_partitions 2**31": (_set("part", "attrs", "num_partitions", {"int": 2 ** 31}),
                             "nodes[2].attrs.num_partitions", "part", "maximum 2147483647"),
    "num_partitions 0": (_set("part", "attrs", "num_partitions", {"int": 0}),
                         "nodes[2].attrs.num_partitions", "part", "minimum 1"),
    "shape attr dim 2**63": (_set("ph", "attrs", "shape", {"shape": [2 ** 63]}),
                             "nodes[3].attrs.shape", "ph", "too large"),
    "shape attr product past int64": (_set("ph", "attrs", "shape", {"shape": [2 ** 62, 4, None]}),
                                      "nodes[3].attrs.shape", "ph", "too large"),
    "list(int) past int64": (_set("sq", "attrs", "squeeze_dims", {"list(int)": [2 ** 70]}),
                             "nodes[4].attrs.squeeze_dims", "sq", "out of range"),
    "deeply nested attr": (_set("x", "attrs", "value", {"tensor": _nested(50_000)}),
                           "nodes[0].attrs.value", "x", "expected a tensor"),
    "huge list in a field": (_set("sq", "inputs", list(range(100_000))), "nodes[4].inputs", "sq",
                             "expected a list of strings"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_graph_def_is_rejected_whole_naming_node_and_field(case):
    edit, field, node, words = MALFORMED[case]
    d = _graph_def()
    edit(d)
    target = gf.Graph()
    gf.Scope(target).constant(1)
    before = target.as_graph_def()
    with pytest.raises(InvalidArgumentError) as info:
        gf.import_graph_def(d, target)
    message = str(info.value)
    assert f"field '{field}'" in message and words in message, message
    assert info.value.node_name == node
    assert len(message) < 1000, "errors show bounded excerpts of what the file holds"
    assert target.as_graph_def() == before


@pytest.mark.parametrize("case", ["dims 2**62 x 4", "input index '٠' (not 0)",
                                  "num_partitions 2**31", "shape attr dim 2**63"])
def test_malformed_file_is_rejected_by_load_graph(case, tmp_path):
    edit, field, node, words = MALFORMED[case]
    d = _graph_def()
    edit(d)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(d), encoding="utf-8")
    with pytest.raises(InvalidArgumentError, match=f"field '{field.replace('[', '.').replace(']', '.')}'"):
        gf.load_graph(path)


UNREADABLE = {
    "not UTF-8": (b'{"format": "graphflow.GraphDef", "version": 1, "nodes": ["\xff\xfe"]}',
                  "byte 58 is not UTF-8"),
    "Latin-1 text": ('{"format": "graphflow.GraphDef", "producer": "caf\u00e9", "version": 1, '
                     '"nodes": []}'.encode("latin-1"), "is not UTF-8"),
    "nested 100000 deep": (b"[" * 100_000 + b"]" * 100_000, "nest too deeply"),
    "nested object": (b'{"a": ' * 50_000 + b"1" + b"}" * 50_000, "nest too deeply"),
    "int of 5000 digits": (b'{"format": "graphflow.GraphDef", "version": ' + b"9" * 5000 + b"}",
                           "not GraphDef JSON"),
    "truncated": (b'{"format": ', "not GraphDef JSON"),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_unreadable_file_is_an_error_naming_the_file(case, tmp_path):
    data, words = UNREADABLE[case]
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    with pytest.raises(InvalidArgumentError) as info:
        gf.load_graph(path)
    assert str(path) in str(info.value) and words in str(info.value)


def test_a_valid_file_still_loads(tmp_path):
    g = gf.Graph()
    s = gf.Scope(g)
    s.constant(np.array(["é".encode(), b"\xff"], dtype=object))
    g.save(tmp_path / "g.json")
    loaded = gf.load_graph(tmp_path / "g.json")
    assert loaded.as_graph_def()["nodes"] == g.as_graph_def()["nodes"]


@pytest.mark.parametrize("value, words", [
    (2 ** 31, "greater than maximum 2147483647"), (10 ** 30, "out of range for an int (int64)"),
    (2 ** 63, "out of range"), (0, "less than minimum 1"), (-1, "less than minimum 1")])
def test_python_and_file_meet_the_same_attr_check(value, words):
    s = gf.Scope(gf.Graph())
    with pytest.raises(InvalidArgumentError, match=re.escape(words)) as built:
        s.dynamic_partition([1, 2], [0, 1], num_partitions=value)
    d = _graph_def()
    _set("part", "attrs", "num_partitions", {"int": value})(d)
    with pytest.raises(InvalidArgumentError, match=re.escape(words)) as read:
        gf.import_graph_def(d)
    rule = str(built.value).split(" [node")[0]
    assert rule in str(read.value)


def test_every_list_length_attr_is_int32():
    """N, num_partitions...: each int attr that counts list inputs or outputs."""
    for d in gf.registered_ops():
        for spec in d.inputs + d.outputs:
            if spec.is_list:
                assert d.attrs[spec.number_attr].maximum == INT32_MAX, (d.name, spec)


@settings(max_examples=200, deadline=None)
@given(value=st.integers(-2 ** 70, 2 ** 70) | st.sampled_from(
    [INT64_MIN, INT64_MIN - 1, INT64_MAX, INT64_MAX + 1, INT32_MAX, INT32_MAX + 1]),
    minimum=st.none() | st.integers(-5, 5), maximum=st.none() | st.sampled_from([5, INT32_MAX]))
def test_int_attr_accepts_exactly_int64_within_its_bounds(value, minimum, maximum):
    attr = registry.IntAttr(minimum=minimum, maximum=maximum)
    fits = INT64_MIN <= value <= INT64_MAX and (minimum is None or value >= minimum) \
        and (maximum is None or value <= maximum)
    if fits:
        assert attr.coerce("n", np.int64(value) if abs(value) < 2 ** 62 else value, "Op") == value
    else:
        with pytest.raises(InvalidArgumentError, match="Attr 'n' of 'Op' Op"):
            attr.coerce("n", value, "Op")


@pytest.mark.parametrize("kind, value", [
    ("list(int)", [1, 2 ** 63]), ("list(int)", [1.5]), ("list(int)", [True]), ("list(int)", 3),
    ("list(int)", [math.nan]), ("float", 10 ** 400), ("string", b"\xff"),
    ("shape", [2 ** 63]), ("shape", [2 ** 32, 2 ** 32]), ("shape", [2 ** 40, 2 ** 40, None])])
def test_attr_kinds_reject_what_does_not_fit(kind, value):
    attr = registry.Attr(kind)
    with pytest.raises(InvalidArgumentError, match="Attr 'a' of 'Op' Op"):
        attr.coerce("a", value, "Op")


# -- item 12: save and the CLI --------------------------------------------------------------
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


# -- item 14: cheap build-time folding --------------------------------------------------------
def _range_max(start: int, limit: int, delta: int) -> int | None:
    """The largest element of range(start, limit, delta), None if empty: the reference."""
    values = range(start, limit, delta)
    return max(values[0], values[-1]) if len(values) else None


def _peak_bytes(build) -> tuple:
    tracemalloc.start()
    try:
        result = build()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("start, limit, delta", [
    (0, 200_000_000, 1), (5, 100_000_005, 1), (199_999_999, -1, -1), (0, 200_000_000, 7),
    (3, 3, 1), (-10, 2 ** 31 - 1, 3)])
def test_stitch_of_a_large_range_keeps_its_static_shape_without_computing_it(start, limit, delta):
    s = gf.Scope(gf.Graph())
    n = len(range(start, limit, delta))

    def build():
        indices = s.range(start, limit, delta)
        return indices, s.dynamic_stitch([indices], [s.fill([n], 1.0)])
    (indices, merged), peak = _peak_bytes(build)
    top = _range_max(start, limit, delta)
    assert merged.shape.as_list() == [0 if top is None else top + 1]
    assert indices.shape.as_list() == [n]
    assert peak < 8 << 20, f"shape inference allocated {peak} bytes"


@pytest.mark.parametrize("size", [2 ** 16 + 1, 200_000_000])
def test_large_range_and_fill_are_not_evaluated_at_build_time(size):
    s = gf.Scope(gf.Graph())

    def build():
        outs = [s.range(0, size, 1), s.fill([size], 7), s.fill([size, 3], np.int8(1))]
        return [inference.constant_value(o) for o in outs]
    values, peak = _peak_bytes(build)
    assert values == [None, None, None]
    assert peak < 8 << 20


def test_small_constants_are_still_folded_and_kept():
    s = gf.Scope(gf.Graph())
    r = s.range(0, 10, 3)
    first = inference.constant_value(r)
    np.testing.assert_array_equal(first, [0, 3, 6, 9])
    assert inference.constant_value(r) is first  # computed once
    merged = s.dynamic_stitch([r, [11]], [s.fill([4], 1), [2]])
    assert merged.shape.as_list() == [12]


@pytest.mark.parametrize("indices, expected", [
    (lambda s: [s.fill([100_000], 41)], 42),
    (lambda s: [s.fill([0], 41)], 0),
    (lambda s: [s.range(0, 100_000, 1), [150_000]], 150_001),
    (lambda s: [s.range(0, 100_000, 1), s.placeholder(gf.int32, [None])], None),
    (lambda s: [s.range(0, s.placeholder(gf.int32, []), 1)], None),
])
def test_stitch_first_dim_from_bounds(indices, expected):
    s = gf.Scope(gf.Graph())
    idx = indices(s)
    data = [s.placeholder(gf.float32, shape=i.shape if isinstance(i, gf.Output) else [1])
            for i in (s.constant(i) if not isinstance(i, gf.Output) else i for i in idx)]
    merged, peak = _peak_bytes(lambda: s.dynamic_stitch(idx, data))
    assert merged.shape.as_list() == [expected]
    assert peak < 8 << 20


def test_static_shape_matches_the_run_past_the_folding_bound(run, scope):
    n = inference.MAX_FOLDED_ELEMENTS + 3
    indices = scope.range(n - 1, -1, -1)
    merged = scope.dynamic_stitch([indices], [scope.range(0, n, 1)])
    assert inference.constant_value(indices) is None
    value = run(merged)
    assert merged.shape.as_list() == list(value.shape) == [n]
    np.testing.assert_array_equal(value, np.arange(n)[::-1])


def test_shape_tensor_longer_than_any_rank_is_an_error_not_a_huge_shape():
    s = gf.Scope(gf.Graph())
    shape = s.range(0, 2 ** 31 - 1, 1)
    _, peak = _peak_bytes(lambda: pytest.raises(
        InvalidArgumentError, s.scatter_nd, [[0]], [1], shape).match("at most 254 dims"))
    assert peak < 8 << 20


def test_shape_and_size_past_int32_are_not_folded():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[2 ** 31, 2])
    assert inference.constant_value(s.size(x)) is None
    assert inference.constant_value(s.shape(x)) is None
    np.testing.assert_array_equal(inference.constant_value(s.shape(x, gf.int64)), [2 ** 31, 2])
    assert inference.constant_value(s.size(x, gf.int64)) == 2 ** 32
    assert inference.constant_value(s.rank(x)) == 2


@pytest.mark.parametrize("n", [10**5, 2**31 - 1])
def test_a_node_of_absurdly_many_outputs_is_refused_before_it_is_built(n):
    """num_partitions fits TensorFlow's int32, but 10**5 outputs would be lists of that
    size in every pass: refused at build time, from Python and from a file."""
    scope = gf.Scope(gf.Graph())
    with pytest.raises(gf.errors.InvalidArgumentError, match=f"would have {n} outputs"):
        scope.dynamic_partition([1.0, 2.0], [0, 1], num_partitions=n)
    ok = gf.Scope(gf.Graph())
    ok.dynamic_partition([1.0, 2.0], [0, 1], num_partitions=2)
    graph_def = ok.graph.as_graph_def()
    for node in graph_def["nodes"]:
        if node["op"] == "DynamicPartition":
            node["attrs"]["num_partitions"] = {"int": n}
    with pytest.raises(gf.errors.InvalidArgumentError, match="outputs"):
        gf.import_graph_def(graph_def)
