"""Every basic op placed on /gpu:0 runs its GPU kernel there and agrees with the CPU:
on the simulated GPU and the emulated one (cupy-like arrays) on any machine, and on
the real device where cupy sees one. The scatter family, GatherNd, partition and
stitch: tests/test_gpu_kernels.py."""
import numpy as np
import pytest

import graphflow as gf

from support.gpu_devices import GPU_KINDS, gpu_session_devices


@pytest.fixture(params=GPU_KINDS)
def kind(request):
    return request.param


def _both(kind: str, build):
    """``build(scope)``'s fetches on the CPU and on the GPU, and each GPU node's device."""
    results = []
    for device in ("/cpu:0", "/gpu:0"):
        scope = gf.Scope(gf.Graph()).with_device(device)
        fetches = build(scope)
        with gf.Session(scope.graph, devices=gpu_session_devices(kind)) as sess:
            plan = sess._plan(fetches if isinstance(fetches, list) else [fetches], [])
            results.append(sess.run(fetches))
    placed = {op.type: d.device_type for op, d in plan.placement.items()}
    return results[0], results[1], placed


BINARY = ["add", "sub", "mul", "real_div", "maximum", "minimum", "less", "greater", "equal",
          "not_equal"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.float16,
                                   np.complex64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("name", BINARY)
def test_binary_ops_agree(kind, name, dtype):
    if np.dtype(dtype).kind == "c" and name in ("maximum", "minimum", "less", "greater"):
        pytest.skip("no order on complex numbers")
    if np.dtype(dtype).kind in "iu" and name == "real_div":
        pytest.skip("RealDiv is for floats")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 3)) * 10).astype(dtype)
    y = (rng.standard_normal(3) * 10 + 20).astype(dtype)  # broadcast, no zero divisors
    cpu, gpu, placed = _both(kind, lambda s: getattr(s, name)(x, y))
    assert gpu.dtype == cpu.dtype and "gpu" in placed.values()
    np.testing.assert_array_equal(cpu, gpu)


def test_array_ops_agree(kind):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    flags = np.array([[True, False], [False, False]])

    def build(s):
        return [s.reshape(x, [-1, 4]), s.concat([x, x], 1), s.pack([x, x], axis=0),
                s.expand_dims(x, 0), s.squeeze(s.expand_dims(x, 0), [0]),
                s.cast(x, gf.int32), s.cast(x, gf.float16), s.fill([2, 2], 3.0),
                s.range(0, 10, 3), s.where(s.greater(x, 5.0), x, s.neg(x)), s.shape(x),
                s.size(x), s.rank(x), s.identity(x), s.zeros_like(x), s.ones_like(x),
                s.logical_not(flags), s.logical_and(flags, True), s.logical_or(flags, False)]
    cpu, gpu, placed = _both(kind, build)
    for c, g in zip(cpu, gpu):
        assert g.dtype == c.dtype
        np.testing.assert_array_equal(c, g)
    on_cpu = sorted(t for t, d in placed.items() if d == "cpu" and t != "Const")
    assert on_cpu == []


def test_device_array_feeds_are_never_modified_and_reach_cpu_nodes(kind):
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float32, shape=[4], name="x")
    on_gpu = scope.with_device("/gpu:0").tensor_scatter_add(x, [[1]], [5.0])
    on_cpu = scope.with_device("/cpu:0").neg(x)
    devices = gpu_session_devices(kind)
    fed = devices[1].from_host(np.arange(4, dtype=np.float32))
    with gf.Session(scope.graph, devices=devices) as sess:
        a, b = sess.run([on_gpu, on_cpu], {x: fed})
    assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    assert a.tolist() == [0, 6, 2, 3] and b.tolist() == [0, -1, -2, -3]
    assert devices[1].to_host(fed).tolist() == [0, 1, 2, 3]
