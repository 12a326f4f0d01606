"""A step as numba source: how a kernel runs inside a compiled segment.

A serial CPU plan runs its kernels one Python call each. Where consecutive steps
all have a *lowering*, the runtime (runtime/segments.py) writes them out as one
generated numba function, so that a chain of small kernels costs one call. An op
registers ``lower(spec) -> Lowering | None`` with ``OpDef.lower("cpu")``; the
spec is the same :class:`graphflow.kernel_context.KernelSpec` a ``prepare`` reads.

A lowering must give its kernel's results bit for bit. It never raises: compiled
code that raises leaks every array it holds (numba emits no cleanup for an
exception), so a process making failing calls would grow without bound. Where its
kernel would fail, a lowering sets the segment's status ``{ok}`` to False and
reads or writes nothing with the bad values (a gather gives zeros); the segment
then declines and runs its steps one by one, whose kernels report the error in
their own words. A lowering may decline the same way where it cannot know the
kernel's exact bits for this call's values (float Max over both signed zeros: numpy's
vector loops return either): the steps then give them. A lowering that writes a variable writes only while ``{ok}`` is
True: a segment ends with such a step, so nothing is written twice.

The same lowerings make a compiled while loop (runtime/compiled_loops.py) when every
step of a loop's cond and body has one; ``spec.in_loop`` is then True.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np


@dataclass(frozen=True)
class Lowering:
    """Numba source lines for one step.

    ``source`` is ``str.format``-ted with ``i0, i1, ...`` (the flat inputs'
    expressions), ``o0, o1, ...`` (the names to assign the outputs to), ``t`` (a
    prefix for the step's own local names), ``ok`` (the segment's status: set it
    False where the kernel would fail) and the keys of ``functions`` (the compiled
    numba functions the lines call); ``np`` is numpy.
    Static shapes and dtypes are written into the lines as literals. An input
    listed in ``variables`` is a resource handle: ``{iK}`` is then the variable's
    value array (C-contiguous, of the handle's dtype and static shape), read and
    written under the variable's lock. ``writes``: the step writes a variable.
    ``weight``: what the step adds to the segment's compile time, in simple ops (a
    fused region counts its nodes); a segment holds a bounded weight. A value of
    ``functions`` may be :class:`Deferred`: loaded only when the segment compiles."""

    source: str
    functions: Mapping[str, Callable] = field(default_factory=dict)
    variables: tuple[int, ...] = ()
    writes: bool = False
    weight: int = 1


@dataclass(frozen=True)
class Deferred:
    """A compiled function loaded when first needed (``load()``): building a plan
    never creates a numba dispatcher it may not use."""

    load: Callable[[], Callable]


def shape_literal(shape) -> str:
    """``shape`` as numba source: a tuple of ints (``(3,)``, ``()``)."""
    dims = tuple(int(d) for d in shape)
    return repr(dims)


def dtype_literal(dtype) -> str:
    """A numpy dtype as numba source: ``np.float32``."""
    return f"np.{np.dtype(dtype).type.__name__}"
