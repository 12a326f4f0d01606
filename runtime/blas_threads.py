"""The BLAS pool behind numpy's MatMul, held to the Session's intra-op thread count.

numpy's BLAS (OpenBLAS, MKL or BLIS) starts one thread per core for every large
product. A plan that runs independent heavy nodes on the inter-op pool then runs
``inter_op_threads x cores`` threads on ``cores`` cores, and BLAS threads that spin
while they wait make everything slower (a top-2 MoE step on 2 cores: 110 ms with an
unbounded pool, 40 ms with one BLAS thread per inter-op thread). TensorFlow bounds its
kernels by ``intra_op_parallelism_threads``; graphflow sets BLAS's pool to
``SessionConfig.intra_op_threads``, by default ``cores // inter_op_threads`` (all cores
when nodes run one at a time). The pool is the process's: the Session made last sets
it. threadpoolctl does the setting; without it the pool is left as it is.
"""
from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_current: int | None = None


def default_intra_op_threads(inter_op_threads: int) -> int:
    """What one kernel may use when the config leaves it open: the cores shared out
    among the nodes that may run at once."""
    return max(1, (os.cpu_count() or 1) // max(1, inter_op_threads))


def bound_blas_threads(threads: int) -> bool:
    """Set the BLAS pool to ``threads`` (once per distinct value); False when
    threadpoolctl is not installed."""
    global _current
    with _lock:
        if threads == _current:
            return True
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            return False
        threadpool_limits(limits=threads, user_api="blas")  # kept: not a context manager
        _current = threads
        return True
