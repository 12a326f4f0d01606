"""Timing, memory and machine-limit measurements shared by every workload.

Times are medians of repeated runs after a warm-up; memory is the peak that
tracemalloc sees (numpy reports its buffers to it) during one run, and the peak
resident set size (Linux: VmHWM, reset through /proc/self/clear_refs) above
what was resident before it.
"""
from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        gc.disable()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        gc.enable()
    return statistics.median(times)


def settle(fn: Callable[[], object], quiet_calls: int = 20, limit_s: float = 60.0) -> int:
    """Calls ``fn`` until graphflow has no background compile in flight for
    ``quiet_calls`` calls in a row (its compiled segments, fused kernels and lean loops
    loaded, its run mode chosen), or for ``limit_s``; the calls it made. What the calls
    before that cost is benchmarks/time_to_steps.py's table, not this one's."""
    from graphflow.ops.tiering import compiles_pending
    start, calls, quiet = time.perf_counter(), 0, 0
    while quiet < quiet_calls and time.perf_counter() - start < limit_s:
        fn()
        calls += 1
        quiet = 0 if compiles_pending() else quiet + 1
    return calls


def round_robin_times(fns: dict[str, Callable[[], object]], repeats: int,
                      calls: int = 1, lead_in: int = 1) -> dict[str, float]:
    """Median time of one call of each function (seconds), sampled in interleaved rounds.

    After one untimed warm-up sample of each, every round times one sample of
    every function (``calls`` calls in a row, gc off), in an order that rotates
    by one each round: load that comes and goes hits all of them alike, and
    none always runs right after the same other one. Each sample starts with
    ``lead_in`` untimed calls: the engine sampled before leaves its worker threads
    spinning and the caches full of its data, which a loop of one engine's steps
    never meets (a torch matmul loop right before it took an MoE step from 14.3 to
    18.5 ms; one untimed call first, 14.1 ms).
    """
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}

    def sample(fn):
        for _ in range(lead_in):
            fn()
        gc.disable()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t = time.perf_counter() - t0
        gc.enable()
        return t / calls
    for name in names:
        sample(fns[name])
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            samples[name].append(sample(fns[name]))
    return {name: statistics.median(ts) for name, ts in samples.items()}


def paired_per_call_time(fa: Callable[[], object], fb: Callable[[], object], rounds: int,
                         batch_s: float = 0.02) -> tuple[float, float, float]:
    """Per-call times of two cheap functions and their ratio, robust to load changes.

    Batches of ``fa`` and ``fb`` (each about ``batch_s`` long) alternate, AB then
    BA, for ``rounds`` rounds; returns the median per-call time of each and the
    median of the per-round ratios a / b.
    """
    def calls_for(fn):
        fn()
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < batch_s / 4:
            fn()
            n += 1
        return max(1, int(n * 4))
    n = min(calls_for(fa), calls_for(fb))

    def batch(fn):
        gc.disable()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        gc.enable()
        return t / n
    ta, tb, ratios = [], [], []
    for r in range(rounds):
        if r % 2:
            b = batch(fb)
            a = batch(fa)
        else:
            a = batch(fa)
            b = batch(fb)
        ta.append(a)
        tb.append(b)
        ratios.append(a / b)
    return statistics.median(ta), statistics.median(tb), statistics.median(ratios)


def peak_bytes(fn: Callable[[], object]) -> int:
    """Peak traced allocation (bytes) while ``fn()`` runs, above what was live before."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
        del result
    finally:
        tracemalloc.stop()
    return peak


def peak_rss_bytes(fn: Callable[[], object]) -> int | None:
    """Peak resident memory (bytes) while ``fn()`` runs, above the resident memory
    before it; None where the kernel cannot reset the peak (not Linux)."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident size
        before = _status_kib("VmRSS")
        result = fn()
        peak = _status_kib("VmHWM")
    except OSError:
        return None
    del result
    return max(0, peak - before) * 1024


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field_name}")


@dataclass
class MachineLimits:
    """What this machine can do at best, measured in the same run as the workloads."""

    copy_gbps: float                 # np.copyto of 80 MB, read + write bytes
    random_assign_ns: float          # per element, a random 1M-element fancy assignment
    notes: dict = field(default_factory=dict)

    @classmethod
    def measure(cls, repeats: int) -> "MachineLimits":
        src = np.ones(10_000_000, np.float64)
        dst = np.empty_like(src)
        t_copy = median_time(lambda: np.copyto(dst, src), repeats)
        rng = np.random.default_rng(0)
        target = np.zeros(10_000_000, np.float32)
        idx = rng.integers(0, target.size, 1_000_000)
        vals = np.ones(idx.size, np.float32)

        def assign():
            target[idx] = vals
        t_rand = median_time(assign, repeats)
        return cls(copy_gbps=2 * src.nbytes / t_copy / 1e9, random_assign_ns=t_rand / idx.size * 1e9)
