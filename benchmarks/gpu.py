"""``python -m benchmarks.gpu [--size N] [--repeats R] [--json PATH]``: the GPU benchmark.

Scatter, gather, stitch, DynamicPartition into 2 and the seed pipeline
(examples/partition_stitch.py: partition by ``x != -1``, +1 on one part, stitch
back) at 10**8 elements on /gpu:0 through make_callable, each against the same
operation written directly in cupy and in PyTorch on CUDA (where torch is
importable and sees the device): ``index_put_(accumulate=True)`` (sort-based)
and ``index_add_`` (atomics) for the sums, ``torch.take`` for the gather,
indexed assignment for the stitch, boolean masks for the partition and the
pipeline. Every peer's result is checked against graphflow's (exactly, or to
rounding for float sums in another order). The device's own copy bandwidth
(read + write bytes of a large device-to-device copy) is measured in the same
run. Every timed graph fetches one element of each big result, so a run
includes the kernels and a 4-byte transfer, not a copy of the result to the
host. Effective GB/s count the bytes an operation must move at least:

* scatter: indices and updates read once, each output element zeroed (or, for
  TensorScatterAdd, copied from the input: read + write) and then read and
  written once by the update;
* gather: indices read, each gathered element read and written once;
* stitch: indices and data read once, the output written once;
* partition: data and partition ids read once, the outputs written once;
* seed pipeline: x read once, the result written once.

The deterministic scatter (sort + segmented fold) is measured against the default
(atomics) with about 10 duplicates per slot and with none. All times are medians
of CUDA-event timings after a warm-up. Needs cupy and a CUDA device; exits with a
message otherwise.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import traceback
from typing import Callable

import numpy as np

import graphflow as gf

#: the Session's devices (None: graphflow's own) and torch's device; the tests set a
#: simulated GPU and torch's CPU here
DEVICES = None
TORCH_DEVICE = "cuda"


def _time(cp, fn: Callable, repeats: int) -> float:
    """Median seconds of ``fn()``, timed with CUDA events on the null stream (which
    PyTorch's default stream is too) after one warm-up."""
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


def _callables(build, feeds, deterministic: bool = False):
    """``(timed, full)`` of ``build(scope, *placeholders)`` on /gpu:0: ``timed()`` fetches
    one element of each result, ``full()`` the results as numpy arrays (a list)."""
    scope = gf.Scope(gf.Graph()).with_device("/gpu:0")
    holders = [scope.placeholder(gf.as_dtype(f.dtype), shape=f.shape) for f in feeds]
    big = build(scope, *holders)
    big = big if isinstance(big, (list, tuple)) else [big]
    probes = [scope.gather_nd(scope.reshape(b, [-1]), [[0]]) for b in big]
    sess = gf.Session(scope.graph, gf.SessionConfig(deterministic=deterministic),
                      devices=DEVICES)
    timed = sess.make_callable(probes, holders)
    full = sess.make_callable(list(big), holders)
    return (lambda: timed(*feeds)), (lambda: full(*feeds)), sess


def _torch_on_gpu():
    """torch when it is importable and sees a CUDA device, else None."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - an optional peer
        return None
    return torch if torch.cuda.is_available() else None


def _indexes_with_int32(torch) -> bool:
    """Whether torch takes int32 index tensors in indexed assignment (else they are
    widened to int64 inside the timed region)."""
    try:
        torch.zeros(2, device=TORCH_DEVICE)[torch.zeros(1, dtype=torch.int32,
                                                        device=TORCH_DEVICE)] = 1.0
        return True
    except (IndexError, RuntimeError, TypeError):
        return False


def _host(value) -> np.ndarray:
    """A numpy copy of a cupy array or torch tensor (or a numpy array as is)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):  # torch
        return value.detach().cpu().numpy()
    return value.get()


