#!/usr/bin/env python
"""Generate the TensorFlow golden corpus ``tf_cases_wave4.json`` for the ops of
issue #35 (dense math, reductions, nn, segment and selection ops).

REQUIRES TENSORFLOW.  Not run by the test suite: test_tf_conformance_wave4.py only
replays the JSON and never imports TensorFlow.  Usage::

    /tmp/tfvenv/bin/python tests/conformance/generate_tf_cases_wave4.py

The machinery is generate_tf_cases.py's (imported, not copied): the TENSOR encoding
(``T``, ``P``, ``encode_array``/``decode_array``), the worker subprocess that a
TensorFlow crash kills alone, and its driver.  What this file adds:

* Inputs are passed by position; the worker names them from TensorFlow's own op
  definition (``op_def_registry``), so no input-name table is kept here.
* A third input kind, ``F(tensor, shape)``: a placeholder of a partial shape (default:
  unknown rank) *fed* with ``tensor`` at run time.  A case holding one runs in a
  ``tf.compat.v1`` graph and session, so that a bad shape reaches the CPU kernel and
  its run-time error (not the shape function's) is recorded.  The other value cases
  run eagerly through ``tf.raw_ops`` on the CPU.
* ``signatures``: per op, TensorFlow's input / output argument names, attr names and
  ``tf.raw_ops``' keyword names of the inputs (Mean's ``axis`` is the op def's
  ``reduction_indices``), so the replay can check graphflow declares the ops in TF's words.
* Messages of the errors that refuse a dtype are cut before TF's ``; NodeDef`` tail
  (it repeats the whole op definition), which keeps the JSON small.

Every case is a dtype sweep over the 15 dtypes (values where TF's CPU kernel takes the
dtype, TF's error elsewhere), or one shape / special value / attr / error / static case.
"""

import inspect
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import generate_tf_cases as base  # noqa: E402
from generate_tf_cases import COMPLEX, DTYPES, FLOATS, P, T, decode_array, \
    encode_array  # noqa: E402,F401

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_PATH = os.path.join(HERE, "tf_cases_wave4.json")
NUMERIC = [d for d in DTYPES if d not in ("string", "bool")]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
F32, I32, I64 = "float32", "int32", "int64"
NAN, INF = float("nan"), float("inf")


def F(tensor, shape=None):
    """A placeholder of ``shape`` (None: unknown rank) fed with ``tensor`` at run time."""
    return {"feed": tensor, "shape": shape}


CASES = []
_IDS = set()


def add(cid, op, inputs, attrs=None, static=False):
    """Queue one case ``<op>/<cid>``."""
    cid = op + "/" + cid
    assert cid not in _IDS, cid
    _IDS.add(cid)
    case = {"id": cid, "op": op}
    if static:
        case["static"] = True
    case["inputs"] = inputs
    case["attrs"] = attrs or {}
    CASES.append(case)


def cast_values(values, dtype):
    """``values`` (python floats / complex) as data of ``dtype``: integers wrap as
    numpy's casts do, so a sweep can reuse one list."""
    if dtype == "bool":
        return [bool(v) for v in values]
    if dtype == "string":
        return ["s%s" % v for v in values]
    if dtype in COMPLEX:
        return [complex(v) for v in values]
    if dtype in FLOATS:
        return [float(v) for v in values]
    bits = np.iinfo(dtype).bits
    wrapped = [int(v) % 2 ** bits for v in values]
    if not dtype.startswith("uint"):
        wrapped = [v - 2 ** bits if v >= 2 ** (bits - 1) else v for v in wrapped]
    return wrapped


def V(values, dtype, shape=None):
    """A TENSOR of ``dtype`` from python values (cast as ``cast_values``); integers go
    straight to their dtype (numpy would make a float64 array of a uint64 max)."""
    if dtype in INTS:
        arr = np.array(cast_values(values, dtype), dtype=dtype)
        return encode_array(arr if shape is None else arr.reshape(shape), dtype)
    return T(cast_values(values, dtype), dtype, shape)


def rand(shape, dtype=F32, seed=0, lo=-4.0, hi=4.0):
    """Deterministic uniform values (floats: every bit used; integers: small)."""
    rng = np.random.default_rng(1000 + seed)
    n = int(np.prod(shape)) if shape else 1
    if dtype in FLOATS:
        vals = rng.uniform(lo, hi, n).astype(dtype).tolist()
    elif dtype in COMPLEX:
        vals = (rng.uniform(lo, hi, n) + 1j * rng.uniform(lo, hi, n)).tolist()
    elif dtype == "bool":
        vals = (rng.uniform(0, 1, n) > 0.5).tolist()
    else:
        lo_i = 0 if dtype.startswith("uint") else int(lo)
        vals = rng.integers(lo_i, int(hi) + 1, n).tolist()
    return V(vals, dtype, shape)


# ---------------------------------------------------------------------------
# Dense math
# ---------------------------------------------------------------------------
FLOAT_GRID = [-100.5, -20.0, -3.5, -2.5, -1.0, -0.5, -1e-4, -0.0, 0.0, 1e-4, 0.25, 0.5,
              1.0, 1.5, 2.5, 3.0, 6.0, 6.5, 20.0, 100.5, NAN, INF, -INF]
SIGNED_GRID = [-100, -7, -2, -1, 0, 1, 2, 3, 6, 7, 100]
UNSIGNED_GRID = [0, 1, 2, 3, 6, 7, 100, 200]
COMPLEX_GRID = [1 + 2j, -1 - 0.5j, 0j, 3j, -2 + 0j, 0.5 - 0.5j, 0.25 + 4j]

UNARY = ["Exp", "Log", "Log1p", "Expm1", "Sqrt", "Rsqrt", "Square", "Reciprocal", "Abs",
         "Sign", "Floor", "Ceil", "Round", "Sigmoid", "Tanh", "Relu", "Relu6", "Elu",
         "Selu", "Softplus", "Softsign", "LeakyRelu"]


def grid(dtype):
    """The sweep input of a unary op for ``dtype``."""
    if dtype in FLOATS:
        return V(FLOAT_GRID, dtype)
    if dtype in COMPLEX:
        return V(COMPLEX_GRID, dtype)
    if dtype.startswith("uint"):
        info = np.iinfo(dtype)
        return V(UNSIGNED_GRID[:-1] + [min(200, info.max), info.max], dtype)
    if dtype in INTS:
        info = np.iinfo(dtype)
        return V(SIGNED_GRID + [info.min, info.max], dtype)
    return V([1, 0, 1], dtype)


def build_unary():
    for op in UNARY:
        for dt in DTYPES:
            add("dtype_" + dt, op, [grid(dt)])
        add("scalar", op, [V([2.5], F32, [])])
        add("empty", op, [V([], F32, [0])])
        add("empty_2x0", op, [V([], "float64", [2, 0])])
        add("rank3_random", op, [rand([2, 3, 4], F32, seed=UNARY.index(op), lo=-10, hi=10)])
        add("float16_random", op, [rand([16], "float16", seed=3, lo=-12, hi=12)])
        add("float64_random", op, [rand([16], "float64", seed=4, lo=-30, hi=30)])
    for x in ["subnormal", "extremes"]:
        vals = [1e-40, -1e-40, 1e-45, 1e-38] if x == "subnormal" else \
            [3.4e38, -3.4e38, 88.7, 88.8, -87.3, -103.9, 15.9, -15.9, 9.0, -9.0]
        for op in ["Exp", "Expm1", "Log", "Log1p", "Sqrt", "Rsqrt", "Sigmoid", "Tanh",
                   "Softplus", "Reciprocal", "Elu", "Selu"]:
            add("float32_" + x, op, [V(vals, F32)])
    for alpha in [0.01, 1.5, -0.5, 0.0]:
        add("alpha_%s" % alpha, "LeakyRelu", [V(FLOAT_GRID, F32)], {"alpha": alpha})
    add("alpha_float64", "LeakyRelu", [V(FLOAT_GRID, "float64")], {"alpha": 0.3})
    add("round_halves", "Round", [V([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 0.49999997],
                                    F32)])
    add("round_halves_float16", "Round", [V([-2.5, -0.5, 0.5, 1.5, 2.5, 1024.5], "float16")])
    add("softplus_thresholds", "Softplus",
        [V([-17.0, -15.0, -14.0, 13.0, 14.0, 15.9, 16.0, 17.0, 30.0, 40.0], F32)])
    add("softplus_thresholds_f64", "Softplus",
        [V([-37.0, -35.0, -33.0, 33.0, 34.0, 35.0, 36.0, 37.0, 40.0], "float64")])
    add("softplus_thresholds_f16", "Softplus",
        [V([-9.0, -8.0, -7.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0], "float16")])
    add("complex_specials", "Sign", [V([0j, -0.0 + 0j, 3 - 4j, -2j], "complex64")])
    add("complex_zero", "Log", [V([0j, -1 + 0j, 1j], "complex128")])
    add("complex_negative", "Sqrt", [V([-4 + 0j, -1 - 0j, 1j, -3 - 4j], "complex128")])


