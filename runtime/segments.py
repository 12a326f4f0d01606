"""Compiled segments: runs of lowered steps computed by one generated numba function.

A serial plan calls one Python kernel per step; for a chain of small kernels that
call, not the arithmetic, is the cost (a few microseconds each). Where two or more
consecutive steps have a lowering (``OpDef.lower``, graphflow/lowering.py), the plan
writes them out as one numba function: their values pass between them inside
compiled code, and the chain costs one call.

- **Which steps.** Lowered CPU steps with static shapes and small outputs, taken in
  plan order, at most :data:`MAX_SEGMENT_STEPS` per segment and
  :data:`MAX_SEGMENT_WEIGHT` simple ops (compile time grows with the function). Steps that cannot fail and read nothing the segment computes (feed
  copies, constants with control inputs, variable handles) are run just before the
  segment instead of ending it. A step that writes a variable ends its segment.
- **Inputs.** Values from outside are arguments; the plan's constants are packed into
  one read-only array per dtype (few arguments however many constants); a variable
  is its value array, read and written under its lock (every variable of the
  segment locked for the call, in name order).
- **Tiered.** A segment compiles from its plan's second call (``COMPILE_AFTER_CALLS``
  in ops/tiering.py), in the background (``GRAPHFLOW_TIERED=0``: in that
  call); until then, and whenever it cannot run, its steps run one by one.
- **Errors.** A lowered step never raises (compiled code that raises leaks what it
  holds); where its kernel would fail it sets the segment's status False and writes
  nothing. The segment then declines and its steps run one by one from its start:
  the step's own kernel reports the error in its words, naming its node, and since
  only a segment's last step writes, nothing is written twice.
- **Outputs.** A view step's output (Reshape, ExpandDims, Squeeze) of a value from
  outside the segment (a feed, a constant) comes back read-only: numba hands such views
  back writeable, and no caller may write them. Views of the segment's own buffers stay
  as they are.

``GRAPHFLOW_SEGMENTS=0`` turns segments off.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from graphflow.kernel_context import KernelSpec
from graphflow.lowering import Lowering

from ..ops.codegen import GeneratedCode, called_code, load_numba, load_python, numba_code
from ..ops.partition_loops import readonly
from ..ops.tiering import COMPILE_AFTER_CALLS, compiled_for, types_key
from ..ops.variable_ops import handle_attrs
from .lowered_source import NotLowerable, SourceWriter
from .steps import CopyStep, KernelStep, Step

log = logging.getLogger("graphflow.segments")

#: The most lowered steps one generated function holds, and their most weight (simple
#: ops: a fused region counts its nodes): numba's compile time grows with both.
MAX_SEGMENT_STEPS = 32
MAX_SEGMENT_WEIGHT = 64

def enabled() -> bool:
    return os.environ.get("GRAPHFLOW_SEGMENTS", "1") != "0"


# -- choosing the steps ---------------------------------------------------------------------
@dataclass(eq=False)
class SegmentPlan:
    """The steps of one segment, by position in the plan."""

    lowered: list[tuple[int, Lowering]] = field(default_factory=list)
    before: list[int] = field(default_factory=list)  # hoisted steps, run first
    produced: set[int] = field(default_factory=set)
    weight: int = 0

    @property
    def first(self) -> int:
        return self.lowered[0][0]

    @property
    def members(self) -> list[int]:
        return sorted([k for k, _ in self.lowered] + self.before)


def lowering_of(step: Step, in_loop: bool = False) -> Lowering | None:
    """The step's lowering, when it has one for what the plan knows (``in_loop``: for a
    compiled while loop, runtime/compiled_loops.py)."""
    if not isinstance(step, KernelStep) or step.device.device_type != "cpu" \
            or step.ctx is None or not getattr(step.ctx.config, "optimize", True):
        return None
    lower = step.op.op_def.lowerers.get("cpu")
    if lower is None:
        return None
    lowered = lower(KernelSpec(step.ctx, step.values, step.op.outputs, in_loop))
    if lowered is None:
        return None
    for i in lowered.variables:
        if handle_attrs(step.values[i]) is None or step.ctx.resources is None:
            return None
    return lowered


def _hoistable(step: Step) -> bool:
    if isinstance(step, CopyStep):
        return step.source is None and step.device.device_type == "cpu"
    return isinstance(step, KernelStep) and step.op.op_def.hoistable \
        and step.device.device_type == "cpu"


def find_segments(steps: Sequence[Step], junk_slot: int | None) -> list[SegmentPlan]:
    """The segments of a serial plan's ``steps``: runs of two or more lowered steps."""
    found: list[SegmentPlan] = []
    current: SegmentPlan | None = None

    def close():
        nonlocal current
        if current is not None and len(current.lowered) >= 2:
            found.append(current)
        current = None

    for k, step in enumerate(steps):
        lowered = lowering_of(step)
        if lowered is not None and junk_slot in step.outputs:
            lowered = None  # a fed output: the step's value is not used
        if lowered is not None:
            if current is not None and current.weight + lowered.weight > MAX_SEGMENT_WEIGHT:
                close()
            if current is None:
                current = SegmentPlan()
            current.lowered.append((k, lowered))
            current.produced.update(step.outputs)
            current.weight += lowered.weight
            if lowered.writes or len(current.lowered) >= MAX_SEGMENT_STEPS:
                close()
        elif current is not None and _hoistable(step) \
                and not current.produced.intersection(step.flat_inputs):
            current.before.append(k)
        else:
            close()
    close()
    return found


