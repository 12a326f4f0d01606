"""The symbolic graph: Graph, Operation and Output.

A Graph only grows: an Operation is immutable once created, and it is always
created after its inputs, so insertion order is a topological order.
"""
from __future__ import annotations

import os
import re
import sys
import threading
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from .dtypes import DType
from .errors import InvalidArgumentError, NotFoundError
from .shapes import TensorShape

if TYPE_CHECKING:  # pragma: no cover
    from .registry import OpDef

_VALID_OP_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/>]*$")


class Output:
    """One output of an Operation: a symbolic handle on a tensor (``op:idx``)."""

    __slots__ = ("op", "index", "dtype", "shape")

    def __init__(self, op: "Operation", index: int, dtype: DType, shape: TensorShape):
        self.op = op
        self.index = index
        self.dtype = dtype
        self.shape = shape

    @property
    def name(self) -> str:
        return f"{self.op.name}:{self.index}"

    @property
    def graph(self) -> "Graph":
        return self.op.graph

    @property
    def device(self) -> str:
        return self.op.device

    def as_output(self) -> "Output":
        return self

    def consumers(self) -> list["Operation"]:
        """The operations that read this output, in creation order."""
        return [op for op in self.op.graph.operations() if any(i is self for i in op.inputs)]

    def __repr__(self) -> str:
        return f"<gf.Output '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    # -- Python operators, as tf.Tensor's in graph mode -------------------------------
    # ``x + y``, ``x[1:]``... build ops: graphflow.operators installs them when the op
    # set is loaded (as TensorFlow's math_ops installs tf.Tensor's), so the data model
    # knows no op.
    #: numpy hands ``array + x`` to ``x.__radd__`` instead of looping over the array.
    __array_priority__ = 100
    #: numpy's functions refuse an Output (``np.add(x, 1)``, ``np.sum(x)``: a TypeError)
    #: instead of treating it as an opaque object (``np.sum(x)`` returned ``x``), while
    #: ``array + x`` and ``np.float64(1) < x`` still reach the Output's operators.
    __array_ufunc__ = None

    def __bool__(self):
        raise TypeError(
            f"Using a graphflow Output as a Python bool is not allowed: {self.name} has a "
            f"value only when a Session runs it. Build the condition into the graph "
            f"(e.g. scope.select_v2), or compare Outputs with `is`.")

    def __iter__(self):
        raise TypeError(f"Iterating over a graphflow Output ({self.name}) is not allowed: it "
                        f"has a value only when a Session runs it.")


