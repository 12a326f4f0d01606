"""The BLAS pool behind numpy's MatMul, held to the Session's intra-op thread count.

numpy's BLAS (OpenBLAS, MKL or BLIS) starts one thread per core for every large
product. A plan that runs independent heavy nodes on the inter-op pool then runs
``inter_op_threads x cores`` threads on ``cores`` cores, and BLAS threads that spin
while they wait make everything slower (a top-2 MoE step on 2 cores: 110 ms with an
unbounded pool, 40 ms with one BLAS thread per inter-op thread). TensorFlow bounds its
kernels by ``intra_op_parallelism_threads``; graphflow sets BLAS's pool to
``SessionConfig.intra_op_threads`` for a parallel run, by default ``cores //
inter_op_threads``, and to every core for a serial run (one kernel at a time), unless
the config set ``intra_op_threads``. The pool is the process's: each run sets it (a C call, and
only when it changes). threadpoolctl does the setting; without it the pool is left as
it is. OpenBLAS's products do not depend on its thread count (checked bit for bit).
"""
from __future__ import annotations

import os
import threading

from ..ops import compile_worker

_lock = threading.Lock()
_current: int | None = None


def default_intra_op_threads(inter_op_threads: int) -> int:
    """What one kernel may use when the config leaves it open: the cores shared out
    among the nodes that may run at once."""
    return max(1, (os.cpu_count() or 1) // max(1, inter_op_threads))


_controllers: list | None = None  # threadpoolctl's BLAS library controllers, found once


def bound_blas_threads(threads: int) -> bool:
    """Set the BLAS pool to ``threads``, one fewer while the compile worker compiles
    (ops/compile_worker.py: it holds a core, and BLAS threads that spin waiting for it
    made every product of a 2-core MoE step 10x slower); False when threadpoolctl is
    not installed. Cheap when the pool already has that many (every run calls it)."""
    global _current, _controllers
    if threads > 1 and compile_worker.busy():
        threads -= 1
    if threads == _current:
        return True
    with _lock:
        if _controllers is None:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:
                _controllers = []
            else:
                _controllers = [c for c in ThreadpoolController().lib_controllers
                                if c.user_api == "blas"]
        for controller in _controllers:
            controller.set_num_threads(threads)
        _current = threads
        return bool(_controllers)


def run_blas_threads(config, parallel: bool) -> int:
    """The BLAS threads of one run: ``config.intra_op_threads`` for a parallel run, and
    for a serial run (one kernel at a time) every core unless the config set it."""
    if parallel or config.intra_op_threads_given:
        return config.intra_op_threads
    return os.cpu_count() or 1