def read_only(value) -> np.ndarray:
    """``value`` as a read-only C-contiguous array (a read-only view of a writeable one,
    a copy of a strided or Fortran-ordered one): what a segment's arguments are typed
    as, so that its compiled code is one for a feed, a constant, or a kernel's fresh
    output alike (it never writes them). Numba types these apart, and a value that
    turned writeable once the segment before it compiled made each segment of a
    1000-node chain compile twice, the second time 4.6 s after the first in a warm
    process; a feed of another layout would compile a third."""
    array = value if type(value) is np.ndarray else np.asarray(value)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return readonly(array)


# -- generating and running one ---------------------------------------------------------------
class Segment:
    """One compiled segment of a plan: ``segment.run(slots) -> bool`` runs it (True)
    or declines (False: not compiled yet, a value it cannot take, an error), and the
    caller then runs its steps one by one."""

    def __init__(self, found: SegmentPlan, steps: Sequence[Step], preloaded: dict,
                 read_after: set[int]):
        self.names = [steps[k].op.name for k, _ in found.lowered]
        self._parts = (found, steps, preloaded, read_after)
        self.source = None
        self.fn = None
        self.ready = False  # compiled for the arguments of some call
        self.ready_keys: set = set()  # the argument types it is compiled for (types_key)
        self.broken = False
        self.asked = 0  # calls before it was compiled
        self.runs = 0   # calls it ran (not its steps one by one)
        self._runner = None
        self.runner_code: GeneratedCode | None = None

    @property
    def code(self) -> list[GeneratedCode]:
        """Its generated numba function and Python caller, once generated, and the
        generated kernels it calls (fused regions), once loaded."""
        found = numba_code("compiled segment (numba)", self.source, self.fn, self.names)
        if self.runner_code is not None:
            found.append(self.runner_code.for_nodes(self.names))
        return found + called_code(getattr(self, "env", {}), getattr(self, "users", {}))

    def run(self, slots: list) -> bool:
        """Run the segment on the plan's slots (True), or decline (False). Its source is
        generated when its compile is due: a plan run once never makes one."""
        runner = self._runner
        if runner is None:
            if self.broken:
                return False
            self.asked += 1
            if self.asked < COMPILE_AFTER_CALLS:
                return False
            try:
                self._generate(*self._parts)
            except NotLowerable:  # a constant numba does not take: the steps it is
                self.broken = True
                return False
            except Exception as e:  # noqa: BLE001 - a generator bug: run the steps
                self._give_up(e)
                return False
            runner = self._runner
        return runner(slots)

    def _generate(self, found: SegmentPlan, steps: Sequence[Step], preloaded: dict,
                  read_after: set[int]) -> None:
        """The segment's numba source and the Python function that calls it."""
        produced = found.produced
        writer = SourceWriter()
        local: dict[int, str] = {}   # slot -> its name in the generated function
        args: list[int] = []         # slots passed as arguments

        def name_of(slot: int) -> str:
            name = local.get(slot)
            if name is None:
                if slot in preloaded and slot not in produced:
                    name = writer.constant(preloaded[slot])
                else:
                    name = writer.fresh()
                    if slot not in produced:
                        args.append(slot)
                local[slot] = name
            return name

        body = [line for k, lowered in found.lowered
                for line in writer.step_lines(steps[k], lowered, name_of)]
        self.pools, unpack = writer.pools()
        self.outputs = [slot for k, _ in found.lowered for slot in steps[k].outputs
                        if slot in read_after]
        self.views = _outside_views(found, steps)
        self.args = args
        # locked in name order: two segments never wait on each other's variables
        self.variables = sorted((name, *rest) for name, rest in writer.variables.items())
        params = [local[slot] for slot in args] + [param for _, param, *_ in self.variables] \
            + [f"pool{j}" for j in range(len(self.pools))]
        result = f"(ok, {''.join(f'{local[slot]}, ' for slot in self.outputs)})"
        self.source = writer.module("A compiled segment (runtime/segments.py)", "segment",
                                    params, ["ok = True", *unpack, *body, f"return {result}"])
        self.env, self.users = writer.env, writer.users
        self._runner = self._make_runner()

    def _make_runner(self):
        """``run(slots) -> bool``, generated: a line per argument, variable and output."""
        env: dict[str, Any] = {"segment": self, "types_key": types_key, "read_only": read_only}
        lines = [f"# calls the compiled segment of {', '.join(self.names)}", "def run(s):"]
        args = []
        for slot in self.args:
            lines.append(f"    a{slot} = read_only(s[{slot}])")
            args.append(f"a{slot}")
        # a value of another layout asks again: numba never compiles in the call
        lines += [f"    key = types_key(({''.join(a + ', ' for a in args)}))",
                  "    fn = segment.fn if key in segment.ready_keys else segment.compiled(s, key)",
                  "    if fn is None:", "        return False"]
        indent = "    "
        for j, (name, param, dtype, shape, resources) in enumerate(self.variables):
            env[f"resources{j}"], env[f"dtype{j}"], env[f"shape{j}"] = resources, dtype, shape
            lines += [f"{indent}state{j} = resources{j}.variable({name!r})",
                      f"{indent}with state{j}.lock:"]
            indent += "    "
            lines += [f"{indent}{param} = state{j}.value",
                      f"{indent}if {param} is None or {param}.dtype != dtype{j} or {param}.shape "
                      f"!= shape{j} or not {param}.flags.c_contiguous or state{j}.journaled:",
                      f"{indent}    return False"]
            args.append(param)
        args += [f"pool{j}" for j in range(len(self.pools))]
        env.update((f"pool{j}", p) for j, p in enumerate(self.pools))
        lines += [f"{indent}try:", f"{indent}    out = fn({', '.join(args)})",
                  f"{indent}except Exception as e:  # noqa: BLE001",
                  f"{indent}    return segment.failed(e)",
                  f"{indent}if not out[0]:  # a step would fail: its kernel says how",
                  f"{indent}    return False"]
        for m, slot in enumerate(self.outputs, start=1):
            lines.append(f"    s[{slot}] = out[{m}]")
            if slot in self.views:
                lines.append(f"    out[{m}].flags.writeable = False")
        lines += ["    segment.runs += 1", "    return True"]
        run, self.runner_code = load_python("\n".join(lines) + "\n", "run", env,
                                            "segment caller")
        return run

    def compiled(self, slots, key: tuple) -> Any:
        """The compiled function, once numba has it for these arguments (tiered: compiled
        in the background), their ``key`` then remembered; None until then."""
        if self.broken:
            return None
        if self.fn is None:
            try:
                self.fn = load_segment_source(self.source, self.env)
            except Exception as e:  # noqa: BLE001 - a generator bug: run the steps
                return self._give_up(e)
        args = [read_only(slots[s]) for s in self.args]
        args += [np.empty((0,) * len(shape), dtype) for _, _, dtype, shape, _ in self.variables]
        if not compiled_for(self.fn, (*args, *self.pools), asked_before=self.asked - 1):
            return None
        self.ready = True
        self.ready_keys.add(key)
        return self.fn

    def failed(self, err: Exception) -> bool:
        """The call raised, which a lowering never does: numba could not compile the
        segment, or its source is wrong. It never runs again; its steps run one by one."""
        self._give_up(err)
        return False

    def _give_up(self, err: Exception) -> None:
        self.broken, self.ready, self.fn, self._runner = True, False, None, None
        self.ready_keys.clear()
        log.warning("compiled segment of %s could not be compiled, its steps run one by one: "
                    "%s", ", ".join(self.names), err)


