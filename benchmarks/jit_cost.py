"""What compiling costs: the first call of each graph in a new process, with an empty
kernel cache (cold: numba compiles) and with the cache the cold run left (warm:
kernels load from disk), against a later call of the same callable.

    python -m benchmarks.jit_cost

Each graph's each measurement runs in its own interpreter with its own cache folder,
so nothing another graph compiled counts (graphs that share kernels would otherwise
take turns paying for them: optimize=False's seed pipeline compiles the partition
loops the 3-way partition then finds ready). ``import graphflow`` (numba included)
is timed on its own. The first call is compared with ``optimize=False``'s first call
(also cold): with tiered compilation a fused region runs its nodes one by one until
its kernel is compiled in the background, so optimizing never makes the first
result wait on numba.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

_CHILD = r'''
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import graphflow as gf
t_import = time.perf_counter() - t0

def graphs():
    n = 1 << 16
    rng = np.random.default_rng(0)
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[None])
    idx = s.placeholder(gf.int64, shape=[None, 1])
    fx, fi = rng.standard_normal(n).astype(np.float32), rng.integers(0, n, (n // 4, 1))
    mask = s.cast(s.not_equal(x, np.float32(-1)), gf.int32)
    parts = s.dynamic_partition(x, mask, 2)
    rows = s.dynamic_partition(s.range(0, s.size(x), 1), mask, 2)
    yield "seed pipeline (fused partition/+1/stitch)", s, s.dynamic_stitch(rows, [parts[0], s.add(parts[1], np.float32(1))]), [x], [fx]
    yield "ScatterNd float32", s, s.scatter_nd(idx, s.gather_nd(x, idx), s.cast(s.shape(x), gf.int64)), [x, idx], [fx, fi]
    yield "TensorScatterAdd/Max float32", s, s.tensor_scatter_max(s.tensor_scatter_add(s.mul(x, np.float32(2)), idx, s.gather_nd(x, idx)), idx, s.gather_nd(x, idx)), [x, idx], [fx, fi]
    yield "DynamicPartition into 3 + DynamicStitch", s, s.dynamic_stitch(s.dynamic_partition(s.range(0, s.size(x), 1), s.cast(s.less(x, np.float32(0)), gf.int32), 3), s.dynamic_partition(x, s.cast(s.less(x, np.float32(0)), gf.int32), 3)), [x], [fx]
    h = x
    for _ in range(100):
        h = s.add(h, x)
    yield "chain of 100 Adds (fused kernels)", s, h, [x], [fx]
    g = gf.Scope(gf.Graph())
    y = g.placeholder(gf.float32, shape=[None])
    h = y
    for _ in range(1500):  # 3000 element-wise ops, then their gradient
        h = g.add(g.mul(h, np.float32(0.999)), y)
    (dy,) = gf.gradients(g.sum(h, [0]), [y])
    yield "gradient of a 3000-op element-wise chain", g, dy, [y], [fx[:1024]]

out = {"import_s": t_import, "graphs": []}
optimize = sys.argv[1] == "1"
only = int(sys.argv[2])
for k, (name, s, fetch, feeds, values) in enumerate(graphs()):
    if k != only:
        continue
    with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
        t = time.perf_counter()
        f = sess.make_callable(fetch, feeds)
        f(*values)
        first = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(10):
            f(*values)
        later = (time.perf_counter() - t) / 10
    out["graphs"].append({"name": name, "first_s": first, "later_s": later})
print(json.dumps(out))
'''


GRAPHS = 6


def _measure(cache: str, graph: int, optimize: bool = True) -> dict:
    env = dict(os.environ, GRAPHFLOW_CACHE_DIR=cache)
    done = subprocess.run([sys.executable, "-c", _CHILD, "1" if optimize else "0", str(graph)],
                          env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure_all(optimize: bool, cache_of) -> dict:
    runs = [_measure(cache_of(k), k, optimize) for k in range(GRAPHS)]
    return {"import_s": runs[0]["import_s"], "graphs": [r["graphs"][0] for r in runs]}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="graphflow-jit-") as root:
        def cache_of(kind):
            return lambda k: os.path.join(root, f"{kind}-{k}")
        cold = _measure_all(True, cache_of("opt"))
        warm = _measure_all(True, cache_of("opt"))
        plain = _measure_all(False, cache_of("plain"))
    print(f"import graphflow: {cold['import_s']:.2f} s cold, {warm['import_s']:.2f} s warm\n")
    print("| graph | first call, cold cache | / optimize=False's (cold) | first call, warm "
          "cache | later call |")
    print("|---|---|---|---|---|")
    for c, w, p in zip(cold["graphs"], warm["graphs"], plain["graphs"]):
        print(f"| {c['name']} | {c['first_s']:.2f} s | {c['first_s'] / p['first_s']:.2f}x "
              f"({p['first_s']:.2f} s) | {w['first_s'] * 1e3:.0f} ms | "
              f"{w['later_s'] * 1e3:.2f} ms |")


if __name__ == "__main__":
    main()
