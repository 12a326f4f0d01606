"""Tiered compilation: a numba kernel compiles away from the call that needs it.

A kernel not compiled yet for a call's argument types is not compiled in the call:
the caller runs its slower path (a fused node's members one by one, a segment's
steps, a lean kernel's registered kernel) while one background thread compiles it.
A generated kernel (a module in the kernel cache folder) or a kernel of graphflow's
own modules compiles in the compile worker process (ops/compile_worker.py), which
fills numba's disk cache; the background thread then only loads it (milliseconds),
so the caller's GIL is never held by numba's compiler. The first asks of a
signature compile nothing (:data:`COMPILE_AFTER_CALLS`): a graph run once never
waits on numba. ``GRAPHFLOW_TIERED=0`` compiles in the call instead (the tests).
"""
from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba

from .compile_worker import compile_elsewhere

log = logging.getLogger("graphflow.jit")


def tiered() -> bool:
    """``GRAPHFLOW_TIERED=0`` makes a call that needs a kernel wait for its compiler."""
    return os.environ.get("GRAPHFLOW_TIERED", "1") != "0"


_compiler = None  # one background thread: numba compiles one kernel at a time anyway
_compiling: dict = {}  # (dispatcher, signature) -> Future
_compiling_lock = threading.Lock()
_asked: dict = {}  # (dispatcher, signature) -> calls that found it not compiled yet
#: A kernel compiles from the call that asks for it this many times: a region that is
#: run once (a first call, a graph evaluated once) runs its nodes, and numba never
#: competes with it for the GIL.
COMPILE_AFTER_CALLS = 2


def compiled_for(fn, args: tuple, asked_before: int = 0) -> bool:
    """Whether numba dispatcher ``fn`` is compiled for ``args``' types. If not, with tiered
    compilation on, False; its compilation (or loading from the disk cache) starts in
    the background once it is asked for the :data:`COMPILE_AFTER_CALLS`-th time (a
    graph run once never waits on numba, nor shares the GIL with it). Off, it compiles
    here, now."""
    if not tiered():
        return True  # the call compiles it
    signature = tuple(numba.typeof(a) for a in args)
    if signature in fn.overloads:
        return True
    global _compiler
    with _compiling_lock:
        future = _compiling.get((fn, signature))
        if future is None:
            asked = _asked[(fn, signature)] = _asked.get((fn, signature), asked_before) + 1
            if asked < COMPILE_AFTER_CALLS:
                return False
            del _asked[(fn, signature)]
            if _compiler is None:
                _compiler = ThreadPoolExecutor(1, thread_name_prefix="graphflow-compile")
            future = _compiling[(fn, signature)] = _compiler.submit(_compile, fn, signature)
    # done: compiled, or failed, when the caller's own call fails in its words (a fused
    # node then runs its nodes one by one, a segment its steps, from then on)
    return future.done()


def _compile(fn, signature) -> bool:
    """On the background thread: a generated kernel or one of graphflow's own compiled
    by the compile worker (ops/compile_worker.py) and loaded from the disk cache, its
    GIL-holding compile away from the caller's threads; any other here."""
    compile_elsewhere(fn, signature)
    try:
        fn.compile(signature)
    except Exception as e:  # noqa: BLE001 - the foreground call reports it
        log.debug("background compile of %s failed: %s", fn, e)
        return False
    return True


def compiles_pending() -> int:
    """How many background compiles have been asked for and are not done (a benchmark
    waits for none before it times a steady state)."""
    with _compiling_lock:
        return sum(not future.done() for future in _compiling.values())


class Tiered:
    """A compiled kernel of graphflow's own modules as one lean kernel calls it:
    ``ready(*args)`` is False until the kernel has code for the arguments' types (asking
    starts its compile away from the call, as :func:`compiled_for`), and the lean
    kernel then does the work another way (its registered kernel, numpy). One plan step
    calls it with one set of types, so once ready it stays ready without asking."""

    __slots__ = ("fn", "_ready")

    def __init__(self, fn):
        self.fn = fn
        self._ready = False

    def ready(self, *args) -> bool:
        if not self._ready and compiled_for(self.fn, args):
            self._ready = True
        return self._ready
