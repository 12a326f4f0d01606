"""Running graph functions: the branches and bodies of control-flow ops.

A control-flow kernel (ops/control_flow_ops.py) gets this runner as
``ctx.functions`` and asks it for a caller per ``gf.Function``: the function's graph
compiled once into a Plan of its own (fetches: its outputs and its stateful ops;
feeds: its inputs), on the Session's devices, with the Session's variables. A call
is one run of that plan, on the calling thread. A While whose cond and body are all
lowered runs as one compiled loop instead (runtime/compiled_loops.py).
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

from graphflow.functions import Function

from .compiled_loops import CompiledLoop, compilable


class FunctionRunner:
    """Compiles each function once per plan that calls it, and runs it."""

    def __init__(self, devices, config, forward_counter, resources):
        self._args = (devices, config, forward_counter, resources)
        self._callers: dict[Function, Callable[[Sequence], list]] = {}
        self._plans: dict[Function, object] = {}
        self._loops: dict[tuple[Function, Function], CompiledLoop | None] = {}
        self._lock = threading.RLock()

    def caller(self, function: Function) -> Callable[[Sequence], list]:
        """``call(values) -> outputs`` running ``function`` on ``values`` (its inputs)."""
        call = self._callers.get(function)
        if call is None:
            with self._lock:
                call = self._callers.get(function)
                if call is None:
                    call = self._callers[function] = self._compile(function)
        return call

    def compiled_loop(self, cond: Function, body: Function) -> CompiledLoop | None:
        """The loop of ``cond`` and ``body`` as one compiled function, when every step of
        both is lowered; None otherwise."""
        key = (cond, body)
        try:
            return self._loops[key]
        except KeyError:
            pass
        with self._lock:
            if key not in self._loops:
                self.caller(cond), self.caller(body)
                parts = compilable(self._plans[cond], self._plans[body], cond, body)
                self._loops[key] = None if parts is None else CompiledLoop(*parts, body)
            return self._loops[key]

    def compiled_loops(self) -> list[CompiledLoop]:
        """The compiled loops made so far, of this plan's loops and of the loops nested
        in its functions."""
        with self._lock:
            found = [loop for loop in self._loops.values() if loop is not None]
            plans = list(self._plans.values())
        for plan in plans:
            found += plan.functions.compiled_loops()
        return found

    def _compile(self, function: Function) -> Callable[[Sequence], list]:
        from .executor import Plan
        devices, config, forward_counter, resources = self._args
        outputs = list(function.outputs)
        fetches = outputs + [op for op in function.control_outputs]
        plan = Plan(function.graph, fetches, list(function.inputs), devices, config,
                    forward_counter, resources)
        self._plans[function] = plan
        count = len(outputs)

        def call(values: Sequence) -> list:
            return plan.run(list(values))[:count]
        return call