def build_binary():
    for op in ["Pow", "SquaredDifference"]:
        for dt in DTYPES:
            if dt in INTS:
                x = V([2, 3, 0, 1, 5, 7], dt, [2, 3])
                y = V([3, 2, 0, 4, 1, 2], dt, [2, 3])
            elif dt in COMPLEX:
                x, y = V([1 + 1j, 2, -1j, 0.5, 3 - 1j, 1], dt, [2, 3]), \
                    V([2, 0.5 + 1j, 3, -1, 1j, 0], dt, [2, 3])
            else:
                x, y = rand([2, 3], dt, seed=11, lo=0.1, hi=3), rand([2, 3], dt, seed=12, lo=-3, hi=3)
            add("dtype_" + dt, op, [x, y])
        add("broadcast_row", op, [rand([2, 3], F32, 13, 0.1, 3), rand([3], F32, 14, -2, 2)])
        add("broadcast_outer", op, [rand([2, 1], F32, 15, 0.1, 3), rand([1, 3], F32, 16, -2, 2)])
        add("broadcast_scalar_x", op, [V([2.0], F32, []), rand([2, 2], F32, 17)])
        add("broadcast_scalar_y", op, [rand([4], "float64", 18, 0.1, 5), V([0.5], "float64", [])])
        add("broadcast_rank3", op, [rand([2, 1, 3], F32, 19, 0.1, 3), rand([4, 1], F32, 20)])
        add("scalar", op, [V([3.0], F32, []), V([2.0], F32, [])])
        add("empty_broadcast", op, [V([], F32, [0]), V([1.0], F32, [1])])
        add("empty_2d", op, [V([], F32, [0, 3]), V([1.0, 2.0, 3.0], F32, [3])])
        add("incompatible", op, [V([1, 2], F32, [2]), V([1, 2, 3], F32, [3])])
        add("incompatible_fed", op, [F(V([1, 2], F32, [2])), F(V([1, 2, 3], F32, [3]))])
        add("int32_overflow", op, [V([70000, -70000, 2 ** 30], I32), V([70000, 3, 2], I32)])
    sp = [0.0, -0.0, 0.0, 1.0, -1.0, -8.0, 2.0, INF, -INF, NAN, NAN, 1.0, -1.0, 0.5, INF, 0.0]
    ex = [0.0, -1.0, -1.0, NAN, INF, 1 / 3, 0.5, 0.0, 3.0, 0.0, 1.0, INF, -INF, -INF, -2.0, 0.5]
    for dt in ["float16", "float32", "float64"]:  # FLOATS is a set: no fixed order
        add("specials_" + dt, "Pow", [V(sp, dt), V(ex, dt)])
    add("specials", "SquaredDifference", [V(sp, F32), V(ex, F32)])
    add("large_f16", "SquaredDifference", [V([300, -200], "float16"), V([-100, 100], "float16")])
    add("int_zero_to_zero", "Pow", [V([0, 0, 2, -2, -3], I32), V([0, 1, 10, 3, 31], I32)])
    add("int_negative_exponent", "Pow", [V([2, 3], I32), V([1, -1], I32)])
    add("int64_negative_exponent", "Pow", [V([1, 2], I64), V([-2, 2], I64)])
    add("int64_wrap", "Pow", [V([3, -5], I64), V([41, 29], I64)])
    add("complex_zero_base", "Pow", [V([0j, 0j, 1j], "complex128"), V([2, 0, 2], "complex128")])


def build_matmul():
    op = "MatMul"
    for dt in DTYPES:
        add("dtype_" + dt, op, [rand([2, 3], dt, 21), rand([3, 4], dt, 22)])
    for ta in (False, True):
        for tb in (False, True):
            a = rand([3, 2] if ta else [2, 3], F32, 23)
            b = rand([4, 3] if tb else [3, 4], F32, 24)
            add("transpose_%d%d" % (ta, tb), op, [a, b], {"transpose_a": ta, "transpose_b": tb})
    add("transpose_complex", op, [rand([3, 2], "complex64", 25), rand([4, 3], "complex64", 26)],
        {"transpose_a": True, "transpose_b": True})
    add("empty_rows", op, [V([], F32, [0, 3]), rand([3, 4], F32, 27)])
    add("empty_inner", op, [V([], F32, [2, 0]), V([], F32, [0, 4])])
    add("empty_cols", op, [rand([2, 3], F32, 28), V([], F32, [3, 0])])
    add("empty_inner_int32", op, [V([], I32, [2, 0]), V([], I32, [0, 2])])
    add("larger_f32", op, [rand([17, 33], F32, 29), rand([33, 9], F32, 30)])
    add("larger_f16", op, [rand([8, 64], "float16", 31), rand([64, 5], "float16", 32)])
    add("larger_f64", op, [rand([9, 40], "float64", 33), rand([40, 7], "float64", 34)])
    add("int32_wrap", op, [V([70000, 70000], I32, [1, 2]), V([70000, 1], I32, [2, 1])])
    add("nan_inf", op, [V([NAN, 1, INF, 0], F32, [2, 2]), V([1, 0, 0, 1], F32, [2, 2])])
    add("inf_times_zero", op, [V([INF, 1], F32, [1, 2]), V([0, 1], F32, [2, 1])])
    add("inner_mismatch_fed", op, [F(rand([2, 3], F32, 35)), F(rand([4, 2], F32, 36))])
    add("inner_mismatch_fed_transposed", op, [F(rand([2, 3], F32, 37), [None, None]),
                                               F(rand([2, 4], F32, 38), [None, None])],
        {"transpose_a": True, "transpose_b": True})
    add("rank3_fed", op, [F(rand([2, 2, 2], F32, 39)), F(rand([2, 2], F32, 40))])
    add("rank1_fed", op, [F(rand([3], F32, 41)), F(rand([3, 2], F32, 42))])
    add("rank3_const", op, [rand([2, 2, 2], F32, 43), rand([2, 2], F32, 44)])

    op = "BatchMatMulV2"
    for dt in DTYPES:
        add("dtype_" + dt, op, [rand([2, 2, 3], dt, 45), rand([2, 3, 2], dt, 46)])
    for ax in (False, True):
        for ay in (False, True):
            for dt in (F32, "complex128"):
                x = rand([2, 3, 2] if ax else [2, 2, 3], dt, 47)
                y = rand([2, 4, 3] if ay else [2, 3, 4], dt, 48)
                add("adj_%d%d_%s" % (ax, ay, dt), op, [x, y], {"adj_x": ax, "adj_y": ay})
    add("broadcast_batch", op, [rand([2, 1, 2, 3], F32, 49), rand([3, 3, 2], F32, 50)])
    add("broadcast_rank2_x", op, [rand([2, 3], F32, 51), rand([4, 3, 2], F32, 52)])
    add("broadcast_rank2_y", op, [rand([4, 2, 3], "float64", 53), rand([3, 2], "float64", 54)])
    add("rank2_both", op, [rand([2, 3], F32, 55), rand([3, 2], F32, 56)])
    add("empty_batch", op, [V([], F32, [0, 2, 3]), rand([3, 2], F32, 57)])
    add("empty_inner", op, [V([], F32, [2, 2, 0]), V([], F32, [2, 0, 3])])
    add("larger_f16", op, [rand([3, 8, 40], "float16", 58), rand([3, 40, 4], "float16", 59)])
    add("inner_mismatch_fed", op, [F(rand([2, 2, 3], F32, 60)), F(rand([2, 2, 3], F32, 61))])
    add("batch_mismatch_fed", op, [F(rand([2, 2, 3], F32, 62)), F(rand([3, 3, 2], F32, 63))])
    add("rank1_fed", op, [F(rand([3], F32, 64)), F(rand([3, 2], F32, 65))])
    add("batch_mismatch_const", op, [rand([2, 2, 3], F32, 66), rand([3, 3, 2], F32, 67)])

    op = "BiasAdd"
    for dt in DTYPES:
        add("dtype_" + dt, op, [rand([2, 3], dt, 68), rand([3], dt, 69)])
    add("rank4_nhwc", op, [rand([2, 2, 2, 3], F32, 70), rand([3], F32, 71)])
    add("rank4_nchw", op, [rand([2, 3, 2, 2], F32, 72), rand([3], F32, 73)],
        {"data_format": "NCHW"})
    add("rank3_nchw", op, [rand([2, 3, 4], F32, 74), rand([3], F32, 75)], {"data_format": "NCHW"})
    add("rank2_nchw", op, [rand([2, 3], F32, 76), rand([3], F32, 77)], {"data_format": "NCHW"})
    add("rank5_nchw", op, [rand([1, 2, 1, 2, 2], F32, 78), rand([2], F32, 79)],
        {"data_format": "NCHW"})
    add("empty_batch", op, [V([], F32, [0, 3]), rand([3], F32, 80)])
    add("nan_inf", op, [V([NAN, INF, -INF, 1], F32, [2, 2]), V([INF, 1], F32, [2])])
    add("bias_mismatch_fed", op, [F(rand([2, 3], F32, 81)), F(rand([4], F32, 82))])
    add("bias_mismatch_nchw_fed", op, [F(rand([2, 3, 4], F32, 83)), F(rand([4], F32, 84))],
        {"data_format": "NCHW"})
    add("rank1_value_fed", op, [F(rand([3], F32, 85)), F(rand([3], F32, 86))])
    add("rank2_bias_fed", op, [F(rand([2, 3], F32, 87)), F(rand([1, 3], F32, 88))])


