#!/usr/bin/env python
"""Generate the TensorFlow golden corpus ``tf_cases.json`` for graphflow.

REQUIRES TENSORFLOW.  This script is NOT run by the test suite: the tests
only replay the JSON it writes and must never import TensorFlow.

Usage (the venv the corpus was made with)::

    python3 -m venv /tmp/tfvenv
    /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 numpy
    /tmp/tfvenv/bin/python tests/conformance/generate_tf_cases.py

It writes ``tf_cases.json`` next to itself.

How it works
------------
* The case list (inputs as TENSOR dicts, attrs) is built here with numpy only,
  from fixed seeds, so the output is deterministic.
* Every case is executed in a *worker subprocess* (this same file run with
  ``--worker``), so that a TensorFlow CHECK-failure / abort / hang kills only
  the worker: such a case is skipped, reported on stderr and listed in
  ``crashes`` of the summary printed at the end, and a fresh worker is started.
* Value cases run eagerly on CPU through ``tf.raw_ops.<Op>`` so the real CPU
  kernels run.  The one exception is GatherNd with a ``batch_dims`` attr: the
  raw GatherNd op has no ``batch_dims`` attr in TF 2.21, so those cases call
  the public ``tf.gather_nd(params, indices, batch_dims=...)`` (which for
  batch_dims > 0 is a Python composite of reshapes + the raw op).
* Static cases (``"static": true``) build the op in a ``tf.compat.v1`` Graph
  from placeholders / constants and record the inferred static output shapes
  and dtypes, or the error raised while building the graph (shape functions).

JSON schema::

  {"tf_version": "2.21.0",
   "cases": [{"id": "<Op>/<desc>", "op": "<RawOp>", ["static": true,]
              "inputs": [TENSOR | {"list": [...]} | {"placeholder": {...}}],
              "attrs": {...non-type attrs set explicitly...},
              "expect": {"values": [TENSOR...]} | {"shapes": [...], "dtypes": [...]}
                        | {"error": "<ExceptionClass>", "message": "<full message>"}}]}

  TENSOR = {"dtype": "int32", "shape": [4, 1], "data": [flat row-major list]}
  complex -> [re, im] pairs; string -> str decoded from bytes with latin-1;
  float nan/inf -> "nan" / "inf" / "-inf"; bool -> true/false.
"""

import json
import math
import os
import select
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_PATH = os.path.join(HERE, "tf_cases.json")
TF_VERSION = "2.21.0"
CASE_TIMEOUT_S = 60

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool", "complex64",
          "complex128", "string"]
NP = {d: (object if d == "string" else np.dtype(d)) for d in DTYPES}
FLOATS = {"float16", "float32", "float64"}
COMPLEX = {"complex64", "complex128"}
COMPONENT = {"complex64": np.float32, "complex128": np.float64}

OP_INPUTS = {
    "ScatterNd": ["indices", "updates", "shape"],
    "TensorScatterUpdate": ["tensor", "indices", "updates"],
    "TensorScatterAdd": ["tensor", "indices", "updates"],
    "TensorScatterSub": ["tensor", "indices", "updates"],
    "TensorScatterMin": ["tensor", "indices", "updates"],
    "TensorScatterMax": ["tensor", "indices", "updates"],
    "GatherNd": ["params", "indices"],
    "DynamicPartition": ["data", "partitions"],
    "DynamicStitch": ["indices", "data"],
    "ParallelDynamicStitch": ["indices", "data"],
}
TS_OPS = ["TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub",
          "TensorScatterMin", "TensorScatterMax"]


# ---------------------------------------------------------------------------
# Encoding (numpy only; shared by the case builder and the worker)
# ---------------------------------------------------------------------------

def _enc_float(x, dtype):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if dtype in ("float16", "float32"):
        # shortest repr that round-trips to the same float16/float32 value
        return float(str(np.dtype(dtype).type(x)))
    return x


def encode_array(arr, dtype):
    """numpy array -> TENSOR dict."""
    shape = [int(s) for s in arr.shape]
    flat = arr.reshape(-1)
    if dtype == "string":
        data = [(v if isinstance(v, bytes) else str(v).encode("latin-1")).decode("latin-1")
                for v in flat.tolist()]
    elif dtype == "bool":
        data = [bool(v) for v in flat.tolist()]
    elif dtype in FLOATS:
        data = [_enc_float(v, dtype) for v in flat.tolist()]
    elif dtype in COMPLEX:
        comp = "float32" if dtype == "complex64" else "float64"
        data = [[_enc_float(complex(v).real, comp), _enc_float(complex(v).imag, comp)]
                for v in flat.tolist()]
    else:
        data = [int(v) for v in flat.tolist()]
    return {"dtype": dtype, "shape": shape, "data": data}


def _dec_float(v):
    if isinstance(v, str):
        return float(v)
    return float(v)


def decode_array(t):
    """TENSOR dict -> numpy array."""
    dtype, shape, data = t["dtype"], t["shape"], t["data"]
    if dtype == "string":
        arr = np.empty(len(data), dtype=object)
        for i, v in enumerate(data):
            arr[i] = v.encode("latin-1")
    elif dtype in COMPLEX:
        arr = np.array([complex(_dec_float(r), _dec_float(i)) for r, i in data],
                       dtype=NP[dtype])
    elif dtype in FLOATS:
        arr = np.array([_dec_float(v) for v in data], dtype=NP[dtype])
    else:
        arr = np.array(data, dtype=NP[dtype])
    return arr.reshape(shape)


def T(data, dtype, shape=None):
    """Build a TENSOR dict from (nested) python data."""
    if dtype == "string":
        arr = np.array(data, dtype=object)
        if shape is not None:
            arr = arr.reshape(shape)
        vals = [v.encode("latin-1") if isinstance(v, str) else v for v in arr.reshape(-1)]
        flat = np.empty(len(vals), dtype=object)
        for i, v in enumerate(vals):
            flat[i] = v
        arr = flat.reshape(arr.shape)
    elif dtype in COMPLEX:
        arr = np.array(data, dtype=NP[dtype])
    else:
        arr = np.array(data, dtype=np.float64 if dtype in FLOATS else None)
        if arr.dtype == object:
            raise ValueError("ragged data")
        arr = arr.astype(NP[dtype])
    if shape is not None:
        arr = arr.reshape(shape)
    return encode_array(arr, dtype)


def P(dtype, shape):
    """Placeholder spec.  shape None = unknown rank; None dims = unknown."""
    return {"placeholder": {"dtype": dtype, "shape": shape}}


def L(*items):
    return {"list": list(items)}


