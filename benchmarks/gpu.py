"""``python -m benchmarks.gpu [--size N] [--json PATH]``: the GPU benchmark.

Scatter, gather and stitch at 10**8 elements on /gpu:0 through make_callable,
each against the same operation written directly in cupy, and the device's own
copy bandwidth (cupy.copyto, read + write bytes) measured in the same run.
Every graph fetches one element of its big result, so a run includes the
kernels and a 4-byte transfer, not a copy of the result to the host. Effective
GB/s count the bytes an operation must move at least: indices and updates read
once, each updated output element read and written once (scatter), each
gathered element read and written once (gather). The deterministic scatter
(sort + segmented fold) is measured against the default (atomics).
Needs cupy and a CUDA device; exits with a message otherwise.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

import graphflow as gf


def _time(cp, fn, repeats: int) -> float:
    """Median seconds of ``fn()``, timed with CUDA events after one warm-up."""
    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return statistics.median(times)


def _callable(build, feeds, deterministic: bool = False):
    """A make_callable of ``build(scope, *placeholders)`` on /gpu:0, fetching one element."""
    scope = gf.Scope(gf.Graph()).with_device("/gpu:0")
    holders = [scope.placeholder(gf.as_dtype(f.dtype), shape=f.shape) for f in feeds]
    big = build(scope, *holders)
    probe = scope.gather_nd(scope.reshape(big, [-1]), [[0]])
    sess = gf.Session(scope.graph, gf.SessionConfig(deterministic=deterministic))
    run = sess.make_callable(probe, holders)
    return lambda: run(*feeds), sess


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10**8, help="elements per workload")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    if not any(d.device_type == "gpu" for d in gf.list_devices()):
        print("no GPU: needs cupy and a CUDA device", file=sys.stderr)
        return 1
    import cupy as cp

    n, r = args.size, args.repeats
    rng = cp.random.default_rng(0)
    src, dst = cp.ones(n, cp.float32), cp.empty(n, cp.float32)
    copy_gbps = 2 * src.nbytes / _time(cp, lambda: cp.copyto(dst, src), r) / 1e9
    del src, dst

    values = rng.standard_normal(n, dtype=cp.float32)
    perm = cp.argsort(rng.random(n))                      # unique int64 indices
    dups = rng.integers(0, n // 10, n, dtype=cp.int64)    # every position about 10 times
    tensor = cp.zeros(n, cp.float32)
    idx_bytes, val_bytes = 8 * n, 4 * n
    rows = []

    def row(name, graph_fn, base_fn, nbytes, extra=None):
        t_gf, t_base = _time(cp, graph_fn, r), _time(cp, base_fn, r)
        gbps = nbytes / t_gf / 1e9
        rows.append({"name": name, "graphflow_ms": t_gf * 1e3, "cupy_ms": t_base * 1e3,
                     "ratio": t_gf / t_base, "gbps": gbps, "of_copy": gbps / copy_gbps,
                     **(extra or {})})

    scatter_nd, _s1 = _callable(lambda s, i, u: s.scatter_nd(s.expand_dims(i, 1), u, [n]),
                                [perm, values])

    def cupy_scatter_nd():
        out = cp.zeros(n, cp.float32)
        cp.add.at(out, perm, values)
    row("ScatterNd 1e8 unique", scatter_nd, cupy_scatter_nd, idx_bytes + val_bytes + 2 * 4 * n)

    for deterministic in (False, True):
        add, _s2 = _callable(lambda s, t, i, u: s.tensor_scatter_add(t, s.expand_dims(i, 1), u),
                             [tensor, dups, values], deterministic)

        def cupy_add():
            out = tensor.copy()
            cp.add.at(out, dups, values)
        row(f"TensorScatterAdd 1e8 dups{' deterministic' if deterministic else ''}", add,
            cupy_add, idx_bytes + val_bytes + 2 * 4 * n + 2 * tensor.nbytes)

    gather, _s3 = _callable(lambda s, p, i: s.gather_nd(p, s.expand_dims(i, 1)), [values, perm])
    row("GatherNd 1e8", gather, lambda: cp.take(values, perm), idx_bytes + 2 * 4 * n)

    half = n // 2
    i0, i1 = perm[:half].astype(cp.int32), perm[half:].astype(cp.int32)
    d0, d1 = values[:half], values[half:]
    stitch, _s4 = _callable(lambda s, a, b, x, y: s.dynamic_stitch([a, b], [x, y]),
                            [i0, i1, d0, d1])

    def cupy_stitch():
        merged = cp.zeros(n, cp.float32)
        merged[i0] = d0
        merged[i1] = d1
    row("DynamicStitch 2 x 5e7", stitch, cupy_stitch, 4 * n + val_bytes + 2 * 4 * n)

    print(f"device copy bandwidth: {copy_gbps:.0f} GB/s (cupy.copyto, read + write)")
    print(f"{'workload':36} {'graphflow ms':>12} {'cupy ms':>9} {'ratio':>6} {'GB/s':>7} "
          f"{'of copy':>7}")
    for x in rows:
        print(f"{x['name']:36} {x['graphflow_ms']:12.2f} {x['cupy_ms']:9.2f} {x['ratio']:6.2f} "
              f"{x['gbps']:7.0f} {x['of_copy']:7.2f}")
    default, det = (x["graphflow_ms"] for x in rows if x["name"].startswith("TensorScatterAdd"))
    print(f"deterministic=True costs {det / default:.2f}x the default TensorScatterAdd")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_gbps": copy_gbps, "rows": rows,
                       "device": str(cp.cuda.runtime.getDeviceProperties(0)["name"])}, f,
                      indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