def _same(name: str, got, want, exact: bool) -> str:
    """"ok" or what differs between graphflow's ``got`` and a peer's ``want`` (lists of
    arrays)."""
    for g, w in zip(got, want):
        w = _host(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{name}: shape/dtype {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
        if exact and g.tobytes() != w.tobytes():
            return f"{name}: {int(np.count_nonzero(g != w))} elements differ"
        if not exact and not np.allclose(g, w, rtol=1e-4, atol=1e-4):
            return f"{name}: max difference {float(np.max(np.abs(g - w)))}"
    return "ok"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10**8, help="elements per workload")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    args = parser.parse_args(argv)
    if DEVICES is None and not any(d.device_type == "gpu" for d in gf.list_devices()):
        print("no GPU: needs cupy and a CUDA device", file=sys.stderr)
        return 1
    import cupy as cp
    torch = None if args.no_torch else _torch_on_gpu()

    n, r = args.size, args.repeats
    src, dst = cp.ones(n, cp.float32), cp.empty(n, cp.float32)
    copy_gbps = 2 * src.nbytes / _time(cp, lambda: cp.copyto(dst, src), r) / 1e9
    del src, dst

    rng = cp.random.default_rng(0)
    values = rng.standard_normal(n, dtype=cp.float32)
    perm = cp.argsort(rng.random(n))                      # unique int64 indices
    dups = rng.integers(0, max(n // 10, 1), n, dtype=cp.int64)  # each slot ~10 times
    tensor = rng.standard_normal(n, dtype=cp.float32)
    half = n // 2
    i0, i1 = perm[:half].astype(cp.int32), perm[half:].astype(cp.int32)
    d0, d1 = values[:half], values[half:]
    ids = (rng.random(n) < 0.5).astype(cp.int32)
    xs = cp.where(rng.random(n) < 0.3, cp.float32(-1), values).astype(cp.float32)
    # torch views of the same device buffers
    t = (lambda a: torch.from_dlpack(a)) if torch else None

    rows, failures = [], []

    def row(name, nbytes, build, feeds, cupy_fn, torch_fn=None, deterministic=False,
            exact=True, label=None):
        """Time graphflow, cupy and torch on one workload and check the peers' results."""
        entry = {"name": name, "bytes": nbytes, "deterministic": deterministic}
        try:
            timed, full, _sess = _callables(build, feeds, deterministic)
            mine = full()
            entry["check_cupy"] = _same("cupy", mine, cupy_fn(), exact)
            entry["graphflow_ms"] = _time(cp, timed, r) * 1e3
            entry["cupy_ms"] = _time(cp, cupy_fn, r) * 1e3
            if torch_fn is not None:
                entry["check_torch"] = _same("torch", mine, torch_fn(), exact)
                entry["torch_ms"] = _time(cp, torch_fn, r) * 1e3
                entry["torch_form"] = label
                entry["graphflow_over_torch"] = entry["graphflow_ms"] / entry["torch_ms"]
            entry["graphflow_over_cupy"] = entry["graphflow_ms"] / entry["cupy_ms"]
            entry["gbps"] = nbytes / entry["graphflow_ms"] * 1e3 / 1e9
            entry["of_copy"] = entry["gbps"] / copy_gbps
            del mine, timed, full, _sess
        except Exception as e:  # noqa: BLE001 - report and go on with the other workloads
            entry["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        for key in ("check_cupy", "check_torch", "error"):
            if entry.get(key, "ok") != "ok":
                failures.append(f"{name}: {entry[key]}")
        rows.append(entry)
        cp.get_default_memory_pool().free_all_blocks()
        if torch:
            torch.cuda.empty_cache()

    e, f = 8, 4  # bytes of an int64 index; of a float32 value or an int32 id

    # -- ScatterNd, unique indices
    def cupy_scatter_nd():
        out = cp.zeros(n, cp.float32)
        cp.add.at(out, perm, values)
        return [out]

    def torch_scatter_nd():  # atomics, as graphflow's default (index_put_ sorts: slower)
        out = torch.zeros(n, dtype=torch.float32, device=TORCH_DEVICE)
        out.index_add_(0, t(perm), t(values))
        return [out]
    row("ScatterNd 1e8 unique", e * n + f * n + 2 * f * n,
        lambda s, i, u: s.scatter_nd(s.expand_dims(i, 1), u, [n]), [perm, values],
        cupy_scatter_nd, torch and torch_scatter_nd, label="index_add_")

    # -- TensorScatterAdd with and without duplicates, default and deterministic
    for kind, idx in (("dups", dups), ("unique", perm)):
        def cupy_add(idx=idx):
            out = tensor.copy()
            cp.add.at(out, idx, values)
            return [out]

        def torch_index_add(idx=idx):  # atomics
            out = t(tensor).clone()
            out.index_add_(0, t(idx), t(values))
            return [out]

        def torch_index_put(idx=idx):  # sort-based
            out = t(tensor).clone()
            out.index_put_((t(idx),), t(values), accumulate=True)
            return [out]
        for deterministic in (False, True):
            name = (f"TensorScatterAdd 1e8 {'~10 dups/slot' if kind == 'dups' else 'unique'}"
                    f"{' deterministic' if deterministic else ''}")
            row(name, e * n + f * n + 2 * f * n + 2 * f * n,
                lambda s, a, i, u: s.tensor_scatter_add(a, s.expand_dims(i, 1), u),
                [tensor, idx, values], cupy_add,
                torch and (torch_index_put if deterministic else torch_index_add),
                deterministic=deterministic, exact=kind == "unique",
                label="index_put_(accumulate=True)" if deterministic else "index_add_")

    # -- GatherNd
    row("GatherNd 1e8", e * n + 2 * f * n,
        lambda s, p, i: s.gather_nd(p, s.expand_dims(i, 1)), [values, perm],
        lambda: [cp.take(values, perm)], torch and (lambda: [torch.take(t(values), t(perm))]),
        label="torch.take")

    # -- DynamicStitch of 2 inputs
    def cupy_stitch():
        merged = cp.zeros(n, cp.float32)
        merged[i0] = d0
        merged[i1] = d1
        return [merged]

    def torch_stitch():
        merged = torch.zeros(n, dtype=torch.float32, device=TORCH_DEVICE)
        for i, d in ((i0, d0), (i1, d1)):
            merged[t(i) if int32_indexing else t(i).long()] = t(d)
        return [merged]
    int32_indexing = torch is not None and _indexes_with_int32(torch)
    row("DynamicStitch 2 x 5e7", 3 * f * n,
        lambda s, a, b, x, y: s.dynamic_stitch([a, b], [x, y]), [i0, i1, d0, d1],
        cupy_stitch, torch and torch_stitch, label="merged[i] = d")

    # -- DynamicPartition into 2
    def torch_partition():
        p = t(ids)
        return [t(values)[p == 0], t(values)[p == 1]]
    row("DynamicPartition 1e8 into 2", 3 * f * n,
        lambda s, x, p: s.dynamic_partition(x, p, num_partitions=2), [values, ids],
        lambda: [values[ids == 0], values[ids == 1]], torch and torch_partition,
        label="x[p == k]")

    # -- the seed pipeline: partition by x != -1, +1 on one part, stitch back
    def pipeline(s, x):
        mask = s.cast(s.not_equal(x, np.float32(-1.0)), gf.int32)
        data = s.dynamic_partition(x, mask, num_partitions=2)
        positions = s.dynamic_partition(s.range(0, s.size(x), 1), mask, num_partitions=2)
        return s.dynamic_stitch(positions, [data[0], s.add(data[1], np.float32(1.0))])

    def torch_pipeline():
        x = t(xs)
        out = x.clone()
        m = x != -1
        out[m] = x[m] + 1
        return [out]
    row("seed pipeline 1e8", 2 * f * n, pipeline, [xs],
        lambda: [cp.where(xs != -1, xs + cp.float32(1), xs)], torch and torch_pipeline,
        label="out[m] = x[m] + 1")

    _print(rows, copy_gbps, torch)
    if failures:
        print("FAILED checks:\n  " + "\n  ".join(failures))
    if args.json:
        with open(args.json, "w") as out:
            device = cp.cuda.runtime.getDeviceProperties(0)["name"] if DEVICES is None else "test"
            json.dump({"copy_gbps": copy_gbps, "size": n, "repeats": r, "rows": rows,
                       "torch": torch.__version__ if torch else None,
                       "cupy": cp.__version__, "device": str(device),
                       "failures": failures}, out, indent=2, default=str)
    return 1 if failures else 0


def _print(rows: list[dict], copy_gbps: float, torch) -> None:
    print(f"device copy bandwidth: {copy_gbps:.0f} GB/s (cupy.copyto, read + write)")
    print(f"{'workload':44} {'graphflow ms':>12} {'cupy ms':>8} {'torch ms':>8} "
          f"{'gf/torch':>8} {'GB/s':>6} {'of copy':>7}  torch form")
    for x in rows:
        if "error" in x:
            print(f"{x['name']:44} ERROR {x['error']}")
            continue
        torch_ms = f"{x['torch_ms']:8.2f}" if "torch_ms" in x else f"{'-':>8}"
        ratio = f"{x['graphflow_over_torch']:8.2f}" if "torch_ms" in x else f"{'-':>8}"
        print(f"{x['name']:44} {x['graphflow_ms']:12.2f} {x['cupy_ms']:8.2f} {torch_ms} "
              f"{ratio} {x['gbps']:6.0f} {x['of_copy']:7.2f}  {x.get('torch_form') or ''}")
    by_name = {x["name"]: x for x in rows if "error" not in x}
    for kind in ("~10 dups/slot", "unique"):
        default = by_name.get(f"TensorScatterAdd 1e8 {kind}")
        det = by_name.get(f"TensorScatterAdd 1e8 {kind} deterministic")
        if default and det:
            print(f"deterministic=True / default TensorScatterAdd ({kind}): "
                  f"{det['graphflow_ms'] / default['graphflow_ms']:.2f}x")
    if torch is None:
        print("PyTorch on CUDA: not importable here (torch columns empty)")


if __name__ == "__main__":
    sys.exit(main())
