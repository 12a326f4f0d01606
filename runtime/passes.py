"""The functions the plan's passes are made of, each testable alone:

    prune, require_feeds              the IR's (runtime/plan_ir.py, runtime/pipeline.py)
    locate -> preload_constants -> liveness -> attach_contexts
                                      the step table a Plan builds once from the placed IR
    heavy_steps, schedule             how a parallel run orders and hops its steps
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Collection, Sequence

from graphflow.errors import InvalidArgumentError
from graphflow.graph import Operation, Output
from graphflow.kernel_context import KernelContext

from .device import Device
from .steps import CopyStep, KernelStep, Step


# -- prune ----------------------------------------------------------------------------
def prune(fetches: Sequence, fed: Collection[Output], subst: dict | None = None) -> list[Operation]:
    """The ops the fetches need, in creation (= topological) order. A fed output
    needs nothing; ``subst`` replaces outputs by those of rewritten nodes (a rewrite
    that :func:`runtime.plan_ir.substitute` is wiring in)."""
    subst = subst or {}
    needed: set[Operation] = set()
    stack: list[Operation] = []
    targets = waits_on(subst, fed)
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
        for c in op.control_inputs:
            stack += targets(c)  # the needed ones are skipped when popped
    return sorted(needed, key=lambda op: op.position)


def waits_on(subst: dict, fed: Collection[Output]) -> Callable[[Operation], list[Operation]]:
    """:func:`control_targets` under one substitution, worked out once per control input
    (a gradient's updates wait on the same products: 884 edges on 284 ops in an MoE step,
    walked by every prune and rewire)."""
    found: dict[Operation, list[Operation]] = {}

    def targets(c: Operation) -> list[Operation]:
        known = found.get(c)
        if known is None:
            known = found[c] = control_targets(c, subst, fed)
        return known
    return targets


def control_targets(c: Operation, subst: dict, fed: Collection[Output]) -> list[Operation]:
    """What waiting on ``c`` means once rewrites replaced its values: ``c`` itself, or,
    for a pure op (no state, no control inputs of its own) whose every output has a
    substitute, the ops that compute the substitutes (none for a constant or a feed):
    its value is theirs, and it has no effect to wait for. A fed source (a Placeholder
    whose every output is fed) is nothing to wait for either: its values are there
    before the run starts, and its kernel would ask to be fed (TensorFlow keeps the
    edge to the feed, not the op)."""
    if c.outputs and not c.inputs and not c.control_inputs and all(o in fed for o in c.outputs):
        return []
    if c.op_def.stateful or c.control_inputs or not c.outputs \
            or any(o not in subst for o in c.outputs):
        return [c]
    targets = []
    for o in c.outputs:
        t = subst[o]
        if t not in fed and not (t.op.type == "Const" and not t.op.control_inputs):
            targets.append(t.op)
    return targets


# -- require_feeds --------------------------------------------------------------------
def require_feeds(ops: Sequence[Operation], fed: Collection[Output]) -> None:
    """A Placeholder the fetches need must be fed: TensorFlow's error otherwise."""
    for op in ops:
        if op.type == "Placeholder" and not all(o in fed for o in op.outputs):
            shape = op.attrs["shape"]
            raise InvalidArgumentError(
                f"You must feed a value for placeholder tensor '{op.name}' with dtype "
                f"{op.attrs['dtype'].name}" + ("" if shape.rank is None else f" and shape {shape}"),
                op.name, op.type, site=op.site)


# -- locate ---------------------------------------------------------------------------
@dataclass
class Layout:
    """Where every value lives: one slot per value (and per device copy of it), and
    the steps that fill them, in an order that respects every dependency."""

    steps: list[Step]
    num_slots: int
    feed_slots: list[int]
    fetch_slots: list[int | None]
    fetch_devices: list[Device]
    slot_device: list[Device | None]  # None: a feed, which may live on any device
    junk_slot: int