def sample(dtype, n, offset=0):
    """n small deterministic values of dtype (python data)."""
    out = []
    for i in range(n):
        k = i + offset
        if dtype in FLOATS:
            out.append((k + 1) * 1.5 * (-1 if k % 3 == 1 else 1))
        elif dtype in COMPLEX:
            out.append(complex(k + 1, -(k % 3)))
        elif dtype == "bool":
            out.append(k % 2 == 0)
        elif dtype == "string":
            out.append("s%d" % k)
        elif dtype.startswith("uint"):
            out.append(k + 2)
        else:
            out.append((k + 2) * (-1 if k % 3 == 1 else 1))
    return out


def fill(dtype, n, value):
    if dtype == "string":
        return [str(value)] * n
    if dtype == "bool":
        return [bool(value)] * n
    return [value] * n


# ---------------------------------------------------------------------------
# Case list
# ---------------------------------------------------------------------------

CASES = []
_IDS = set()


def add(cid, op, inputs, attrs=None, static=False):
    assert cid not in _IDS, cid
    assert cid.startswith(op + "/"), cid
    _IDS.add(cid)
    c = {"id": cid, "op": op}
    if static:
        c["static"] = True
    c["inputs"] = inputs
    c["attrs"] = attrs or {}
    CASES.append(c)


RNG = np.random.default_rng(20240601)


def rand(shape, dtype="float32", lo=-5, hi=5):
    n = int(np.prod(shape)) if shape else 1
    vals = RNG.integers(lo, hi, size=n)
    if dtype in FLOATS:
        vals = vals.astype(np.float64) * 0.5
    return T(vals.tolist(), dtype, shape)


def arange(shape, dtype="float32", start=0):
    n = int(np.prod(shape)) if shape else 1
    return T(list(range(start, start + n)), dtype, shape)


def I(data, dtype="int32", shape=None):
    return T(data, dtype, shape)


SEED_IDX = [[4], [3], [1], [7]]
SEED_UPD = [9, 10, 11, 12]
SLAB = [[5, 5, 5, 5], [6, 6, 6, 6], [7, 7, 7, 7], [8, 8, 8, 8]]
SEED3_UPD = [SLAB, SLAB]
IDX_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
              "uint64", "float32"]
POLICIES = ["", "DEFAULT", "ERROR", "IGNORE", "BOGUS"]


def build_scatter_nd():
    op = "ScatterNd"
    # seeds
    add(op + "/seed_1d", op, [I(SEED_IDX), T(SEED_UPD, "int32"), I([8])])
    add(op + "/seed_rank3_slices", op, [I([[0], [2]]), T(SEED3_UPD, "int32"), I([4, 4, 4])])
    # dtype sweep (with a duplicate index so the reduction is visible)
    for dt in DTYPES:
        add(op + "/dtype_%s_dup" % dt, op,
            [I([[1], [3], [1]]), T(sample(dt, 3), dt), I([5])])
    # index dtype sweep (shape input shares Tindices)
    for it in IDX_DTYPES:
        add(op + "/index_dtype_" + it, op,
            [I([[1], [3]], it), T([1.0, 2.0], "float32"), I([5], it)])
    add(op + "/index_int32_shape_int64", op,
        [I([[1]], "int32"), T([1.0], "float32"), I([5], "int64")])
    # duplicates
    add(op + "/dup_float_sum", op,
        [I([[0], [0], [0], [2]]), T([0.5, 0.25, 1.0, 3.0], "float32"), I([4])])
    add(op + "/dup_int8_wraparound", op,
        [I([[1], [1]]), T([100, 100], "int8"), I([3])])
    add(op + "/dup_uint8_wraparound", op,
        [I([[1], [1]]), T([200, 100], "uint8"), I([3])])
    add(op + "/dup_string_concat_order", op,
        [I([[1], [3], [1], [1], [0]]), T(["a", "b", "c", "d", "e"], "string"), I([5])])
    add(op + "/dup_string_slices_2d", op,
        [I([[1], [0], [1]]), T([["x", "y"], ["p", "q"], ["X", "Y"]], "string"), I([3, 2])])
    add(op + "/dup_bool", op,
        [I([[1], [1], [2], [2], [3]]), T([True, True, False, True, False], "bool"), I([5])])
    add(op + "/dup_bool_true_false", op,
        [I([[0], [0]]), T([True, False], "bool"), I([2])])
    add(op + "/nan_inf_updates", op,
        [I([[0], [1], [1], [2]]), T([float("nan"), float("inf"), float("-inf"), 1.0], "float32"), I([4])])
    # index depth 1..rank on [2,3,4]
    add(op + "/depth1_slices", op, [I([[1], [0]]), rand([2, 3, 4]), I([2, 3, 4])])
    add(op + "/depth2_rows", op, [I([[1, 2], [0, 0], [1, 0]]), rand([3, 4]), I([2, 3, 4])])
    add(op + "/depth3_elements", op, [I([[1, 2, 3], [0, 0, 0]]), T([7.0, 8.0], "float32"), I([2, 3, 4])])
    add(op + "/depth0_whole_tensor", op, [I([], shape=[2, 0]), rand([2, 4]), I([4])])
    add(op + "/depth0_scalar_output", op, [I([], shape=[3, 0]), T([1.0, 2.0, 4.0], "float32"), I([])])
    # rank-1 indices (no explicit batch axis)
    add(op + "/rank1_indices_depth1", op, [I([3]), T(5.0, "float32"), I([5])])
    add(op + "/rank1_indices_depth1_slice", op, [I([1]), T([1.0, 2.0, 3.0, 4.0], "float32"), I([3, 4])])
    add(op + "/rank1_indices_updates_with_batch", op, [I([3]), T([5.0], "float32"), I([5])])
    add(op + "/rank1_indices_slice_with_batch_axis", op, [I([1]), T([[1.0, 2.0, 3.0, 4.0]], "float32"), I([3, 4])])
    add(op + "/rank1_indices_as_batch_of_depth1", op, [I([1, 3]), T([10.0, 20.0], "float32"), I([5])])
    add(op + "/rank0_indices", op, [I(3), T(5.0, "float32"), I([5])])
    # rank-3 indices
    add(op + "/rank3_indices_depth1", op, [I([[[1], [3]], [[0], [3]]]), T([[1, 2], [3, 4]], "int32"), I([5])])
    add(op + "/rank3_indices_depth2_slices", op,
        [I([[[0, 1], [2, 2]], [[1, 1], [0, 1]]]), rand([2, 2, 4]), I([3, 3, 4])])
    add(op + "/rank4_indices", op, [I([[[[0]], [[1]]]]), T([[[1.0], [2.0]]], "float32"), I([2])])
    # scalar updates
    add(op + "/scalar_updates_for_two_indices", op, [I([[1], [3]]), T(5.0, "float32"), I([5])])
    add(op + "/scalar_updates_for_slice", op, [I([[1]]), T(5.0, "float32"), I([3, 4])])
    # zero-size / empty indices
    add(op + "/empty_indices_0x1", op, [I([], shape=[0, 1]), T([], "float32", [0]), I([5])])
    add(op + "/empty_indices_0x2", op, [I([], shape=[0, 2]), T([], "float32", [0]), I([3, 4])])
    add(op + "/empty_indices_0x1_slices", op, [I([], shape=[0, 1]), T([], "float32", [0, 4]), I([3, 4])])
    add(op + "/empty_indices_0x1_int64", op, [I([], "int64", [0, 1]), T([], "int32", [0]), I([4], "int64")])
    add(op + "/empty_indices_nonempty_updates", op, [I([], shape=[0, 1]), T([1.0], "float32"), I([5])])
    add(op + "/zero_dim_shape_empty_indices", op, [I([], shape=[0, 1]), T([], "float32", [0]), I([0])])
    add(op + "/zero_dim_shape_with_index", op, [I([[0]]), T([1.0], "float32"), I([0])])
    add(op + "/zero_dim_inner_shape", op, [I([[1], [2]]), T([], "float32", [2, 0]), I([3, 0])])
    # bad indices
    add(op + "/oob_index_1d", op, [I([[1], [8]]), T([1.0, 2.0], "float32"), I([8])])
    add(op + "/oob_index_depth2", op, [I([[0, 0], [1, 4]]), T([1.0, 2.0], "float32"), I([2, 4])])
    add(op + "/negative_index", op, [I([[-1]]), T([1.0], "float32"), I([5])])
    add(op + "/oob_second_of_many", op, [I([[0], [1], [9], [10]]), T([1, 2, 3, 4], "int32"), I([5])])
    # policy
    for pol in POLICIES:
        tag = pol or "empty"
        add(op + "/policy_%s_oob" % tag, op,
            [I([[1], [7], [2]]), T([1.0, 2.0, 3.0], "float32"), I([5])], {"bad_indices_policy": pol})
        if pol in ("ERROR", "IGNORE"):
            add(op + "/policy_%s_negative" % tag, op,
                [I([[-1], [2]]), T([1.0, 2.0], "float32"), I([5])], {"bad_indices_policy": pol})
            if pol == "IGNORE":
                add(op + "/policy_%s_valid" % tag, op,
                    [I([[1], [1]]), T([1.0, 2.0], "float32"), I([3])], {"bad_indices_policy": pol})
    add(op + "/policy_IGNORE_oob_slices", op,
        [I([[0, 5], [1, 1]]), rand([2, 2]), I([2, 3, 2])], {"bad_indices_policy": "IGNORE"})
    # bad shape input
    add(op + "/negative_dim_in_shape", op, [I([[0]]), T([1.0], "float32"), I([-1])])
    add(op + "/negative_dim_in_shape_2d", op, [I([[0]]), T([[1.0, 2.0]], "float32"), I([2, -3])])
    add(op + "/shape_rank2", op, [I([[0]]), T([1.0], "float32"), I([[5]])])
    add(op + "/shape_scalar", op, [I([[0]]), T([1.0], "float32"), I(5)])
    add(op + "/shape_empty_with_depth1_index", op, [I([[0]]), T([1.0], "float32"), I([])])
    # shape mismatches
    # NOTE: aborts the process (CHECK failure) in TF 2.21: skipped and reported
    add(op + "/updates_lower_rank_than_outer", op,
        [I([[[0], [1]], [[2], [3]]]), T([1.0, 2.0], "float32"), I([5])])
    add(op + "/updates_wrong_outer_dim", op, [I([[0], [1]]), T([1.0, 2.0, 3.0], "float32"), I([5])])
    add(op + "/updates_wrong_inner_dim", op, [I([[0], [1]]), rand([2, 3]), I([5, 4])])
    add(op + "/updates_extra_dim", op, [I([[0], [1]]), rand([2, 1]), I([5])])
    add(op + "/index_depth_gt_rank", op, [I([[1, 2]]), T([1.0], "float32"), I([5])])
    add(op + "/batch_dims_mismatch_rank3", op,
        [I([[[0], [1]], [[2], [3]]]), rand([2, 3]), I([5])])


