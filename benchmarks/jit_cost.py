"""What compiling costs: the first call of each graph in a new process, with an empty
kernel cache (cold: numba compiles) and with the cache the cold run left (warm:
kernels load from disk), against a later call of the same callable.

    python -m benchmarks.jit_cost

Each measurement runs in its own interpreter, so nothing compiled earlier in this
process counts. ``import graphflow`` (numba included) is timed on its own. The
first call is compared with ``optimize=False``'s first call (also cold): with tiered
compilation a fused region runs its nodes one by one until its kernel is compiled in
the background, so optimizing never makes the first result wait on numba.
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
for name, s, fetch, feeds, values in graphs():
    with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
        t = time.perf_counter()
        f = sess.make_callable(fetch, feeds)
        f(*values)
        first = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(10):
            f(*values)
        later = (time.perf_counter() - t) / 10
    # the next graph's first call must not share the GIL with this one's background
    # compiles (a fresh process would not): wait for them
    from graphflow.ops import fused_elementwise
    for future in list(fused_elementwise._compiling.values()):
        future.result()
    out["graphs"].append({"name": name, "first_s": first, "later_s": later})
print(json.dumps(out))
'''


def _measure(cache: str, optimize: bool = True) -> dict:
    env = dict(os.environ, GRAPHFLOW_CACHE_DIR=cache)
    done = subprocess.run([sys.executable, "-c", _CHILD, "1" if optimize else "0"], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="graphflow-jit-") as cache, \
            tempfile.TemporaryDirectory(prefix="graphflow-jit-plain-") as plain_cache:
        cold = _measure(cache)
        warm = _measure(cache)
        plain = _measure(plain_cache, optimize=False)
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
