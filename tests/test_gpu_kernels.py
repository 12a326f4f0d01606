"""The GPU kernels of the scatter family, GatherNd, DynamicPartition and the stitches.

Each test runs on the simulated GPU (the GPU kernels on numpy: their logic,
placement and copies, on any machine) and on the real CUDA device when there
is one. On a GPU: the values agree with the CPU (exactly under
deterministic=True), an out-of-bound index is skipped by default (zeros for
GatherNd), as on TensorFlow's GPU, and raised under bad_indices_policy="ERROR",
reporting the first bad index.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.ops import gpu_index, scatter_ops

from support import ref_scatter
from support.gpu_devices import GPU_KINDS, gpu_session_devices

CASES = json.loads((pathlib.Path(__file__).parent / "conformance" / "tf_cases.json")
                   .read_text())["cases"]
GPU_OPS = {"ScatterNd", "TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub",
           "TensorScatterMin", "TensorScatterMax", "GatherNd", "DynamicPartition",
           "DynamicStitch", "ParallelDynamicStitch"}

SCATTER_OPS = {"update": "tensor_scatter_update", "add": "tensor_scatter_add",
               "sub": "tensor_scatter_sub", "min": "tensor_scatter_min",
               "max": "tensor_scatter_max"}
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.int8, np.uint16,
          np.uint64, np.complex64]


@pytest.fixture(params=GPU_KINDS)
def kind(request):
    return request.param


def _run(kind: str, build, deterministic: bool = True, device="/gpu:0"):
    """Build on ``device`` in a fresh graph, run on a CPU + GPU session; returns
    (values, {node name: device name})."""
    scope = gf.Scope(gf.Graph()).with_device(device)
    fetches = build(scope)
    config = gf.SessionConfig(deterministic=deterministic)
    with gf.Session(scope.graph, config, devices=gpu_session_devices(kind)) as sess:
        plan = sess._plan(fetches if isinstance(fetches, list) else [fetches], [])
        placement = {op.name: d.name for op, d in plan.placement.items()}
        return sess.run(fetches), placement


def _random_case(rng, dtype, num_slices=40, slice_dims=(3,), n=60, depth=1):
    shape = (num_slices,) + slice_dims
    indices = rng.integers(0, num_slices, size=(n, depth)).astype(np.int64)  # duplicates
    values = rng.standard_normal((n,) + slice_dims) * 10
    tensor = rng.standard_normal(shape) * 10
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(values.shape)
    return tensor.astype(dtype), indices, values.astype(dtype)


# -- agreement with the CPU -----------------------------------------------------------------
@pytest.mark.parametrize("op", sorted(SCATTER_OPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_tensor_scatter_deterministic_equals_cpu(kind, op, dtype):
    if op in ("min", "max") and np.dtype(dtype).kind == "c":
        pytest.skip("no order on complex numbers")
    tensor, indices, updates = _random_case(np.random.default_rng(7), dtype)
    build = lambda s: getattr(s, SCATTER_OPS[op])(tensor, indices, updates, name="out")  # noqa: E731
    cpu, _ = _run(kind, build, device="/cpu:0")
    gpu, where = _run(kind, build)
    assert where["out"] == "/device:GPU:0"
    assert gpu.dtype == cpu.dtype
    assert gpu.tobytes() == cpu.tobytes()  # bit for bit: sums in index order, last wins
    np.testing.assert_array_equal(cpu, ref_scatter.scatter(tensor, indices[:, None].reshape(-1, 1),
                                                           updates, op))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.complex64, np.float16])
def test_scatter_nd_default_agrees_with_cpu(kind, dtype):
    """Atomics in any order: exact for integers, to rounding for floats."""
    _, indices, updates = _random_case(np.random.default_rng(3), dtype, slice_dims=(2, 2))
    build = lambda s: s.scatter_nd(indices, updates, [40, 2, 2], name="out")  # noqa: E731
    cpu, _ = _run(kind, build, device="/cpu:0")
    gpu, where = _run(kind, build, deterministic=False)
    assert where["out"] == "/device:GPU:0"
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(gpu, cpu)
    else:
        tol = 1e-2 if dtype == np.float16 else 1e-5
        np.testing.assert_allclose(gpu, cpu, rtol=tol, atol=tol)


def test_scatter_nd_bool_ors_on_gpu(kind):
    build = lambda s: s.scatter_nd([[1], [1], [3]], [True, False, False], [4])  # noqa: E731
    gpu, _ = _run(kind, build, deterministic=False)
    assert gpu.tolist() == [False, True, False, False]


def test_min_max_nan_rules_match_cpu(kind):
    tensor = np.array([1.0, np.nan, 3.0, 0.0], np.float32)
    indices = np.array([[0], [1], [2], [2], [3]])
    updates = np.array([np.nan, 0.0, 5.0, np.nan, -1.0], np.float32)
    for name in ("tensor_scatter_min", "tensor_scatter_max"):
        build = lambda s: getattr(s, name)(tensor, indices, updates)  # noqa: E731
        cpu, _ = _run(kind, build, device="/cpu:0")
        for deterministic in (True, False):
            gpu, _ = _run(kind, build, deterministic)
            np.testing.assert_array_equal(gpu, cpu)


def test_gather_nd_equals_cpu(kind):
    rng = np.random.default_rng(1)
    params = rng.standard_normal((6, 5, 4)).astype(np.float32)
    for indices in (rng.integers(0, 5, size=(7, 2)), rng.integers(0, 6, size=(3, 2, 1)),
                    np.zeros((0, 2), np.int64)):
        build = lambda s: s.gather_nd(params, indices.astype(np.int32), name="g")  # noqa: E731
        cpu, _ = _run(kind, build, device="/cpu:0")
        gpu, where = _run(kind, build)
        assert where["g"] == "/device:GPU:0"
        np.testing.assert_array_equal(gpu, cpu)
    batched = lambda s: s.gather_nd(params, [[[1], [0]], [[2], [4]], [[0], [0]], [[3], [3]],  # noqa: E731
                                             [[4], [1]], [[0], [2]]], batch_dims=1)
    np.testing.assert_array_equal(_run(kind, batched)[0], _run(kind, batched, device="/cpu:0")[0])


@pytest.mark.parametrize("k", [1, 2, 5, 20])
def test_dynamic_partition_and_stitch_equal_cpu(kind, k):
    rng = np.random.default_rng(k)
    data = rng.standard_normal((50, 3)).astype(np.float32)
    ids = rng.integers(0, k, size=50).astype(np.int32)

    def build(s):
        parts = s.dynamic_partition(data, ids, num_partitions=k, name="part")
        rows = s.dynamic_partition(s.range(0, 50, 1), ids, num_partitions=k)
        return list(parts) + [s.dynamic_stitch(list(rows), list(parts), name="stitch")]
    cpu, _ = _run(kind, build, device="/cpu:0")
    gpu, where = _run(kind, build, deterministic=False)
    assert where["part"] == where["stitch"] == "/device:GPU:0"
    for c, g in zip(cpu, gpu):
        np.testing.assert_array_equal(g, c)
    np.testing.assert_array_equal(gpu[-1], data)


@pytest.mark.parametrize("op", ["dynamic_stitch", "parallel_dynamic_stitch"])
def test_stitch_duplicates_later_wins_on_gpu(kind, op):
    """Both stitches keep the later duplicate on the GPU, by default too (the last writer
    stores), so that a gradient knows which value won."""
    build = lambda s: getattr(s, op)([[0, 2, 2], [2, 5]], [[1.0, 2.0, 3.0], [4.0, 5.0]])  # noqa: E731
    gpu, _ = _run(kind, build, deterministic=True)
    assert gpu.tolist() == [1.0, 0.0, 4.0, 0.0, 0.0, 5.0]
    assert _run(kind, build, deterministic=False)[0].tolist() == gpu.tolist()


# -- bad indices on the GPU ---------------------------------------------------------------------
def test_out_of_bound_scatter_skipped_by_default(kind):
    indices = [[4], [9], [1], [-1], [1]]
    updates = [1.0, 2.0, 3.0, 4.0, 5.0]
    build = lambda s: s.scatter_nd(indices, updates, [6])  # noqa: E731
    for policy_build in (build, lambda s: s.scatter_nd(indices, updates, [6],
                                                       bad_indices_policy="IGNORE")):
        for deterministic in (True, False):
            got, _ = _run(kind, policy_build, deterministic)
            assert got.tolist() == [0, 8, 0, 0, 1, 0]
    with pytest.raises(InvalidArgumentError, match="does not index"):
        _run(kind, build, device="/cpu:0")  # the CPU raises


def test_error_policy_raises_the_first_bad_index_on_gpu(kind):
    build = lambda s: s.tensor_scatter_add(np.zeros(6, np.float32), [[4], [9], [1], [-1]],  # noqa: E731
                                           [1.0, 2.0, 3.0, 4.0], bad_indices_policy="ERROR",
                                           name="bad")
    with pytest.raises(InvalidArgumentError,
                       match=r"indices\[1\] = \[9\] does not index into shape \[6\]") as info:
        _run(kind, build)
    assert "bad" in str(info.value)


@pytest.mark.parametrize("index_type", [np.int16, np.int32, np.int64])
def test_locate_checks_both_ends_of_dimensions_past_the_index_range(index_type):
    """A negative index stays out of bounds when the dimension is larger than its type,
    on the GPU and on the CPU."""
    tuples = np.array([[1, -1], [2, 5], [3, 0], [0, np.iinfo(index_type).min]], index_type)
    offsets = gpu_index.locate(np, tuples, [3, 2**40], "IGNORE", str)
    assert offsets.tolist() == [-1, 2 * 2**40 + 5, -1, -1]
    with pytest.raises(InvalidArgumentError, match="^0$"):
        gpu_index.locate(np, tuples, [3, 2**40], "ERROR", str)
    offsets, keep = scatter_ops.locate(tuples, [3, 2**40], "IGNORE", str)
    assert offsets.tolist() == [2 * 2**40 + 5] and keep.tolist() == [False, True, False, False]
    with pytest.raises(InvalidArgumentError, match="^3$"):  # the CPU reports the last
        scatter_ops.locate(tuples, [3, 2**40], "ERROR", str)


def test_gather_nd_out_of_bound_gives_zeros_on_gpu(kind):
    params = np.arange(12, dtype=np.int32).reshape(4, 3)
    build = lambda s: s.gather_nd(params, [[1], [7], [-2], [3]])  # noqa: E731
    got, _ = _run(kind, build)
    assert got.tolist() == [[3, 4, 5], [0, 0, 0], [0, 0, 0], [9, 10, 11]]
    erroring = lambda s: s.gather_nd(params, [[1], [7], [-2]], bad_indices_policy="ERROR")  # noqa: E731
    with pytest.raises(InvalidArgumentError, match=r"indices\[1\] = \[7\] does not index"):
        _run(kind, erroring)


def test_partition_and_stitch_errors_on_gpu(kind):
    with pytest.raises(InvalidArgumentError, match=r"partitions\[2\] = 7 is not in \[0, 2\)"):
        _run(kind, lambda s: s.dynamic_partition([1.0, 2.0, 3.0], [0, 1, 7], num_partitions=2))
    with pytest.raises(InvalidArgumentError, match=r"indices\[1\] is out of range"):
        _run(kind, lambda s: s.dynamic_stitch([[0, -3]], [[1.0, 2.0]]))


# -- the TensorFlow corpus on the GPU ----------------------------------------------------------
def _case_inputs(scope, case):
    from conformance.test_tf_conformance import _inputs
    return _inputs(scope, case)


GPU_CASES = [c for c in CASES if c["op"] in GPU_OPS and not c.get("static")
             and "values" in c["expect"]
             and not any(i.get("dtype") == "string" or any(t.get("dtype") == "string"
                                                           for t in i.get("list", []))
                         for i in c["inputs"])]


@pytest.mark.parametrize("case", GPU_CASES, ids=[c["id"] for c in GPU_CASES])
def test_tensorflow_cases_on_gpu(kind, case):
    """Every recorded TensorFlow result of these ops, computed on the GPU
    (deterministic=True: duplicates resolve as on TensorFlow's CPU)."""
    from conformance.test_tf_conformance import _assert_same, _decode
    got, _ = _run(kind, lambda s: _as_list(s.create_op(case["op"], *_case_inputs(s, case),
                                                       **case["attrs"])))
    wants = [_decode(v) for v in case["expect"]["values"]]
    for g, w in zip(got, wants):
        _assert_same(g, w, case["id"])


def _as_list(outs):
    return outs if isinstance(outs, list) else [outs]


def test_a_fed_value_copied_to_the_gpu_is_never_forwarded(kind):
    """A device-array feed reaches the GPU without a copy, so the kernel must not write
    into it: the copy step of a feed does not count as a fresh buffer."""
    scope = gf.Scope(gf.Graph()).with_device("/gpu:0")
    x = scope.placeholder(gf.float32, shape=[4], name="x")
    y = scope.tensor_scatter_add(x, [[1]], [5.0], name="y")
    w = scope.placeholder(gf.float32, shape=[4], name="w")
    z = scope.tensor_scatter_add(scope.add(w, 0.0), [[1]], [5.0], name="z")
    with gf.Session(scope.graph, devices=gpu_session_devices(kind)) as sess:
        plan = sess._plan([y, z], [x, w])
        steps = {s.label: s for s in plan.steps}
        assert steps["y"].ctx.forwardable[0] is False   # the feed's copy
        assert steps["z"].ctx.forwardable[0] is True    # a fresh result of Add
        fed = np.zeros(4, np.float32)
        np.testing.assert_array_equal(sess.run(y, {x: fed}), [0, 5, 0, 0])
        assert fed.tolist() == [0, 0, 0, 0]


def test_a_device_array_feed_can_be_fetched_back(kind):
    """A feed that already lives on the GPU comes back from run as a numpy array, fetched
    as it is or read by a CPU node."""
    scope = gf.Scope(gf.Graph()).with_device("/cpu:0")
    x = scope.placeholder(gf.float32, shape=[3], name="x")
    y = scope.neg(x, name="y")
    devices = gpu_session_devices(kind)
    fed = devices[1].from_host(np.arange(3, dtype=np.float32))
    with gf.Session(scope.graph, devices=devices) as sess:
        alone = sess.run(x, {x: fed})
        got_x, got_y = sess.run([x, y], {x: fed})
    assert type(alone) is np.ndarray and alone.tolist() == [0, 1, 2]
    assert type(got_x) is np.ndarray and type(got_y) is np.ndarray
    assert got_x.tolist() == [0, 1, 2] and got_y.tolist() == [0, -1, -2]


def test_empty_inputs_on_gpu(kind):
    def build(s):
        parts = s.dynamic_partition(np.zeros((0, 2), np.float32), np.zeros(0, np.int32),
                                    num_partitions=3)
        merged = s.dynamic_stitch([np.zeros(0, np.int32)], [np.zeros((0, 2), np.float32)])
        scattered = s.scatter_nd(np.zeros((0, 1), np.int64), np.zeros(0, np.float32), [4])
        return list(parts) + [merged, scattered]
    got, _ = _run(kind, build, deterministic=False)
    assert [g.shape for g in got] == [(0, 2)] * 3 + [(0, 2), (4,)]


@pytest.mark.parametrize("name", ["tensor_scatter_min", "tensor_scatter_max"])
def test_signed_zero_ties_keep_the_earliest_value(kind, name):
    """Eigen's min/max keep the current value on a tie, and among updates the earliest:
    0.0 and -0.0 come out bit for bit as TensorFlow's CPU, on both devices."""
    tensor = np.array([0.0, -0.0, 5.0, -5.0], np.float32)
    indices = np.array([[0], [0], [1], [2], [2], [3], [3]])
    updates = np.array([-0.0, -0.0, 0.0, -0.0, 0.0, 0.0, -0.0], np.float32)
    want = ref_scatter.scatter(tensor, indices, updates, name.rsplit("_", 1)[1])
    build = lambda s: getattr(s, name)(tensor, indices, updates)  # noqa: E731
    cpu, _ = _run(kind, build, device="/cpu:0")
    gpu, _ = _run(kind, build, deterministic=True)
    assert cpu.tobytes() == want.tobytes() == gpu.tobytes()