# ---------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------
def build_reductions():
    for op in ["Mean", "Max", "Min", "Any", "All"]:
        logical = op in ("Any", "All")
        for dt in DTYPES:
            add("dtype_" + dt, op, [rand([2, 3], dt, 90), V([1], I32)])
        dt = "bool" if logical else F32
        x = rand([2, 3, 4], dt, 91)
        for axis, tag in [([0], "axis0"), ([-1], "axis_neg1"), ([0, 2], "axes02"),
                          ([], "no_axes"), ([0, 1, 2], "all_axes"), ([2, 0], "axes_reversed")]:
            add(tag, op, [x, V(axis, I32)])
            add(tag + "_keep_dims", op, [x, V(axis, I32)], {"keep_dims": True})
        add("axis_scalar", op, [x, V([1], I32, [])])
        add("axis_int64", op, [x, V([1, -1], I64)])
        add("scalar_input", op, [V([1], dt, []), V([], I32, [0])])
        add("scalar_input_axis0", op, [V([1], dt, []), V([0], I32)])
        add("empty_reduced", op, [V([], dt, [0, 3]), V([0], I32)])
        add("empty_reduced_float64", op, [V([], "bool" if logical else "float64", [2, 0]),
                                          V([1], I32)])
        add("empty_kept", op, [V([], dt, [0, 3]), V([1], I32)], {"keep_dims": True})
        add("empty_int32_reduced", op, [V([], "bool" if logical else I32, [0, 2]), V([0], I32)])
        add("axis_out_of_range", op, [F(x), F(V([3], I32))])
        add("axis_out_of_range_negative", op, [F(x), F(V([-4], I32))])
        add("axis_duplicate", op, [F(x), F(V([1, 1], I32))])
        add("axis_duplicate_neg", op, [F(x), F(V([1, -2], I32))])
        add("axis_rank2", op, [F(x), F(V([0, 1], I32, [1, 2]))])
        if logical:
            continue
        add("nan", op, [V([1, NAN, 3, -INF, 2, INF], F32, [2, 3]), V([1], I32)])
        add("nan_first", op, [V([NAN, 1, 2, 3, NAN, 0], F32, [2, 3]), V([0], I32)])
        add("neg_zero", op, [V([-0.0, 0.0, 0.0, -0.0], F32, [2, 2]), V([1], I32)])
        add("float16", op, [rand([3, 50], "float16", 92, 0, 60), V([1], I32)])
        add("float16_large", op, [V([60000, 60000, -1000, 7], "float16", [1, 4]), V([1], I32)])
        add("float32_long", op, [rand([3, 400], F32, 93), V([1], I32)])
        add("float32_all_long", op, [rand([30, 70], F32, 94), V([0, 1], I32)])
        add("int_extremes", op, [V([np.iinfo(np.int32).max, np.iinfo(np.int32).max, -3, -4,
                                    1, 2], I32, [3, 2]), V([1], I32)])
        add("int8", op, [V([-7, -2, 5, 127, 127, 1], "int8", [2, 3]), V([1], I32)])
        add("uint8", op, [V([250, 3, 8, 255, 254, 1], "uint8", [2, 3]), V([1], I32)])
        add("complex", op, [rand([2, 3], "complex64", 95), V([1], I32)])
    add("ties", "Max", [V([2, 5, 5, 1, -1, -1], I32, [2, 3]), V([1], I32)])
    add("int_truncation", "Mean", [V([-7, -2, 0, 7, 2, 1, -1, 0, 0], I32, [3, 3]), V([1], I32)])
    add("int64_truncation", "Mean", [V([-5, -5, 1, 5, 5, 1], I64, [2, 3]), V([1], I32)])
    add("uint8_mean", "Mean", [V([250, 250, 1, 255, 1, 2], "uint8", [2, 3]), V([1], I32)])


# ---------------------------------------------------------------------------
# nn ops
# ---------------------------------------------------------------------------
def build_nn():
    for op in ["Softmax", "LogSoftmax"]:
        for dt in DTYPES:
            add("dtype_" + dt, op, [rand([2, 5], dt, 100)])
        add("rank1", op, [rand([7], F32, 101)])
        add("rank3", op, [rand([2, 3, 4], F32, 102)])
        add("one_class", op, [rand([3, 1], F32, 103)])
        add("empty_batch", op, [V([], F32, [0, 3])])
        add("empty_classes", op, [V([], F32, [2, 0])])
        add("huge_logits", op, [V([1000, 0, -1000, 3e38, 3e38, -3e38], F32, [2, 3])])
        add("huge_logits_f16", op, [V([60000, 0, -60000, 100, 99, 98], "float16", [2, 3])])
        add("huge_logits_f64", op, [V([1e300, 0, -1e300, 700, 710, 720], "float64", [2, 3])])
        add("neg_inf", op, [V([-INF, 0, 1, -INF, -INF, -INF], F32, [2, 3])])
        add("pos_inf", op, [V([INF, 0, 1, INF, INF, 1], F32, [2, 3])])
        add("nan", op, [V([NAN, 0, 1, 2, 3, 4], F32, [2, 3])])
        add("wide_rows", op, [rand([3, 300], F32, 104, -20, 20)])
        add("wide_rows_f16", op, [rand([2, 100], "float16", 105, -8, 8)])
        add("wide_rows_f64", op, [rand([2, 200], "float64", 106, -50, 50)])
        add("scalar_fed", op, [F(V([1.0], F32, []))])
        add("scalar_const", op, [V([1.0], F32, [])])

    op = "SoftmaxCrossEntropyWithLogits"

    def probs(shape, dt, seed):
        rng = np.random.default_rng(seed)
        p = rng.uniform(0, 1, shape)
        return V((p / p.sum(-1, keepdims=True)).reshape(-1).tolist(), dt, shape)
    for dt in DTYPES:
        add("dtype_" + dt, op, [rand([3, 4], dt, 110), probs([3, 4], dt, 111) if dt in FLOATS
                                else rand([3, 4], dt, 111)])
    add("one_hot_labels", op, [rand([3, 5], F32, 112), V(np.eye(5)[[1, 0, 4]].reshape(-1), F32,
                                                          [3, 5])])
    add("broadcast_labels_row", op, [rand([3, 4], F32, 113), probs([1, 4], F32, 114)])
    add("broadcast_features_row", op, [rand([1, 4], F32, 115), probs([3, 4], F32, 116)])
    add("labels_not_normalised", op, [rand([2, 3], F32, 117), V([2, 0, 1, -1, 0.5, 3], F32, [2, 3])])
    add("huge_logits", op, [V([1000, 0, -1000, 3e38, -3e38, 0], F32, [2, 3]),
                            V([0.5, 0.5, 0, 0, 1, 0], F32, [2, 3])])
    add("neg_inf_logit_zero_label", op, [V([-INF, 0, 1], F32, [1, 3]), V([0, 0.5, 0.5], F32, [1, 3])])
    add("neg_inf_logit_with_label", op, [V([-INF, 0, 1], F32, [1, 3]), V([1, 0, 0], F32, [1, 3])])
    add("nan_logit", op, [V([NAN, 0, 1, 1, 2, 3], F32, [2, 3]), V([0, 1, 0, 0, 0, 1], F32, [2, 3])])
    add("empty_batch", op, [V([], F32, [0, 3]), V([], F32, [0, 3])])
    add("empty_classes", op, [V([], F32, [2, 0]), V([], F32, [2, 0])])
    add("f16_wide", op, [rand([2, 60], "float16", 118, -6, 6), probs([2, 60], "float16", 119)])
    add("f64_wide", op, [rand([2, 90], "float64", 120, -30, 30), probs([2, 90], "float64", 121)])
    add("rank1_fed", op, [F(rand([4], F32, 122)), F(probs([4], F32, 123))])
    add("rank1_const", op, [rand([4], F32, 124), probs([4], F32, 125)])
    add("rank3_fed", op, [F(rand([2, 2, 3], F32, 126)), F(probs([2, 2, 3], F32, 127))])
    add("not_broadcastable_fed", op, [F(rand([2, 3], F32, 128)), F(probs([3, 3], F32, 129))])

    op = "SparseSoftmaxCrossEntropyWithLogits"
    for dt in DTYPES:
        add("dtype_" + dt, op, [rand([3, 4], dt, 130), V([0, 3, 1], I64)])
    for lt in ["int32", "int64", "int16", "uint8", "float32"]:
        add("labels_" + lt, op, [rand([3, 4], F32, 131), V([2, 0, 3], lt)])
    add("one_class", op, [rand([2, 1], F32, 132), V([0, 0], I32)])
    add("huge_logits", op, [V([1000, 0, -1000, 3e38, -3e38, 0], F32, [2, 3]), V([2, 1], I32)])
    add("neg_inf_logit", op, [V([-INF, 0, 1, -INF, 0, 1], F32, [2, 3]), V([0, 1], I32)])
    add("nan_logit", op, [V([NAN, 0, 1, 1, 2, 3], F32, [2, 3]), V([1, 2], I32)])
    add("empty_batch", op, [V([], F32, [0, 3]), V([], I32, [0])])
    add("wide_f16", op, [rand([2, 70], "float16", 133, -6, 6), V([5, 69], I32)])
    add("wide_f64", op, [rand([2, 90], "float64", 134, -30, 30), V([0, 89], I64)])
    add("label_too_large", op, [F(rand([3, 3], F32, 135)), F(V([0, 3, 1], I32))])
    add("label_negative", op, [F(rand([3, 3], F32, 136)), F(V([0, 1, -1], I64))])
    add("label_too_large_int64", op, [F(rand([2, 4], F32, 137)), F(V([7, 9], I64))])
    add("no_classes_fed", op, [F(V([], F32, [2, 0])), F(V([0, 0], I32))])
    add("no_classes_empty_batch_fed", op, [F(V([], F32, [0, 0])), F(V([], I32, [0]))])
    add("batch_mismatch_fed", op, [F(rand([2, 3], F32, 138)), F(V([0, 1, 2], I32))])
    add("logits_rank1_fed", op, [F(rand([3], F32, 139)), F(V([0], I32))])
    add("labels_rank2_fed", op, [F(rand([2, 3], F32, 140)), F(V([0, 1], I32, [2, 1]))])

    op = "L2Loss"
    for dt in DTYPES:
        add("dtype_" + dt, op, [rand([2, 3], dt, 141)])
    add("scalar", op, [V([3.0], F32, [])])
    add("empty", op, [V([], F32, [0])])
    add("empty_2d", op, [V([], "float64", [3, 0])])
    add("nan_inf", op, [V([NAN, 1], F32)])
    add("inf", op, [V([-INF, 1], F32)])
    add("long_f32", op, [rand([1500], F32, 142)])
    add("long_f16", op, [rand([300], "float16", 143)])
    add("f16_overflow", op, [V([300, 300, 1], "float16")])
    add("long_f64", op, [rand([64, 33], "float64", 144)])


