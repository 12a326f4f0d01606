"""Generated code stays readable (runtime/codegen.py): ``plan.code`` holds every function
a plan generated, and a traceback through the serial run shows its generated line."""
from __future__ import annotations

import gc
import linecache
import traceback

import numpy as np
import pytest

import graphflow as gf


def _plan(sess):
    (plan,) = sess._plans.values()
    return plan


def test_plan_code_holds_the_serial_run():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, [3], name="x")
    y = s.reduce_sum(s.gather_v2(x, s.constant([2, 0]), 0) * 2.0)
    with gf.Session(s.graph) as sess:
        sess.run(y, {x: np.ones(3, np.float32)})
        (code,) = [c for c in _plan(sess).code if c.what == "plan"]
        assert code.source.startswith("def run(feed_values):")
        assert linecache.getline(code.filename, 1) == "def run(feed_values):\n"
        assert code.filename in str(code)


def test_a_traceback_shows_the_generated_line():
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.int64, [2], name="x")
    y = s.gather_v2(s.constant([1.0, 2.0, 3.0]), x, 0, name="pick")
    with gf.Session(s.graph) as sess:
        with pytest.raises(gf.errors.InvalidArgumentError) as info:
            sess.run(y, {x: np.array([0, 7])})
        frames = traceback.extract_tb(info.value.__cause__.__traceback__)
        generated = [f for f in frames if f.filename.startswith("<graphflow plan")]
        assert generated and "= f" in generated[0].line  # "s[5] = f1(c1, s[3], s[4])"


def test_the_text_goes_with_the_function():
    s = gf.Scope(gf.Graph())
    y = s.constant(1.0) + s.placeholder(gf.float32, [], name="p")
    sess = gf.Session(s.graph)
    sess.run(y, {"p:0": np.float32(1)})
    (code,) = _plan(sess).code
    sess.close()
    del sess
    gc.collect()
    assert code.filename not in linecache.cache