def build_tensor_scatter():
    for op in TS_OPS:
        # Update and Add get the full set; Sub/Min/Max (same validation code
        # paths) get a core set: seeds, dtype sweep, reductions, messages.
        full = op in ("TensorScatterUpdate", "TensorScatterAdd")
        # seeds (docs use int32 ones)
        add(op + "/seed_1d_ones", op, [T(fill("int32", 8, 1), "int32"), I(SEED_IDX), T(SEED_UPD, "int32")])
        add(op + "/seed_rank3_ones", op,
            [T(fill("int32", 64, 1), "int32", [4, 4, 4]), I([[0], [2]]), T(SEED3_UPD, "int32")])
        # dtype sweep (index 1 is duplicated)
        for dt in DTYPES:
            base = sample(dt, 5, offset=7)
            add(op + "/dtype_%s_dup" % dt, op,
                [T(base, dt), I([[1], [3], [1]]), T(sample(dt, 3), dt)])
        idx_dtypes = IDX_DTYPES if op == "TensorScatterUpdate" else ["int16", "int32", "int64", "uint16", "float32"]
        for it in idx_dtypes:
            add(op + "/index_dtype_" + it, op,
                [T([1.0, 2.0, 3.0, 4.0], "float32"), I([[1], [3]], it), T([10.0, -20.0], "float32")])
        # duplicates
        add(op + "/dup_float", op,
            [T([1.0, 2.0, 3.0, 4.0], "float32"), I([[0], [0], [0], [2]]), T([5.0, -1.0, 3.0, 0.5], "float32")])
        base = arange([2, 3, 4], "float32")
        add(op + "/depth2_rows", op, [base, I([[1, 2], [0, 1]]), rand([2, 4])])
        add(op + "/rank1_indices_depth1", op, [arange([5], "float32"), I([3]), T(9.0, "float32")])
        add(op + "/scalar_updates_two_indices", op, [arange([5], "float32"), I([[1], [3]]), T(9.0, "float32")])
        add(op + "/empty_indices_0x1", op, [arange([5], "float32"), I([], shape=[0, 1]), T([], "float32", [0])])
        add(op + "/nan_values", op,
            [T([1.0, float("nan"), 3.0, 4.0], "float32"), I([[0], [1], [2]]),
             T([float("nan"), 5.0, float("-inf")], "float32")])
        add(op + "/oob_index", op, [arange([5], "float32"), I([[1], [5]]), T([1.0, 2.0], "float32")])
        add(op + "/negative_index", op, [arange([5], "float32"), I([[-1]]), T([1.0], "float32")])
        add(op + "/updates_wrong_inner_dim", op, [arange([5, 4], "float32"), I([[0], [1]]), rand([2, 3])])
        add(op + "/policy_empty_oob", op,
            [arange([5], "float32"), I([[1], [7], [2]]), T([10.0, 20.0, 30.0], "float32")],
            {"bad_indices_policy": ""})
        add(op + "/policy_IGNORE_oob", op,
            [arange([5], "float32"), I([[1], [7], [2]]), T([10.0, 20.0, 30.0], "float32")],
            {"bad_indices_policy": "IGNORE"})
        add(op + "/policy_IGNORE_negative", op,
            [arange([5], "float32"), I([[-1], [2]]), T([10.0, 20.0], "float32")],
            {"bad_indices_policy": "IGNORE"})
        if op == "TensorScatterSub":
            add(op + "/uint8_wraparound", op, [T([1, 5], "uint8"), I([[0], [0]]), T([1, 2], "uint8")])
        if op in ("TensorScatterMin", "TensorScatterMax"):
            add(op + "/int_extremes", op,
                [T([0, 0, 0], "int64"), I([[0], [1], [1]]),
                 T([-9223372036854775808, 9223372036854775807, 5], "int64")])
        if not full:
            continue
        add(op + "/dup_slices_2d", op,
            [arange([3, 2], "int32"), I([[2], [0], [2]]), T([[10, 20], [-1, -2], [30, 5]], "int32")])
        add(op + "/depth1_slices", op, [base, I([[1]]), rand([1, 3, 4])])
        add(op + "/depth3_elements", op, [base, I([[1, 2, 3], [0, 0, 0]]), T([50.0, -50.0], "float32")])
        add(op + "/depth0_whole_tensor", op, [arange([4], "float32"), I([], shape=[2, 0]), rand([2, 4])])
        extra = op == "TensorScatterUpdate"
        if extra:
            add(op + "/depth0_scalar_tensor", op, [T(3.0, "float32"), I([], shape=[1, 0]), T([4.0], "float32")])
        if extra:
            add(op + "/rank1_indices_depth2", op, [arange([3, 4], "float32"), I([1, 2]), T(9.0, "float32")])
        add(op + "/rank1_indices_depth1_slice", op,
            [arange([3, 4], "float32"), I([1]), T([9.0, 8.0, 7.0, 6.0], "float32")])
        if extra:
            add(op + "/rank1_indices_slice_with_batch_axis", op,
                [arange([3, 4], "float32"), I([1]), T([[9.0, 8.0, 7.0, 6.0]], "float32")])
        add(op + "/rank1_indices_as_batch_of_depth1", op, [arange([5], "float32"), I([1, 3]), T([10.0, 20.0], "float32")])
        add(op + "/rank3_indices", op,
            [arange([5], "int32"), I([[[1], [3]], [[0], [3]]]), T([[10, 20], [30, 40]], "int32")])
        if extra:
            add(op + "/rank3_indices_slices", op,
                [arange([3, 2], "int32"), I([[[1]], [[2]]]), T([[[7, 8]], [[9, 9]]], "int32")])
        add(op + "/scalar_updates_slice", op, [arange([3, 4], "float32"), I([[1]]), T(9.0, "float32")])
        add(op + "/empty_indices_0x2", op, [arange([3, 4], "float32"), I([], shape=[0, 2]), T([], "float32", [0])])
        if extra:
            add(op + "/empty_indices_0x1_slices", op,
                [arange([3, 4], "float32"), I([], shape=[0, 1]), T([], "float32", [0, 4])])
        add(op + "/zero_size_tensor", op, [T([], "float32", [0]), I([], shape=[0, 1]), T([], "float32", [0])])
        add(op + "/zero_size_tensor_with_index", op, [T([], "float32", [0]), I([[0]]), T([1.0], "float32")])
        if extra:
            add(op + "/zero_inner_dim", op, [T([], "float32", [3, 0]), I([[1]]), T([], "float32", [1, 0])])
        add(op + "/int64_indices", op, [arange([5], "int64"), I([[4], [0]], "int64"), T([-1, -2], "int64")])
        add(op + "/oob_index_depth2", op, [arange([2, 3], "float32"), I([[1, 3]]), T([1.0], "float32")])
        for pol in (["DEFAULT", "ERROR", "BOGUS"] if extra else ["ERROR"]):
            add(op + "/policy_%s_oob" % pol, op,
                [arange([5], "float32"), I([[1], [7], [2]]), T([10.0, 20.0, 30.0], "float32")],
                {"bad_indices_policy": pol})
        add(op + "/policy_ERROR_negative", op,
            [arange([5], "float32"), I([[-1], [2]]), T([10.0, 20.0], "float32")],
            {"bad_indices_policy": "ERROR"})
        add(op + "/updates_wrong_outer_dim", op, [arange([5], "float32"), I([[0], [1]]), T([1.0, 2.0, 3.0], "float32")])
        # NOTE: this one aborts the process (CHECK failure) in TF 2.21: skipped+reported
        if extra:
            add(op + "/updates_lower_rank_than_outer", op,
                [arange([5], "float32"), I([[[0], [1]], [[2], [3]]]), T([1.0, 2.0], "float32")])
        add(op + "/index_depth_gt_rank", op, [arange([5], "float32"), I([[1, 2]]), T([1.0], "float32")])
        add(op + "/dtype_mismatch_tensor_updates", op,
            [arange([5], "float32"), I([[1]]), T([1.0], "float64")])