# ---------------------------------------------------------------------------
# Segment ops
# ---------------------------------------------------------------------------
UNSORTED = ["UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin",
            "UnsortedSegmentProd"]
SORTED = ["SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin", "SegmentProd"]


def build_segments():
    for op in UNSORTED:
        for dt in DTYPES:
            add("dtype_" + dt, op, [rand([5, 2], dt, 150, -3, 3), V([2, 0, 2, -1, 1], I32), V([3], I32, [])])
        data = rand([6, 3], F32, 151)
        add("basic", op, [data, V([0, 2, 0, 1, 2, 0], I32), V([3], I32, [])])
        add("ids_int64", op, [data, V([0, 2, 0, 1, 2, 0], I64), V([4], I64, [])])
        add("num_segments_int64", op, [data, V([0, 2, 0, 1, 2, 0], I32), V([3], I64, [])])
        add("negative_ids_dropped", op, [data, V([-1, 1, -5, 1, 0, -1], I32), V([2], I32, [])])
        add("empty_segments", op, [data, V([0, 0, 4, 4, 0, 4], I32), V([6], I32, [])])
        add("num_segments_0", op, [data, V([-1] * 6, I32), V([0], I32, [])])
        add("num_segments_0_empty", op, [V([], F32, [0, 3]), V([], I32, [0]), V([0], I32, [])])
        add("empty_data", op, [V([], F32, [0, 3]), V([], I32, [0]), V([2], I32, [])])
        add("scalar_ids_scalar_data", op, [V([4.0], F32, []), V([1], I32, []), V([3], I32, [])])
        add("ids_2d", op, [rand([2, 3, 2], F32, 152), V([0, 1, 0, 2, 2, -1], I32, [2, 3]), V([3], I32, [])])
        add("ids_same_shape_as_data", op, [rand([2, 3], F32, 153), V([0, 1, 0, 1, 1, 0], I32, [2, 3]),
                                           V([2], I32, [])])
        add("nan", op, [V([1, NAN, 2, NAN, NAN, 5], F32, [6]), V([0, 0, 1, 1, 2, 2], I32), V([3], I32, [])])
        add("inf", op, [V([INF, -INF, 2, INF, -INF, -INF], F32), V([0, 0, 1, 1, 2, 2], I32), V([3], I32, [])])
        add("neg_zero", op, [V([-0.0, 0.0, 0.0, -0.0], F32), V([0, 0, 1, 1], I32), V([2], I32, [])])
        add("float16_long", op, [rand([400], "float16", 154, -4, 4), V(list(range(4)) * 100, I32),
                                 V([4], I32, [])])
        add("float32_long", op, [rand([1000], F32, 155), V([i % 7 for i in range(1000)], I32),
                                 V([7], I32, [])])
        add("int8_wrap", op, [V([100, 100, 100, -100], "int8"), V([0, 0, 1, 1], I32), V([2], I32, [])])
        add("id_out_of_range", op, [F(data), F(V([0, 5, 0, 1, 2, 0], I32)), F(V([3], I32, []))])
        add("id_out_of_range_2d", op, [F(rand([2, 2], F32, 156)), F(V([0, 1, 2, 0], I32, [2, 2])),
                                       F(V([2], I32, []))])
        add("id_out_of_range_int64", op, [F(data), F(V([0, 0, 0, 1, 2, 3], I64)), F(V([3], I64, []))])
        add("negative_num_segments_fed", op, [F(data), F(V([0] * 6, I32)), F(V([-1], I32, []))])
        add("num_segments_vector_fed", op, [F(data), F(V([0] * 6, I32)), F(V([3], I32, [1]))])
        add("prefix_mismatch_fed", op, [F(data), F(V([0, 1, 0, 1, 0], I32)), F(V([3], I32, []))])
    for op in SORTED:
        for dt in DTYPES:
            add("dtype_" + dt, op, [rand([5, 2], dt, 160, -3, 3), V([0, 0, 1, 3, 3], I32)])
        data = rand([6, 3], F32, 161)
        add("basic", op, [data, V([0, 0, 1, 1, 1, 2], I32)])
        add("ids_int64", op, [data, V([0, 1, 1, 1, 4, 4], I64)])
        add("gaps", op, [data, V([1, 1, 3, 3, 3, 6], I32)])
        add("single_rows", op, [data, V([0, 1, 2, 3, 4, 5], I32)])
        add("one_segment", op, [data, V([0] * 6, I32)])
        add("rank1", op, [V([1, 2, 3, 4, 5], F32), V([0, 0, 2, 2, 2], I32)])
        add("rank3", op, [rand([4, 2, 2], F32, 162), V([0, 0, 0, 1], I32)])
        add("empty", op, [V([], F32, [0, 3]), V([], I32, [0])])
        add("empty_inner", op, [V([], F32, [3, 0]), V([0, 0, 1], I32)])
        add("nan", op, [V([1, NAN, NAN, 2, 3, NAN], F32), V([0, 0, 1, 1, 2, 2], I32)])
        add("inf", op, [V([INF, -INF, INF, 2, -INF, 5], F32), V([0, 0, 1, 1, 2, 2], I32)])
        add("int32", op, [V([-7, 2, 3, 5, -5, 8, 1], I32), V([0, 0, 1, 1, 1, 2, 2], I32)])
        add("int8_wrap", op, [V([100, 100, 100, -100, -128], "int8"), V([0, 0, 1, 1, 1], I32)])
        add("uint8", op, [V([200, 100, 7, 255, 1], "uint8"), V([0, 0, 0, 1, 1], I32)])
        add("float16_long", op, [rand([300], "float16", 163, -4, 4), V(sorted([i % 3 for i in range(300)]), I32)])
        add("float32_long", op, [rand([800], F32, 164), V(sorted([i % 5 for i in range(800)]), I32)])
        add("not_increasing", op, [F(data), F(V([0, 0, 2, 1, 1, 2], I32))])
        add("not_increasing_end", op, [F(data), F(V([0, 1, 2, 3, 4, 0], I32))])
        add("negative_first", op, [F(data), F(V([-1, -1, 0, 1, 1, 2], I32))])
        add("negative_only", op, [F(data), F(V([-1] * 6, I32))])
        add("negative_middle", op, [F(data), F(V([0, 0, -1, 1, 1, 2], I32))])
        add("ids_length_mismatch", op, [F(data), F(V([0, 0, 1, 1], I32))])
        add("ids_rank2", op, [F(data), F(V([0, 0, 1, 1, 1, 2], I32, [2, 3]))])
        add("scalar_data", op, [F(V([1.0], F32, [])), F(V([0], I32, []))])
    add("int_truncation", "SegmentMean", [V([-7, -2, 0, 7, 2, 1, -1, -1, 5], I32),
                                          V([0, 0, 0, 1, 1, 1, 2, 2, 3], I32)])