def _outside_views(found: SegmentPlan, steps: Sequence[Step]) -> set[int]:
    """The output slots of the segment's view steps (Reshape, ExpandDims...) that may view
    a value from outside it: a feed, a constant, a value the plan computed before. numba
    hands such views back writeable; the runner makes them read-only, so that a fetch
    copies them and no kernel writes into them. A view of a buffer the segment allocated
    is the plan's own and stays as it is."""
    producer = {slot: k for k, _ in found.lowered for slot in steps[k].outputs}

    def from_outside(slot: int) -> bool:
        while slot in producer:
            step = steps[producer[slot]]
            if step.fresh:
                return False
            slot = step.flat_inputs[0]  # a view step views its first input
        return True
    return {slot for k, _ in found.lowered if not steps[k].fresh
            for slot in steps[k].outputs if from_outside(steps[k].flat_inputs[0])}


_LOADED: dict[str, Any] = {}  # source -> its numba dispatcher, one per process
_LOADED_LOCK = threading.Lock()


def load_segment_source(source: str, env: dict, function: str = "segment",
                        what: str = "compiled segment (numba)") -> Any:
    """The dispatcher of a generated segment's (or compiled loop's) source
    (ops/codegen.py's ``load_numba``): one per process, so that plans with the same
    segment (a repeated block, a plan built again) share its compile."""
    with _LOADED_LOCK:
        fn = _LOADED.get(source)
        if fn is None:
            fn, _ = load_numba(source, function, env, what)
            _LOADED[source] = fn
        return fn


def build_segments(steps: Sequence[Step], preloaded: dict, fetch_slots: Sequence,
                   junk_slot: int | None) -> dict[int, tuple[Segment, SegmentPlan]]:
    """The plan's segments, by the position of their first step."""
    if not enabled():
        return {}
    built = {}
    for found in find_segments(steps, junk_slot):
        inside = {k for k, _ in found.lowered}
        read_after = {s for k, step in enumerate(steps) if k not in inside
                      for s in step.flat_inputs}
        read_after.update(s for s in fetch_slots if s is not None)
        built[found.first] = (Segment(found, steps, preloaded, read_after), found)
    return built
