"""Replays TensorFlow 2.21's recorded behaviour of the ops of issue #35
(tf_cases_wave4.json, written by generate_tf_cases_wave4.py with real TensorFlow)
against graphflow: values, dtypes, static shapes, error classes, TF's messages where
graphflow promises its words, and the ops' signatures.  TensorFlow is not imported.

How values are compared, per op (``COMPARE``), and why:

=========================  ===========  ==================================================
ops                        comparison   why
=========================  ===========  ==================================================
integer / bool outputs,    bit-exact    integer arithmetic and copies have one answer
index outputs (all ops)
Abs Sign Floor Ceil Round  bit-exact    correctly rounded IEEE operations (or copies) in
Relu Relu6 LeakyRelu                    both: the same bits, the sign of zero included
Square Sqrt (real)
Softsign SquaredDifference
BiasAdd
Max Min Any All            bit-exact    a max / min / logical fold picks an element
segment ops, but Mean      bit-exact    TF's CPU kernels add / multiply in index order
ArgMax ArgMin TopKV2       bit-exact    selections and copies
OneHot Where Split SplitV
Unique
Exp Log Log1p Expm1 Rsqrt  ulps         TF runs Eigen's vectorised approximations (and
Sigmoid Tanh Elu Selu                   std::complex functions), numpy its libm's: both
Softplus Pow Reciprocal                 within an ulp or two of the true value (TF's
Sqrt (complex)                          float32 Reciprocal is a Newton step, not 1 / x)
Softmax LogSoftmax         ulps, scaled Eigen sums a row in vectorised partial sums, numpy
SoftmaxCrossEntropy...                  pairwise: the same sum, rounded differently; an
MatMul BatchMatMulV2                    element near 0 (a difference, a cancelled dot
Mean L2Loss SegmentMean                 product) is compared to the tensor's scale
=========================  ===========  ==================================================

``ulps``: |got - want| <= k * eps * |want| + k * (the dtype's smallest normal number:
TF's CPU threads flush subnormal results to zero, graphflow keeps them);
``ulps, scaled``: the second term is k * eps * max|want| instead.  k = 4 (float32,
float64, complex), 8 for float16 (TF's half kernels round through float32 twice).
NaN must meet NaN, an infinity the same infinity, everywhere.

Errors: the class must be TF's; a dtype TF refuses (its op def's list, or no CPU
kernel) graphflow must refuse too.  TF's message must be in graphflow's where
``EXACT_MESSAGES`` names it and the case feeds its inputs (``F``: the error is the
kernel's at run time in both); with constant inputs graphflow, a graph builder, may
report the same fault at build time in its shape function's words.
"""
from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import OpError
from support.tf_cases import decode as _decode

DOC = json.loads((pathlib.Path(__file__).with_name("tf_cases_wave4.json")).read_text())
CASES = DOC["cases"]
SIGNATURES = DOC["signatures"]

ULPS = {"Exp", "Log", "Log1p", "Expm1", "Rsqrt", "Sigmoid", "Tanh", "Elu", "Selu", "Softplus",
        "Pow", "Reciprocal"}
ULPS_COMPLEX = {"Sqrt"}  # exact for real inputs (IEEE's sqrt), std::sqrt's for complex
ULPS_SCALED = {"Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits",
               "SparseSoftmaxCrossEntropyWithLogits", "MatMul", "BatchMatMulV2", "Mean",
               "L2Loss", "SegmentMean"}

#: Cases where graphflow is deliberately stricter than TensorFlow's graph-mode shape
#: function: TF accepts them at build time (its kernel rejects them at run time).
STRICTER_AT_BUILD_TIME: dict[str, str] = {
    **{f"{op}/static_axis_duplicate": "an axis named twice: TF's kernel refuses it at run "
       "time (\"Axes contains duplicate dimension\"); graphflow's shape function already does"
       for op in ("Mean", "Max", "Any")},
    **{f"{op}/static_length_mismatch": "segment_ids shorter than data.shape[0]: TF's shape "
       "function does not compare them, its kernel does" for op in ("SegmentSum", "SegmentMean")},
    "ArgMax/static_scalar_input": "a scalar input has no dimension 0: TF's shape function "
    "returns a scalar, its kernel refuses it",
    "TopKV2/static_k_vector": "k of shape [1]: TF's shape function reads it, its kernel wants "
    "a scalar",
    "OneHot/static_depth_vector": "depth of shape [1]: TF's kernel wants a scalar",
    "OneHot/static_axis_too_large": "axis 2 for indices of rank 1: TF's kernel refuses it "
    "(\"Expected axis to be -1 or between [0, 2)\")",
}

