"""A test op for the reliability tests: sleeps, then fails on demand, and records
when each node started, so tests can see what ran after a failure.

``scope.reliability_probe(x, delay=0.0, fail="")`` returns a fresh copy of ``x``
after ``delay`` seconds. When ``fail`` names an exception and ``x``'s first
element is negative, it raises that exception instead: the feed decides whether
a run fails, so the same session can fail and then succeed.
"""
from __future__ import annotations

import threading
import time

import numpy as np

import graphflow as gf
from graphflow.errors import InvalidArgumentError

#: (perf_counter at kernel start, node name), in start order
STARTS: list[tuple[float, str]] = []
#: perf_counter just before each raise, by node name
RAISED: dict[str, float] = {}
_lock = threading.Lock()

_FAILURES = {
    "InvalidArgument": lambda: InvalidArgumentError("x[0] is negative"),
    "RuntimeError": lambda: RuntimeError("probe failed"),
    "MemoryError": lambda: MemoryError("probe could not allocate"),
    "KeyboardInterrupt": KeyboardInterrupt,
}

Probe = gf.register_op(
    "ReliabilityProbe", inputs=["x: T"], outputs=["y: T"],
    attrs={"T": gf.TypeAttr(), "delay": gf.FloatAttr(0.0),
           "fail": gf.StringAttr("", [""] + sorted(_FAILURES))},
    stateful=True, doc="Copy of x after a delay; raises `fail` when x[0] < 0 (tests only).")


@Probe.shape_fn
def _probe_shape(ctx):
    """same as x."""
    return ctx.shape("x")


@Probe.kernel("cpu")
def _probe(ctx, x):
    with _lock:
        STARTS.append((time.perf_counter(), ctx.node_name))
    if ctx.attrs["delay"]:
        time.sleep(ctx.attrs["delay"])
    fail = ctx.attrs["fail"]
    if fail and x.size and x.flat[0] < 0:
        with _lock:
            RAISED[ctx.node_name] = time.perf_counter()
        raise _FAILURES[fail]()
    return np.array(x, copy=True)


Alloc = gf.register_op(
    "ReliabilityAlloc", inputs=["n: int64"], outputs=["y: float64"],
    doc="np.empty(n), without asking the memory limit first (tests only).")


@Alloc.shape_fn
def _alloc_shape(ctx):
    """a vector."""
    return gf.TensorShape([None])


@Alloc.kernel("cpu")
def _alloc(ctx, n):
    return np.empty(int(n), np.float64)


def reset() -> None:
    """Forget what earlier runs recorded."""
    with _lock:
        STARTS.clear()
        RAISED.clear()
