"""Python work away from the calls: on a background thread, paced, so that the caller
keeps most of the GIL.

A background thread doing Python work (a shape-specialized plan's passes, a kernel's
load) shares the GIL with the caller's calls. Two things keep those calls from
stalling on it:

- **A short switch interval** (:func:`switching_often`) while it works, so that the two
  take turns every 0.2 ms instead of every 5.
- **Pacing** (:func:`paced`, :func:`pace`): the work checks in at short steps (each op
  of a pass, each load) and, every :data:`PACE_SLICE_S` of work, sleeps for as long as it
  worked times ``1 / share - 1``. A caller busy beside it then keeps at least
  ``1 - share / 2`` of its speed. Built in the call, the MoE step's specialized plan
  made its second call 100-160 ms (the target: 50).

:func:`in_background` runs a job so, on a thread of its own (the compile thread of
ops/tiering.py paces its loads itself).
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

#: The share of the wall time that :func:`in_background`'s work takes at most.
BACKGROUND_SHARE = 0.25

#: Paced work sleeps once it has worked this long since its last sleep.
PACE_SLICE_S = 0.001

#: The interpreter's thread switch interval while background work runs (Python's
#: default is 5 ms).
SWITCH_INTERVAL_S = 0.0002

_worker: ThreadPoolExecutor | None = None  # in_background's thread
_pending: set = set()  # in_background's futures not done
_lock = threading.Lock()
_pacing = threading.local()  # .slice: (start, share) of the work paced on this thread


def in_background(fn, *args) -> Future:
    """``fn(*args)`` on a background thread of its own (one job at a time; not the compile
    thread, where it would wait behind a cold compile of seconds), with a short switch
    interval and paced at :data:`BACKGROUND_SHARE`. For Python work that must not stall
    a call: a shape-specialized plan's passes (runtime/executor.py)."""
    global _worker

    def run():
        with paced(BACKGROUND_SHARE), switching_often():
            return fn(*args)

    with _lock:
        if _worker is None:
            _worker = ThreadPoolExecutor(1, thread_name_prefix="graphflow-background")
        future = _worker.submit(run)
        _pending.add(future)
    future.add_done_callback(_pending.discard)
    return future


def pending() -> int:
    """How many :func:`in_background` jobs are not done."""
    return len(_pending)


@contextlib.contextmanager
def paced(share: float):
    """The work inside, on this thread, is paced by its :func:`pace` checkpoints to take
    at most ``share`` of the wall time."""
    _pacing.slice = (time.perf_counter(), share)
    try:
        yield
    finally:
        del _pacing.slice


def pace(done: bool = False) -> None:
    """A checkpoint of paced work (an op of a pass, a kernel's load): once it has worked
    :data:`PACE_SLICE_S` since its last sleep (or at its end, ``done``), it sleeps for as
    long as it worked times ``1 / share - 1``. Outside :func:`paced` (work done in the
    call) it does nothing, at the cost of one attribute read."""
    slice_ = getattr(_pacing, "slice", None)
    if slice_ is not None:
        start, share = slice_
        worked = time.perf_counter() - start
        if worked >= PACE_SLICE_S or done:
            time.sleep(worked * (1 / share - 1))
            _pacing.slice = (time.perf_counter(), share)


_switching = 0  # threads inside switching_often()
_switching_lock = threading.Lock()
_usual_interval = sys.getswitchinterval()


@contextlib.contextmanager
def switching_often():
    """A short switch interval while background work runs beside a caller busy in
    Python. Loading a cached kernel is hundreds of short calls into LLVM, each of which
    releases the GIL; each then waited out the caller's 5 ms interval to get it back (a
    1000-node chain's segment took 5 s to load so, its steps run one by one meanwhile).
    A plan's passes would hold the GIL for whole intervals while the caller's run waits
    to hand a kernel's result on. Threads may nest it: the usual interval comes back
    when the last one leaves."""
    global _switching, _usual_interval
    with _switching_lock:
        if _switching == 0:
            _usual_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(_usual_interval, SWITCH_INTERVAL_S))
        _switching += 1
    try:
        yield
    finally:
        with _switching_lock:
            _switching -= 1
            if _switching == 0:
                sys.setswitchinterval(_usual_interval)