_FTZ = ("TF's CPU threads flush subnormal numbers to zero (inputs and results: "
        "ScopedFlushDenormal); graphflow computes with IEEE subnormals")
_NO_CPU_KERNEL = ("TF's op def allows the dtype but its CPU has no kernel for it; graphflow "
                  "runs it")

#: Cases where graphflow deliberately differs from TensorFlow: id -> why.
DIFFERENCES: dict[str, str] = {
    **{f"{op}/float32_subnormal": _FTZ for op in (
        "Exp", "Expm1", "Log", "Log1p", "Sqrt", "Rsqrt", "Sigmoid", "Tanh", "Softplus",
        "Reciprocal", "Elu", "Selu")},
    "Reciprocal/float32_extremes": _FTZ + " (1 / 3.4e38 is subnormal)",
    "Where/float_specials": _FTZ + " (1e-45 counts as zero in TF)",
    "Round/dtype_int8": _NO_CPU_KERNEL + " (a copy)",
    "Round/dtype_int16": _NO_CPU_KERNEL + " (a copy)",
    "Unique/dtype_complex64": _NO_CPU_KERNEL,
    "Unique/dtype_complex128": _NO_CPU_KERNEL,
    "Round/dtype_int32": "TF 2.21's CPU kernel returns zeros for integers (a bug: tf.round "
    "itself returns an integer tensor unchanged, never calling the op); graphflow copies",
    "Round/dtype_int64": "as Round/dtype_int32",
    "Where/dtype_float16": "TF's CPU Where refuses half on purpose (UnimplementedError, 'to "
    "avoid silently creating costly copies'); graphflow computes it",
    "Softmax/nan": "a NaN logit: TF's oneDNN softmax gives NaN at that place only and 0 "
    "elsewhere; graphflow's row is NaN (the row's sum is NaN), as TF's Eigen kernels of "
    "LogSoftmax and the cross-entropies",
    "Softmax/scalar_fed": "a scalar: TF's oneDNN kernel aborts (AbortedError 'Input dims "
    "must be <= 5 and >=1'); graphflow raises InvalidArgumentError in the words of TF's "
    "Eigen kernel ('logits must have >= 1 dimension')",
    "Softmax/scalar_const": "as Softmax/scalar_fed",
    "Where/scalar_true": "a scalar: TF's kernel is written for ranks 1 to 8 ('WhereOp : "
    "Unhandled input dimensions: 0'); graphflow gives the [n, 0] coordinates "
    "(tests/test_selection_ops.py holds where(True) -> shape [1, 0])",
    "Where/scalar_false": "as Where/scalar_true",
    "SplitV/static_unknown_dim": "TF's shape function reads an unknown split_dim as -1 (the "
    "last axis) and refuses sizes that do not fit that axis; graphflow leaves it to run time",
}

#: Mismatches whose fix is outside the op modules this corpus covers: expected to fail
#: until then (strict: a fix makes them pass and the mark must go).
#: Cases graphflow fails yet (strict expected failures): none left.
PENDING: dict[str, str] = {}

ERROR_CLASSES = {
    "InvalidArgumentError": gf.errors.InvalidArgumentError,
    "NotFoundError": gf.errors.NotFoundError,
    "UnimplementedError": gf.errors.UnimplementedError,
    "AbortedError": gf.errors.AbortedError,
    "ValueError": ValueError,
    "TypeError": TypeError,
}

#: TF's core messages that graphflow reproduces (the node context aside).
EXACT_MESSAGES = re.compile(
    r"Received a label value of|is out of range \[0|out of range \[0, .*possibly because"
    r"|segment ids are not increasing|input must have at least k columns"
    r"|Number of ways to split should evenly divide|Matrix size-incompatible"
    r"|Invalid reduction dimension|must have the same first dimension")

#: TF refusing a dtype: the op def's list, or no CPU kernel for it.
DTYPE_REFUSAL = re.compile(r"not in the list of allowed values|Could not find device for node"
                           r"|No registered")


