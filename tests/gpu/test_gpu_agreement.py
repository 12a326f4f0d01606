"""On a machine with cupy and a CUDA device: every op placed on /gpu:0 agrees
with the CPU. Skipped cleanly elsewhere (CI has no GPU)."""
import numpy as np
import pytest

import graphflow as gf

GPU = next((d for d in gf.list_devices() if d.device_type == "gpu"), None)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(GPU is None, reason="needs cupy and a CUDA device")]


def _both(build):
    results = []
    for device in ("/cpu:0", "/gpu:0"):
        scope = gf.Scope(gf.Graph()).with_device(device)
        out = build(scope)
        with gf.Session(scope.graph) as sess:
            results.append(sess.run(out))
    return results


@pytest.mark.parametrize("name", ["add", "sub", "mul", "maximum", "minimum", "less", "equal"])
def test_binary_ops_agree(name):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    cpu, gpu = _both(lambda s: getattr(s, name)(x, y))
    np.testing.assert_array_equal(cpu, gpu)


def test_array_ops_agree():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    def build(s):
        return [s.reshape(x, [-1, 4]), s.concat([x, x], 1), s.pack([x, x], axis=0),
                s.expand_dims(x, 0), s.cast(x, gf.int32), s.fill([2, 2], 3.0), s.range(0, 10, 3),
                s.where(s.greater(x, 5.0), x, s.neg(x)), s.shape(x)]
    for cpu, gpu in zip(*_both(build)):
        np.testing.assert_array_equal(cpu, gpu)

# The scatter family, GatherNd, partition and stitch: tests/test_gpu_kernels.py (its
# "cuda" cases run here on the real device).


def test_cupy_feeds_are_never_modified_and_reach_cpu_nodes():
    import cupy as cp
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float32, shape=[4], name="x")
    on_gpu = scope.with_device("/gpu:0").tensor_scatter_add(x, [[1]], [5.0])
    on_cpu = scope.with_device("/cpu:0").neg(x)
    fed = cp.arange(4, dtype=cp.float32)
    with gf.Session(scope.graph) as sess:
        a, b = sess.run([on_gpu, on_cpu], {x: fed})
    assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    assert a.tolist() == [0, 6, 2, 3] and b.tolist() == [0, -1, -2, -3]
    assert fed.get().tolist() == [0, 1, 2, 3]