class Operation:
    """A node: its type, name, inputs, control inputs, attrs, requested device, outputs."""

    __slots__ = ("graph", "name", "op_def", "inputs", "arg_lengths", "control_inputs",
                 "attrs", "device", "outputs", "site", "_position", "_const_cache", "__weakref__")

    def __init__(self, graph: "Graph", name: str, op_def: "OpDef", inputs: Iterable[Output],
                 arg_lengths: tuple[int, ...], control_inputs: Iterable["Operation"],
                 attrs: Mapping[str, Any], device: str, site: str):
        self.graph = graph
        self.name = name
        self.op_def = op_def
        self.inputs = tuple(inputs)
        self.arg_lengths = arg_lengths  # number of flat inputs behind each declared input arg
        self.control_inputs = tuple(control_inputs)
        # a plan's copy shares its original's (read-only) attrs
        self.attrs = attrs if type(attrs) is MappingProxyType else MappingProxyType(dict(attrs))
        self.device = device
        self.outputs: tuple[Output, ...] = ()
        self.site = site
        self._position = -1
        self._const_cache: dict[int, Any] = {}

    @classmethod
    def stand_in(cls, original: "Operation", op_def: "OpDef", inputs: Iterable[Output],
                 arg_lengths: tuple[int, ...], attrs: Mapping[str, Any],
                 outputs: Iterable[tuple[DType, TensorShape]], *, name: str | None = None,
                 control_inputs: Iterable["Operation"] = ()) -> "PlanNode":
        """A plan-only node standing for ``original`` (a rewrite's product): outside the
        graph's registry of names, on ``original``'s device, with its site and its
        position in the creation order, so that a plan sorts it where ``original`` was."""
        node = PlanNode(original.graph, name or original.name, op_def, inputs, arg_lengths,
                        control_inputs, attrs, original.device, original.site)
        node.outputs = tuple(Output(node, k, dt, sh) for k, (dt, sh) in enumerate(outputs))
        node._position = original._position
        node._frozen = True
        return node

    @property
    def type(self) -> str:
        return self.op_def.name

    @property
    def position(self) -> int:
        """Where this op stands in its graph's creation order: every input of an op comes
        before it (-1 until the op is added to a graph)."""
        return self._position

    def output(self, index: int = 0) -> Output:
        """Output ``index`` (negative counts from the end, as a list's index)."""
        if not isinstance(index, (int, np.integer)) or isinstance(index, (bool, np.bool_)):
            raise TypeError(f"An output index of '{self.name}' must be an int, got "
                            f"{type(index).__name__} {index!r}")
        n = len(self.outputs)
        if not -n <= index < n:
            raise NotFoundError(f"Operation '{self.name}' ({self.type}) has {n} outputs; there "
                                f"is no output {index}")
        return self.outputs[int(index)]

    def get_attr(self, name: str) -> Any:
        try:
            return self.attrs[name]
        except KeyError:
            raise NotFoundError(f"Operation '{self.name}' has no attr named '{name}'") from None

    def grouped_inputs(self) -> list:
        """Inputs per declared argument: an Output, or a list for list arguments."""
        groups, start = [], 0
        for spec, n in zip(self.op_def.inputs, self.arg_lengths):
            chunk = self.inputs[start:start + n]
            groups.append(list(chunk) if spec.is_list else chunk[0])
            start += n
        return groups

    def __repr__(self) -> str:
        return f"<gf.Operation '{self.name}' type={self.type}>"


class PlanNode(Operation):
    """A node only a plan knows (runtime/plan_ir.py): a rewrite's product, or a copy of a
    graph node that reads other inputs. It is outside its graph's registry of names and
    immutable: a pass that wants another node makes one (``Operation.stand_in``)."""

    __slots__ = ("_frozen",)

    def __init__(self, *args) -> None:
        object.__setattr__(self, "_frozen", False)  # set first: the check below is a read
        super().__init__(*args)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise AttributeError(f"plan node '{self.name}' is immutable: a pass makes a new "
                                 f"node instead of changing one (runtime/plan_ir.py)")
        object.__setattr__(self, name, value)