# -- decoding and building ---------------------------------------------------------------
def _build(case: dict):
    """The case's op in a fresh graph: (graph, outputs, feeds)."""
    scope = gf.Scope(gf.Graph())
    feeds = {}

    def one(t):
        if "placeholder" in t:
            p = t["placeholder"]
            return scope.placeholder(gf.as_dtype(p["dtype"]), shape=p["shape"])
        if "feed" in t:
            value = _decode(t["feed"])
            ph = scope.placeholder(gf.as_dtype(t["feed"]["dtype"]), shape=t["shape"])
            feeds[ph] = value
            return ph
        return scope.constant(_decode(t))
    outs = scope.create_op(case["op"], *[one(t) for t in case["inputs"]], **case["attrs"])
    return scope.graph, outs if isinstance(outs, list) else [outs], feeds


def _run(case: dict):
    graph, outs, feeds = _build(case)
    with gf.Session(graph) as sess:
        return outs, sess.run(outs, feed_dict=feeds)


def _core(message: str) -> str:
    if message.startswith("{{function_node"):
        message = message.split("}} ", 1)[1]
    for stop in (" [Op:", "\n\t; NodeDef", ", node name:", " for '{{node"):
        message = message.split(stop, 1)[0]
    return message.strip()


# -- comparing values -----------------------------------------------------------------------
def _k(dtype: np.dtype) -> int:
    return 8 if dtype == np.float16 else 4


def _same_specials(got, want, case_id):
    for part in ((got.real, want.real), (got.imag, want.imag)) if got.dtype.kind == "c" \
            else ((got, want),):
        g, w = part
        assert np.array_equal(np.isnan(g), np.isnan(w)), f"{case_id}: NaNs {got} vs TF {want}"
        inf = np.isinf(w) | np.isinf(g)
        assert np.array_equal(g[inf], w[inf]), f"{case_id}: infinities {got} vs TF {want}"


def _assert_exact(got, want, case_id):
    if got.dtype.kind in "fc":
        _same_specials(got, want, case_id)
        parts = (got.real, want.real), (got.imag, want.imag)
        for g, w in parts if got.dtype.kind == "c" else ((got, want),):
            ok = ~np.isnan(w)
            assert np.array_equal(g[ok], w[ok]) and np.array_equal(
                np.signbit(g[ok]), np.signbit(w[ok])), f"{case_id}: {got} != TF {want}"
    else:
        assert got.tolist() == want.tolist(), f"{case_id}: {got} != TF {want}"


def _assert_close(got, want, case_id, scaled: bool):
    _same_specials(got, want, case_id)
    real = np.finfo(want.real.dtype)
    k = _k(want.real.dtype)
    finite = np.isfinite(want) & np.isfinite(got)
    g, w = got[finite].astype(np.complex128 if got.dtype.kind == "c" else np.float64), \
        want[finite].astype(np.complex128 if got.dtype.kind == "c" else np.float64)
    if w.size == 0:
        return
    floor = k * real.eps * np.max(np.abs(w)) if scaled else k * real.tiny
    bad = np.abs(g - w) > k * real.eps * np.abs(w) + floor
    assert not bad.any(), (f"{case_id}: {g[bad][:5]} vs TF {w[bad][:5]} (off by "
                           f"{np.max(np.abs(g - w)[bad] / np.maximum(np.abs(w[bad]), 1e-300))} "
                           f"relative)")


def _assert_unsorted_top_k(got, want, case_id):
    """TopKV2 with sorted=False: TF leaves the order open; the same (index, value) pairs per
    row, in any order."""
    (gv, gi), (wv, wi) = got, want
    assert gi.shape == wi.shape and gi.dtype == wi.dtype, case_id
    go, wo = np.argsort(gi, axis=-1), np.argsort(wi, axis=-1)
    _assert_exact(np.take_along_axis(gi, go, -1), np.take_along_axis(wi, wo, -1), case_id)
    _assert_exact(np.take_along_axis(gv, go, -1), np.take_along_axis(wv, wo, -1), case_id)


