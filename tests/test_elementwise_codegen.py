"""One element-wise code generator (ops/elementwise_table.py): fused regions
(runtime/fusion.py) and the partitioned select (ops/fused_ops.py) compute each op
with the same scalar expression, so they agree with each other and with the
graph as written; integer arithmetic wraps modulo 2**bits, as TensorFlow's does."""
from unittest import mock

import numpy as np
import pytest

import graphflow as gf
from graphflow.ops import fused_ops
from graphflow.ops.elementwise_table import RULES
from graphflow.registry import op_def
from graphflow.runtime import fusion

INT_TYPES = [np.int8, np.int32, np.int64, np.uint32]


def _run(graph, fetch, feed, optimize):
    with gf.Session(graph, gf.SessionConfig(optimize=optimize)) as sess:
        value = sess.run(fetch, feed)
        kinds = {s.op.type for s in sess._plan([fetch], list(feed)).steps if s.op is not None}
    return value, kinds


def _extremes(dtype):
    info = np.iinfo(dtype)
    edges = [info.max, info.min, 0, 1, 2, info.max - 1, info.min + 1, info.max // 2 + 1]
    return np.resize(np.array(edges, dtype), 40)


@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda t: np.dtype(t).name)
def test_integer_overflow_wraps_in_a_fused_region(dtype, monkeypatch):
    monkeypatch.setenv("GRAPHFLOW_TIERED", "0")  # the compiled kernel on the first call
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.as_dtype(dtype), shape=[None])
    big = np.iinfo(dtype).max
    y = scope.sub(scope.mul(scope.add(x, np.asarray(big, dtype)), x), scope.add(x, x))
    if np.dtype(dtype).kind == "i":
        y = scope.neg(y)
    values = _extremes(dtype)
    fused, kinds = _run(scope.graph, y, {x: values}, optimize=True)
    plain, _ = _run(scope.graph, y, {x: values}, optimize=False)
    assert "_FusedElementwise" in kinds
    with np.errstate(over="ignore"):
        want = (values + np.asarray(big, dtype)) * values - (values + values)
        want = -want if np.dtype(dtype).kind == "i" else want
    assert fused.dtype == plain.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(fused, plain)
    np.testing.assert_array_equal(fused, want)


def test_int64_sum_that_overflows_to_zero_is_zero_when_fused(monkeypatch):
    """(a + a) != 0 for INT64_MIN: LLVM may fold signed (nsw) arithmetic to a != 0."""
    monkeypatch.setenv("GRAPHFLOW_TIERED", "0")
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.int64, shape=[None])
    y = scope.not_equal(scope.add(x, x), np.int64(0))
    values = np.array([np.iinfo(np.int64).min, 1, 0], np.int64)
    fused, kinds = _run(scope.graph, y, {x: values}, optimize=True)
    assert "_FusedElementwise" in kinds
    np.testing.assert_array_equal(fused, [False, True, False])


@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda t: np.dtype(t).name)
def test_integer_overflow_wraps_in_a_partitioned_select(dtype):
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.as_dtype(dtype), shape=[None])
    p = scope.placeholder(gf.int32, shape=[None])
    parts = scope.dynamic_partition(x, p, num_partitions=3)
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), p, num_partitions=3)
    big = np.asarray(np.iinfo(dtype).max, dtype)
    branches = [scope.add(parts[0], big), scope.mul(parts[1], parts[1]),
                scope.sub(np.asarray(np.iinfo(dtype).min, dtype), parts[2])]
    out = scope.dynamic_stitch(rows, branches)
    values = _extremes(dtype)
    feed = {x: values, p: np.arange(values.size, dtype=np.int32) % 3}
    with mock.patch.object(fused_ops, "COMPILE_MIN_ELEMENTS", 0), \
            mock.patch.object(fused_ops, "_select_numpy", side_effect=AssertionError):
        fused, kinds = _run(scope.graph, out, feed, optimize=True)
    plain, _ = _run(scope.graph, out, feed, optimize=False)
    assert "_PartitionedSelect" in kinds
    assert fused.dtype == plain.dtype
    np.testing.assert_array_equal(fused, plain)


def test_both_generators_spell_an_op_alike():
    """A fused region and a partitioned select write the same expression for Add."""
    program = fusion.Program(("int64", "int64"), (("Add", "int64", (0, 1)),), (0,))
    region = program.source()
    select = fused_ops.kernel_source(((("Add", 0, 0),),), np.dtype(np.int64), "ids")
    assert "v0 = _int64(_uint64(s0) + _uint64(s1))" in region
    assert "v = _int64(_uint64(v) + _uint64(s0))" in select


def test_traits_live_on_the_op_defs():
    for rule in RULES:
        assert op_def(rule.op_type).elementwise is rule
        assert rule.arity == len(op_def(rule.op_type).inputs)
    assert op_def("ScatterNd").elementwise is None
    assert not op_def("Identity").elementwise.fuses
    assert op_def("Cast").elementwise.compiles([np.int32, np.int8])
    assert not op_def("Cast").elementwise.compiles([np.float32, np.int8])
    assert not op_def("Add").elementwise.compiles([np.float16] * 3)
