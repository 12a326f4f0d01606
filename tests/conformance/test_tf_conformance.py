"""Replays TensorFlow 2.21's recorded behaviour (tf_cases.json, made by
generate_tf_cases.py with real TensorFlow) against graphflow: values, dtypes,
shapes, static shapes, error classes and the index-error messages."""
from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import NotFoundError, OpError
from support.tf_cases import decode as _decode

CASES = json.loads((pathlib.Path(__file__).with_name("tf_cases.json")).read_text())["cases"]

#: Cases where graphflow is deliberately stricter than TensorFlow's graph-mode
#: shape function: TensorFlow accepts them at build time, and its own CPU kernel
#: then rejects the same input at run time. graphflow reports it at build time.
STRICTER_AT_BUILD_TIME = {
    # indices.shape[-1] > rank: TensorFlow's shape functions let it through.
    "ScatterNd/static_depth_gt_rank", "ScatterNd/static_depth_gt_rank_constant_indices",
    "TensorScatterUpdate/static_depth_gt_rank", "TensorScatterAdd/static_depth_gt_rank",
    "TensorScatterSub/static_depth_gt_rank", "TensorScatterMin/static_depth_gt_rank",
    "TensorScatterMax/static_depth_gt_rank",
}

ERROR_CLASSES = {
    "InvalidArgumentError": gf.errors.InvalidArgumentError,
    "NotFoundError": NotFoundError,
    "ValueError": ValueError,
    "TypeError": TypeError,
}

#: Messages whose text graphflow reproduces exactly (the node context aside).
EXACT_MESSAGES = re.compile(r"does not index into|is not in \[0|is out of range")


def _inputs(scope: gf.Scope, case: dict) -> list:
    def one(t):
        if "placeholder" in t:
            p = t["placeholder"]
            return scope.placeholder(gf.as_dtype(p["dtype"]), shape=p["shape"])
        return scope.constant(_decode(t))
    return [[one(t) for t in i["list"]] if "list" in i else one(i) for i in case["inputs"]]


def _core(message: str) -> str:
    if message.startswith("{{function_node"):
        message = message.split("}} ", 1)[1]
    for stop in (" [Op:", "\n\t; NodeDef", ", node name:"):
        message = message.split(stop, 1)[0]
    return message.strip()


def _build(case: dict):
    scope = gf.Scope(gf.Graph())
    outs = scope.create_op(case["op"], *_inputs(scope, case), **case["attrs"])
    return scope, outs if isinstance(outs, list) else [outs]


def _assert_same(got: np.ndarray, want: np.ndarray, case_id: str) -> None:
    assert got.dtype == want.dtype, f"{case_id}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{case_id}: shape {got.shape} != {want.shape}"
    if want.dtype.kind in "fc":
        np.testing.assert_array_equal(got, want, err_msg=case_id)  # NaNs compare equal
    else:
        assert got.tolist() == want.tolist(), case_id


def _ids(cases):
    return [c["id"] for c in cases]


RUN_CASES = [c for c in CASES if not c.get("static")]
STATIC_CASES = [c for c in CASES if c.get("static")]


@pytest.mark.parametrize("case", RUN_CASES, ids=_ids(RUN_CASES))
def test_run_matches_tensorflow(case):
    expect = case["expect"]
    if "error" in expect:
        cls = ERROR_CLASSES[expect["error"]]
        with pytest.raises(OpError) as info:
            scope, outs = _build(case)
            with gf.Session(scope.graph) as sess:
                sess.run(outs)
        assert isinstance(info.value, cls), f"{case['id']}: {type(info.value).__name__}: {info.value}"
        core = _core(expect["message"])
        if EXACT_MESSAGES.search(core):
            assert core in str(info.value), f"{case['id']}: {info.value!s} lacks {core!r}"
        return
    scope, outs = _build(case)
    with gf.Session(scope.graph) as sess:
        got = sess.run(outs)
    wants = [_decode(v) for v in expect["values"]]
    assert len(got) == len(wants)
    for out, g, w in zip(outs, got, wants):
        _assert_same(g, w, case["id"])
        assert out.shape.is_compatible_with(w.shape), f"{case['id']}: static {out.shape} vs {w.shape}"


@pytest.mark.parametrize("case", STATIC_CASES, ids=_ids(STATIC_CASES))
def test_static_shapes_match_tensorflow(case):
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(ERROR_CLASSES[expect["error"]]):
            _build(case)
        return
    if case["id"] in STRICTER_AT_BUILD_TIME:
        with pytest.raises(gf.errors.InvalidArgumentError):
            _build(case)
        return
    _, outs = _build(case)
    assert [o.dtype.name for o in outs] == expect["dtypes"]
    for out, want in zip(outs, expect["shapes"]):
        want = gf.TensorShape(want)
        assert out.shape.is_compatible_with(want), f"{case['id']}: {out.shape} vs TF {want}"
        if want.rank is not None:
            assert out.shape.rank == want.rank, f"{case['id']}: {out.shape} vs TF {want}"
            for ours, theirs in zip(out.shape.as_list(), want.as_list()):
                assert theirs is None or ours == theirs, f"{case['id']}: {out.shape} less known than {want}"
