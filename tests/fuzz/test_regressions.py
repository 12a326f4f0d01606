"""Regression tests for the discrepancies the differential fuzzer found, minimized;
each docstring says what was wrong."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError, OpError

from support import ref_scatter


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("updates", [[-0.0, 0.0, 0.0], [0.0, -0.0, -0.0]])
def test_tensor_scatter_min_max_signed_zero_ties_between_updates(scope, run, dtype, op, updates):
    """Of duplicate updates that tie (0.0 and -0.0), the earliest wins (Eigen: the current
    value changes only for a strictly smaller/larger one). float16 gave the last one:
    numpy's float16 minimum/maximum keep the first of two equal values, float32's the
    second, and the kernel assumed the latter."""
    tensor = np.array([1.0 if op == "min" else -1.0], dtype)
    indices, updates = np.zeros((3, 1), np.int32), np.array(updates, dtype)
    got = run(getattr(scope, f"tensor_scatter_{op}")(tensor, indices, updates))
    want = ref_scatter.scatter(tensor, indices, updates, op)
    assert np.signbit(want[0]) == np.signbit(updates[0])
    assert got.dtype == want.dtype and np.signbit(got[0]) == np.signbit(want[0]), (got, want)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum", "equal", "logical_and"])
def test_elementwise_incompatible_shapes_at_run_time(scope, op):
    """Shapes that do not broadcast, known only at run time, give TensorFlow's
    "Incompatible shapes" InvalidArgumentError; the kernel let numpy's ValueError
    ("operands could not be broadcast together") escape into the executor."""
    dtype = gf.bool if op == "logical_and" else gf.float32
    x = scope.placeholder(dtype, shape=None)
    out = getattr(scope, op)(x, np.zeros((1, 1, 0), dtype.as_numpy_dtype))
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError) as info:
            sess.run(out, {x: np.zeros(2, dtype.as_numpy_dtype)})
    assert info.value.message == "Incompatible shapes: [2] vs. [1,1,0]"
    assert info.value.node_name == out.op.name
    assert isinstance(info.value.__cause__, OpError)  # raised by the kernel, not by numpy


@pytest.mark.parametrize("threads", [1, 2])
def test_inf_and_nan_results_come_without_numpy_warnings(scope, threads):
    """inf * 0, inf - inf and overflows give NaN and inf silently, as TensorFlow's kernels;
    the element-wise kernels let numpy's RuntimeWarnings out (an InternalError where
    warnings are errors). Two heavy (unknown-shape) nodes make the run parallel."""
    x = scope.placeholder(gf.float32, shape=[None])
    outs = [scope.mul(x, np.float32(0)), scope.sub(x, x), scope.add(x, x)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=threads)) as sess:
            got = sess.run(outs, {x: np.array([np.inf, 3e38], np.float32)})
    np.testing.assert_array_equal(got[0], [np.nan, 0])
    np.testing.assert_array_equal(got[1], [np.nan, 0])
    np.testing.assert_array_equal(got[2], [np.inf, np.inf])


@pytest.mark.parametrize("optimize", [False, True])
def test_fused_single_partition_pipeline_gives_a_fresh_array(scope, optimize):
    """partition -> stitch with one partition and no element-wise op, rewritten by the
    optimizer into _PartitionedSelect, returned its input buffer itself, yet counted
    as a fresh output: a TensorScatterUpdate downstream wrote into it in place and so
    changed x, which is fetched too."""
    x = scope.cast(np.array([1.0, 2.0, 3.0], np.float32), gf.float32)  # a kernel's buffer
    ids = scope.constant(np.zeros(3, np.int32))
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), ids, num_partitions=1)
    y = scope.dynamic_stitch(rows, scope.dynamic_partition(x, ids, num_partitions=1))
    z = scope.tensor_scatter_update(y, [[0]], np.array([9.0], np.float32))
    with gf.Session(scope.graph, gf.SessionConfig(optimize=optimize)) as sess:
        got_x, got_z = sess.run([x, z])
    assert got_x.tolist() == [1.0, 2.0, 3.0] and got_z.tolist() == [9.0, 2.0, 3.0]


@pytest.mark.parametrize("fed", ["parts[1]", "parts[1] + 1", "rows[0]", "mask cast"])
def test_optimizer_respects_feeds_inside_the_partition_stitch_pattern(scope, fed):
    """A feed replaces any output, also one inside the partition -> stitch pattern; the
    optimizer fused the pattern anyway and computed from x, ignoring the feed."""
    x = scope.placeholder(gf.float32, shape=[None])
    ids = scope.cast(scope.not_equal(x, np.float32(-1)), gf.int32)
    parts = scope.dynamic_partition(x, ids, num_partitions=2)
    plus_one = scope.add(parts[1], np.float32(1))
    rows = scope.dynamic_partition(scope.range(0, scope.size(x), 1), ids, num_partitions=2)
    y = scope.dynamic_stitch(rows, [parts[0], plus_one])
    target, value = {"parts[1]": (parts[1], [10.0, 20.0]), "parts[1] + 1": (plus_one, [10.0, 20.0]),
                     "rows[0]": (rows[0], [2]), "mask cast": (ids, [1, 1, 0])}[fed]
    feeds = {x: np.array([0.5, -1.0, 2.5], np.float32),
             target: np.array(value, target.dtype.as_numpy_dtype)}
    results = []
    for optimize in (False, True):
        with gf.Session(scope.graph, gf.SessionConfig(optimize=optimize)) as sess:
            results.append(sess.run(y, feeds).tolist())
    assert results[1] == results[0]