def build_gather_nd():
    op = "GatherNd"
    params = arange([2, 3, 4], "int32")
    for dt in DTYPES:
        add(op + "/dtype_" + dt, op, [T(sample(dt, 6), dt, [3, 2]), I([[2, 1], [0, 0], [2, 1]])])
    for it in IDX_DTYPES:
        add(op + "/index_dtype_" + it, op, [arange([4], "float32"), I([[3], [0]], it)])
    add(op + "/doc_elements", op, [T([["a", "b"], ["c", "d"]], "string"), I([[0, 0], [1, 1]])])
    add(op + "/doc_slices", op, [T([["a", "b"], ["c", "d"]], "string"), I([[1], [0]])])
    add(op + "/depth1", op, [params, I([[1], [0], [1]])])
    add(op + "/depth2", op, [params, I([[1, 2], [0, 0]])])
    add(op + "/depth3", op, [params, I([[1, 2, 3], [0, 1, 2]])])
    add(op + "/depth0", op, [params, I([], shape=[2, 0])])
    add(op + "/depth0_scalar_params", op, [T(7.0, "float32"), I([], shape=[3, 0])])
    add(op + "/rank1_indices_scalar_result", op, [params, I([1, 2, 3])])
    add(op + "/rank1_indices_slice", op, [params, I([1])])
    add(op + "/rank3_indices", op, [params, I([[[0, 0], [1, 1]], [[1, 2], [0, 2]]])])
    add(op + "/rank0_indices", op, [arange([4], "float32"), I(2)])
    add(op + "/int64_indices", op, [params, I([[1, 1], [0, 2]], "int64")])
    add(op + "/empty_indices_0x1", op, [params, I([], shape=[0, 1])])
    add(op + "/empty_indices_0x2", op, [params, I([], shape=[0, 2])])
    add(op + "/empty_params_empty_indices", op, [T([], "float32", [0, 3]), I([], shape=[0, 1])])
    add(op + "/empty_params_with_index", op, [T([], "float32", [0, 3]), I([[0]])])
    add(op + "/zero_inner_dim_params", op, [T([], "float32", [3, 0]), I([[2], [0]])])
    add(op + "/oob_index", op, [params, I([[0, 0], [1, 3]])])
    add(op + "/oob_index_depth1", op, [params, I([[2]])])
    add(op + "/oob_index_depth3", op, [params, I([[0, 0, 0], [1, 2, 4]])])
    add(op + "/negative_index", op, [params, I([[-1, 0]])])
    add(op + "/index_depth_gt_rank", op, [arange([4], "float32"), I([[1, 2]])])
    add(op + "/scalar_params_with_depth1", op, [T(1.0, "float32"), I([[0]])])
    for pol in ["", "ERROR", "IGNORE", "BOGUS"]:
        tag = pol or "empty"
        add(op + "/policy_%s_oob" % tag, op, [arange([5], "float32"), I([[1], [7], [2]])],
            {"bad_indices_policy": pol})
    add(op + "/policy_IGNORE_oob_slices", op, [arange([3, 2], "float32"), I([[1], [3], [-1]])],
        {"bad_indices_policy": "IGNORE"})
    add(op + "/policy_IGNORE_negative", op, [arange([5], "float32"), I([[-1], [2]])],
        {"bad_indices_policy": "IGNORE"})
    # batch_dims (tf.gather_nd python wrapper)
    add(op + "/batch_dims0_explicit", op, [params, I([[1, 2]])], {"batch_dims": 0})
    add(op + "/batch_dims1_depth1", op, [params, I([[1], [2]])], {"batch_dims": 1})
    add(op + "/batch_dims1_depth2", op, [params, I([[[1, 2], [0, 0]], [[2, 3], [1, 1]]])], {"batch_dims": 1})
    add(op + "/batch_dims1_rank1_batch_scalar", op, [arange([2, 3], "float32"), I([[2], [0]])], {"batch_dims": 1})
    add(op + "/batch_dims1_int64", op, [params, I([[[1]], [[2]]], "int64")], {"batch_dims": 1})
    add(op + "/batch_dims2", op, [params, I([[[1], [2], [3]], [[0], [0], [1]]])], {"batch_dims": 2})
    add(op + "/batch_dims2_multi", op, [params, I([[[[1], [2]], [[3], [3]], [[0], [0]]], [[[0], [1]], [[2], [3]], [[0], [1]]]])], {"batch_dims": 2})
    add(op + "/batch_dims1_docs", op,
        [T([[["a0b0", "a0b1"], ["a1b0", "a1b1"]], [["c0d0", "c0d1"], ["c1d0", "c1d1"]]], "string"),
         I([[1], [0]])], {"batch_dims": 1})
    add(op + "/batch_dims1_empty_batch", op, [T([], "float32", [0, 3]), I([], shape=[0, 1])], {"batch_dims": 1})
    add(op + "/batch_dims1_oob", op, [params, I([[1], [5]])], {"batch_dims": 1})
    add(op + "/batch_dims1_batch_mismatch", op, [params, I([[1], [2], [0]])], {"batch_dims": 1})
    add(op + "/batch_dims_eq_indices_rank", op, [params, I([[1], [2]])], {"batch_dims": 2})
    add(op + "/batch_dims_gt_params_rank", op, [arange([2], "float32"), I([[[[0]]]])], {"batch_dims": 3})
    add(op + "/batch_dims_gt_rank", op, [params, I([[1], [2]])], {"batch_dims": 4})
    add(op + "/batch_dims_negative", op, [params, I([[1], [2]])], {"batch_dims": -1})