class Graph:
    """A growing set of operations with unique names; safe to build from many threads."""

    def __init__(self) -> None:
        self._ops: list[Operation] = []
        self._by_name: dict[str, Operation] = {}
        self._used_names: dict[str, int] = {}
        self._lock = threading.RLock()
        #: The graph-level random seed (TF's ``Graph.seed``, ``tf.compat.v1.set_random_seed``):
        #: None, or an int that, with each random op's own ``seed=``, fixes the sequence the
        #: op draws in every Session (see ops/random_ops.py, ``get_seed``). Read when a random
        #: op is built, so set it before building them.
        self.seed: int | None = None

    # -- naming ------------------------------------------------------------
    def unique_name(self, name: str) -> str:
        """Reserve and return ``name``, or ``name_1``, ``name_2``... if taken."""
        if not isinstance(name, str):
            raise TypeError(f"A node name must be a string, got {type(name).__name__} {name!r}")
        if not _VALID_OP_NAME.match(name):
            raise InvalidArgumentError(f"'{name}' is not a valid node name")
        with self._lock:
            if name not in self._used_names:
                self._used_names[name] = 1
                return name
            i = self._used_names[name]
            while f"{name}_{i}" in self._used_names:
                i += 1
            self._used_names[name] = i + 1
            unique = f"{name}_{i}"
            self._used_names[unique] = 1
            return unique

    # -- building ----------------------------------------------------------
    def _add(self, op: Operation, dtypes: list[DType], shapes: list[TensorShape]) -> Operation:
        op.outputs = tuple(Output(op, i, dt, sh) for i, (dt, sh) in enumerate(zip(dtypes, shapes)))
        with self._lock:
            if op.name in self._by_name:
                raise InvalidArgumentError(f"Duplicate node name in graph: '{op.name}'")
            op._position = len(self._ops)
            self._ops.append(op)
            self._by_name[op.name] = op
        return op

    # -- queries -----------------------------------------------------------
    def operations(self) -> list[Operation]:
        with self._lock:
            return list(self._ops)

    def operation(self, name: str) -> Operation:
        """The Operation called ``name``."""
        if not isinstance(name, str):
            raise TypeError(f"An operation name must be a string, got {type(name).__name__} "
                            f"{name!r}")
        try:
            return self._by_name[name]
        except KeyError:
            raise NotFoundError(f"The name '{name}' refers to an Operation not in the graph.") from None

    def output(self, name: str) -> Output:
        """The Output named ``op:idx`` (``op`` alone means ``op:0``)."""
        if not isinstance(name, str):
            raise TypeError(f"An output name must be a string, got {type(name).__name__} {name!r}")
        op_name, colon, idx = name.partition(":")
        if colon and not (idx.isascii() and idx.isdigit()):
            raise InvalidArgumentError(
                f"The name '{name}' looks like an output name, but is not a valid one: output "
                f"names have the form '<op_name>:<output_index>'")
        op = self.operation(op_name)
        index = int(idx) if idx else 0
        if not 0 <= index < len(op.outputs):
            raise NotFoundError(f"The name '{name}' refers to an output that does not exist: "
                                f"operation '{op_name}' has {len(op.outputs)} outputs.")
        return op.outputs[index]

    def __len__(self) -> int:
        return len(self._ops)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def as_graph_def(self) -> dict:
        """A plain, versioned, JSON-ready description (see graphflow.serialization)."""
        from .serialization import as_graph_def
        return as_graph_def(self)

    def save(self, path: "str | os.PathLike") -> None:
        """Write the graph as GraphDef JSON; ``gf.load_graph(path)`` reads it back."""
        from .serialization import save
        save(self, path)

    # ``to_dot(**options)``, Graphviz DOT text of the graph, is installed by
    # graphflow.tools.visualize, a tool (``fused=True`` asks the runtime's planner).

    def to_networkx(self):
        """A networkx.DiGraph: one node per op; data edges (kind='data', with the
        output and input indices) and control edges (kind='control')."""
        import networkx as nx

        g = nx.DiGraph()
        for op in self.operations():
            g.add_node(op.name, type=op.type, device=op.device,
                       dtypes=[o.dtype.name for o in op.outputs],
                       shapes=[str(o.shape) for o in op.outputs])
        for op in self.operations():
            for in_index, src in enumerate(op.inputs):
                if g.has_edge(src.op.name, op.name):
                    g.edges[src.op.name, op.name]["tensors"].append((src.index, in_index))
                else:
                    g.add_edge(src.op.name, op.name, kind="data", tensors=[(src.index, in_index)])
            for ctrl in op.control_inputs:
                if not g.has_edge(ctrl.name, op.name):
                    g.add_edge(ctrl.name, op.name, kind="control", tensors=[])
        return g


# -- creation sites -----------------------------------------------------------
_PACKAGE_DIRS: tuple[str, ...] | None = None


def _package_dirs() -> tuple[str, ...]:
    global _PACKAGE_DIRS
    if _PACKAGE_DIRS is None:
        dirs = {os.path.dirname(os.path.abspath(__file__))}
        for name in ("graphflow.ops", "graphflow.runtime"):
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__file__", None):
                dirs.add(os.path.dirname(os.path.abspath(module.__file__)))
        _PACKAGE_DIRS = tuple(d + os.sep for d in dirs)
    return _PACKAGE_DIRS


def user_site() -> str:
    """``file:line`` of the first frame outside graphflow: where the user built the op."""
    dirs = _package_dirs()
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(dirs) and not filename.startswith("<frozen"):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"
