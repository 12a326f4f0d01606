"""Malformed graph files are rejected whole, naming the node and the field: values past
int64, list lengths past int32, dims whose product passes int64, non-ASCII digits,
non-UTF-8 bytes, JSON nested too deeply; an unreadable file names the file. Attr limits
live in the attr declaration, so a value built in Python meets the same check as one
read from a file.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow import registry
from graphflow.errors import InvalidArgumentError
from graphflow.serialization import as_graph_def

INT64_MIN, INT64_MAX, INT32_MAX = -2 ** 63, 2 ** 63 - 1, 2 ** 31 - 1


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
            if spec.number_attr is not None:  # a list(type) attr's length is its own
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


