"""Compiled while loops: a While whose cond and body are all lowered runs as one numba loop.

A While's kernel (ops/control_flow_ops.py) runs its cond and body as two plans, a
Python call each per iteration: a few microseconds of machinery around a small body's
arithmetic. Where every step of both plans has a lowering (graphflow/lowering.py, the
compiled segments' machinery), the two are written out as one generated numba function
that runs the whole loop, as XLA compiles ``lax.while_loop``::

    def loop(loop_limit, x0, x1, ..., pool0, ...):   # the loop variables, the constants
        ok, loop_done, loop_n = True, False, 0
        while loop_n < loop_limit:
            <the cond's lines>                        # reading x0, x1, ...
            if not ok: break
            if not v3.reshape(-1)[0]: loop_done = True; break
            <the body's lines>
            if not ok: break
            x1, x2 = v7, v9                            # the body's results
            loop_n += 1
        return ok, loop_done, loop_n, x0, x1, ...

- **Which loops.** Stateless cond and body (no variable, no random op, nothing with
  an effect: a declined loop is run again from its start), every step a feed's
  pass-through or lowered (``lowering_of(step, in_loop=True)``: scalar arithmetic
  lowers there), a scalar predicate, every body result of a static shape.
- **Tiered.** As a segment: its source is generated on the loop's
  ``COMPILE_AFTER_CALLS``-th call and compiled in the background; until then, and
  whenever it declines, the loop runs plan call by plan call.
- **Errors.** A lowered step never raises; where its kernel would, it sets ``ok``
  False, the compiled loop declines, and the loop runs again from its start step by
  step, whose kernel reports the error in its words, naming the node and iteration.
- **Ctrl-C.** The compiled loop runs :data:`CHUNK_ITERATIONS` iterations per call and
  returns to Python between chunks, so a loop that never ends can be interrupted.

``GRAPHFLOW_SEGMENTS=0`` turns compiled loops off with the segments.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..ops.codegen import GeneratedCode, called_code, numba_code
from ..ops.tiering import COMPILE_AFTER_CALLS, Tiered
from .lowered_source import NotLowerable, SourceWriter
from .segments import enabled as segments_enabled
from .segments import load_segment_source, lowering_of
from .steps import CopyStep, KernelStep

log = logging.getLogger("graphflow.segments")

#: Iterations one compiled call runs before returning to Python (signals, Ctrl-C).
CHUNK_ITERATIONS = 1 << 16


@dataclass(frozen=True)
class _Lowered:
    """One function's plan as lowered steps: (step, lowering) in plan order, the copies
    that pass a feed through (destination slot -> source slot)."""

    plan: Any
    lowered: tuple
    aliases: dict


def _lowered_plan(plan) -> _Lowered | None:
    """The plan's steps as lowered steps, or None when one is not lowered."""
    lowered, aliases = [], {}
    for step in plan.steps:
        if isinstance(step, CopyStep):
            if step.source is not None or step.device.device_type != "cpu":
                return None
            aliases[step.outputs[0]] = step.inputs[0]
            continue
        lowering = lowering_of(step, in_loop=True) if isinstance(step, KernelStep) else None
        if lowering is None or lowering.variables or lowering.writes:
            return None
        lowered.append((step, lowering))
    return _Lowered(plan, tuple(lowered), aliases)


def compilable(cond_plan, body_plan, cond_function, body_function) \
        -> tuple[_Lowered, _Lowered] | None:
    """The cond's and body's plans lowered, when the loop can be compiled."""
    if not segments_enabled() or cond_function.stateful or body_function.stateful:
        return None
    if any(not t.shape.is_fully_defined() for t in (*body_function.outputs, *body_function.inputs)):
        return None
    if len(cond_function.outputs) != 1 or cond_function.outputs[0].shape.rank != 0 \
            or None in cond_plan.fetch_slots or None in body_plan.fetch_slots:
        return None
    cond, body = _lowered_plan(cond_plan), _lowered_plan(body_plan)
    if cond is None or body is None:
        return None
    return cond, body


