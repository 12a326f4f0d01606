"""Differential fuzzing on the GPU device: the random graphs of tests/fuzz/graphs.py,
built on "/gpu:0" and run on a CPU + GPU session with deterministic=True, must equal
the plain-loop references under TensorFlow's GPU semantics bit for bit (an out-of-bound
index skipped by the scatters, zeros from GatherNd, bad_indices_policy="ERROR" raising
on the first bad index; partition and stitch errors as on the CPU), string nodes
staying on the CPU and every other node with a GPU kernel placed on the GPU
(tests/fuzz/check.py). A graph whose scatters are all integer sums, mins and maxes
also runs with the default kernels (atomics), which must then agree too.
"simulated" runs the GPU kernels on numpy on any machine; "emulated" runs their
CUDA source compiled for the CPU, on cupy-like arrays (tests/support/cuda_emulator.py);
"cuda" runs where cupy sees a CUDA device."""
from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings

import graphflow as gf
from graphflow.ops import gpu_index, scatter_ops

from support.gpu_devices import GPU_KINDS

from .check import check_graph
from .graphs import graph_specs
from .spec import GraphSpec, Node, Ref

#: Graphs per CI run and kind: about 7 s on two cores ("simulated"), 13 s ("emulated"); new
#: graphs each run (not derandomized), so runs add up. HYPOTHESIS_PROFILE=long
#: runs the long profile's count (20000, about 7 minutes). GF_GPU_FUZZ_EXAMPLES=N runs N
#: instead, and GF_GPU_FUZZ_SHRINK=0 reports a failing graph unshrunk (a one-shot device
#: run, tests/gpu/run_gpu_checks.sh, splits the graphs over processes and cannot wait).
CI_EXAMPLES = int(os.environ.get("GF_GPU_FUZZ_EXAMPLES", "150"))
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
PHASES = [p for p in Phase if p is not Phase.shrink or
          os.environ.get("GF_GPU_FUZZ_SHRINK", "1") != "0"]


@pytest.mark.parametrize("kind", GPU_KINDS)
@settings(max_examples=CI_EXAMPLES if PROFILE == "ci" else settings.default.max_examples,
          phases=PHASES, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=graph_specs(gpu=True))
def test_graphflow_on_gpu_agrees_with_reference(kind: str, spec: GraphSpec) -> None:
    check_graph(spec, gpu=kind)


# -- the check can fail -------------------------------------------------------------------------
_I32, _F32 = np.int32, np.float32

#: ScatterNd with out-of-bound tuples (skipped on the GPU), TensorScatterAdd under "ERROR"
#: with two bad tuples (the GPU reports the first), TensorScatterUpdate with a duplicate
#: (the last wins under deterministic=True), GatherNd with a bad fed index (zeros), and a
#: string GatherNd (on the CPU, where its bad index raises).
SPEC = GraphSpec([
    Node("Const", value=np.array([[1], [7], [1], [-1]], _I32)),
    Node("Const", value=np.array([1.5, 2.0, -0.0, 4.0], _F32)),
    Node("Const", value=np.array([4], _I32)),
    Node("ScatterNd", (Ref(0), Ref(1), Ref(2)), {"bad_indices_policy": ""}),
    Node("TensorScatterAdd", (Ref(3), Ref(0), Ref(1)), {"bad_indices_policy": "ERROR"}),
    Node("Const", value=np.array([[2], [2]], _I32)),
    Node("Const", value=np.array([5.0, 6.0], _F32)),
    Node("TensorScatterUpdate", (Ref(3), Ref(5), Ref(6)), {"bad_indices_policy": "IGNORE"}),
    Node("Const", value=np.array([[1, 2], [3, 4]], np.int64)),
    Node("Placeholder", value=np.array([[0], [5]], _I32), static_shape=[None, 1]),
    Node("GatherNd", (Ref(8), Ref(9)), {"batch_dims": 0, "bad_indices_policy": ""}),
    Node("Const", value=np.array([b"a", b"b"], object)),
    Node("Const", value=np.array([[1], [2]], _I32)),
    Node("GatherNd", (Ref(11), Ref(12)), {"batch_dims": 0, "bad_indices_policy": ""}),
], fetches=[Ref(3), Ref(7), Ref(10)])


def test_the_gpu_spec_passes() -> None:
    for fetches in (SPEC.fetches, [Ref(4)], [Ref(13)], [Ref(3), Ref(4), Ref(13)]):
        check_graph(GraphSpec(SPEC.nodes, fetches), gpu="simulated")


_locate, _scatter = gpu_index.locate, gpu_index.scatter


def _locate_reporting_last(xp, tuples, dims, policy, bad_index):
    if policy == "ERROR":
        scatter_ops.locate(tuples, dims, policy, bad_index)  # the CPU's: the last bad tuple
    return _locate(xp, tuples, dims, policy, bad_index)


def _locate_raising(xp, tuples, dims, policy, bad_index):
    return _locate(xp, tuples, dims, "ERROR" if policy != "IGNORE" else policy, bad_index)


def _scatter_reversed(xp, out, offsets, rows, op, deterministic):
    _scatter(xp, out, offsets[::-1], rows[::-1], op, deterministic)


@pytest.mark.parametrize("breakage, fetches", [
    (mock.patch.object(gpu_index, "locate", _locate_reporting_last), [Ref(4)]),
    (mock.patch.object(gpu_index, "locate", _locate_raising), SPEC.fetches),
    (mock.patch.object(gpu_index, "scatter", _scatter_reversed), SPEC.fetches),
], ids=["first bad index not reported", "bad index raised", "duplicates out of order"])
def test_a_broken_gpu_kernel_is_caught(breakage, fetches) -> None:
    with breakage, pytest.raises(AssertionError):
        check_graph(GraphSpec(SPEC.nodes, fetches), gpu="simulated")


# -- float32 subnormals on a CUDA device ---------------------------------------------------------
def test_a_flushed_float32_subnormal_passes_on_cuda_alone() -> None:
    """Found on an H200 (seed 3): Cast(float32 1.4e-45 -> complex128) gave 0, cupy's kernels
    being compiled with -ftz=true. Only a "cuda" run accepts that zero, and only for a
    value under float32's smallest normal."""
    from .check import assert_same
    want = np.array([1.401298464324817e-45 + 0j, 2.0 + 0j, -1e-39 + 1e-40j], np.complex128)
    flushed = np.array([0j, 2.0 + 0j, complex(-0.0, 0.0)], np.complex128)
    assert_same(flushed, want, "cuda", flushes=True)
    with pytest.raises(AssertionError):
        assert_same(flushed, want, "emulated")
    with pytest.raises(AssertionError):  # a normal value never becomes a zero
        assert_same(np.array([0.0], np.float32), np.array([1.2e-38], np.float32), "cuda",
                    flushes=True)


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_the_h200_subnormal_cast_graph_passes(kind) -> None:
    """The cast of the failing graph, on every GPU kind."""
    check_graph(GraphSpec([
        Node("Const", value=np.array([2.0, np.nan, 1.401298464324817e-45, -1.4e-44, np.inf],
                                     _F32)),
        Node("Cast", (Ref(0),), {"DstT": gf.complex128}),
    ], fetches=[Ref(1)]), gpu=kind)
