"""Regression tests for the discrepancies the differential fuzzer found, minimized.
Each names the bug it pins down; the fuzzer's own spec form is used where a graph of
several nodes is the point."""
from __future__ import annotations

import numpy as np
import pytest

import ref_scatter


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