def build_dynamic_partition():
    op = "DynamicPartition"
    x = [0.1, -1.0, 5.2, 4.3, -1.0, 7.4]
    mask = [1, 0, 1, 1, 0, 1]
    add(op + "/pipeline_data", op, [T(x, "float32"), I(mask)], {"num_partitions": 2})
    add(op + "/pipeline_indices", op, [arange([6], "int32"), I(mask)], {"num_partitions": 2})
    for dt in DTYPES:
        add(op + "/dtype_" + dt, op, [T(sample(dt, 5), dt), I([1, 0, 2, 0, 1])], {"num_partitions": 3})
    for pt in ["int16", "int64", "uint8", "float32", "bool"]:
        add(op + "/partitions_dtype_" + pt, op,
            [T([1.0, 2.0, 3.0], "float32"), T([0, 1, 1] if pt != "bool" else [False, True, True], pt)],
            {"num_partitions": 2})
    add(op + "/docs_1d", op, [T([10, 20, 30, 40, 50], "int32"), I([0, 0, 1, 1, 0])], {"num_partitions": 2})
    add(op + "/docs_2d_partitions", op,
        [T([[10, 20, 30], [40, 50, 60]], "int32"), I([[1, 0, 1], [2, 3, 0]])], {"num_partitions": 4})
    add(op + "/partitions_prefix_of_data", op, [arange([2, 3, 2], "float32"), I([[1, 0, 1], [0, 0, 2]])],
        {"num_partitions": 3})
    add(op + "/rows", op, [arange([4, 3], "int32"), I([2, 0, 2, 1])], {"num_partitions": 3})
    add(op + "/empty_partition", op, [arange([3, 2], "float32"), I([0, 0, 2])], {"num_partitions": 4})
    add(op + "/empty_data", op, [T([], "float32", [0]), I([], shape=[0])], {"num_partitions": 2})
    add(op + "/empty_data_2d", op, [T([], "float32", [0, 3]), I([], shape=[0])], {"num_partitions": 2})
    add(op + "/num_partitions_1", op, [T([1.0, 2.0, 3.0], "float32"), I([0, 0, 0])], {"num_partitions": 1})
    add(op + "/num_partitions_0", op, [T([1.0], "float32"), I([0])], {"num_partitions": 0})
    add(op + "/scalar_data_and_partitions", op, [T(3.5, "float32"), I(1)], {"num_partitions": 2})
    add(op + "/scalar_partitions_vector_data", op, [T([1.0, 2.0], "float32"), I(0)], {"num_partitions": 2})
    add(op + "/id_eq_num_partitions", op, [T([1.0, 2.0, 3.0], "float32"), I([0, 2, 1])], {"num_partitions": 2})
    add(op + "/id_negative", op, [T([1.0, 2.0, 3.0], "float32"), I([0, -1, 1])], {"num_partitions": 2})
    add(op + "/id_large", op, [arange([2, 2], "float32"), I([[0, 1], [100, 0]])], {"num_partitions": 2})
    add(op + "/shape_mismatch", op, [T([1.0, 2.0, 3.0], "float32"), I([0, 1])], {"num_partitions": 2})
    add(op + "/shape_not_prefix", op, [arange([2, 3], "float32"), I([0, 1, 0])], {"num_partitions": 2})
    add(op + "/partitions_rank_gt_data", op, [T([1.0, 2.0], "float32"), I([[0, 1]])], {"num_partitions": 2})
    add(op + "/order_preserved_many", op,
        [T(list(range(12)), "int64"), I([2, 1, 0, 2, 1, 0, 0, 0, 2, 1, 1, 2])], {"num_partitions": 3})