def _assert_matches(case, got, want):
    case_id, op = case["id"], case["op"]
    assert got.dtype == want.dtype, f"{case_id}: dtype {got.dtype} != TF {want.dtype}"
    assert got.shape == want.shape, f"{case_id}: shape {got.shape} != TF {want.shape}"
    close = op in ULPS | ULPS_SCALED or (want.dtype.kind == "c" and op in ULPS_COMPLEX)
    if want.dtype.kind not in "fc" or not close:
        _assert_exact(got, want, case_id)
    else:
        _assert_close(got, want, case_id, scaled=op in ULPS_SCALED)


# -- the tests --------------------------------------------------------------------------------
def _params(cases):
    """The cases as pytest params, PENDING ones marked as expected (strict) failures."""
    return [pytest.param(c, id=c["id"], marks=[pytest.mark.xfail(
        strict=True, reason=PENDING[c["id"]])] if c["id"] in PENDING else [])
        for c in cases]


RUN_CASES = [c for c in CASES if not c.get("static")]
STATIC_CASES = [c for c in CASES if c.get("static")]


def _skip_difference(case):
    if case["id"] in DIFFERENCES:
        pytest.skip(DIFFERENCES[case["id"]])


def _check_error(case):
    expect = case["expect"]
    with pytest.raises(OpError) as info:
        _run(case)
    got = info.value
    core = _core(expect["message"])
    if DTYPE_REFUSAL.search(core):  # refused by graphflow's op def or by its kernels
        assert isinstance(got, (gf.errors.InvalidArgumentError, gf.errors.NotFoundError)), \
            f"{case['id']}: {type(got).__name__}: {got}"
        return
    cls = ERROR_CLASSES[expect["error"]]
    assert isinstance(got, cls), f"{case['id']}: {type(got).__name__}: {got} (TF: {core})"
    fed = all("feed" in t for t in case["inputs"])
    if fed and EXACT_MESSAGES.search(core):
        assert core in str(got), f"{case['id']}: {got!s} lacks TF's {core!r}"


@pytest.mark.parametrize("case", _params(RUN_CASES))
def test_run_matches_tensorflow(case):
    _skip_difference(case)
    if "error" in case["expect"]:
        _check_error(case)
        return
    outs, got = _run(case)
    wants = [_decode(v) for v in case["expect"]["values"]]
    assert len(got) == len(wants), case["id"]
    if case["op"] == "TopKV2" and case["attrs"].get("sorted") is False:
        _assert_unsorted_top_k(got, wants, case["id"])
    else:
        for g, w in zip(got, wants):
            _assert_matches(case, np.asarray(g), w)
    for out, w in zip(outs, wants):
        assert out.shape.is_compatible_with(w.shape), f"{case['id']}: static {out.shape} vs {w.shape}"


@pytest.mark.parametrize("case", _params(STATIC_CASES))
def test_static_shapes_match_tensorflow(case):
    _skip_difference(case)
    expect = case["expect"]
    if case["id"] in STRICTER_AT_BUILD_TIME:
        with pytest.raises(gf.errors.InvalidArgumentError):
            _build(case)
        return
    if "error" in expect:
        with pytest.raises(ERROR_CLASSES[expect["error"]]):
            _build(case)
        return
    _, outs, _ = _build(case)
    assert [o.dtype.name for o in outs] == expect["dtypes"], case["id"]
    for out, want in zip(outs, expect["shapes"]):
        want = gf.TensorShape(want)
        assert out.shape.is_compatible_with(want), f"{case['id']}: {out.shape} vs TF {want}"
        if want.rank is not None:
            assert out.shape.rank == want.rank, f"{case['id']}: {out.shape} vs TF {want}"
            for ours, theirs in zip(out.shape.as_list(), want.as_list()):
                assert theirs is None or ours == theirs, \
                    f"{case['id']}: {out.shape} less known than TF's {want}"


@pytest.mark.parametrize("op", sorted(SIGNATURES))
def test_signature_matches_tensorflow(op):
    """The op is declared with TF's input names (its op def's, or tf.raw_ops' keywords:
    Mean's ``axis``) and output names, in TF's order."""
    from graphflow.registry import op_def
    definition = op_def(op)
    want = SIGNATURES[op]
    for ours, name, keyword in zip([a.name for a in definition.inputs], want["inputs"],
                                   want["keywords"], strict=True):
        assert ours in (name, keyword), f"{op}: input {ours!r}, TF's {name!r} / {keyword!r}"
    assert [a.name for a in definition.outputs] == want["outputs"], op
