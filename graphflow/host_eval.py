"""Evaluating one node on the host, before the graph runs.

Build-time inference (graphflow/inference.py: constant inputs of shape
functions) and plan-time constant folding (runtime/folding.py) both compute a
node from constant inputs with its CPU kernel. :func:`evaluate_on_host` is the
one way they do it: the kernel is called through the output check every plan
step uses (graphflow/output_check.py), and a node that cannot be evaluated
(no CPU kernel, a kernel that raises or returns something a constant cannot be,
an output past the memory allowed) gives None: it is left to run, and fail, as
written.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .graph import Operation
from .kernel_context import KernelContext
from .output_check import checked_kernel


class HostArrays:
    """The host as the output check sees it when no runtime device is at hand."""

    name = "/device:CPU:0"

    @staticmethod
    def holds(array) -> bool:
        return isinstance(array, (np.ndarray, np.generic))


HOST = HostArrays()


def evaluate_on_host(op: Operation, inputs: Sequence[np.ndarray], memory_limit: int,
                     device: Any = None, config: Any = None) -> list[np.ndarray] | None:
    """The outputs of ``op`` computed by its CPU kernel from the flat ``inputs``, as
    read-only arrays of their own (never an input's buffer), or None when it cannot be
    evaluated here. The kernel may allocate up to ``memory_limit`` bytes, and each
    output must fit in it. ``device`` (the host Device of a plan, else :data:`HOST`)
    and ``config`` are what the kernel's context holds."""
    kernel = op.op_def.find_kernel("cpu", dict(op.attrs))
    if kernel is None:
        return None
    ctx = KernelContext(op.name, op.type, op.attrs, device=device, config=config,
                        memory_limit=memory_limit)
    fn = checked_kernel(kernel.fn, op, device or HOST,  # a user kernel's bad result is dropped
                        trusted=kernel.trusted)
    args = op.op_def.group_inputs(list(inputs), op.arg_lengths)
    try:
        with np.errstate(all="ignore"):
            result = fn(ctx, *args)
    except Exception:  # noqa: BLE001 - the same error is reported when the graph runs
        return None
    results = list(result) if op.op_def.returns_list else [result]
    if len(results) != len(op.outputs) or not all(
            isinstance(r, (np.ndarray, np.generic)) and r.nbytes <= memory_limit for r in results):
        return None
    return [_frozen(r) for r in results]


def _frozen(value) -> np.ndarray:
    """A read-only copy of ``value``: a constant never aliases a buffer someone may write."""
    value = np.array(value, copy=True)
    value.flags.writeable = False
    return value