# ---------------------------------------------------------------------------
# Selection ops
# ---------------------------------------------------------------------------
def build_selection():
    for op in ["ArgMax", "ArgMin"]:
        for dt in DTYPES:
            add("dtype_" + dt, op, [rand([3, 4], dt, 170, -3, 3), V([1], I32, [])])
        x = rand([2, 3, 4], F32, 171)
        for d in [0, 1, 2, -1, -3]:
            add("dim_%d" % d, op, [x, V([d], I32, [])])
        add("dim_int64", op, [x, V([1], I64, [])])
        if op == "ArgMin":  # ArgMax's CPU kernel reads an int16 dimension as an int32
            add("dim_int16", op, [x, V([1], "int16", [])])  # (UB: a different error each run)
        for ot in ["int32", "int64", "int16", "uint16", "uint8"]:
            add("output_type_" + ot, op, [x, V([2], I32, [])], {"output_type": ot})
        add("ties", op, [V([1, 3, 3, 0, 0, 0, 2, 1, 2], F32, [3, 3]), V([1], I32, [])])
        add("ties_int", op, [V([5, 5, -5, -5], I32, [2, 2]), V([0], I32, [])])
        add("nan", op, [V([NAN, 1, 2, 3, NAN, 0, NAN, NAN, NAN], F32, [3, 3]), V([1], I32, [])])
        add("nan_f64", op, [V([1, NAN, 0, NAN], "float64", [2, 2]), V([1], I32, [])])
        add("infs", op, [V([-INF, -INF, INF, INF, -INF, 0], F32, [2, 3]), V([1], I32, [])])
        add("lowest", op, [V([-3.4028234663852886e38, -INF, 3.4028234663852886e38, INF], F32, [2, 2]),
                           V([1], I32, [])])
        add("neg_zero", op, [V([-0.0, 0.0, 0.0, -0.0], F32, [2, 2]), V([1], I32, [])])
        add("bool", op, [V([0, 1, 1, 0, 0, 0], "bool", [2, 3]), V([1], I32, [])])
        add("rank1", op, [V([3, 1, 4, 1, 5, 9, 2, 6], I64), V([0], I32, [])])
        add("long_row", op, [rand([2, 600], F32, 172), V([1], I32, [])])
        add("empty_kept_dim", op, [V([], F32, [0, 3]), V([1], I32, [])])
        add("empty_reduced_dim_fed", op, [F(V([], F32, [3, 0])), F(V([1], I32, []))])
        add("empty_reduced_dim0_fed", op, [F(V([], F32, [0, 3])), F(V([0], I32, []))])
        add("dim_out_of_range_fed", op, [F(x), F(V([3], I32, []))])
        add("dim_out_of_range_neg_fed", op, [F(x), F(V([-4], I32, []))])
        add("dim_vector_fed", op, [F(x), F(V([1], I32, [1]))])
        add("scalar_input_fed", op, [F(V([1.0], F32, [])), F(V([0], I32, []))])

    op = "TopKV2"
    for dt in DTYPES:
        add("dtype_" + dt, op, [rand([2, 6], dt, 180, -3, 3), V([3], I32, [])])
    x = rand([3, 7], F32, 181)
    for k in [0, 1, 3, 7]:
        add("k_%d" % k, op, [x, V([k], I32, [])])
        add("k_%d_unsorted" % k, op, [x, V([k], I32, [])], {"sorted": False})
    add("rank1", op, [rand([9], F32, 182), V([4], I32, [])])
    add("rank3", op, [rand([2, 2, 5], F32, 183), V([2], I32, [])])
    add("k_int64", op, [x, V([2], I64, [])])
    add("index_type_int64", op, [x, V([2], I32, [])], {"index_type": "int64"})
    add("index_type_int16", op, [x, V([2], I32, [])], {"index_type": "int16"})
    add("ties", op, [V([1, 3, 3, 1, 3, 0, 2, 2, 2, 2], F32, [2, 5]), V([3], I32, [])])
    add("ties_k1", op, [V([1, 3, 3, 1, 3, 2, 2, 2, 2, 2], F32, [2, 5]), V([1], I32, [])])
    add("ties_int", op, [V([5, 5, 5, 5, 5, 1, 1, 1], I32, [1, 8]), V([5], I32, [])])
    add("ties_long", op, [V([i % 3 for i in range(200)], F32, [2, 100]), V([10], I32, [])])
    add("infs", op, [V([-INF, 0, INF, -INF, 2, INF], F32, [1, 6]), V([6], I32, [])])
    add("nan", op, [V([1, NAN, 3, 2], F32, [1, 4]), V([2], I32, [])])
    add("nan_k1", op, [V([1, NAN, 3, 2], F32, [1, 4]), V([1], I32, [])])
    add("neg_zero", op, [V([0.0, -0.0, 0.0, -0.0], F32, [1, 4]), V([2], I32, [])])
    add("long_rows", op, [rand([3, 500], F32, 184), V([20], I32, [])])
    add("long_rows_k_all", op, [rand([2, 300], F32, 185), V([300], I32, [])])
    add("empty_rows", op, [V([], F32, [0, 5]), V([2], I32, [])])
    add("empty_cols_k0", op, [V([], F32, [3, 0]), V([0], I32, [])])
    add("int8", op, [V([-128, 127, 0, -1, 5], "int8", [1, 5]), V([3], I32, [])])
    add("uint64", op, [V([2 ** 63, 1, 2 ** 64 - 1, 0], "uint64", [1, 4]), V([2], I32, [])])
    add("k_too_large_fed", op, [F(x), F(V([8], I32, []))])
    add("k_too_large_const", op, [x, V([8], I32, [])])
    add("k_negative_fed", op, [F(x), F(V([-1], I32, []))])
    add("k_vector_fed", op, [F(x), F(V([1], I32, [1]))])
    add("scalar_input_fed", op, [F(V([1.0], F32, [])), F(V([0], I32, []))])

    op = "OneHot"
    for dt in DTYPES:
        on, off = cast_values([5, 1], dt)
        add("dtype_" + dt, op, [V([0, 2, -1, 1], I64), V([3], I32, []), T(on, dt), T(off, dt)])
    for ti in ["uint8", "int8", "int32", "int64", "int16"]:
        add("indices_" + ti, op, [V([0, 2, 1], ti), V([3], I32, []), V([1], F32, []), V([0], F32, [])])
    idx = V([0, 3, -1, 2, 1, 5], I32, [2, 3])
    for axis in [-1, 0, 1, 2]:
        add("axis_%d" % axis, op, [idx, V([4], I32, []), V([1], F32, []), V([0], F32, [])],
            {"axis": axis})
    add("depth_0", op, [idx, V([0], I32, []), V([1], F32, []), V([0], F32, [])])
    add("scalar_index", op, [V([2], I32, []), V([4], I32, []), V([7], I32, []), V([-1], I32, [])])
    add("scalar_index_axis0", op, [V([1], I32, []), V([3], I32, []), V([1], F32, []), V([0], F32, [])],
        {"axis": 0})
    add("empty_indices", op, [V([], I32, [0]), V([3], I32, []), V([1], F32, []), V([0], F32, [])])
    add("nan_on_value", op, [V([1, 0], I32), V([2], I32, []), V([NAN], F32, []), V([-INF], F32, [])])
    add("large_index", op, [V([2 ** 40, 1], I64), V([2], I32, []), V([1], F32, []), V([0], F32, [])])
    add("string_values", op, [V([1, 0], I32), V([2], I32, []), T("yes", "string", []),
                              T("no", "string", [])])
    add("depth_negative_fed", op, [F(V([0, 1], I32)), F(V([-1], I32, [])), F(V([1], F32, [])),
                                   F(V([0], F32, []))])
    add("depth_vector_fed", op, [F(V([0, 1], I32)), F(V([2], I32, [1])), F(V([1], F32, [])),
                                 F(V([0], F32, []))])
    add("on_value_vector_fed", op, [F(V([0, 1], I32)), F(V([2], I32, [])), F(V([1, 2], F32)),
                                    F(V([0], F32, []))])
    add("axis_too_large_fed", op, [F(V([0, 1], I32)), F(V([2], I32, [])), F(V([1], F32, [])),
                                   F(V([0], F32, []))], {"axis": 2})
    add("axis_minus2_fed", op, [F(V([0, 1], I32)), F(V([2], I32, [])), F(V([1], F32, [])),
                                F(V([0], F32, []))], {"axis": -2})

    op = "Where"
    for dt in DTYPES:
        add("dtype_" + dt, op, [rand([3, 4], dt, 190, -1, 1) if dt != "string" else
                                V([0, 1], dt)])
    add("scalar_true", op, [V([1], "bool", [])])
    add("scalar_false", op, [V([0], "bool", [])])
    add("empty", op, [V([], "bool", [0, 3])])
    add("rank3", op, [rand([2, 3, 2], "bool", 191)])
    add("rank5", op, [rand([2, 1, 2, 1, 2], "bool", 192)])
    add("none_true", op, [V([0] * 6, "bool", [2, 3])])
    add("float_specials", op, [V([NAN, -0.0, 0.0, INF, 1e-45, -INF], F32)])
    add("complex_specials", op, [V([0j, 1j, -0.0 + 0j, 1e-30], "complex64")])
    add("long", op, [rand([500], "bool", 193)])

    op = "Split"
    for dt in DTYPES:
        add("dtype_" + dt, op, [V([0], I32, []), rand([4, 3], dt, 200) if dt != "string" else
                                V(list(range(12)), dt, [4, 3])], {"num_split": 2})
    x = rand([4, 6], F32, 201)
    for dim, n in [(0, 1), (0, 4), (1, 3), (-1, 2), (-2, 2), (1, 6)]:
        add("dim_%d_num_%d" % (dim, n), op, [V([dim], I32, []), x], {"num_split": n})
    add("empty_dim", op, [V([0], I32, []), V([], F32, [0, 3])], {"num_split": 3})
    add("empty_other_dim", op, [V([1], I32, []), V([], F32, [0, 4])], {"num_split": 2})
    add("rank3", op, [V([1], I32, []), rand([2, 4, 2], I64, 202)], {"num_split": 2})
    add("uneven_fed", op, [F(V([0], I32, [])), F(rand([5, 2], F32, 203))], {"num_split": 2})
    add("uneven_const", op, [V([0], I32, []), rand([5, 2], F32, 204)], {"num_split": 2})
    add("uneven_dim1_fed", op, [F(V([1], I32, [])), F(rand([2, 7], F32, 205))], {"num_split": 3})
    add("dim_out_of_range_fed", op, [F(V([2], I32, [])), F(rand([2, 2], F32, 206))], {"num_split": 2})
    add("dim_out_of_range_neg_fed", op, [F(V([-3], I32, [])), F(rand([2, 2], F32, 207))],
        {"num_split": 2})
    add("scalar_value_fed", op, [F(V([0], I32, [])), F(V([1.0], F32, []))], {"num_split": 1})
    add("dim_vector_fed", op, [F(V([0], I32, [1])), F(rand([2, 2], F32, 208))], {"num_split": 2})

    op = "SplitV"
    for dt in DTYPES:
        add("dtype_" + dt, op, [rand([5, 2], dt, 210) if dt != "string" else V(list(range(10)), dt, [5, 2]),
                                V([2, 3], I64), V([0], I32, [])], {"num_split": 2})
    x = rand([4, 6], F32, 211)
    add("sizes_int32", op, [x, V([1, 2, 3], I32), V([1], I32, [])], {"num_split": 3})
    add("sizes_int8", op, [x, V([1, 3], "int8"), V([0], I32, [])], {"num_split": 2})
    add("sizes_int16", op, [x, V([1, 3], "int16"), V([0], I32, [])], {"num_split": 2})
    add("minus_one_first", op, [x, V([-1, 2], I32), V([1], I32, [])], {"num_split": 2})
    add("minus_one_middle", op, [x, V([1, -1, 2], I64), V([-1], I32, [])], {"num_split": 3})
    add("zero_sizes", op, [x, V([0, 4, 0], I32), V([0], I32, [])], {"num_split": 3})
    add("minus_one_zero", op, [x, V([4, -1], I32), V([0], I32, [])], {"num_split": 2})
    add("one_part", op, [x, V([6], I32), V([1], I32, [])], {"num_split": 1})
    add("one_part_minus_one", op, [x, V([-1], I32), V([1], I32, [])], {"num_split": 1})
    add("empty_dim", op, [V([], F32, [0, 2]), V([0, 0], I32), V([0], I32, [])], {"num_split": 2})
    add("sum_mismatch_fed", op, [F(x), F(V([1, 2], I32)), F(V([0], I32, []))], {"num_split": 2})
    add("sum_too_large_minus_one_fed", op, [F(x), F(V([5, -1], I32)), F(V([0], I32, []))],
        {"num_split": 2})
    add("two_minus_ones_fed", op, [F(x), F(V([-1, -1, 2], I32)), F(V([1], I32, []))], {"num_split": 3})
    add("negative_size_fed", op, [F(x), F(V([-2, 6], I32)), F(V([0], I32, []))], {"num_split": 2})
    add("count_mismatch_fed", op, [F(x), F(V([1, 3], I32)), F(V([0], I32, []))], {"num_split": 3})
    add("dim_out_of_range_fed", op, [F(x), F(V([2, 2], I32)), F(V([2], I32, []))], {"num_split": 2})
    add("sizes_rank2_fed", op, [F(x), F(V([2, 2], I32, [1, 2])), F(V([0], I32, []))], {"num_split": 2})

    op = "Unique"
    for dt in DTYPES:
        add("dtype_" + dt, op, [V([3, 1, 3, 0, 1, 2], dt)])
    add("out_idx_int64", op, [V([5, 5, 2], I32)], {"out_idx": "int64"})
    add("empty", op, [V([], F32, [0])])
    add("empty_int64_idx", op, [V([], I64, [0])], {"out_idx": "int64"})
    add("nan", op, [V([NAN, 1, NAN, 1], F32)])
    add("neg_zero_first", op, [V([-0.0, 0.0, 1.0, -0.0], F32)])
    add("pos_zero_first", op, [V([0.0, -0.0], "float64")])
    add("infs", op, [V([INF, -INF, INF, 1], F32)])
    add("strings", op, [T(["b", "a", "b", "", "a", ""], "string")])
    add("long", op, [V([(i * 7919) % 31 for i in range(400)], I64)])
    add("single", op, [V([4], "int8")])
    add("scalar_fed", op, [F(V([1.0], F32, []))])
    add("rank2_fed", op, [F(V([1, 2, 1, 2], I32, [2, 2]))])
    add("rank2_const", op, [V([1, 2, 1, 2], I32, [2, 2])])


