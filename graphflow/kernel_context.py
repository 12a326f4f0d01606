"""What a kernel sees besides its input arrays: attrs, node name, device, whether
it may write into an input's buffer, and the memory limit.

This is the contract between kernels and whatever calls them: build-time
evaluation (graphflow/host_eval.py), plan steps (runtime/) and fused kernels
(ops/) all make one, which is why it lives in core. The memory limit is enforced
here and only here: :meth:`KernelContext.check_allocation` raises, and
:meth:`KernelContext.fits` and :attr:`KernelContext.allowed_bytes` are the same
rule for callers that step aside instead (graphflow/memory_limit.py, lean and fused
kernels).
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Callable, Mapping

import numpy as np

from .errors import ResourceExhaustedError


class KernelContext:
    """Per-node, per-plan context passed as the first argument of every kernel.

    ``forwardable[i]`` is decided once, when the plan is compiled: input ``i`` is
    produced by a kernel into a fresh buffer, is read by this node only, and is
    neither fed nor fetched. The buffer must also be writeable at run time:
    constants and feeds reach kernels as read-only views, so they never qualify.
    """

    __slots__ = ("node_name", "op_type", "attrs", "device", "xp", "config",
                 "forwardable", "forward_counter", "memory_limit", "cache", "buffers", "resources",
                 "functions")

    def __init__(self, node_name: str, op_type: str, attrs: Mapping[str, Any], *,
                 device=None, xp=np, config=None, forwardable: tuple[bool, ...] = (),
                 forward_counter: "itertools.count | None" = None,
                 memory_limit: int | None = None, buffers=None, resources=None,
                 functions=None):
        self.node_name = node_name
        self.op_type = op_type
        self.attrs = attrs
        self.device = device
        self.xp = xp
        self.config = config
        self.forwardable = forwardable
        self.forward_counter = forward_counter
        self.memory_limit = memory_limit
        self.cache: dict = {}  # per-plan state a kernel may keep (e.g. a constant on the device)
        self.buffers = buffers  # the plan's pool of dead intermediates (runtime/memory.py)
        self.resources = resources  # the Session's variables (runtime/resources.py)
        # runs graph functions (control flow's branches and bodies; runtime/functions.py)
        self.functions = functions

    @property
    def deterministic(self) -> bool:
        return bool(getattr(self.config, "deterministic", False))

    def can_forward(self, index: int, array) -> bool:
        # cupy arrays have no writeable flag: on a device every buffer is the plan's own
        return (index < len(self.forwardable) and self.forwardable[index]
                and getattr(array.flags, "writeable", True) and array.base is None)

    def forward_or_copy(self, index: int, array):
        """``array`` itself when input ``index`` may be overwritten, else a copy."""
        if self.can_forward(index, array):
            if self.forward_counter is not None:
                next(self.forward_counter)
            return array
        self.check_allocation(array.size, array.dtype)
        return array.copy()

    def empty(self, shape, dtype):
        """An uninitialized output buffer: a dead intermediate of the same shape and dtype
        from the plan's pool when there is one, else a new array. Kernels that write every
        element ask for their outputs here instead of calling ``np.empty``/``np.zeros``."""
        return self._output(shape, dtype, zeroed=False)

    def zeros(self, shape, dtype):
        """A zero-filled output buffer (see :meth:`empty`)."""
        return self._output(shape, dtype, zeroed=True)

    def _output(self, shape, dtype, zeroed: bool):
        if type(shape) is not tuple:
            shape = tuple(int(d) for d in shape)
        if type(dtype) is not np.dtype:
            dtype = np.dtype(dtype)
        if self.plain_small(math.prod(shape) * dtype.itemsize):
            return (np.zeros if zeroed else np.empty)(shape, dtype)
        if self.buffers is not None:
            buffer = self.buffers.take(shape, dtype)
            if buffer is not None:
                if zeroed:
                    buffer.fill(0)
                return buffer
        self.check_allocation(math.prod(shape), dtype)
        # a new zeroed array costs no more than an empty one: the OS zeroes fresh pages
        return (self.xp.zeros if zeroed else self.xp.empty)(shape, dtype)

    def plain_small(self, nbytes: int) -> bool:
        """Whether an output of ``nbytes`` is a plain new numpy array: small (the pool
        keeps only big buffers) and within the memory limit, on the host."""
        return self.xp is np and nbytes < _POOLED_BYTES and nbytes <= self.allowed_bytes

    @property
    def allowed_bytes(self) -> int:
        """The most bytes one buffer may take: the memory limit, and never more than
        numpy (an int64 byte count) can describe."""
        return _MAX_BYTES if self.memory_limit is None else min(self.memory_limit, _MAX_BYTES)

    def fits(self, num_elements: int, dtype) -> bool:
        """Whether ``num_elements`` of ``dtype`` may be allocated (see
        :meth:`check_allocation`, which raises where this says False)."""
        return _nbytes(num_elements, dtype) <= self.allowed_bytes

    def check_allocation(self, num_elements: int, dtype) -> None:
        """Raise ResourceExhaustedError before allocating past the memory limit.

        ``num_elements`` must be exact (a Python int, e.g. ``math.prod(dims)``, not an
        int64 product that may wrap): a size past 2**63 - 1 bytes fails even without
        a limit, before numpy sees it.
        """
        nbytes = _nbytes(num_elements, dtype)
        limit = self.allowed_bytes
        if nbytes > limit:
            raise ResourceExhaustedError(
                f"OOM when allocating tensor with {int(num_elements)} elements of type "
                f"{np.dtype(dtype).name} ({nbytes} bytes; memory limit {limit} bytes)")


def _nbytes(num_elements: int, dtype) -> int:
    itemsize = np.dtype(dtype).itemsize if dtype is not object else 8
    return int(num_elements) * itemsize


#: The largest buffer numpy (and an int64 byte count) can describe.
_MAX_BYTES = 2 ** 63 - 1
#: Buffers below this size are not pooled (runtime/memory.py's MIN_POOLED_BYTES).
_POOLED_BYTES = 1 << 16


class KernelSpec:
    """What a plan knows of one node before it runs (a kernel's ``prepare`` reads it):
    its context, and per flat input the static shape, dtype and, for a constant of the
    plan, the value. A shape-specialized plan knows the feeds' shapes too. ``in_loop``:
    the step is lowered into a compiled while loop (runtime/compiled_loops.py), where
    even scalar arithmetic is worth compiling (a plain segment leaves it to Python)."""

    __slots__ = ("ctx", "inputs", "outputs", "in_loop")

    def __init__(self, ctx: KernelContext, inputs, outputs, in_loop: bool = False):
        self.ctx = ctx
        self.inputs = tuple(inputs)    # Outputs, as the plan wires them
        self.outputs = tuple(outputs)
        self.in_loop = in_loop

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self.ctx.attrs

    def shape(self, i: int) -> tuple | None:
        """Input ``i``'s dims when all are known, else None."""
        shape = self.inputs[i].shape
        return tuple(shape.as_list()) if shape.is_fully_defined() else None

    def output_shape(self, i: int = 0) -> tuple | None:
        shape = self.outputs[i].shape
        return tuple(shape.as_list()) if shape.is_fully_defined() else None

    def dtype(self, i: int) -> np.dtype:
        return np.dtype(self.inputs[i].dtype.as_numpy_dtype)

    def small_output(self, shape: tuple, dtype) -> bool:
        """Whether an output of a static ``shape`` and ``dtype`` is a plain new array
        (:meth:`KernelContext.plain_small`): what a compiled segment may allocate."""
        return self.ctx.plain_small(math.prod(shape) * np.dtype(dtype).itemsize)

    def allocator(self, shape: tuple, dtype) -> Callable[[], Any]:
        """``new()`` -> an uninitialized output of a static ``shape`` and ``dtype``: what
        ``ctx.empty(shape, dtype)`` gives, decided now: a small CPU buffer within the
        memory limit is a plain ``np.empty`` call (the pool keeps only big buffers)."""
        dtype, shape = np.dtype(dtype), tuple(int(d) for d in shape)
        if self.small_output(shape, dtype):
            return functools.partial(np.empty, shape, dtype)
        return functools.partial(self.ctx.empty, shape, dtype)

    def value(self, i: int):
        """Input ``i``'s value when it is a constant of the plan, else None."""
        op = self.inputs[i].op
        return op.attrs["value"] if op.type == "Const" and not op.control_inputs else None