def build_stitch(op):
    full = op == "DynamicStitch"
    # seed example
    add(op + "/seed_docs", op,
        [L(I(6), I([4, 1]), I([[5, 2], [0, 3]])),
         L(T([61, 62], "int32"), T([[41, 42], [11, 12]], "int32"),
           T([[[51, 52], [21, 22]], [[1, 2], [31, 32]]], "int32"))])
    # pipeline
    x = np.array([0.1, -1.0, 5.2, 4.3, -1.0, 7.4], dtype=np.float32)
    mask = np.array([1, 0, 1, 1, 0, 1])
    p0 = x[mask == 0]
    p1 = (x[mask == 1] + np.float32(1.0)).astype(np.float32)
    add(op + "/pipeline_stitch", op,
        [L(I([1, 4]), I([0, 2, 3, 5])),
         L(encode_array(p0, "float32"), encode_array(p1, "float32"))])
    for dt in DTYPES:
        add(op + "/dtype_" + dt, op,
            [L(I([0, 2]), I([1, 3])), L(T(sample(dt, 2), dt), T(sample(dt, 2, offset=2), dt))])
    for it in ["int64", "uint8", "float32"]:
        add(op + "/index_dtype_" + it, op,
            [L(I([0, 1], it)), L(T([1.0, 2.0], "float32"))])
    add(op + "/overlap_across_inputs", op,
        [L(I([0, 1, 2]), I([1, 2])), L(T([1, 2, 3], "int32"), T([20, 30], "int32"))])
    add(op + "/overlap_within_input", op,
        [L(I([0, 1, 1, 0])), L(T([1, 2, 3, 4], "int32"))])
    add(op + "/overlap_three_inputs", op,
        [L(I([2]), I([2, 0]), I([2])), L(T([1.0], "float32"), T([2.0, 3.0], "float32"), T([4.0], "float32"))])
    add(op + "/scalar_indices", op,
        [L(I(1), I(0)), L(T([1.0, 2.0], "float32"), T([3.0, 4.0], "float32"))])
    add(op + "/scalar_indices_scalar_data", op, [L(I(2), I(0)), L(T(5.0, "float32"), T(6.0, "float32"))])
    add(op + "/gap_unfilled_rows", op, [L(I([0, 3])), L(T([[1, 2], [3, 4]], "int32"))])
    add(op + "/gap_unfilled_rows_string", op, [L(I([3])), L(T(["z"], "string"))])
    add(op + "/dup_many_within_input", op, [L(I([2, 2, 2, 0, 2])), L(T([1, 2, 3, 4, 5], "int32"))])
    add(op + "/gap_unfilled_float", op, [L(I([4]), I([1])), L(T([1.5], "float32"), T([2.5], "float32"))])
    add(op + "/negative_index", op, [L(I([0, -1])), L(T([1.0, 2.0], "float32"))])
    add(op + "/negative_index_second_input", op,
        [L(I([0, 1]), I([3, -1, 2])), L(T([1.0, 2.0], "float32"), T([3.0, 4.0, 5.0], "float32"))])
    add(op + "/empty_inputs", op, [L(I([], shape=[0])), L(T([], "float32", [0, 2]))])
    if full:
        add(op + "/empty_inputs_1d", op, [L(I([], shape=[0])), L(T([], "float32", [0]))])
        add(op + "/gap_unfilled_rows_string_2", op, [L(I([1]), I([3])), L(T(["a"], "string"), T(["b"], "string"))])
        add(op + "/shape_mismatch_prefix_rank", op, [L(I([[0, 1]])), L(T([1.0, 2.0], "float32"))])
        add(op + "/data_dtype_mismatch", op, [L(I([0]), I([1])), L(T([1.0], "float32"), T([1.0], "float64"))])
    add(op + "/empty_and_nonempty", op,
        [L(I([], shape=[0]), I([1, 0])), L(T([], "float32", [0, 2]), T([[1, 2], [3, 4]], "float32"))])
    add(op + "/multi_dim_indices", op, [L(I([[0, 2], [1, 3]])), L(arange([2, 2, 3], "int32"))])
    add(op + "/shape_mismatch_data_rows", op, [L(I([0, 1])), L(T([1.0, 2.0, 3.0], "float32"))])
    add(op + "/shape_mismatch_inner", op,
        [L(I([0]), I([1])), L(T([[1.0, 2.0]], "float32"), T([[1.0, 2.0, 3.0]], "float32"))])
    add(op + "/n_mismatch", op, [L(I([0]), I([1])), L(T([1.0], "float32"))])
    add(op + "/large_index", op, [L(I([9])), L(T([1], "int8"))])


