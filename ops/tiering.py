"""Tiered compilation: a numba kernel compiles away from the call that needs it.

A kernel not compiled yet for a call's argument types is not compiled in the call:
the caller runs its slower path (a fused node's members one by one, a segment's
steps, a lean kernel's registered kernel) while one background thread compiles it.
A generated kernel (a module in the kernel cache folder) or a kernel of graphflow's
own modules compiles in the compile worker process (ops/compile_worker.py), which
fills numba's disk cache; the background thread then only loads it (milliseconds),
so the caller's GIL is never held by numba's compiler. The first asks of a
signature compile nothing (:data:`COMPILE_AFTER_CALLS`): a graph run once never
waits on numba. A load is paced (ops/background.py) so that the caller keeps most of
the GIL. ``GRAPHFLOW_TIERED=0`` compiles in the call instead (the tests).
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from . import background
from .background import pace, paced, switching_often
from .compile_worker import compile_elsewhere, in_disk_cache
from .jit import kernel

log = logging.getLogger("graphflow.jit")


def tiered() -> bool:
    """``GRAPHFLOW_TIERED=0`` makes a call that needs a kernel wait for its compiler."""
    return os.environ.get("GRAPHFLOW_TIERED", "1") != "0"


_compiler = None  # one background thread: numba compiles one kernel at a time anyway
_compiling: dict = {}  # (dispatcher, signature) -> Future
_compiling_lock = threading.Lock()
_asked: dict = {}  # (dispatcher, signature) -> calls that found it not compiled yet
_signatures: dict = {}  # (dispatcher, types_key of arguments) -> numba's signature of them
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
    signature = _signature(fn, args)
    if signature in fn.overloads:
        return True
    with _compiling_lock:
        future = _compiling.get((fn, signature))
        if future is None:
            if _standing_in:
                return False
            asked = _asked[(fn, signature)] = _asked.get((fn, signature), asked_before) + 1
            if asked < COMPILE_AFTER_CALLS:
                return False
            del _asked[(fn, signature)]
            future = _compiling[(fn, signature)] = _compile_thread().submit(
                _compile, fn, signature)
    # done: compiled, or failed, when the caller's own call fails in its words (a fused
    # node then runs its nodes one by one, a segment its steps, from then on)
    return future.done()


def _compile_thread() -> ThreadPoolExecutor:
    global _compiler
    if _compiler is None:  # under _compiling_lock
        _compiler = ThreadPoolExecutor(1, thread_name_prefix="graphflow-compile")
    return _compiler


_standing_in = 0  # runs inside standing_in(), on any thread


@contextlib.contextmanager
def standing_in():
    """A run of a plan that another replaces soon (a general plan while its
    shape-specialized plan is built): the kernels it asks for are not those of the
    plan that will run, so its asks start no compile (nor count towards one)."""
    global _standing_in
    with _compiling_lock:
        _standing_in += 1
    try:
        yield
    finally:
        with _compiling_lock:
            _standing_in -= 1


#: The share of the wall time kernel loads take at most (ops/background.py's ``pace``):
#: more than the specialized plans' passes, as each load keeps a slower path running.
LOADING_SHARE = 0.5


def _signature(fn, args: tuple) -> tuple:
    """numba's types of ``args``; ``numba.typeof`` costs ~10 us an array: it runs once per
    kind of arguments (:func:`types_key`)."""
    typed = (fn, types_key(args))
    signature = _signatures.get(typed)
    if signature is None:
        signature = _signatures[typed] = tuple(numba.typeof(a) for a in args)
    return signature


def _compile(fn, signature) -> bool:
    """On the background thread: a generated kernel or one of graphflow's own compiled
    by the compile worker (ops/compile_worker.py) and loaded from the disk cache, its
    GIL-holding compile away from the caller's threads; any other here."""
    compile_elsewhere(fn, signature)
    with paced(LOADING_SHARE):  # the load (or a compile here) holds the GIL
        try:
            with switching_often():
                fn.compile(signature)
        except Exception as e:  # noqa: BLE001 - the foreground call reports it
            log.debug("background compile of %s failed: %s", fn, e)
            return False
        finally:
            pace(done=True)
    return True


