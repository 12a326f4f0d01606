"""'Nobody else holds this array', decided from reference counts, on this interpreter.

Buffer reuse (runtime/memory.py) and the output check of a user kernel
(graphflow/output_check.py) compare ``sys.getrefcount`` with a count measured at
import (graphflow/refcounts.py). Each rule is tested both ways, so that a count off
by one in either direction fails: a private array must be taken as private (pooled,
passed on without a copy), and one held once more must not be.
"""
from __future__ import annotations

import sys

import numpy as np

import graphflow as gf
from graphflow.host_eval import HOST
from graphflow.output_check import checked_kernel
from graphflow.refcounts import HELD_BY_ONE_LOCAL
from graphflow.runtime.memory import MIN_POOLED_BYTES, BufferPool, releaser

SHAPE = (MIN_POOLED_BYTES // 8,)  # just big enough to be pooled, as float64


def test_the_measured_count_is_what_one_local_name_gives():
    value = np.empty(1)
    assert sys.getrefcount(value) == HELD_BY_ONE_LOCAL


# -- buffer reuse -------------------------------------------------------------------------
def _pool_wanting(shape) -> BufferPool:
    pool = BufferPool()
    assert pool.take(shape, np.dtype(np.float64)) is None  # a kernel asked for this shape
    return pool


def test_a_released_array_nothing_else_holds_is_pooled():
    pool = _pool_wanting(SHAPE)
    slots = [np.zeros(SHAPE)]
    address = slots[0].ctypes.data
    releaser(pool)(slots, 0)
    reused = pool.take(SHAPE, np.dtype(np.float64))
    assert reused is not None and reused.ctypes.data == address


def test_a_released_array_held_once_more_is_not_pooled():
    pool = _pool_wanting(SHAPE)
    slots = [np.zeros(SHAPE)]
    kept = slots[0]  # one more holder: the pool must not hand this buffer out
    releaser(pool)(slots, 0)
    assert pool.take(SHAPE, np.dtype(np.float64)) is None
    assert kept.shape == SHAPE


def test_an_array_in_two_slots_is_pooled_only_when_the_last_is_released():
    pool = _pool_wanting(SHAPE)
    slots = [np.zeros(SHAPE), None]
    slots[1] = slots[0]
    release = releaser(pool)
    release(slots, 0)
    assert pool.take(SHAPE, np.dtype(np.float64)) is None
    release(slots, 1)
    assert pool.take(SHAPE, np.dtype(np.float64)) is not None


def test_a_view_that_is_the_last_holder_of_its_array_gives_that_array():
    """A DynamicPartition's parts are views of one buffer: it returns to the pool when
    its last part is released, not before."""
    pool = _pool_wanting(SHAPE)
    base = np.zeros(SHAPE)
    address = base.ctypes.data
    slots = [base[: SHAPE[0] // 2], base[SHAPE[0] // 2:]]
    del base
    release = releaser(pool)
    release(slots, 0)
    assert pool.take(SHAPE, np.dtype(np.float64)) is None  # the other part views it still
    release(slots, 1)
    reused = pool.take(SHAPE, np.dtype(np.float64))
    assert reused is not None and reused.ctypes.data == address


def test_a_view_of_an_array_held_elsewhere_gives_nothing():
    pool = _pool_wanting(SHAPE)
    base = np.zeros(SHAPE)  # this name: one more holder of the viewed array
    slots = [base[1:]]
    releaser(pool)(slots, 0)
    assert pool.take(SHAPE, np.dtype(np.float64)) is None


def test_a_view_held_once_more_gives_nothing():
    pool = _pool_wanting(SHAPE)
    slots = [np.zeros(SHAPE)[1:]]
    kept = slots[0]  # holds the view, so the array it views
    releaser(pool)(slots, 0)
    assert pool.take(SHAPE, np.dtype(np.float64)) is None
    assert not kept.any()


def test_a_view_of_memory_no_array_owns_gives_nothing():
    pool = _pool_wanting(SHAPE)
    slots = [np.frombuffer(bytearray(SHAPE[0] * 8), np.float64)[1:]]
    releaser(pool)(slots, 0)
    assert pool.take(SHAPE, np.dtype(np.float64)) is None


def test_a_shape_not_asked_for_in_this_run_or_the_last_is_dropped():
    """The pool keeps what the plan's next run may ask for: shapes asked for in this run
    or the one before. Per-call shapes (an MoE's per-expert token counts) are not
    hoarded up to the pool's limit."""
    f8 = np.dtype(np.float64)
    other = (SHAPE[0] * 2,)
    pool = BufferPool()
    pool.start_run()
    assert pool.take(SHAPE, f8) is None
    pool.give(np.zeros(SHAPE))
    pool.start_run()  # asked for in the run before: still kept, and taken
    assert pool.take(SHAPE, f8) is not None
    pool.give(np.zeros(SHAPE))
    pool.start_run()
    pool.start_run()  # two runs since SHAPE was asked for
    assert pool.take(other, f8) is None
    pool.give(np.zeros(SHAPE))  # refused: not asked for in this run or the last
    pool.give(np.zeros(other))  # kept, and the stale SHAPE buffer freed
    assert pool.nbytes == np.zeros(other).nbytes
    assert pool.take(SHAPE, f8) is None


# -- the output check of a user kernel ----------------------------------------------------
_HELD: list = []

One = gf.register_op("TestRefcountOne", inputs=["x: float64"], outputs=["y: float64"])
One.shape_fn(lambda ctx: ctx.shape("x"))
Two = gf.register_op("TestRefcountTwo", inputs=["x: float64"],
                     outputs=["y: float64", "z: float64"])
Two.shape_fn(lambda ctx: [ctx.shape("x"), ctx.shape("x")])


def _fresh(ctx, x):
    return x + 1.0


def _held(ctx, x):
    _HELD.append(x + 1.0)
    return _HELD[-1]


def _fresh_pair(ctx, x):
    return [x + 1.0, x + 2.0]


def _held_pair(ctx, x):
    _HELD.append(x + 2.0)
    return [x + 1.0, _HELD[-1]]


def _checked(op_def, fn):
    scope = gf.Scope(gf.Graph())
    node = scope.create_op(op_def, scope.placeholder(gf.float64, shape=[3]))
    op = (node[0] if isinstance(node, list) else node).op
    return checked_kernel(fn, op, HOST, trusted=False)


def _recording(fn, seen: list):
    """``fn``, remembering (by id) each array it returns, without holding it."""
    def kernel(ctx, x):
        result = fn(ctx, x)
        seen.extend(id(r) for r in (result if isinstance(result, list) else [result]))
        return result
    return kernel


def test_a_fresh_output_is_passed_on_as_it_is():
    seen: list = []
    out = _checked(One, _recording(_fresh, seen))(None, np.zeros(3))
    assert id(out) == seen[0]  # not copied
    np.testing.assert_array_equal(out, np.ones(3))


def test_an_output_the_kernel_also_holds_is_copied():
    _HELD.clear()
    out = _checked(One, _held)(None, np.zeros(3))
    assert out is not _HELD[-1]
    np.testing.assert_array_equal(out, _HELD[-1])


def test_fresh_outputs_of_a_list_kernel_are_passed_on_as_they_are():
    seen: list = []
    outs = _checked(Two, _recording(_fresh_pair, seen))(None, np.zeros(3))
    assert [id(o) for o in outs] == seen


def test_an_output_of_a_list_kernel_held_elsewhere_is_copied_and_only_it():
    _HELD.clear()
    seen: list = []
    outs = _checked(Two, _recording(_held_pair, seen))(None, np.zeros(3))
    assert id(outs[0]) == seen[0]
    assert outs[1] is not _HELD[-1]
    np.testing.assert_array_equal(outs[1], _HELD[-1])