def build_static():
    f32 = "float32"
    # ---- ScatterNd
    op = "ScatterNd"
    add(op + "/static_fully_known", op, [I([[1], [3]]), T([1.0, 2.0], f32), I([5])], static=True)
    add(op + "/static_partial_shape", op,
        [P("int32", [None, 1]), P(f32, [None, 3]), I([4, 3])], static=True)
    add(op + "/static_unknown_rank_indices", op, [P("int32", None), P(f32, None), I([4, 3])], static=True)
    add(op + "/static_shape_placeholder_known_len", op, [I([[1]]), P(f32, [1, 3]), P("int32", [2])], static=True)
    add(op + "/static_shape_placeholder_unknown_len", op, [I([[1]]), P(f32, [1, 3]), P("int32", [None])], static=True)
    add(op + "/static_shape_placeholder_unknown_rank", op, [I([[1]]), P(f32, [1, 3]), P("int32", None)], static=True)
    add(op + "/static_depth_gt_rank", op, [P("int32", [2, 3]), P(f32, [2]), I([4, 3])], static=True)
    add(op + "/static_depth_gt_rank_constant_indices", op, [I([[1, 2, 0]]), T([1.0], f32), I([4, 3])], static=True)
    add(op + "/static_updates_lower_rank_than_outer", op, [P("int32", [2, 2, 1]), P(f32, [2]), I([5])], static=True)
    add(op + "/static_update_mismatch_known", op, [P("int32", [2, 1]), P(f32, [2, 4]), I([4, 3])], static=True)
    add(op + "/static_update_mismatch_outer", op, [P("int32", [2, 1]), P(f32, [3, 3]), I([4, 3])], static=True)
    add(op + "/static_update_mismatch_partial", op, [P("int32", [None, 1]), P(f32, [None, 2]), I([4, 3])], static=True)
    add(op + "/static_update_partial_compatible", op, [P("int32", [None, 2]), P(f32, [5, None]), I([4, 3, 7])], static=True)
    add(op + "/static_unknown_depth", op, [P("int32", [2, None]), P(f32, [2, 3]), I([4, 3])], static=True)
    add(op + "/static_negative_dim_shape", op, [I([[1]]), T([1.0], f32), I([-1])], static=True)
    add(op + "/static_shape_rank2", op, [I([[1]]), T([1.0], f32), I([[5]])], static=True)
    add(op + "/static_index_dtype_float", op, [T([[1.0]], f32), T([1.0], f32), I([5])], static=True)
    add(op + "/static_index_shape_dtype_mismatch", op, [I([[1]]), T([1.0], f32), I([5], "int64")], static=True)
    add(op + "/static_rank1_indices", op, [P("int32", [2]), P(f32, [3]), I([4, 5, 3])], static=True)
    add(op + "/static_scalar_updates", op, [P("int32", [2, 1]), P(f32, []), I([5])], static=True)
    add(op + "/static_oob_constant_index", op, [I([[9]]), T([1.0], f32), I([5])], static=True)
    # ---- TensorScatter*
    for op in TS_OPS:
        full = op in ("TensorScatterUpdate", "TensorScatterAdd")
        add(op + "/static_fully_known", op, [P(f32, [5, 3]), P("int32", [2, 1]), P(f32, [2, 3])], static=True)
        add(op + "/static_partial_tensor", op, [P(f32, [None, 3]), P("int32", [None, 1]), P(f32, [None, 3])], static=True)
        add(op + "/static_depth_gt_rank", op, [P(f32, [5]), P("int32", [2, 2]), P(f32, [2])], static=True)
        add(op + "/static_update_mismatch_known", op, [P(f32, [5, 3]), P("int32", [2, 1]), P(f32, [2, 4])], static=True)
        add(op + "/static_scalar_updates", op, [P(f32, [5]), P("int32", [2, 1]), P(f32, [])], static=True)
        if not full:
            continue
        add(op + "/static_updates_lower_rank_than_outer", op,
            [P(f32, [5]), P("int32", [2, 2, 1]), P(f32, [2])], static=True)
        add(op + "/static_rank1_indices", op, [P(f32, [3, 4]), P("int32", [1]), P(f32, [4])], static=True)
        add(op + "/static_unknown_rank_tensor", op, [P(f32, None), P("int32", [2, 1]), P(f32, [2, 3])], static=True)
        add(op + "/static_unknown_rank_all", op, [P(f32, None), P("int32", None), P(f32, None)], static=True)
        add(op + "/static_update_mismatch_partial", op, [P(f32, [None, 3]), P("int32", [None, 1]), P(f32, [None, 4])], static=True)
        add(op + "/static_dtype_mismatch", op, [P(f32, [5]), P("int32", [2, 1]), P("float64", [2])], static=True)
        add(op + "/static_index_dtype_float", op, [P(f32, [5]), P(f32, [2, 1]), P(f32, [2])], static=True)
    # ---- GatherNd
    op = "GatherNd"
    add(op + "/static_fully_known", op, [P(f32, [2, 3, 4]), P("int32", [5, 2])], static=True)
    add(op + "/static_partial", op, [P(f32, [None, 3, 4]), P("int32", [None, 2])], static=True)
    add(op + "/static_unknown_depth", op, [P(f32, [2, 3, 4]), P("int32", [5, None])], static=True)
    add(op + "/static_unknown_rank_params", op, [P(f32, None), P("int32", [5, 2])], static=True)
    add(op + "/static_unknown_rank_indices", op, [P(f32, [2, 3]), P("int32", None)], static=True)
    add(op + "/static_depth_gt_rank", op, [P(f32, [2, 3]), P("int32", [5, 3])], static=True)
    add(op + "/static_scalar_result", op, [P(f32, [2, 3]), P("int32", [2])], static=True)
    add(op + "/static_const_oob_index", op, [P(f32, [2, 3]), I([[5, 0]])], static=True)
    add(op + "/static_index_dtype_float", op, [P(f32, [2, 3]), P(f32, [1, 2])], static=True)
    add(op + "/static_batch_dims1", op, [P(f32, [2, 3, 4]), P("int32", [2, 5, 1])], {"batch_dims": 1}, static=True)
    add(op + "/static_batch_dims1_partial", op, [P(f32, [None, 3, 4]), P("int32", [None, 5, 2])], {"batch_dims": 1}, static=True)
    add(op + "/static_batch_dims2", op, [P(f32, [2, 3, 4]), P("int32", [2, 3, 1])], {"batch_dims": 2}, static=True)
    add(op + "/static_batch_dims_gt_rank", op, [P(f32, [2, 3]), P("int32", [2, 1])], {"batch_dims": 3}, static=True)
    add(op + "/static_batch_dims1_mismatch", op, [P(f32, [2, 3]), P("int32", [3, 1])], {"batch_dims": 1}, static=True)
    # ---- DynamicPartition
    op = "DynamicPartition"
    add(op + "/static_fully_known", op, [P(f32, [6, 3]), P("int32", [6])], {"num_partitions": 2}, static=True)
    add(op + "/static_partial", op, [P(f32, [None, 3]), P("int32", [None])], {"num_partitions": 3}, static=True)
    add(op + "/static_unknown_rank_data", op, [P(f32, None), P("int32", [4])], {"num_partitions": 2}, static=True)
    add(op + "/static_unknown_rank_partitions", op, [P(f32, [4, 3]), P("int32", None)], {"num_partitions": 2}, static=True)
    add(op + "/static_2d_partitions", op, [P(f32, [2, 3, 4]), P("int32", [2, 3])], {"num_partitions": 2}, static=True)
    add(op + "/static_constant_inputs", op, [T([1.0, 2.0, 3.0], f32), I([0, 1, 1])], {"num_partitions": 2}, static=True)
    add(op + "/static_mismatch", op, [P(f32, [4, 3]), P("int32", [5])], {"num_partitions": 2}, static=True)
    add(op + "/static_partitions_rank_gt_data", op, [P(f32, [4]), P("int32", [4, 1])], {"num_partitions": 2}, static=True)
    add(op + "/static_num_partitions_0", op, [P(f32, [4]), P("int32", [4])], {"num_partitions": 0}, static=True)
    add(op + "/static_partitions_int64", op, [P(f32, [4]), P("int64", [4])], {"num_partitions": 2}, static=True)
    add(op + "/static_partitions_uint8", op, [P(f32, [4]), P("uint8", [4])], {"num_partitions": 2}, static=True)
    # ---- DynamicStitch / ParallelDynamicStitch
    for op in ["DynamicStitch", "ParallelDynamicStitch"]:
        full = op == "DynamicStitch"
        add(op + "/static_constant_indices", op,
            [L(I([0, 5]), I([[2], [1]])), L(P(f32, [2, 3]), P(f32, [2, 1, 3]))], static=True)
        add(op + "/static_constant_indices_constant_data", op,
            [L(I([0, 2])), L(T([1.0, 2.0], f32))], static=True)
        add(op + "/static_placeholder_indices_known", op,
            [L(P("int32", [2]), P("int32", [3])), L(P(f32, [2, 4]), P(f32, [3, 4]))], static=True)
        if full:
            add(op + "/static_placeholder_indices_partial", op,
                [L(P("int32", [None]), P("int32", [None])), L(P(f32, [None, 4]), P(f32, [None, None]))], static=True)
        add(op + "/static_mixed_constant_placeholder", op,
            [L(I([0, 3]), P("int32", [2])), L(P(f32, [2]), P(f32, [2]))], static=True)
        add(op + "/static_unknown_rank_data", op,
            [L(P("int32", [2])), L(P(f32, None))], static=True)
        if full:
            add(op + "/static_unknown_rank_indices", op,
                [L(P("int32", None)), L(P(f32, [2, 3]))], static=True)
        if full:
            add(op + "/static_unknown_rank_all", op,
                [L(P("int32", None)), L(P(f32, None))], static=True)
        add(op + "/static_shape_mismatch", op,
            [L(P("int32", [2]), P("int32", [3])), L(P(f32, [2, 4]), P(f32, [3, 5]))], static=True)
        if full:
            add(op + "/static_prefix_mismatch", op,
                [L(P("int32", [2])), L(P(f32, [3, 4]))], static=True)
        add(op + "/static_negative_constant_index", op,
            [L(I([0, -1])), L(P(f32, [2]))], static=True)
        add(op + "/static_index_dtype_int64", op,
            [L(P("int64", [2])), L(P(f32, [2]))], static=True)
        if full:
            add(op + "/static_empty_constant_indices", op,
                [L(I([], shape=[0])), L(P(f32, [0, 3]))], static=True)