# ---------------------------------------------------------------------------
# Static cases: placeholders of partial shapes, TF's inferred shapes or build error
# ---------------------------------------------------------------------------
def S(cid, op, inputs, attrs=None):
    add("static_" + cid, op, inputs, attrs, static=True)


def build_static():
    f = F32
    for op in ["Exp", "Relu", "Round", "LeakyRelu"]:
        S("partial", op, [P(f, [None, 3])])
        S("unknown_rank", op, [P(f, None)])
    for op in ["Pow", "SquaredDifference"]:
        S("broadcast_partial", op, [P(f, [None, 3]), P(f, [3])])
        S("broadcast_unknown_one", op, [P(f, [None, 1]), P(f, [1, 4])])
        S("broadcast_known_one", op, [P(f, [2, 1]), P(f, [None, 4])])
        S("unknown_rank", op, [P(f, None), P(f, [2, 3])])
        S("incompatible", op, [P(f, [2, 3]), P(f, [4])])
        S("dtype_mismatch", op, [P(f, [2]), P("float64", [2])])
    op = "MatMul"
    S("partial", op, [P(f, [None, 3]), P(f, [3, None])])
    S("unknown_rank", op, [P(f, None), P(f, [3, 4])])
    S("transposed", op, [P(f, [3, None]), P(f, [5, 3])], {"transpose_a": True, "transpose_b": True})
    S("inner_mismatch", op, [P(f, [2, 3]), P(f, [4, 5])])
    S("inner_mismatch_transposed", op, [P(f, [2, 3]), P(f, [4, 2])], {"transpose_a": True})
    S("rank3", op, [P(f, [2, 2, 2]), P(f, [2, 2])])
    S("rank1", op, [P(f, [2]), P(f, [2, 2])])
    S("dtype_mismatch", op, [P(f, [2, 2]), P("float64", [2, 2])])
    op = "BatchMatMulV2"
    S("partial", op, [P(f, [None, 2, 3]), P(f, [None, 3, None])])
    S("broadcast", op, [P(f, [2, 1, 2, 3]), P(f, [5, 3, 4])])
    S("broadcast_unknown", op, [P(f, [None, 2, 3]), P(f, [4, 3, 4])])
    S("broadcast_one_unknown", op, [P(f, [1, 2, 3]), P(f, [None, 3, 4])])
    S("unknown_rank", op, [P(f, None), P(f, [2, 3, 4])])
    S("adjoint", op, [P(f, [2, 3, 2]), P(f, [2, 4, 3])], {"adj_x": True, "adj_y": True})
    S("inner_mismatch", op, [P(f, [2, 2, 3]), P(f, [2, 4, 2])])
    S("batch_mismatch", op, [P(f, [2, 2, 3]), P(f, [3, 3, 2])])
    S("rank1", op, [P(f, [3]), P(f, [3, 2])])
    op = "BiasAdd"
    S("partial", op, [P(f, [None, 3]), P(f, [None])])
    S("nchw", op, [P(f, [None, 3, None, None]), P(f, [3])], {"data_format": "NCHW"})
    S("nchw_infer_channels", op, [P(f, [2, None, 4, 4]), P(f, [3])], {"data_format": "NCHW"})
    S("infer_channels", op, [P(f, [2, None]), P(f, [5])])
    S("unknown_rank", op, [P(f, None), P(f, [3])])
    S("mismatch", op, [P(f, [2, 3]), P(f, [4])])
    S("rank1_value", op, [P(f, [3]), P(f, [3])])
    S("rank2_bias", op, [P(f, [2, 3]), P(f, [1, 3])])
    for op in ["Mean", "Max", "Any"]:
        dt = "bool" if op == "Any" else f
        S("const_axis", op, [P(dt, [None, 3, 4]), V([1], I32)])
        S("const_axis_keep", op, [P(dt, [None, 3, 4]), V([1], I32)], {"keep_dims": True})
        S("unknown_axis", op, [P(dt, [2, 3, 4]), P(I32, [1])])
        S("unknown_axis_keep", op, [P(dt, [2, 3, 4]), P(I32, [1])], {"keep_dims": True})
        S("unknown_axis_len", op, [P(dt, [2, 3, 4]), P(I32, [None])])
        S("unknown_axis_len_keep", op, [P(dt, [2, 3, 4]), P(I32, [None])], {"keep_dims": True})
        S("unknown_rank", op, [P(dt, None), V([0], I32)])
        S("unknown_rank_keep", op, [P(dt, None), V([0], I32)], {"keep_dims": True})
        S("axis_out_of_range", op, [P(dt, [2, 3]), V([2], I32)])
        S("axis_out_of_range_neg", op, [P(dt, [2, 3]), V([-3], I32)])
        S("axis_duplicate", op, [P(dt, [2, 3]), V([0, -2], I32)])
        S("scalar_axis_const", op, [P(dt, [2, None]), V([-1], I32, [])])
        S("axis_rank2", op, [P(dt, [2, 3]), P(I32, [1, 1])])
    for op in ["Softmax", "LogSoftmax"]:
        S("partial", op, [P(f, [None, 5])])
        S("unknown_rank", op, [P(f, None)])
        S("scalar", op, [P(f, [])])
    op = "SoftmaxCrossEntropyWithLogits"
    S("partial", op, [P(f, [None, 5]), P(f, [None, 5])])
    S("broadcast", op, [P(f, [4, 5]), P(f, [1, 5])])
    S("broadcast_unknown", op, [P(f, [None, 5]), P(f, [3, None])])
    S("unknown_rank", op, [P(f, None), P(f, [2, 3])])
    S("rank1", op, [P(f, [3]), P(f, [3])])
    S("mismatch", op, [P(f, [2, 3]), P(f, [2, 4])])
    op = "SparseSoftmaxCrossEntropyWithLogits"
    S("partial", op, [P(f, [None, 5]), P(I32, [None])])
    S("batch_from_labels", op, [P(f, [None, 5]), P(I64, [7])])
    S("unknown_rank", op, [P(f, None), P(I32, [4])])
    S("batch_mismatch", op, [P(f, [3, 5]), P(I32, [4])])
    S("labels_rank2", op, [P(f, [3, 5]), P(I32, [3, 1])])
    S("logits_rank3", op, [P(f, [3, 5, 2]), P(I32, [3])])
    op = "L2Loss"
    S("unknown_rank", op, [P(f, None)])
    for op in ["UnsortedSegmentSum", "UnsortedSegmentMax"]:
        S("const_num", op, [P(f, [None, 3]), P(I32, [None]), V([5], I32, [])])
        S("placeholder_num", op, [P(f, [6, 3]), P(I32, [6]), P(I32, [])])
        S("ids_2d", op, [P(f, [2, 3, 4]), P(I32, [2, 3]), V([4], I64, [])])
        S("unknown_rank_ids", op, [P(f, [6, 3]), P(I32, None), V([5], I32, [])])
        S("unknown_rank_data", op, [P(f, None), P(I32, [6]), V([5], I32, [])])
        S("prefix_mismatch", op, [P(f, [6, 3]), P(I32, [5]), V([5], I32, [])])
        S("data_rank_too_small", op, [P(f, [6]), P(I32, [6, 1]), V([5], I32, [])])
        S("num_vector", op, [P(f, [6, 3]), P(I32, [6]), P(I32, [1])])
        S("negative_num", op, [P(f, [6, 3]), P(I32, [6]), V([-2], I32, [])])
    for op in ["SegmentSum", "SegmentMean"]:
        S("partial", op, [P(f, [None, 3]), P(I32, [None])])
        S("known", op, [P(f, [6, 3]), P(I32, [6])])
        S("const_ids", op, [P(f, [4, 2]), V([0, 0, 1, 3], I32)])
        S("unknown_rank", op, [P(f, None), P(I32, [6])])
        S("ids_rank2", op, [P(f, [6, 3]), P(I32, [6, 1])])
        S("length_mismatch", op, [P(f, [6, 3]), P(I32, [5])])
        S("scalar_data", op, [P(f, []), P(I32, [1])])
    for op in ["ArgMax"]:
        S("const_dim", op, [P(f, [None, 3, 4]), V([1], I32, [])])
        S("const_dim_neg", op, [P(f, [2, None, 4]), V([-1], I32, [])])
        S("unknown_dim", op, [P(f, [2, 3, 4]), P(I32, [])])
        S("unknown_rank", op, [P(f, None), V([0], I32, [])])
        S("dim_out_of_range", op, [P(f, [2, 3]), V([2], I32, [])])
        S("dim_vector", op, [P(f, [2, 3]), V([0], I32, [1])])
        S("output_type", op, [P(f, [2, 3]), V([0], I32, [])], {"output_type": "int32"})
        S("scalar_input", op, [P(f, []), V([0], I32, [])])
    op = "TopKV2"
    S("const_k", op, [P(f, [None, 7]), V([3], I32, [])])
    S("unknown_k", op, [P(f, [2, 7]), P(I32, [])])
    S("unknown_rank", op, [P(f, None), V([3], I32, [])])
    S("k_too_large", op, [P(f, [2, 3]), V([4], I32, [])])
    S("k_negative", op, [P(f, [2, 3]), V([-1], I32, [])])
    S("scalar_input", op, [P(f, []), V([1], I32, [])])
    S("k_vector", op, [P(f, [2, 3]), P(I32, [1])])
    S("unknown_last_dim", op, [P(f, [2, None]), V([5], I32, [])])
    op = "OneHot"
    oh = [V([4], I32, []), V([1], f, []), V([0], f, [])]
    S("partial", op, [P(I32, [None, 2])] + oh)
    S("axis0", op, [P(I32, [None, 2])] + oh, {"axis": 0})
    S("unknown_depth", op, [P(I32, [3]), P(I32, []), V([1], f, []), V([0], f, [])])
    S("unknown_rank", op, [P(I32, None)] + oh)
    S("negative_depth", op, [P(I32, [3]), V([-2], I32, []), V([1], f, []), V([0], f, [])])
    S("axis_too_large", op, [P(I32, [3])] + oh, {"axis": 2})
    S("axis_minus2", op, [P(I32, [3])] + oh, {"axis": -2})
    S("depth_vector", op, [P(I32, [3]), P(I32, [1]), V([1], f, []), V([0], f, [])])
    S("on_off_dtype_mismatch", op, [P(I32, [3]), V([2], I32, []), V([1], f, []),
                                    V([0], "float64", [])])
    op = "Where"
    S("partial", op, [P("bool", [None, 3])])
    S("unknown_rank", op, [P("bool", None)])
    S("scalar", op, [P(f, [])])
    op = "Split"
    S("const_dim", op, [V([1], I32, []), P(f, [None, 6])], {"num_split": 3})
    S("unknown_dim", op, [P(I32, []), P(f, [4, 6])], {"num_split": 2})
    S("unknown_split_size", op, [V([0], I32, []), P(f, [None, 6])], {"num_split": 2})
    S("unknown_rank", op, [V([0], I32, []), P(f, None)], {"num_split": 2})
    S("uneven", op, [V([1], I32, []), P(f, [2, 5])], {"num_split": 2})
    S("dim_out_of_range", op, [V([2], I32, []), P(f, [2, 5])], {"num_split": 2})
    op = "SplitV"
    S("const_sizes", op, [P(f, [None, 6]), V([1, -1, 2], I32), V([1], I32, [])], {"num_split": 3})
    S("const_sizes_unknown_dim", op, [P(f, [4, None]), V([1, -1], I32), V([1], I32, [])],
      {"num_split": 2})
    S("unknown_sizes", op, [P(f, [4, 6]), P(I32, [2]), V([1], I32, [])], {"num_split": 2})
    S("unknown_dim", op, [P(f, [4, 6]), V([2, 2], I32), P(I32, [])], {"num_split": 2})
    S("unknown_rank", op, [P(f, None), V([2, 2], I32), V([0], I32, [])], {"num_split": 2})
    S("sum_mismatch", op, [P(f, [4, 6]), V([2, 3], I32), V([1], I32, [])], {"num_split": 2})
    S("count_mismatch", op, [P(f, [4, 6]), V([2, 4], I32), V([1], I32, [])], {"num_split": 3})
    S("two_minus_ones", op, [P(f, [4, 6]), V([-1, -1], I32), V([1], I32, [])], {"num_split": 2})
    op = "Unique"
    S("partial", op, [P(f, [None])])
    S("known", op, [P(I32, [5])], {"out_idx": "int64"})
    S("unknown_rank", op, [P(f, None)])
    S("rank2", op, [P(f, [2, 2])])


