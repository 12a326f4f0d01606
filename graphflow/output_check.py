"""What a kernel must return, checked where the kernel is not graphflow's own.

:func:`checked_kernel` wraps a user op's kernel so that what it returns is what
later steps rely on. Plan steps (runtime/steps.py) and the host evaluator
(graphflow/host_eval.py: build-time inference and plan-time folding) both call
their kernels through it, so a user kernel's bad result is caught in one place.
``device`` is anything with ``name`` and ``holds(array)`` (a runtime Device, or
the host stand-in of host_eval).
"""
from __future__ import annotations

import sys
from typing import Callable

import numpy as np

from .errors import InternalError
from .graph import Operation
from .refcounts import HELD_BY_ONE_LOCAL


def checked_kernel(fn: Callable, op: Operation, device, *, trusted: bool) -> Callable:
    """``fn``, a kernel of ``op`` on ``device``, as the runtime may call it. graphflow's
    own kernels are ``trusted`` (registered so, registry.own_kernels: their tests check
    them) and run as they are. A user op's
    kernel is held to what later steps rely on: one array of the device per declared
    output, of the declared dtype (else an InternalError naming the op and the kernel,
    never a wrong value passed on), an ndarray subclass (a masked array) passed on as
    its plain data, as a fed one is; and with ``fresh_outputs`` (``register_op``'s
    default, which lets later nodes write into its outputs), outputs that are
    provably private: an output that is a view (of an input, or of anything) or that
    something else holds (an input itself, a buffer kept in a global or in
    ``ctx.cache``: its reference count says so) is copied."""
    if trusted:
        return fn
    check = _output_checker(fn, op, device)
    if op.op_def.returns_list:
        return _checked_list(fn, op, check)
    return _checked_single(fn, op, check)


def _output_checker(fn: Callable, op: Operation, device) -> Callable:
    """``check(value, i)``: an InternalError unless ``value`` is an array of ``device``
    of output i's declared dtype."""
    kernel_name = f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', fn)}"
    declared = [o.dtype for o in op.outputs]
    dtypes = [d.as_numpy_dtype for d in declared]
    holds = device.holds

    def check(value, i: int) -> None:
        if value is None or not holds(value):
            raise bad_kernel(kernel_name, op, f"returned {_described(value)} for output {i}, "
                                              f"which must be an array of {device.name}")
        dtype = getattr(value, "dtype", None)
        if dtype is not None and dtype != dtypes[i]:
            raise bad_kernel(kernel_name, op, f"returned an array of dtype {dtype} for output "
                                              f"{i}, which is declared {declared[i].name}")
    check.kernel_name = kernel_name
    return check


def bad_kernel(kernel_name: str, op: Operation, what: str) -> InternalError:
    return InternalError(f"Kernel {kernel_name} of op '{op.type}' {what}")


def _checked_single(fn: Callable, op: Operation, check: Callable) -> Callable:
    """The check of a kernel that returns its one output's array."""
    dtype0 = op.outputs[0].dtype.as_numpy_dtype
    fresh = op.op_def.fresh_outputs
    getrefcount = sys.getrefcount
    ndarray = np.ndarray

    def checked(ctx, *args):
        value = fn(ctx, *args)
        if type(value) is not ndarray or value.dtype != dtype0:
            check(value, 0)
            if isinstance(value, ndarray):  # np.ma, np.matrix: its plain data, as a feed
                value = value.view(ndarray)
        # held by the local name ``value`` alone when nothing else holds it
        if fresh and type(value) is ndarray and (
                value.base is not None or getrefcount(value) > HELD_BY_ONE_LOCAL):
            value = value.copy()
        return value
    return checked


def _checked_list(fn: Callable, op: Operation, check: Callable) -> Callable:
    """The check of a kernel that returns a list of arrays, one per output."""
    n_out = len(op.outputs)
    fresh = op.op_def.fresh_outputs
    getrefcount = sys.getrefcount
    ndarray = np.ndarray
    kernel_name = check.kernel_name

    def checked_list(ctx, *args):
        result = fn(ctx, *args)
        if not isinstance(result, (list, tuple)):
            raise bad_kernel(kernel_name, op, f"returned {_described(result)}, where a list "
                                              f"of {n_out} arrays is due")
        if len(result) != n_out:
            raise bad_kernel(kernel_name, op, f"returned {len(result)} values for {n_out} "
                                              f"outputs")
        values = list(result)
        del result
        for i in range(n_out):
            value = values[i]
            check(value, i)
            if isinstance(value, ndarray) and type(value) is not ndarray:
                value = values[i] = value.view(ndarray)  # its plain data, as a feed's
            # held by the local name ``value`` and the list ``values`` when private
            if fresh and type(value) is ndarray and (
                    value.base is not None or getrefcount(value) > HELD_BY_ONE_LOCAL + 1):
                values[i] = value.copy()
        return values
    return checked_list


def _described(value) -> str:
    return "None" if value is None else f"a value of type {type(value).__name__}"