def build_cases():
    build_scatter_nd()
    build_tensor_scatter()
    build_gather_nd()
    build_dynamic_partition()
    build_stitch("DynamicStitch")
    build_stitch("ParallelDynamicStitch")
    build_static()
    return CASES


# ---------------------------------------------------------------------------
# Worker (imports TensorFlow)
# ---------------------------------------------------------------------------

def worker_main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import tensorflow as tf  # noqa: E402

    out = sys.stdout
    sys.stdout = sys.stderr  # anything TF prints must not corrupt the protocol

    def to_tf(x):
        if "list" in x:
            return [to_tf(v) for v in x["list"]]
        if "placeholder" in x:
            p = x["placeholder"]
            return tf.compat.v1.placeholder(tf.as_dtype(p["dtype"]), shape=p["shape"])
        return tf.constant(decode_array(x), dtype=tf.as_dtype(x["dtype"]))

    def err(e):
        if isinstance(e, tf.errors.OpError):
            msg = e.message
        else:
            msg = str(e)
        return {"error": type(e).__name__, "message": msg}

    def call(op, args, attrs):
        attrs = dict(attrs)
        if op == "GatherNd" and "batch_dims" in attrs:
            return tf.gather_nd(args[0], args[1], **attrs)
        kwargs = dict(zip(OP_INPUTS[op], args))
        kwargs.update(attrs)
        return getattr(tf.raw_ops, op)(**kwargs)

    def outputs(res):
        if isinstance(res, (list, tuple)):
            return list(res)
        return [res]

    def run_value(case):
        try:
            with tf.device("/CPU:0"):
                args = [to_tf(x) for x in case["inputs"]]
                res = outputs(call(case["op"], args, case["attrs"]))
                vals = [encode_array(r.numpy(), r.dtype.name) for r in res]
            return {"values": vals}
        except Exception as e:  # noqa: BLE001
            return err(e)

    def run_static(case):
        g = tf.Graph()
        try:
            with g.as_default():
                args = [to_tf(x) for x in case["inputs"]]
                res = outputs(call(case["op"], args, case["attrs"]))
                shapes = [None if r.shape.rank is None else r.shape.as_list() for r in res]
                dtypes = [r.dtype.name for r in res]
            return {"shapes": shapes, "dtypes": dtypes}
        except Exception as e:  # noqa: BLE001
            return err(e)

    out.write(json.dumps({"ready": tf.__version__}) + "\n")
    out.flush()
    for line in sys.stdin:
        case = json.loads(line)
        res = run_static(case) if case.get("static") else run_value(case)
        out.write(json.dumps(res) + "\n")
        out.flush()


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

class Worker:
    def __init__(self):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONHASHSEED="0"))
        hello = self._read(300)
        if hello is None:
            raise RuntimeError("worker failed to start: " + self.stderr_tail())
        self.version = json.loads(hello)["ready"]

    def _read(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            return None
        line = self.proc.stdout.readline()
        return line.decode() if line else None

    def stderr_tail(self, n=1500):
        self.log.seek(0)
        data = self.log.read().decode(errors="replace")
        lines = [ln for ln in data.splitlines() if ln.strip()]
        # the CHECK-failure / fatal line comes before the stack trace
        fatal = [ln for ln in lines if "Check failed" in ln or ln.startswith("F0000")
                 or "Fatal Python error" in ln or "Aborted" in ln]
        rest = [ln for ln in lines if not ln.lstrip().startswith("@")]
        return "\n".join((fatal or rest[-4:])[-4:])[-n:]

    def run(self, case):
        try:
            self.proc.stdin.write((json.dumps(case) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            return None
        line = self._read(CASE_TIMEOUT_S)
        return json.loads(line) if line else None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        rc = self.proc.returncode
        return rc


def main():
    cases = build_cases()
    worker = Worker()
    if worker.version != TF_VERSION:
        print("WARNING: TensorFlow %s, corpus is meant for %s" % (worker.version, TF_VERSION),
              file=sys.stderr)
    done, crashes = [], []
    for case in cases:
        res = worker.run(case)
        if res is None:
            rc = worker.kill()
            tail = worker.stderr_tail()
            crashes.append({"id": case["id"], "returncode": rc, "stderr_tail": tail})
            print("CRASH/HANG (skipped) %s rc=%s\n%s" % (case["id"], rc, tail), file=sys.stderr)
            worker = Worker()
            continue
        c = dict(case)
        c["expect"] = res
        done.append(c)
    worker.kill()
    doc = {"tf_version": worker.version, "cases": done}
    with open(OUT_PATH, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"), sort_keys=False)
        f.write("\n")
    per_op = {}
    for c in done:
        per_op[c["op"]] = per_op.get(c["op"], 0) + 1
    print(json.dumps({"written": OUT_PATH, "cases": len(done), "per_op": per_op,
                      "crashes": crashes}, indent=1))


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker_main()
    else:
        main()
