"""Splitting one large numpy call across the cores.

numpy releases the GIL inside ``take``, ``copyto`` and fancy indexing loops, so
disjoint halves of one big gather run in parallel on two threads (measured on 2
cores: a 1M x 32 float32 ``np.take`` 40 ms -> 21 ms). Below
``MIN_PARALLEL_ELEMENTS`` the threads cost more than they save.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

#: Elements moved below which one call stays on one thread.
MIN_PARALLEL_ELEMENTS = 1 << 20

_WORKERS = max(1, min(4, os.cpu_count() or 1))
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="graphflow-intra-op")
        return _pool


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
    futures = [_shared_pool().submit(fn, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    for f in futures:
        f.result()


def run_each(calls: Sequence[Callable[[], T]], elements: int) -> list[T]:
    """The results of ``calls``, in order: one after another when the work (``elements``
    moved in all) is small or there is one core, else concurrently on the shared pool.
    The calls must write disjoint memory; the first exception is re-raised."""
    if len(calls) < 2 or _WORKERS < 2 or elements < MIN_PARALLEL_ELEMENTS:
        return [call() for call in calls]
    futures = [_shared_pool().submit(call) for call in calls]
    return [f.result() for f in futures]
