"""Lowered steps written out as the lines of one generated numba function.

Both compiled segments (runtime/segments.py) and compiled while loops
(runtime/compiled_loops.py) turn a run of steps with a lowering (graphflow/lowering.py)
into numba source. :class:`SourceWriter` is what they share: it gives every value a
local name in order of appearance (so that steps of one structure have one source: one
compile, one cache entry), packs the plan's constants into one read-only array per
dtype, binds the compiled functions the lines call, and formats each step's lines.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from graphflow.lowering import Deferred, Lowering, shape_literal

from ..ops.elementwise_table import COMPILED_DTYPES, type_aliases
from ..ops.jit import jittable
from ..ops.variable_ops import handle_attrs
from .steps import Step


class NotLowerable(Exception):
    """The steps cannot be written out (a constant numba does not take)."""


class SourceWriter:
    """The names, constants and functions of one generated function."""

    def __init__(self):
        self.constants: dict[str, np.ndarray] = {}   # name -> value (equal ones share)
        self._by_value: dict[tuple, str] = {}
        self.variables: dict[str, tuple] = {}        # name -> (param, dtype, shape, resources)
        self.env: dict[str, Any] = {}                # global name -> compiled function
        self._global_of: dict[int, str] = {}
        self.bindings: list[str] = []                # "# g0 = module.function" lines
        self.users: dict[str, list[str]] = {}        # global name -> the nodes calling it
        self._names = 0
        self._steps = 0

    def fresh(self) -> str:
        """A new local name: ``v0``, ``v1``..."""
        name = f"v{self._names}"
        self._names += 1
        return name

    def constant(self, value) -> str:
        """The local name of a constant (equal constants share one)."""
        c = np.asarray(value)
        key = (c.dtype.str, c.shape, c.tobytes()) if c.dtype != object else None
        name = self._by_value.get(key) if key is not None else None
        if name is None:
            name = self.fresh()
            self.constants[name] = c
            if key is not None:
                self._by_value[key] = name
        return name

    def step_lines(self, step: Step, lowered: Lowering, name_of: Callable[[int], str]) -> list[str]:
        """``step``'s lines, its inputs and outputs named by ``name_of(slot)``."""
        names: dict[str, str] = {"t": f"s{self._steps}_", "ok": "ok"}
        self._steps += 1
        for i, slot in enumerate(step.flat_inputs):
            if f"{{i{i}}}" not in lowered.source:
                continue  # an input the lowering does not read (a static shape)
            names[f"i{i}"] = self._variable(step, i) if i in lowered.variables else name_of(slot)
        for m, slot in enumerate(step.outputs):
            names[f"o{m}"] = name_of(slot)
        for key, fn in lowered.functions.items():
            names[key] = self._function(fn)
            users = self.users.setdefault(names[key], [])
            users += [n for n in step.op.attrs.get("replaces") or (step.op.name,)
                      if n not in users]
        return lowered.source.format(**names).splitlines()

    def _variable(self, step: Step, i: int) -> str:
        dtype, shape, name = handle_attrs(step.values[i])
        if name not in self.variables:
            self.variables[name] = (f"var{len(self.variables)}", np.dtype(dtype.as_numpy_dtype),
                                    tuple(shape.as_list()), step.ctx.resources)
        return self.variables[name][0]

    def _function(self, fn) -> str:
        if isinstance(fn, Deferred):
            fn = fn.load()
        name = self._global_of.get(id(fn))
        if name is None:
            name = self._global_of[id(fn)] = f"g{len(self._global_of)}"
            self.env[name] = fn
            py = getattr(fn, "py_func", fn)
            self.bindings.append(f"# {name} = {py.__module__}:{py.__qualname__}")
        return name

    def pools(self) -> tuple[list[np.ndarray], list[str]]:
        """The constants packed into one read-only array per dtype, and the lines that
        unpack them (``name = pool{j}[a:b].reshape(shape)``)."""
        if any(not jittable(c.dtype) for c in self.constants.values()):
            raise NotLowerable("a constant numba does not take")
        by_dtype: dict[np.dtype, list[str]] = {}
        for name, c in self.constants.items():
            by_dtype.setdefault(c.dtype, []).append(name)
        pools, lines = [], []
        for j, (dtype, names) in enumerate(sorted(by_dtype.items(), key=lambda kv: str(kv[0]))):
            pool = np.concatenate([self.constants[name].reshape(-1) for name in names])
            pool.flags.writeable = False
            pools.append(pool)
            offset = 0
            for name in names:
                n = self.constants[name].size
                lines.append(f"{name} = pool{j}[{offset}:{offset + n}]"
                             f".reshape({shape_literal(self.constants[name].shape)})")
                offset += n
        return pools, lines

    def module(self, what: str, function: str, params: Sequence[str],
               body: Sequence[str]) -> str:
        """The generated module: a docstring saying ``what`` made it, the imports and
        bindings, and ``@kernel def function(params): body``."""
        lines = [f'"""{what} generated by graphflow."""',
                 "import numpy as np", "import numpy as _np",
                 "from graphflow.ops.jit import kernel", *self.bindings, "",
                 *type_aliases(COMPILED_DTYPES), "", "",
                 "@kernel", f"def {function}({', '.join(params)}):",
                 *(f"    {line}" for line in body)]
        return "\n".join(lines) + "\n"