class CompiledLoop:
    """One While's cond and body as a compiled loop: ``run(values)`` gives the final
    loop variables, or None (not compiled yet, declined: run the loop step by step)."""

    def __init__(self, cond: _Lowered, body: _Lowered, function):
        self._parts = (cond, body)
        self.node_names = [step.op.name for part in (cond, body) for step, _ in part.lowered]
        self.shapes = [tuple(f.shape.as_list()) for f in function.inputs]
        self.dtypes = [np.dtype(f.dtype.as_numpy_dtype) for f in function.inputs]
        self.source = None
        self.env: dict = {}    # the generated function's globals, once generated
        self.users: dict = {}  # global name -> the nodes whose lines call it
        self.fn = None
        self.asked = 0
        self.tiered: Tiered | None = None  # fn, and the argument types it is compiled for
        self.runs = 0      # calls it ran compiled
        self.broken = False

    @property
    def code(self) -> list[GeneratedCode]:
        """Its generated numba function, once generated, and the generated kernels it
        calls (fused regions), once loaded."""
        return numba_code("compiled loop (numba)", self.source, self.fn, self.node_names) \
            + called_code(self.env, self.users)

    def run(self, values: Sequence) -> list | None:
        """The loop's results, computed compiled, or None."""
        if self.broken:
            return None
        self.asked += 1
        if self.source is None:
            if self.asked < COMPILE_AFTER_CALLS:
                return None
            try:
                self._generate(*self._parts)
            except NotLowerable:
                self.broken = True
                return None
            except Exception as e:  # noqa: BLE001 - a generator bug: run it step by step
                return self._give_up(e)
        args = self._arguments(values)
        if args is None:
            return None
        return self._run_chunks(args)

    def _arguments(self, values: Sequence) -> list | None:
        """The loop variables as the compiled loop takes them: the ones the body changes
        as C-contiguous arrays of their own (one type across iterations and calls)."""
        args = []
        for k, v in enumerate(values):
            a = np.array(v, order="C") if self.changing[k] else np.asarray(v)
            if a.shape != self.shapes[k] or a.dtype != self.dtypes[k]:
                return None  # the step-by-step loop says what is wrong
            args.append(a)
        return args

    def _run_chunks(self, args: list) -> list | None:
        if self.fn is None:
            try:
                self.fn = load_segment_source(self.source, self.env, "loop",
                                              "compiled loop (numba)")
            except Exception as e:  # noqa: BLE001
                return self._give_up(e)
            self.tiered = Tiered(self.fn)
        limit = np.int64(CHUNK_ITERATIONS)
        if not self.tiered.ready(limit, *args, *self.pools, asked_before=self.asked - 1):
            return None
        while True:
            try:
                ok, done, _, *args = self.fn(limit, *args, *self.pools)
            except Exception as e:  # noqa: BLE001 - numba could not compile it
                return self._give_up(e)
            if not ok:
                return None  # a step would fail: the step-by-step loop says how
            if done:
                self.runs += 1
                return args

    def _give_up(self, err: Exception) -> None:
        self.broken, self.fn, self.tiered = True, None, None
        log.warning("compiled loop of %s could not be compiled, it runs step by step: %s",
                    ", ".join(self.node_names), err)
        return None

    def _generate(self, cond: _Lowered, body: _Lowered) -> None:
        writer = SourceWriter()
        n_vars = len(self.shapes)
        variables = [f"x{k}" for k in range(n_vars)]
        cond_lines, cond_names = _function_lines(writer, cond, variables)
        body_lines, body_names = _function_lines(writer, body, variables)
        predicate = cond_names(cond.plan.fetch_slots[0])
        results = [body_names(slot) for slot in body.plan.fetch_slots[:n_vars]]
        fresh = {name for step, _ in body.lowered if step.fresh
                 for name in map(body_names, step.outputs)}
        self.changing = [r != x for r, x in zip(results, variables)]
        updated = [(x, r if r in fresh else f"{r}.copy()")
                   for x, r, changing in zip(variables, results, self.changing) if changing]
        self.pools, unpack = writer.pools()
        assign = [f"{', '.join(x for x, _ in updated)} = {', '.join(r for _, r in updated)}"] \
            if updated else []
        lines = ["ok = True", "loop_done = False", "loop_n = 0", *unpack,
                 "while loop_n < loop_limit:",
                 *(f"    {line}" for line in cond_lines),
                 "    if not ok:", "        break",
                 f"    if not {predicate}.reshape(-1)[0]:", "        loop_done = True",
                 "        break",
                 *(f"    {line}" for line in body_lines),
                 "    if not ok:", "        break",
                 *(f"    {line}" for line in assign),
                 "    loop_n += 1",
                 f"return ok, loop_done, loop_n, {''.join(f'{x}, ' for x in variables)}"]
        params = ["loop_limit", *variables, *(f"pool{j}" for j in range(len(self.pools)))]
        self.source = writer.module("A compiled while loop (runtime/compiled_loops.py)", "loop",
                                    params, lines)
        self.env, self.users = writer.env, writer.users


def _function_lines(writer: SourceWriter, part: _Lowered, variables: list[str]):
    """A function plan's lines, its feeds named by the loop variables; and the naming."""
    plan = part.plan
    local: dict[int, str] = dict(zip(plan.feed_slots, variables))

    def name_of(slot: int) -> str:
        slot = part.aliases.get(slot, slot)
        name = local.get(slot)
        if name is None:
            if slot in plan.preloaded:
                name = writer.constant(plan.preloaded[slot])
            else:
                name = writer.fresh()
            local[slot] = name
        return name

    lines = [line for step, lowering in part.lowered
             for line in writer.step_lines(step, lowering, name_of)]
    return lines, name_of