def build_cases():
    build_unary()
    build_binary()
    build_matmul()
    build_reductions()
    build_nn()
    build_segments()
    build_selection()
    build_static()
    return CASES


OPS = UNARY + ["Pow", "SquaredDifference", "MatMul", "BatchMatMulV2", "BiasAdd", "Mean",
               "Max", "Min", "Any", "All", "Softmax", "LogSoftmax",
               "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
               "L2Loss"] + UNSORTED + SORTED + ["ArgMax", "ArgMin", "TopKV2", "OneHot",
                                                "Where", "Split", "SplitV", "Unique"]


# ---------------------------------------------------------------------------
# Worker (imports TensorFlow)
# ---------------------------------------------------------------------------
def _short(message):
    """TF's message without what depends on the machine or repeats the op: a session's
    "Graph execution error" preamble (the Python stack of the op's creation) and
    ``[[{{node ...}}]]`` tail, and a dtype refusal's listing of the op definition."""
    if message.startswith("Graph execution error"):
        body = message.split("\nNode: ", 1)[-1]
        message = body.split("\n", 1)[-1].split("\n\t [[", 1)[0]
    if "not in the list of allowed values" in message or "Could not find device" in message \
            or "No registered" in message:
        return message.split("\n\t; NodeDef", 1)[0].split("; NodeDef", 1)[0][:400]
    return message


