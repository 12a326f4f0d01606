"""Compiling a (fetches, feeds) signature into a Plan, and running Plans.

A Plan is made once per signature and cached by the Session. It holds a flat
list of steps in topological order; each step is a small closure that reads
its inputs from a list of value slots, calls its kernel, writes its outputs,
and clears the slots whose last reader it was. Everything that does not
depend on values (pruning, placement, device copies, forwarding and release
points, the parallel schedule) is decided here, so a run pays only for the
kernels and this loop.

Scheduler state for a parallel run (dask-style): ``waiting[i]`` counts the
unfinished producers of step i; ``ready`` steps go to the thread pool; a slot
is cleared when its count of unfinished readers reaches zero.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from graphflow.errors import (InternalError, InvalidArgumentError, OpError,
                              ResourceExhaustedError)
from graphflow.graph import Graph, Operation, Output
from graphflow.kernel_context import KernelContext

from .device import Device
from .optimizer import rewrite
from .placer import place
from .tracing import RunMetadata, traced

#: A node whose output has at least this many elements counts as heavy: only
#: heavy independent nodes are worth a thread hop.
HEAVY_ELEMENTS = 1 << 17


class ForwardCounter:
    """Counts input buffers that kernels wrote into instead of copying."""

    def __init__(self):
        self._lock = threading.Lock()
        self.value = 0

    def __next__(self):
        with self._lock:
            self.value += 1
        return self.value


@dataclass
class Step:
    """One kernel call (or one device copy) of a plan."""

    op: Operation | None           # None for a device copy
    device: Device
    ctx: KernelContext | None
    inputs: list                   # slot per input arg (a list of slots for list args)
    outputs: list[int]             # slot per output (the junk slot for a fed output)
    label: str = ""
    run: Callable | None = None    # the compiled closure
    source: Device | None = None   # for a device copy: where the value comes from
    flat_inputs: list[int] = field(default_factory=list)


class Plan:
    """A compiled (fetches, feeds) signature."""

    def __init__(self, graph: Graph, fetches: Sequence, feeds: Sequence[Output],
                 devices: Sequence[Device], config, forward_counter: ForwardCounter):
        self.graph = graph
        self.feeds = list(feeds)
        self.config = config
        cpu = next(d for d in devices if d.device_type == "cpu")
        self.host = cpu

        fed = {o: i for i, o in enumerate(self.feeds)}
        ops = _needed_ops(fetches, fed, {})
        subst: dict[Output, Output] = {}
        if config.optimize:
            subst = rewrite(ops, fed)
            if subst:
                fetches = [subst.get(f, f) if isinstance(f, Output) else f for f in fetches]
                ops = _needed_ops(fetches, fed, subst)
        self.substitutions = subst
        for op in ops:
            if op.type == "Placeholder" and not all(o in fed for o in op.outputs):
                shape = op.attrs["shape"]
                raise InvalidArgumentError(
                    f"You must feed a value for placeholder tensor '{op.name}' with dtype "
                    f"{op.attrs['dtype'].name}" + ("" if shape.rank is None else f" and shape {shape}"),
                    op.name, op.type, site=op.site)
        self.placement = place(ops, devices, soft_placement=config.allow_soft_placement,
                               log_placement=config.log_device_placement)

        # -- slots --------------------------------------------------------------
        self.num_slots = 0
        slot_of: dict[Output, int] = {}
        device_of_slot: list[Device] = []

        def new_slot(device: Device) -> int:
            device_of_slot.append(device)
            self.num_slots += 1
            return self.num_slots - 1

        self.feed_slots = []
        for o in self.feeds:
            slot_of[o] = new_slot(cpu)
            self.feed_slots.append(slot_of[o])
        junk = new_slot(cpu)
        self.junk_slot = junk
        for op in ops:
            for o in op.outputs:
                if o not in fed:
                    slot_of[o] = new_slot(self.placement[op])

        # -- steps, with device copies where a value crosses devices ------------
        steps: list[Step] = []
        copies: dict[tuple[int, Device], int] = {}

        def slot_on(src: Output, device: Device) -> int:
            slot = slot_of[src]
            if device_of_slot[slot] is device or (src in fed and device.device_type == "cpu"):
                return slot
            key = (slot, device)
            if key not in copies:
                dst = new_slot(device)
                steps.append(Step(None, device, None, [slot], [dst],
                                  label=f"copy {src.name} -> {device.name}",
                                  source=device_of_slot[slot]))
                copies[key] = dst
            return copies[key]

        for op in ops:
            device = self.placement[op]
            inputs = []
            for arg in op.grouped_inputs():
                if isinstance(arg, list):
                    inputs.append([slot_on(subst.get(o, o), device) for o in arg])
                else:
                    inputs.append(slot_on(subst.get(arg, arg), device))
            outputs = [junk if o in fed else slot_of[o] for o in op.outputs]
            steps.append(Step(op, device, None, inputs, outputs, label=op.name))
        for s in steps:
            s.flat_inputs = [i for a in s.inputs for i in (a if isinstance(a, list) else [a])]

        # -- fetches ------------------------------------------------------------
        self.fetch_slots: list[int | None] = []
        self.fetch_devices: list[Device] = []
        for f in fetches:
            if isinstance(f, Output):
                self.fetch_slots.append(slot_of[f])
                self.fetch_devices.append(device_of_slot[slot_of[f]])
            else:
                self.fetch_slots.append(None)
                self.fetch_devices.append(cpu)
        pinned = {s for s in self.fetch_slots if s is not None}

        # -- readers, forwarding, release points --------------------------------
        readers: dict[int, int] = {}
        last_reader: dict[int, int] = {}
        for k, s in enumerate(steps):
            for i in s.flat_inputs:
                readers[i] = readers.get(i, 0) + 1
                last_reader[i] = k
        feed_slots = set(self.feed_slots)
        producer_fresh = {}
        for s in steps:
            # a copy of a feed may be the fed array itself (a cupy feed to a GPU node)
            fresh = s.inputs[0] not in feed_slots if s.op is None else s.op.op_def.fresh_outputs
            for o in s.outputs:
                producer_fresh[o] = fresh
        # feeds that CPU kernels read directly: a device array fed there comes to the host
        self.host_feeds = tuple(k for k, slot in enumerate(self.feed_slots) if any(
            slot in s.flat_inputs for s in steps if s.op is not None and s.device is cpu))
        self.use_counts = [readers.get(i, 0) for i in range(self.num_slots)]
        for s in steps:
            if s.op is None:
                continue
            forwardable = tuple(
                isinstance(a, int) and a not in feed_slots and a not in pinned
                and producer_fresh.get(a, False) and readers.get(a) == 1
                for a in s.inputs)
            s.ctx = KernelContext(
                s.op.name, s.op.type, s.op.attrs, device=s.device, xp=s.device.xp, config=config,
                forwardable=forwardable, forward_counter=forward_counter,
                memory_limit=config.memory_limit_bytes)
        self.steps = steps
        self.pinned = pinned
        self.parallel = config.inter_op_threads > 1 and _worth_parallel(steps)
        frees: list[list[int]] = [[] for _ in steps]
        if not self.parallel:
            for slot, k in last_reader.items():
                if slot not in pinned:
                    frees[k].append(slot)
        for s, free in zip(steps, frees):
            s.run = _compile_step(s, tuple(free))
        self.runs = [s.run for s in steps]

        if self.parallel:
            producer_step = {o: k for k, s in enumerate(steps) for o in s.outputs}
            deps: list[set[int]] = []
            for s in steps:
                d = {producer_step[i] for i in s.flat_inputs if i in producer_step}
                if s.op is not None:
                    d |= {k for k, t in enumerate(steps) if t.op in s.op.control_inputs}
                deps.append(d)
            self.waiting = [len(d) for d in deps]
            self.dependents: list[list[int]] = [[] for _ in steps]
            for k, d in enumerate(deps):
                for j in d:
                    self.dependents[j].append(k)

    # -- running --------------------------------------------------------------------
    def run(self, feed_values: Sequence, pool=None, metadata: RunMetadata | None = None) -> list:
        """Run the plan once; ``metadata``, if given, receives one NodeEvent per step."""
        slots: list[Any] = [None] * self.num_slots
        for slot, value in zip(self.feed_slots, feed_values):
            slots[slot] = value
        for k in self.host_feeds:
            value = feed_values[k]
            if not isinstance(value, (np.ndarray, np.generic)):
                slots[self.feed_slots[k]] = _read_only(self.host.to_host(value))
        runs = self.runs if metadata is None else [traced(s, metadata) for s in self.steps]
        if self.parallel and pool is not None:
            self._run_parallel(slots, pool, runs)
        else:
            steps = self.steps
            k = 0
            try:
                with np.errstate(all="ignore"):  # inf and NaN results come silently, as in TF
                    for k, run in enumerate(runs):
                        run(slots)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 - re-raised with node context
                raise _node_error(steps[k], e) from e
        return [self._fetch(slots, s, d) for s, d in zip(self.fetch_slots, self.fetch_devices)]

    def _fetch(self, slots, slot, device):
        if slot is None:
            return None
        value = slots[slot]
        if device.device_type != "cpu":
            value = device.to_host(value)
        elif not isinstance(value, np.ndarray):
            value = self.host.to_host(value)  # a scalar, or a cupy feed fetched back
        if not value.flags.writeable:
            value = value.copy()  # a constant or a feed: the caller gets its own array
        return value

    def _run_parallel(self, slots: list, pool, runs: list[Callable]) -> None:
        steps = self.steps
        waiting = list(self.waiting)
        unread = list(self.use_counts)
        done: queue.SimpleQueue = queue.SimpleQueue()
        in_flight = 0
        first_error: tuple[int, BaseException] | None = None
        # Set by the first failing step (or an interrupted coordinator): steps already
        # queued on the pool then return at once instead of starting their kernels.
        stop = threading.Event()

        def work(k: int) -> None:
            if stop.is_set():
                done.put((k, _SKIPPED))
                return
            try:
                with np.errstate(all="ignore"):  # per thread: as in run()
                    runs[k](slots)
                done.put((k, None))
            except BaseException as e:  # noqa: BLE001 - reported by the coordinator
                stop.set()
                done.put((k, e))

        def submit(k: int) -> None:
            nonlocal in_flight
            in_flight += 1
            pool.submit(work, k)

        try:
            for k, w in enumerate(waiting):
                if w == 0:
                    submit(k)
            while in_flight:
                k, err = done.get()
                in_flight -= 1
                if err is not None:
                    if first_error is None and err is not _SKIPPED:
                        first_error = (k, err)
                    continue
                for i in steps[k].flat_inputs:
                    unread[i] -= 1
                    if unread[i] == 0 and i not in self.pinned:
                        slots[i] = None
                if first_error is not None:
                    continue
                for j in self.dependents[k]:
                    waiting[j] -= 1
                    if waiting[j] == 0:
                        submit(j)
        except BaseException:
            # KeyboardInterrupt or similar: start nothing more, let what is running
            # finish, then re-raise.
            stop.set()
            while in_flight:
                done.get()
                in_flight -= 1
            raise
        if first_error is not None:
            k, err = first_error
            if isinstance(err, (KeyboardInterrupt, SystemExit)):
                raise err
            raise _node_error(steps[k], err) from err


#: What a parallel step reports when it was not started because an earlier step failed.
_SKIPPED = object()


def _needed_ops(fetches: Sequence, fed: dict, subst: dict) -> list[Operation]:
    """The ops the fetches need, in creation (= topological) order; ``subst``
    replaces outputs by those of rewritten nodes."""
    needed: set[Operation] = set()
    stack: list[Operation] = []
    for f in fetches:
        if isinstance(f, Output):
            if f not in fed:
                stack.append(f.op)
        else:
            stack.append(f)
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        for i in op.inputs:
            i = subst.get(i, i)
            if i not in fed and i.op not in needed:
                stack.append(i.op)
        stack.extend(c for c in op.control_inputs if c not in needed)
    return sorted(needed, key=lambda op: op._id)


def _worth_parallel(steps: list[Step]) -> bool:
    """True when at least two heavy steps could run at the same time."""
    depth: dict[int, int] = {}
    heavy_at: dict[int, int] = {}
    for s in steps:
        d = 1 + max((depth.get(i, 0) for i in s.flat_inputs), default=0)
        for o in s.outputs:
            depth[o] = d
        if s.op is not None and any(
                (o.shape.num_elements() or HEAVY_ELEMENTS) >= HEAVY_ELEMENTS for o in s.op.outputs):
            heavy_at[d] = heavy_at.get(d, 0) + 1
            if heavy_at[d] >= 2:
                return True
    return False


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def _compile_step(step: Step, free: tuple[int, ...]) -> Callable:
    """The closure that runs ``step`` on a list of slots."""
    if step.op is None:  # a device copy, through the host
        (src,), (dst,) = step.inputs, step.outputs
        to_host = step.source.to_host if step.source.device_type != "cpu" else None
        to_device = step.device.from_host if step.device.device_type != "cpu" else None

        def copy(s, src=src, dst=dst):
            v = s[src]
            if to_host is not None:
                v = to_host(v)
            s[dst] = to_device(v) if to_device is not None else v
            for f in free:
                s[f] = None
        return copy

    fn = step.device.bind(step.op.op_def.find_kernel(step.device.device_type,
                                                     dict(step.op.attrs)).fn)
    ctx = step.ctx
    ins, outs = step.inputs, step.outputs
    has_lists = any(isinstance(a, list) for a in ins)
    # a kernel returns one array for one declared non-list output, else a sequence
    returns_sequence = len(outs) != 1 or any(spec.is_list for spec in step.op.op_def.outputs)
    if not has_lists and not returns_sequence:
        (o,) = outs
        if not ins:
            def step0(s):
                s[o] = fn(ctx)
                for f in free:
                    s[f] = None
            return step0
        if len(ins) == 1:
            (a,) = ins

            def step1(s):
                s[o] = fn(ctx, s[a])
                for f in free:
                    s[f] = None
            return step1
        if len(ins) == 2:
            a, b = ins

            def step2(s):
                s[o] = fn(ctx, s[a], s[b])
                for f in free:
                    s[f] = None
            return step2
        if len(ins) == 3:
            a, b, c = ins

            def step3(s):
                s[o] = fn(ctx, s[a], s[b], s[c])
                for f in free:
                    s[f] = None
            return step3

    n_out = len(outs)
    op = step.op

    def step_n(s):
        args = [[s[j] for j in a] if isinstance(a, list) else s[a] for a in ins]
        result = fn(ctx, *args)
        if not returns_sequence:
            s[outs[0]] = result
        elif n_out:
            result = list(result)
            if len(result) != n_out:
                raise InternalError(f"kernel of {op.type} returned {len(result)} values for "
                                    f"{n_out} outputs")
            for slot, value in zip(outs, result):
                s[slot] = value
        for f in free:
            s[f] = None
    return step_n


def _node_error(step: Step, err: BaseException) -> BaseException:
    """``err`` as an OpError that names the step's node and where it was created."""
    if step.op is None:
        name, type_, site = step.label, "_Copy", None
    else:
        name, type_, site = step.op.name, step.op.type, step.op.site
    if isinstance(err, OpError):
        return err.with_node(name, type_, site=site)
    if isinstance(err, MemoryError) or (
            isinstance(err, ValueError) and str(err).startswith("array is too big")):
        # the second is numpy's word for a size past what an int64 byte count holds
        return ResourceExhaustedError(f"OOM while running the kernel: {err}", name, type_, site=site)
    if isinstance(err, (ValueError, IndexError, TypeError, ArithmeticError)):
        return InvalidArgumentError(f"{type(err).__name__}: {err}", name, type_, site=site)
    return InternalError(f"{type(err).__name__}: {err}", name, type_, site=site)
