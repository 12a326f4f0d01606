"""Lazy reads: a variable update's result (TF's _UnreadVariable) is the update, and
reads the variable only where its value is used."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import graphflow as gf
from graphflow.variables import UnreadVariable

RNG = np.random.default_rng(5)
START = RNG.standard_normal((6, 3)).astype(np.float32)
DENSE = RNG.standard_normal((6, 3)).astype(np.float32)
ROWS = np.array([[4], [1], [4]])
PATCH = RNG.standard_normal((3, 3)).astype(np.float32)


def _last_wins(a, i, u):
    for row, value in zip(i[:, 0], u):
        a[row] = value


# method, its arguments, the op type, the update applied to a numpy copy in place
UPDATES = [
    ("assign", (DENSE,), "AssignVariableOp", lambda a: a.__setitem__(..., DENSE)),
    ("assign_add", (DENSE,), "AssignAddVariableOp", lambda a: np.add(a, DENSE, out=a)),
    ("assign_sub", (DENSE,), "AssignSubVariableOp", lambda a: np.subtract(a, DENSE, out=a)),
    ("scatter_nd_update", (ROWS, PATCH), "ResourceScatterNdUpdate",
     lambda a: _last_wins(a, ROWS, PATCH)),
    ("scatter_nd_add", (ROWS, PATCH), "ResourceScatterNdAdd",
     lambda a: np.add.at(a, ROWS[:, 0], PATCH)),
    ("scatter_nd_sub", (ROWS, PATCH), "ResourceScatterNdSub",
     lambda a: np.subtract.at(a, ROWS[:, 0], PATCH)),
    ("scatter_nd_min", (ROWS, PATCH), "ResourceScatterNdMin",
     lambda a: np.minimum.at(a, ROWS[:, 0], PATCH)),
    ("scatter_nd_max", (ROWS, PATCH), "ResourceScatterNdMax",
     lambda a: np.maximum.at(a, ROWS[:, 0], PATCH)),
]


def _reads(graph):
    return [op for op in graph.operations() if op.type == "ReadVariableOp"]


def _traced_types(sess, fetch):
    md = gf.RunMetadata()
    sess.run(fetch, options=gf.RunOptions(trace=True), run_metadata=md)
    return [e.op_type for e in md.events]


@pytest.mark.parametrize("method,args,op_type,apply", UPDATES, ids=[u[0] for u in UPDATES])
def test_update_op_is_the_update_and_reads_nothing(method, args, op_type, apply):
    g = gf.Graph()
    s = gf.Scope(g)
    v = s.variable(START, name="table")
    reads_before = len(_reads(g))
    after = getattr(v, method)(*args)
    assert isinstance(after, UnreadVariable)
    assert after.op.type == op_type
    assert len(_reads(g)) == reads_before, "the result built a read nobody asked for"
    expected = START.copy()
    apply(expected)
    with gf.Session(g) as sess:
        sess.run(v.initializer)
        types = _traced_types(sess, after.op)
        assert op_type in types and "ReadVariableOp" not in types
        np.testing.assert_array_equal(sess.run(v), expected)
        # Used as a tensor, it reads the value after the update (which runs again).
        apply(expected)
        np.testing.assert_array_equal(sess.run(after), expected)
        apply(expected)
        np.testing.assert_array_equal(sess.run(s.identity(after)), expected)


@pytest.mark.parametrize("method,args,op_type,apply", UPDATES[:4], ids=[u[0] for u in UPDATES[:4]])
def test_control_dependency_on_the_result_waits_on_the_update_only(method, args, op_type, apply):
    g = gf.Graph()
    s = gf.Scope(g)
    v = s.variable(START, name="table")
    after = getattr(v, method)(*args)
    marker = s.with_control_dependencies([after]).no_op(name="marker")
    assert marker.control_inputs == (after.op,)
    expected = START.copy()
    apply(expected)
    with gf.Session(g) as sess:
        sess.run(v.initializer)
        types = _traced_types(sess, marker)
        assert op_type in types and "ReadVariableOp" not in types
        np.testing.assert_array_equal(sess.run(v), expected)


def test_chained_updates_run_in_order():
    g = gf.Graph()
    s = gf.Scope(g)
    v = s.variable(START, name="table")
    chained = v.assign(DENSE).assign_add(DENSE).scatter_nd_update(ROWS, PATCH)
    expected = DENSE * 2
    _last_wins(expected, ROWS, PATCH)
    with gf.Session(g) as sess:
        sess.run(v.initializer)
        np.testing.assert_array_equal(sess.run(chained), expected)
        sess.run(v.initializer)
        sess.run(chained.op)
        np.testing.assert_array_equal(sess.run(v), expected)


def test_update_op_on_a_big_table_copies_nothing():
    rows, width = 1 << 19, 16  # a 32 MiB table
    g = gf.Graph()
    s = gf.Scope(g)
    v = s.variable(np.zeros((rows, width), np.float32), name="big")
    ids = s.placeholder(gf.int64, [None, 1])
    step = v.scatter_nd_add(ids, np.ones((2, width), np.float32)).op
    with gf.Session(g) as sess:
        sess.run(v.initializer)
        feed = {ids: np.array([[3], [rows - 1]])}
        sess.run(step, feed)  # plan built and cached
        tracemalloc.start()
        try:
            sess.run(step, feed)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < rows * width * 4 // 8, f"running the update allocated {peak} bytes"
        np.testing.assert_array_equal(sess.run(v.sparse_read([3, 0, rows - 1]))[:, 0], [2, 0, 2])