def worker_main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import tensorflow as tf  # noqa: E402
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2  # noqa: E402
    from tensorflow.python.framework import op_def_registry  # noqa: E402

    out = sys.stdout
    sys.stdout = sys.stderr  # anything TF prints must not corrupt the protocol

    def constant(t):
        return tf.constant(decode_array(t), dtype=tf.as_dtype(t["dtype"]))

    def to_tf(x, feeds):
        if "placeholder" in x:
            p = x["placeholder"]
            return tf.compat.v1.placeholder(tf.as_dtype(p["dtype"]), shape=p["shape"])
        if "feed" in x:
            t = x["feed"]
            ph = tf.compat.v1.placeholder(tf.as_dtype(t["dtype"]), shape=x["shape"])
            feeds[ph] = decode_array(t)
            return ph
        return constant(x)

    def err(e):
        msg = e.message if isinstance(e, tf.errors.OpError) else str(e)
        return {"error": type(e).__name__, "message": _short(msg)}

    def call(op, args, attrs):
        # tf.raw_ops' keyword names (Mean's "axis", not the op def's "reduction_indices")
        names = list(inspect.signature(getattr(tf.raw_ops, op)).parameters)
        kwargs = dict(zip(names[:len(op_def_registry.get(op).input_arg)], args))
        kwargs.update(attrs)
        for k in ("output_type", "index_type", "out_idx"):
            if k in kwargs:
                kwargs[k] = tf.as_dtype(kwargs[k])
        res = getattr(tf.raw_ops, op)(**kwargs)
        return list(res) if isinstance(res, (list, tuple)) else [res]

    def run_eager(case):
        with tf.device("/CPU:0"):
            res = call(case["op"], [constant(x) for x in case["inputs"]], case["attrs"])
            return {"values": [encode_array(r.numpy(), r.dtype.name) for r in res]}

    def run_fed(case):
        g = tf.Graph()
        with g.as_default(), tf.device("/CPU:0"):
            feeds = {}
            res = call(case["op"], [to_tf(x, feeds) for x in case["inputs"]], case["attrs"])
        cfg = config_pb2.ConfigProto(graph_options=config_pb2.GraphOptions(
            rewrite_options=rewriter_config_pb2.RewriterConfig(disable_meta_optimizer=True)))
        with tf.compat.v1.Session(graph=g, config=cfg) as sess:
            vals = sess.run(res, feed_dict=feeds)
        return {"values": [encode_array(np.asarray(v), r.dtype.name) for v, r in zip(vals, res)]}

    def run_static(case):
        g = tf.Graph()
        with g.as_default():
            res = call(case["op"], [to_tf(x, {}) for x in case["inputs"]], case["attrs"])
            return {"shapes": [None if r.shape.rank is None else r.shape.as_list() for r in res],
                    "dtypes": [r.dtype.name for r in res]}

    def run(case):
        try:
            if case.get("static"):
                return run_static(case)
            if any("feed" in x for x in case["inputs"]):
                return run_fed(case)
            return run_eager(case)
        except Exception as e:  # noqa: BLE001
            return err(e)

    def signature(op):
        d = op_def_registry.get(op)
        keywords = list(inspect.signature(getattr(tf.raw_ops, op)).parameters)
        return {"inputs": [a.name for a in d.input_arg], "outputs": [a.name for a in d.output_arg],
                "attrs": [a.name for a in d.attr], "keywords": keywords[:len(d.input_arg)]}

    out.write(json.dumps({"ready": tf.__version__}) + "\n")
    out.flush()
    for line in sys.stdin:
        case = json.loads(line)
        res = {"signature": signature(case["op"])} if case.get("signature") else run(case)
        out.write(json.dumps(res) + "\n")
        out.flush()


# ---------------------------------------------------------------------------
# Driver (generate_tf_cases.py's, with this file as the worker)
# ---------------------------------------------------------------------------
class Worker(base.Worker):
    """generate_tf_cases.Worker, running this file's worker_main."""

    def __init__(self):  # noqa: D401 -- same protocol, another script
        import subprocess
        import tempfile
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONHASHSEED="0"))
        hello = self._read(300)
        if hello is None:
            raise RuntimeError("worker failed to start: " + self.stderr_tail())
        self.version = json.loads(hello)["ready"]


def main():
    cases = build_cases()
    worker = Worker()
    if worker.version != base.TF_VERSION:
        print("WARNING: TensorFlow %s, corpus is meant for %s" % (worker.version, base.TF_VERSION),
              file=sys.stderr)
    signatures = {op: worker.run({"op": op, "signature": True})["signature"] for op in OPS}
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
        done.append(dict(case, expect=res))
    worker.kill()
    doc = {"tf_version": worker.version, "signatures": signatures, "cases": done}
    with open(OUT_PATH, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")
    per_op = {}
    for c in done:
        per_op[c["op"]] = per_op.get(c["op"], 0) + 1
    print(json.dumps({"written": OUT_PATH, "cases": len(done), "bytes": os.path.getsize(OUT_PATH),
                      "per_op": per_op, "crashes": crashes}, indent=1))


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker_main()
    else:
        main()
