"""Splitting one large numpy call across the cores.

numpy releases the GIL inside ``take``, ``copyto`` and fancy indexing loops, so
disjoint halves of one big gather run in parallel on two threads (measured on 2
cores: a 1M x 32 float32 ``np.take`` 40 ms -> 21 ms). Below
``MIN_PARALLEL_ELEMENTS`` the threads cost more than they save.
"""
from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

#: Elements moved below which one call stays on one thread.
MIN_PARALLEL_ELEMENTS = 1 << 20

_CORES = max(1, os.cpu_count() or 1)
_WORKERS = min(4, _CORES)
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
#: The pool's threads are named so: a call made on one of them runs on one thread
#: (waiting on the pool from the pool could wait forever).
POOL_PREFIX = "graphflow-intra-op"
#: The Session's inter-op pool (runtime/session.py): a kernel on it runs beside others.
_INTER_OP_PREFIX = "graphflow-inter-op"


def cores() -> int:
    """The cores this process's kernels share."""
    return _CORES


def shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:  # threads start as they are first needed: up to one per core
            _pool = ThreadPoolExecutor(_CORES, thread_name_prefix=POOL_PREFIX)
        return _pool


def kernel_threads(ctx) -> int:
    """The threads one kernel may use, by the rule that bounds numpy's BLAS pool
    (runtime/blas_threads.py): ``SessionConfig.intra_op_threads`` when the config sets
    it or the kernel runs on the inter-op pool beside other nodes (by default the cores
    shared out among them); on the calling thread (a serial run, one kernel at a time,
    or build-time evaluation without a config) every core. Never more than the cores."""
    config = getattr(ctx, "config", None)
    if config is None:
        return _CORES
    if config.intra_op_threads_given or \
            threading.current_thread().name.startswith(_INTER_OP_PREFIX):
        return max(1, min(_CORES, config.intra_op_threads))
    return _CORES


def run_split(fn: Callable[[int, int], T], n: int, threads: int,
              chunks: int | None = None) -> list[T]:
    """``[fn(start, stop), ...]`` over ``chunks`` (default: ``threads``) contiguous chunks
    of ``[0, n)``, in order, on ``threads`` threads at once: the calling thread and
    ``threads - 1`` of the shared pool (one thread, or a call from a pool thread: one call
    of ``fn(0, n)`` here). With more chunks than threads, each thread takes the next chunk
    not taken yet, so a thread that gets less of a core (a shared machine) does less of
    the work. The chunks must write disjoint memory; the first exception is re-raised
    once every thread is done."""
    threads = max(1, min(threads, n))
    if threads < 2 or threading.current_thread().name.startswith(POOL_PREFIX):
        return [fn(0, n)]
    chunks = max(threads, min(n, chunks or threads))
    bounds = [n * k // chunks for k in range(chunks + 1)]
    results: list = [None] * chunks
    claim = itertools.count()  # next() is atomic under the GIL

    def work() -> None:
        for k in iter(claim.__next__, None):
            if k >= chunks:
                return
            results[k] = fn(bounds[k], bounds[k + 1])

    pool = shared_pool()
    futures = [pool.submit(work) for _ in range(threads - 1)]
    try:
        work()
    finally:
        for f in futures:  # the other threads finish before the output is handed on
            f.exception()
    for f in futures:
        f.result()
    return results


def run_in_chunks(fn: Callable[[int, int], None], n: int, elements: int,
                  min_elements: int = MIN_PARALLEL_ELEMENTS) -> None:
    """Call ``fn(start, stop)`` over ``[0, n)``: once when the work (``elements`` moved)
    is below ``min_elements`` or there is one core, else in one chunk per core,
    concurrently. The chunks must write disjoint memory; the first exception is
    re-raised."""
    chunks = min(_WORKERS, n)
    if chunks < 2 or elements < min_elements:
        fn(0, n)
        return
    bounds = [n * k // chunks for k in range(chunks + 1)]
    futures = [shared_pool().submit(fn, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    for f in futures:
        f.result()


def run_each(calls: Sequence[Callable[[], T]], elements: int) -> list[T]:
    """The results of ``calls``, in order: one after another when the work (``elements``
    moved in all) is small or there is one core, else concurrently on the shared pool.
    The calls must write disjoint memory; the first exception is re-raised."""
    if len(calls) < 2 or _WORKERS < 2 or elements < MIN_PARALLEL_ELEMENTS:
        return [call() for call in calls]
    futures = [shared_pool().submit(call) for call in calls]
    return [f.result() for f in futures]
