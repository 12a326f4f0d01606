"""The two kinds of plan step, and the closures that run them.

A step reads its inputs from a list of value slots and writes its outputs
there. ``KernelStep`` calls one op's kernel; ``CopyStep`` moves a value to the
device that reads it (a no-op when it already lives there, as a fed device
array may).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from graphflow.errors import InternalError
from graphflow.graph import Operation
from graphflow.kernel_context import KernelContext, KernelSpec
from graphflow.memory_limit import limit_outputs
from graphflow.output_check import checked_kernel

from .device import Device


@dataclass(eq=False)
class Step:
    """What every step has: where it runs, which slots it reads and writes."""

    device: Device
    inputs: list                   # slot per input arg (a list of slots for list args)
    outputs: list[int]             # slot per output (the junk slot for a fed output)
    label: str = ""
    flat_inputs: list[int] = field(default_factory=list)
    run: Callable | None = None    # the compiled closure: run(slots)

    op: Operation | None = None    # the node a kernel step runs
    fresh: bool = False            # its outputs are new buffers (may be written in place)

    def __post_init__(self):
        self.flat_inputs = [i for a in self.inputs for i in (a if isinstance(a, list) else [a])]

    @property
    def name(self) -> str:
        return self.label

    @property
    def type(self) -> str:
        return self.op.type if self.op is not None else "_Copy"


@dataclass(eq=False)
class KernelStep(Step):
    """One kernel call of ``op``."""

    ctx: KernelContext | None = None
    values: list = field(default_factory=list)  # the flat inputs, as the plan wires them
    _kernel: Callable | None = field(default=None, init=False, repr=False)

    def kernel(self) -> Callable:
        """The kernel function as this step calls it: with ``optimize``, the op's lean
        kernel when its ``prepare`` gives one for what the plan knows (static shapes,
        constants), else the registered kernel; bound to its device, a user op's kernel checked
        (:func:`checked_kernel`), and held to the memory limit
        (graphflow/memory_limit.py). Built once (its ``prepare`` run once), when the
        step's context is attached, and shared by every way the plan runs the step."""
        if self._kernel is None:
            self._kernel = self._build_kernel()
        return self._kernel

    def _build_kernel(self) -> Callable:
        op = self.op
        device_type = self.device.device_type
        registered = op.op_def.find_kernel(device_type, dict(op.attrs))
        fn, trusted = registered.fn, registered.trusted
        prepare = op.op_def.preparers.get(device_type)
        if prepare is not None and self.ctx is not None \
                and getattr(self.ctx.config, "optimize", True):
            lean = prepare(KernelSpec(self.ctx, self.values, op.outputs))
            if lean is not None:
                fn, trusted = lean, device_type in op.op_def.trusted_preparers
        checked = checked_kernel(fn, op, self.device, trusted=trusted)
        return limit_outputs(self.device.bind(checked), op, self.ctx)

    def compile(self, release: Sequence[int], release_fn) -> Callable:
        return _kernel_closure(self, tuple(release), release_fn)


@dataclass(eq=False)
class CopyStep(Step):
    """Moves one value to ``device`` through the host. The value of a feed may already
    live there (a device array fed in): the copy then passes it through."""

    source: Device | None = None         # where the value lives; None for a feed
    holders: tuple[Device, ...] = ()     # for a feed: the devices it may live on

    def mover(self) -> Callable:
        """``move(value)``: the value on this step's device."""
        device = self.device
        on_host = device.device_type == "cpu"
        if self.source is not None:
            to_host = None if self.source.device_type == "cpu" else self.source.to_host

            def move(v):
                if to_host is not None:
                    v = to_host(v)
                return v if on_host else device.from_host(v)
            return move
        holds, devices = device.holds, [h for h in self.holders if h.device_type != "cpu"]

        def move_feed(v):
            if holds(v):
                return v
            for h in devices:
                if h.holds(v):
                    v = h.to_host(v)
                    break
            return v if on_host else device.from_host(v)
        return move_feed

    def compile(self, release: Sequence[int], release_fn) -> Callable:
        (src,), (dst,) = self.inputs, self.outputs
        move, release = self.mover(), tuple(release)

        def copy(s):
            s[dst] = move(s[src])
            for f in release:
                release_fn(s, f)
        return copy


def _kernel_closure(step: KernelStep, release: tuple[int, ...], release_fn) -> Callable:
    """The closure that runs ``step`` on a list of slots and releases the slots whose
    last reader it is (parallel and traced runs; a serial run inlines its steps in one
    generated function, runtime/executor.py)."""
    op = step.op
    fn = step.kernel()
    ctx = step.ctx
    ins, outs = step.inputs, step.outputs
    n_out = len(outs)
    returns_sequence = op.op_def.returns_list

    def run(s):
        result = fn(ctx, *[[s[j] for j in a] if isinstance(a, list) else s[a] for a in ins])
        if not returns_sequence:
            s[outs[0]] = result
        elif n_out:
            result = list(result)
            if len(result) != n_out:
                raise InternalError(f"kernel of {op.type} returned {len(result)} values for "
                                    f"{n_out} outputs")
            for slot, value in zip(outs, result):
                s[slot] = value
        for f in release:
            release_fn(s, f)
    return run
