"""Running graph functions: the branches and bodies of control-flow ops.

A control-flow kernel (ops/control_flow_ops.py) gets this runner as
``ctx.functions`` and asks it for a caller per ``gf.Function``: the function's graph
compiled once into a Plan of its own (fetches: its outputs and its stateful ops;
feeds: its inputs), on the Session's devices, with the Session's variables. A call
is one run of that plan, on the calling thread.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

from graphflow.functions import Function


class FunctionRunner:
    """Compiles each function once per plan that calls it, and runs it."""

    def __init__(self, devices, config, forward_counter, resources):
        self._args = (devices, config, forward_counter, resources)
        self._callers: dict[Function, Callable[[Sequence], list]] = {}
        self._lock = threading.Lock()

    def caller(self, function: Function) -> Callable[[Sequence], list]:
        """``call(values) -> outputs`` running ``function`` on ``values`` (its inputs)."""
        call = self._callers.get(function)
        if call is None:
            with self._lock:
                call = self._callers.get(function)
                if call is None:
                    call = self._callers[function] = self._compile(function)
        return call

    def _compile(self, function: Function) -> Callable[[Sequence], list]:
        from .executor import Plan
        devices, config, forward_counter, resources = self._args
        outputs = list(function.outputs)
        fetches = outputs + [op for op in function.control_outputs]
        plan = Plan(function.graph, fetches, list(function.inputs), devices, config,
                    forward_counter, resources)
        count = len(outputs)

        def call(values: Sequence) -> list:
            return plan.run(list(values))[:count]
        return call