def locate(ops: Sequence[Operation], placement: dict[Operation, Device],
           feeds: Sequence[Output], fetches: Sequence, devices: Sequence[Device]) -> Layout:
    """Give every value a slot and every op a KernelStep; insert a CopyStep wherever
    a value is read on another device than the one it lives on. A feed is an ordinary
    value whose device is known only at run time: each device that reads it gets a
    copy step, which passes the value through when that device already holds it."""
    fed = set(feeds)
    slots = _Slots(devices)
    slot_of: dict[Output, int] = {o: slots.new(None) for o in feeds}
    feed_slots = [slot_of[o] for o in feeds]
    junk = slots.new(None)
    for op in ops:
        for o in op.outputs:
            if o not in fed:
                slot_of[o] = slots.new(placement[op])
    for op in ops:
        device = placement[op]
        inputs = [[slots.on(slot_of, o, device) for o in arg]
                  if isinstance(arg, list) else slots.on(slot_of, arg, device)
                  for arg in op.grouped_inputs()]  # copies first, then the step reading them
        outputs = [junk if o in fed else slot_of[o] for o in op.outputs]
        slots.steps.append(KernelStep(device, inputs, outputs, label=op.name, op=op,
                                      fresh=op.op_def.fresh_outputs,
                                      values=list(op.inputs)))
    fetch_slots, fetch_devices = _fetch_slots(fetches, slot_of, slots.device_of, devices)
    return Layout(slots.steps, len(slots.device_of), feed_slots, fetch_slots, fetch_devices,
                  slots.device_of, junk)


class _Slots:
    """The value slots of a plan as :func:`locate` hands them out: the device each
    value lives on (None: a feed's, known at run time), and the steps so far."""

    def __init__(self, devices: Sequence[Device]):
        self.device_of: list[Device | None] = []
        self.steps: list[Step] = []
        self._copies: dict[tuple[int, Device], int] = {}
        self._holders = tuple(devices)  # who may hold a fed value

    def new(self, device: Device | None) -> int:
        self.device_of.append(device)
        return len(self.device_of) - 1

    def on(self, slot_of: dict[Output, int], src: Output, device: Device) -> int:
        """The slot of ``src`` on ``device``: its own, or that of a copy step to it (one
        per value and device)."""
        slot = slot_of[src]
        if self.device_of[slot] is device:
            return slot
        key = (slot, device)
        if key not in self._copies:
            self._copies[key] = self.new(device)
            source = self.device_of[slot]
            self.steps.append(CopyStep(device, [slot], [self._copies[key]],
                                       label=f"copy {src.name} -> {device.name}",
                                       fresh=source is not None, source=source,
                                       holders=self._holders if source is None else ()))
        return self._copies[key]


def _fetch_slots(fetches: Sequence, slot_of: dict[Output, int],
                 slot_device: list[Device | None], devices: Sequence[Device]):
    """Per fetch, its slot (None for an op fetched as a target) and the device it is
    read from (the host for a feed's or a target's)."""
    fetch_slots: list[int | None] = []
    fetch_devices: list[Device] = []
    host = next(d for d in devices if d.device_type == "cpu")
    for f in fetches:
        if isinstance(f, Output):
            slot = slot_of[f]
            fetch_slots.append(slot)
            fetch_devices.append(slot_device[slot] or host)
        else:
            fetch_slots.append(None)
            fetch_devices.append(host)
    return fetch_slots, fetch_devices


# -- liveness -------------------------------------------------------------------------
@dataclass
class Liveness:
    """Who reads each slot, where it dies, and which inputs a kernel may write into."""

    use_counts: list[int]
    releases: list[list[int]]          # per step: the slots it is the last reader of
    pinned: frozenset[int]             # fetched slots: never released
    forwardable: list[tuple[bool, ...]] = field(default_factory=list)  # per step, per input


def liveness(layout: Layout) -> Liveness:
    """Count readers, find each slot's last reader, and decide buffer forwarding: a
    kernel may write into input ``i`` when the value is a fresh buffer of a kernel or
    a real copy, is read by this step only, and is neither fed nor fetched."""
    steps = layout.steps
    readers: dict[int, int] = {}
    last_reader: dict[int, int] = {}
    for k, s in enumerate(steps):
        for i in s.flat_inputs:
            readers[i] = readers.get(i, 0) + 1
            last_reader[i] = k
    pinned = frozenset(s for s in layout.fetch_slots if s is not None)
    feeds = set(layout.feed_slots)
    fresh = {o: s.fresh for s in steps for o in s.outputs}
    releases: list[list[int]] = [[] for _ in steps]
    for slot, k in last_reader.items():
        if slot not in pinned:
            releases[k].append(slot)
    forwardable = [
        tuple(isinstance(a, int) and a not in feeds and a not in pinned
              and fresh.get(a, False) and readers.get(a) == 1 for a in s.inputs)
        for s in steps]
    return Liveness([readers.get(i, 0) for i in range(layout.num_slots)], releases, pinned,
                    forwardable)