def compiles_pending() -> int:
    """How many background compiles have been asked for and are not done (a benchmark
    waits for none before it times a steady state)."""
    with _compiling_lock:
        compiling = sum(not future.done() for future in _compiling.values())
    return compiling + background.pending()


class Tiered:
    """A compiled kernel of graphflow's own modules as one lean kernel calls it:
    ``ready(*args)`` is False until the kernel has code for the arguments' types (asking
    starts its compile away from the call, as :func:`compiled_for`), and the lean
    kernel then does the work another way (its registered kernel, numpy). The types
    found ready are remembered by :func:`types_key`: a step whose inputs turn read-only
    or strided later (a compiled segment, a feed, a folded constant now produces them)
    asks again instead of making numba compile in the call (a 400 ms stall)."""

    __slots__ = ("fn", "_ready")

    def __init__(self, fn):
        self.fn = fn
        self._ready: set = set()

    def ready(self, *args, asked_before: int = 0) -> bool:
        key = types_key(args)
        if key in self._ready:
            return True
        if compiled_for(self.fn, args, asked_before):
            self._ready.add(key)
            return True
        return False

    def ready_or_cached(self, *args) -> bool:
        """:meth:`ready`, or else loaded in the call when numba's disk cache holds the
        kernel for the arguments' types and the background thread is not at it
        (milliseconds, and numba's start once per process), never compiled in it; where
        the cache does not hold it, numba starts here (:func:`start_numba`). For a loop
        whose other way costs more than a load, and whose later load must not stall a
        call (a segment fold: ``ufunc.at`` costs 20x its loop)."""
        if self.ready(*args):
            return True
        signature = _signature(self.fn, args)
        with _compiling_lock:
            loading = (self.fn, signature) in _compiling  # the background thread's, then
        if loading:
            return False
        if not in_disk_cache(self.fn, signature):
            start_numba()  # here, so that the background load, later, takes milliseconds
            return False
        try:
            self.fn.compile(signature)
        except Exception as e:  # noqa: BLE001 - the other way reports it, in its words
            log.debug("loading %s from the disk cache failed: %s", self.fn, e)
            return False
        self._ready.add(types_key(args))
        return True


@kernel
def _first_kernel(x):
    """A kernel to load (or compile) first: numba's start."""
    return x + 1


_numba_started = False


def start_numba() -> None:
    """numba's start: its typing and lowering registries load with the first kernel a
    process compiles or loads (0.13 s of Python; 0.33 s with scipy installed, whose
    linalg numba imports). In the background it shares the GIL with the caller's
    calls and stalls one of them by as much; a loop that should not wait
    (:meth:`Tiered.ready_or_cached`) pays it in the call that first asks instead."""
    global _numba_started
    if not _numba_started:
        _first_kernel(1)
        _numba_started = True


#: The flags numba's type of an array depends on: its layout, alignment and whether it
#: is read-only (numpy's NPY_ARRAY_C_CONTIGUOUS, F_CONTIGUOUS, ALIGNED, WRITEABLE).
_TYPE_FLAGS = 0x1 | 0x2 | 0x100 | 0x400


def types_key(args) -> tuple:
    """What numba's types of ``args`` depend on, cheaper than ``numba.typeof``: an
    array's dtype, rank, layout, alignment and writeability; a tuple's length and its
    items' keys; another value's type."""
    ndarray = np.ndarray
    return tuple((a.dtype, a.ndim, a.flags.num & _TYPE_FLAGS) if type(a) is ndarray
                 else (tuple, types_key(a)) if type(a) is tuple else type(a) for a in args)
