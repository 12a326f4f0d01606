"""Graph functions: the branches and bodies of control-flow ops (TF 2's FuncGraph).

``trace`` calls a Python function on placeholders standing for its arguments, with
every op it builds redirected into a graph of its own (a :class:`FuncGraph`): an op
built through any scope of an enclosing graph lands in the innermost graph being
traced on this thread, and a tensor of an enclosing graph used there is *captured*
(a placeholder inside, fed by the control-flow op with the outer value). Stateful
ops inside run in the order they were built (TF 2's automatic control dependencies).

A :class:`Function` is the finished value: its graph, the placeholders of its
inputs (arguments, then captures), the outputs it returns, and its stateful ops
(which run whether or not an output needs them). Control-flow ops hold Functions
as attrs (``then_branch``, ``body``...); the runtime runs one as a plan of its own
(runtime/functions.py).
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .dtypes import DType
from .errors import InvalidArgumentError
from .graph import Graph, Operation, Output
from .shapes import TensorShape

if TYPE_CHECKING:  # pragma: no cover
    from .registry import ArgSpec, OpDef
    from .scope import Scope

_tracing = threading.local()
_ids = itertools.count()


class FuncGraph(Graph):
    """The graph of one function being traced (or traced): it knows the graph it was
    traced in, and the outer tensors it captured."""

    def __init__(self, name: str, outer: Graph):
        super().__init__()
        self.name = name
        self.outer = outer
        self.seed = outer.seed
        self.captures: dict[Output, Output] = {}    # outer tensor -> its placeholder here
        self.captured_from: dict[Output, Output] = {}  # and back
        #: an argument holding a variable handle -> the handle it is called with (a gradient
        #: function's copy of a body's handle input): its variable's dtype and shape
        self.handle_sources: dict[Output, Output] = {}
        self.outer_controls: list[Operation] = []   # outer ops the traced code waited on
        self.stateful_ops: list[Operation] = []     # in creation order

    def encloses(self, graph: Graph) -> bool:
        """Whether ``graph`` is this graph or one it was traced in."""
        g: Graph | None = self
        while g is not None:
            if g is graph:
                return True
            g = getattr(g, "outer", None)
        return False

    def __repr__(self) -> str:
        return f"<gf.FuncGraph '{self.name}' ({len(self)} ops)>"


def active_graph(graph: Graph) -> Graph:
    """Where an op built in ``graph`` goes: the innermost function being traced on this
    thread inside ``graph``, else ``graph`` itself."""
    stack = getattr(_tracing, "stack", None)
    if stack:
        top = stack[-1]
        if top is not graph and top.encloses(graph):
            return top
    return graph


def capture(graph: Graph, output: Output, op_def: "OpDef | None" = None,
            spec: "ArgSpec | None" = None) -> Output:
    """``output`` of an enclosing graph as a tensor of ``graph``: the placeholder that
    stands for it there (made once per tensor), through every graph in between."""
    if not isinstance(graph, FuncGraph) or not graph.encloses(output.graph):
        what = f"Input '{spec.name}' of '{op_def.name}' Op" if spec is not None else "A tensor"
        raise InvalidArgumentError(f"{what} ({output.name}) must be from the same graph as "
                                   f"the op")
    if output.graph is not graph.outer:
        output = capture(graph.outer, output, op_def, spec)
    inner = graph.captures.get(output)
    if inner is None:
        from .scope import Scope
        with _Tracing(graph):
            inner = Scope(graph).placeholder(output.dtype, shape=output.shape,
                                             name="capture/" + output.op.name.replace("/", "_"))
        graph.captures[output] = inner
        graph.captured_from[inner] = output
    return inner


def outer_source(output: Output) -> Output:
    """The tensor a capture placeholder stands for (through every enclosing function;
    for a handle argument of a gradient function, the handle it copies), else ``output``
    itself: what a shape function may look through (a variable's handle)."""
    while True:
        graph = output.graph
        source = getattr(graph, "captured_from", {}).get(output)
        if source is None:
            source = getattr(graph, "handle_sources", {}).get(output)
        if source is None:
            return output
        output = source


def note_built(graph: Graph, op: Operation) -> None:
    """Bookkeeping for an op just added to a function's graph: its stateful ops, in
    order."""
    if isinstance(graph, FuncGraph) and op.op_def.stateful:
        graph.stateful_ops.append(op)


def auto_control_inputs(graph: Graph, op_def: "OpDef", controls: list) -> list:
    """The control inputs of a new op of ``graph``: a stateful op of a function waits on
    the stateful op built before it (TF 2's automatic control dependencies); an outer
    op waited on is waited on by the control-flow op instead."""
    if not isinstance(graph, FuncGraph):
        return controls
    inner = []
    for c in controls:
        if c.graph is graph:
            inner.append(c)
        elif c not in graph.outer_controls:
            graph.outer_controls.append(c)
    if op_def.stateful and graph.stateful_ops and graph.stateful_ops[-1] not in inner:
        inner.append(graph.stateful_ops[-1])
    return inner


@dataclass(frozen=True, eq=False)
class Function:
    """A traced graph function: ``outputs = f(*arguments, *captured)``."""

    name: str
    graph: FuncGraph
    arguments: tuple[Output, ...]   # placeholders of the explicit arguments
    captured: tuple[Output, ...]    # outer tensors, fed to the capture placeholders
    outputs: tuple[Output, ...]

    @property
    def inputs(self) -> tuple[Output, ...]:
        """Every placeholder, as the op feeds them: the arguments, then the captures."""
        return self.arguments + tuple(self.graph.captures[c] for c in self.captured)

    @property
    def control_outputs(self) -> tuple[Operation, ...]:
        """The stateful ops: they run on every call, needed by an output or not."""
        return tuple(self.graph.stateful_ops)

    @property
    def stateful(self) -> bool:
        return bool(self.graph.stateful_ops)

    @property
    def input_types(self) -> tuple[DType, ...]:
        return tuple(p.dtype for p in self.inputs)

    @property
    def output_types(self) -> tuple[DType, ...]:
        return tuple(o.dtype for o in self.outputs)

    @property
    def output_shapes(self) -> tuple[TensorShape, ...]:
        return tuple(o.shape for o in self.outputs)

    def __repr__(self) -> str:
        ins = ", ".join(t.name for t in self.input_types)
        outs = ", ".join(t.name for t in self.output_types)
        return f"<gf.Function '{self.name}' ({ins}) -> ({outs})>"


class _Tracing:
    """While active, ops built on this thread in ``graph``'s enclosing graphs go to it."""

    def __init__(self, graph: FuncGraph):
        self.graph = graph

    def __enter__(self) -> FuncGraph:
        stack = getattr(_tracing, "stack", None)
        if stack is None:
            stack = _tracing.stack = []
        stack.append(self.graph)
        return self.graph

    def __exit__(self, *exc) -> None:
        _tracing.stack.pop()


def new_func_graph(scope: "Scope", name: str) -> FuncGraph:
    return FuncGraph(f"{name}_{next(_ids)}", active_graph(scope.graph))


def trace(graph: FuncGraph, fn: Callable, arguments: Sequence[Output]) -> Any:
    """``fn(*arguments)`` with every op it builds going to ``graph``."""
    with _Tracing(graph):
        return fn(*arguments)


def tracing(graph: FuncGraph) -> _Tracing:
    """A context in which ops go to ``graph`` (for code that builds into a function
    after its trace: outputs converted to tensors, extra capture placeholders)."""
    return _Tracing(graph)


def arguments_like(graph: FuncGraph, specs: Sequence[tuple[DType, TensorShape]],
                   prefix: str = "arg") -> list[Output]:
    """One placeholder per (dtype, shape) in ``graph``: a function's arguments."""
    from .scope import Scope
    scope = Scope(graph)
    return [scope.placeholder(dtype, shape=shape, name=f"{prefix}{k}")
            for k, (dtype, shape) in enumerate(specs)]


def finish(graph: FuncGraph, arguments: Sequence[Output], outputs: Sequence[Output],
           captured: Sequence[Output] | None = None) -> Function:
    """The Function of a traced graph. ``captured`` orders the outer tensors its inputs
    end with (default: in capture order); one it never used gets a placeholder too,
    so that functions called with the same inputs (both branches, a loop's cond and
    body) take the same list."""
    if captured is None:
        captured = list(graph.captures)
    for c in captured:
        if c not in graph.captures:
            capture(graph, c)
    for o in outputs:
        if o.graph is not graph:
            raise InvalidArgumentError(f"Output {o.name} of function '{graph.name}' is not one "
                                       f"of its tensors")
    return Function(graph.name, graph, tuple(arguments), tuple(captured), tuple(outputs))


def union_captures(*graphs: FuncGraph) -> list[Output]:
    """The outer tensors any of ``graphs`` captured, in first-capture order."""
    seen: dict[Output, None] = {}
    for g in graphs:
        for c in g.captures:
            seen.setdefault(c)
    return list(seen)


__all__ = ["FuncGraph", "Function", "active_graph", "capture", "trace", "tracing", "finish",
           "arguments_like", "new_func_graph", "union_captures"]
