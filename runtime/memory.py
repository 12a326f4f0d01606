"""Buffer reuse: a plan's pool of dead intermediates.

When a value's last reader has run, the plan releases its slot. If the value is
a host array that nothing else can reach, its buffer goes into the plan's
``BufferPool`` instead of back to the allocator, and the next kernel that asks
its context for an output of the same shape and dtype (``ctx.empty``) writes
into it: within a run, and across runs of the same plan, which then touch no
fresh pages (a fresh 40 MB array costs ~10k page faults on first touch).

"Nothing else can reach it" is proven at run time, not assumed from op
declarations: the array owns its memory (``base is None``: it is not a view,
so no view of another value), is writeable (constants and feeds are read-only
views), and its reference count shows no holder besides the slot list being
cleared (a view of it, an alias in another slot, an array the user holds or a
kernel cached all hold a reference; what the count is then is measured at import,
graphflow/refcounts.py). Fed, fetched and constant values are therefore never
reused or written, until the caller has dropped them: a fetched array the plan
produced goes back into its pool once its reference count shows the plan's record
of it as its last holder (:class:`ReturnedBuffers`), as TensorFlow's allocator takes
back a result tensor nobody holds.
"""
from __future__ import annotations

import sys
import threading
import weakref
from collections import OrderedDict

import numpy as np

from graphflow.errors import InternalError
from graphflow.refcounts import HELD_BY_ONE_LOCAL

#: A pool holds at most this many bytes; the least recently released shapes go first.
MAX_POOLED_BYTES = 1 << 30

#: ... and at most this many buffers of one shape and dtype.
MAX_POOLED_PER_SHAPE = 8

#: Buffers smaller than this go back to the allocator, which is fast for them.
MIN_POOLED_BYTES = 1 << 16

#: The shapes a pool remembers being asked for, at most.
MAX_ASKED_SHAPES = 4096

#: The reference count of a private array while ``release`` looks at it, once its slot
#: is cleared: ``release``'s local name is its only holder.
_PRIVATE_REFCOUNT = HELD_BY_ONE_LOCAL


class BufferPool:
    """Dead host buffers of one plan, by (shape, dtype). Thread-safe. Only shapes that
    a kernel of the plan asked for in this run or the one before are kept (the plan
    counts its runs, :meth:`start_run`): a pool never hoards buffers nothing will take.
    Shapes that change every call (an MoE's per-expert token counts) would otherwise
    fill it to its limit with dead buffers, and each call's outputs be fresh pages."""

    __slots__ = ("_free", "_asked", "_bytes", "_lock", "limit", "reused", "_run", "_swept")

    def __init__(self, limit: int = MAX_POOLED_BYTES):
        self._free: OrderedDict[tuple, list[np.ndarray]] = OrderedDict()
        self._asked: dict[tuple, int] = {}  # (shape, dtype) -> the last run that asked
        self._bytes = 0
        self._lock = threading.Lock()
        self.limit = limit
        self.reused = 0  # buffers handed out again (for tests and stats)
        self._run = 0    # runs started (start_run); a pool no plan counts keeps every shape
        self._swept = 0  # the run whose start the stale shapes were last dropped at

    def start_run(self) -> None:
        """A run of the plan begins: shapes last asked for before the previous run stop
        being kept (dropped at the next ``give``)."""
        self._run += 1

    def take(self, shape: tuple, dtype: np.dtype) -> np.ndarray | None:
        """A dead buffer of exactly this shape and dtype, or None."""
        key = (shape, dtype)
        asked = self._asked
        if key in asked:
            asked[key] = self._run
        elif len(asked) < MAX_ASKED_SHAPES:
            with self._lock:
                asked[key] = self._run
        free = self._free.get(key)
        if not free:  # no lock for a miss: the common case of small outputs
            return None
        with self._lock:
            if not free:
                return None
            buffer = free.pop()
            self._bytes -= buffer.nbytes
            self.reused += 1
            return buffer

    def releaser(self):
        """:func:`releaser` for this pool, for code that holds a pool but does not import
        the runtime (a fused node running its nodes one by one)."""
        return releaser(self)

    def give(self, buffer: np.ndarray) -> None:
        """Keep ``buffer`` (proven private by the caller) for a later ``take``."""
        key = (buffer.shape, buffer.dtype)
        asked = self._asked.get(key)
        if asked is None or asked < self._run - 1 or buffer.nbytes > self.limit:
            return
        with self._lock:
            if self._swept != self._run:
                self._drop_stale_shapes()
            free = self._free.setdefault(key, [])
            if len(free) >= MAX_POOLED_PER_SHAPE:
                return
            free.append(buffer)
            self._free.move_to_end(key)
            self._bytes += buffer.nbytes
            while self._bytes > self.limit:  # the least recently released shapes go first
                old_key, old = next(iter(self._free.items()))
                if old:  # a shape whose buffers were all taken keeps an empty list
                    self._bytes -= old.pop(0).nbytes
                if not old:
                    del self._free[old_key]

    def _drop_stale_shapes(self) -> None:
        """Forget the shapes, and free the buffers, that no kernel asked for in this run
        or the previous one (under the lock)."""
        self._swept = run = self._run
        stale = [key for key, last in list(self._asked.items()) if last < run - 1]
        for key in stale:
            del self._asked[key]
            for buffer in self._free.pop(key, ()):
                self._bytes -= buffer.nbytes

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._asked.clear()
            self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes


#: Fetched arrays a plan remembers at most (the newest kept).
MAX_RETURNED = 16


class ReturnedBuffers:
    """The arrays a plan's calls returned (those a kernel of the plan made: owned,
    writeable, at least MIN_POOLED_BYTES), each given to the plan's pool at a later
    call once the caller has dropped it. A loop that fetches a 128 MB gather and lets
    it go then touches no fresh pages each call (591 page faults a call before, 15 ms
    of a 2-core 28 ms gather). One still held is asked again later; one held weakly or
    through a view is never taken (its count shows the holder). Thread-safe."""

    __slots__ = ("_pool", "_held", "_lock")

    def __init__(self, pool: BufferPool):
        self._pool = pool
        self._held: list[np.ndarray] = []
        self._lock = threading.Lock()

    def hold(self, fetched: list) -> None:
        """Remember the arrays of ``fetched`` (what a call returns) that may come back."""
        ndarray = np.ndarray
        mine = [v for v in fetched if type(v) is ndarray and v.base is None
                and v.nbytes >= MIN_POOLED_BYTES and v.flags.writeable and v.dtype.kind != "O"]
        if mine:
            with self._lock:
                self._held = (self._held + mine)[-MAX_RETURNED:]

    def take_back(self) -> None:
        """Give the pool every remembered array whose last holder is this record."""
        if not self._held:
            return
        with self._lock:
            held, self._held = self._held, []
        getrefcount, still_held = sys.getrefcount, []
        for value in held:  # holders: the list ``held`` and the name ``value``
            if getrefcount(value) == _PRIVATE_REFCOUNT + 1 \
                    and not weakref.getweakrefcount(value):
                self._pool.give(value)
            else:
                still_held.append(value)
        if still_held:
            with self._lock:
                self._held = (still_held + self._held)[-MAX_RETURNED:]


def _poolable(array: np.ndarray) -> bool:
    """Whether an owned array is one the pool takes: big enough, writeable, no objects."""
    return array.nbytes >= MIN_POOLED_BYTES and array.flags.writeable \
        and array.dtype.kind != "O"


def releaser(pool: BufferPool):
    """``release(slots, slot)``: clear a slot, keeping its buffer in ``pool`` when it is
    provably private (see the module docstring). A private view that is the last holder
    of the array it views gives that array back instead: the parts of a DynamicPartition
    are views of one buffer, which returns once its last part is released (else it went
    back to the allocator each call, and its successor cost a page fault per 4 KiB)."""
    give = pool.give
    getrefcount = sys.getrefcount
    ndarray = np.ndarray

    def keep(value: np.ndarray) -> None:
        try:
            give(value)
        except Exception as e:  # noqa: BLE001 - ours, never the user's input
            raise InternalError(f"the plan's buffer pool failed to keep a {value.shape} "
                                f"{value.dtype} buffer: {type(e).__name__}: {e} (a "
                                f"graphflow bug)") from e

    def release(slots: list, slot: int) -> None:
        value = slots[slot]
        slots[slot] = None
        if type(value) is not ndarray or getrefcount(value) != _PRIVATE_REFCOUNT:
            return
        base = value.base
        if base is None:
            if _poolable(value):
                keep(value)
            return
        if type(base) is not ndarray or base.base is not None:
            return  # a view of memory no ndarray owns (numba's, a buffer's): left alone
        value = None  # the view goes: now ``base`` may be held by this name alone
        if _poolable(base) and getrefcount(base) == _PRIVATE_REFCOUNT:
            keep(base)
    return release