def attach_contexts(layout: Layout, live: Liveness, config, forward_counter, buffers,
                    resources=None, functions=None) -> None:
    """Give every kernel step its KernelContext (attrs, device, forwarding, buffer pool)."""
    for s, forwardable in zip(layout.steps, live.forwardable):
        if isinstance(s, KernelStep):
            s.ctx = KernelContext(
                s.op.name, s.op.type, s.op.attrs, device=s.device, xp=s.device.xp, config=config,
                forwardable=forwardable, forward_counter=forward_counter,
                memory_limit=config.memory_limit_bytes,
                buffers=buffers if s.device.device_type == "cpu" else None,
                resources=resources, functions=functions)


# -- schedule -------------------------------------------------------------------------
@dataclass
class Schedule:
    """The dependency counts of a parallel run (dask-style)."""

    waiting: list[int]
    dependents: list[list[int]]


def schedule(steps: Sequence[Step]) -> Schedule:
    """Each step waits for the producers of its inputs and for its control inputs."""
    producer = {o: k for k, s in enumerate(steps) for o in s.outputs}
    step_of_op = {s.op: k for k, s in enumerate(steps) if isinstance(s, KernelStep)}
    deps: list[set[int]] = []
    for s in steps:
        d = {producer[i] for i in s.flat_inputs if i in producer}
        if isinstance(s, KernelStep):
            d |= {step_of_op[c] for c in s.op.control_inputs if c in step_of_op}
        deps.append(d)
    dependents: list[list[int]] = [[] for _ in steps]
    for k, d in enumerate(deps):
        for j in d:
            dependents[j].append(k)
    return Schedule([len(d) for d in deps], dependents)


def heavy_steps(steps: Sequence[Step], heavy_elements: int,
                known_sizes: dict[int, int | None] | None = None) -> list[bool | None]:
    """Per step: whether it is worth a thread hop, from the static sizes of its inputs
    and outputs (``known_sizes``: feed and constant slot -> elements); None where a size
    is unknown
    (the executor then decides from the sizes it sees). A shape-specialized plan knows
    them all."""
    size_of: dict[int, int | None] = dict(known_sizes or {})
    for s in steps:
        if isinstance(s, KernelStep):
            for slot, o in zip(s.outputs, s.op.outputs):
                size_of[slot] = o.shape.num_elements()
        else:
            for i, o in zip(s.flat_inputs, s.outputs):
                size_of[o] = size_of.get(i)
    flags: list[bool | None] = []
    for s in steps:
        if not isinstance(s, KernelStep):
            flags.append(False)
            continue
        sizes = [size_of.get(i) for i in s.flat_inputs] + [size_of.get(o) for o in s.outputs]
        if any(n is not None and n >= heavy_elements for n in sizes):
            flags.append(True)
        else:
            flags.append(None if None in sizes else False)
    return flags


def worth_parallel(steps: Sequence[Step], heavy: Sequence[bool | None]) -> bool:
    """True when at least two heavy (or maybe heavy) kernel steps could run at the same
    time (at the same depth of the dependency graph)."""
    depth: dict[int, int] = {}
    heavy_at: dict[int, int] = {}
    for s, is_heavy in zip(steps, heavy):
        d = 1 + max((depth.get(i, 0) for i in s.flat_inputs), default=0)
        for o in s.outputs:
            depth[o] = d
        if is_heavy is not False:
            heavy_at[d] = heavy_at.get(d, 0) + 1
            if heavy_at[d] >= 2:
                return True
    return False


# -- constants ------------------------------------------------------------------------
def preload_constants(layout: Layout) -> tuple[Layout, dict[int, object]]:
    """Constants on the CPU are no steps: their values are in their slots when a run
    starts. A Const with control inputs stays a step (its readers wait on them)."""
    preloaded: dict[int, object] = {}
    steps = []
    for s in layout.steps:
        if isinstance(s, KernelStep) and s.op.type == "Const" and not s.op.control_inputs \
                and s.device.device_type == "cpu":
            preloaded[s.outputs[0]] = s.op.attrs["value"]
        else:
            steps.append(s)
    return replace(layout, steps=steps), preloaded
