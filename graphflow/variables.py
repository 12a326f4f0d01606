"""gf.Variable: a TensorFlow 1.x resource variable, built from ops/variable_ops.py.

A Variable is a handful of graph nodes around one ``VarHandleOp`` named after
it: ``<name>/Initializer`` (an AssignVariableOp of the initial value) and
``<name>/Read`` (the snapshot that ``as_output()`` gives, so a Variable is an
Operand). Its value lives in each Session (runtime/resources.py), so a graph
saved and loaded keeps its variables (``gf.global_variables(graph)`` finds them
again), while their values travel in checkpoints (``gf.train.Saver``).

Ordering: within a run, ops are ordered by data and control dependencies only.
An update's ``read_value=True`` result is an ``UnreadVariable`` (TensorFlow's
``_UnreadVariable``): its ``.op`` is the update itself, and it reads the value
after the update (a read with a control dependency on it) only where it is used
as a tensor, so running ``v.scatter_nd_add(i, u).op`` never copies the table.
Reads elsewhere in the same run that do not depend on the update may see the
value before or after it, as in TensorFlow 1.x.
"""
from __future__ import annotations

from typing import Any

from .builder import as_operand
from .dtypes import DType, as_dtype
from .errors import InvalidArgumentError
from .functions import active_graph
from .graph import Graph, Operation, Output
from .shapes import TensorShape


class Variable:
    """A variable of a graph: ``read()``, ``initializer``, in-place updates."""

    __slots__ = ("handle", "initializer", "_read", "_scope")

    def __init__(self, handle: Output, initializer: Operation | None, read: Output):
        self.handle = handle
        self.initializer = initializer
        self._read = read
        from .scope import Scope
        self._scope = Scope(handle.graph).beside(handle)

    @classmethod
    def create(cls, scope, initial_value: Any, name: str | None = None,
               dtype: DType | str | None = None) -> "Variable":
        """Build the variable's nodes in ``scope`` (see ``Scope.variable``), without the
        scope's control dependencies (TF 1.x's init_scope): a variable's handle, reads
        and initializer must not rerun what the scope waits on at every use."""
        scope = scope.without_control_dependencies()
        what = f"Variable '{name or 'Variable'}'"
        value = as_operand(initial_value)
        if value is None:
            from .convert import to_array
            try:  # converted before any node exists: a bad value leaves the graph as it was
                array = to_array(initial_value, as_dtype(dtype) if dtype is not None else None)
            except TypeError as e:
                raise TypeError(f"{what}: {e}") from None
            dtype_, shape = as_dtype(array.dtype), TensorShape(array.shape)
        else:
            if dtype is not None and as_dtype(dtype) != value.dtype:
                raise TypeError(f"{what}: initial value {value.name} has dtype "
                                f"{value.dtype.name}, requested {as_dtype(dtype).name}")
            dtype_, shape = value.dtype, value.shape
        if not shape.is_fully_defined():
            raise InvalidArgumentError(
                f"{what}: the initial value's shape {shape} must be fully defined at build time")
        handle = scope.var_handle_op(dtype=dtype_, shape=shape, name=name or "Variable")
        node_name = handle.op.name
        sub = scope.within(node_name)
        if value is None:
            value = sub.const(array, dtype=dtype_, name="InitialValue")
        init = sub.assign_variable_op(handle, value, name="Initializer")
        read = sub.read_variable_op(handle, dtype=value.dtype, name="Read")
        return cls(handle, init, read)

    # -- what it is ---------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.handle.op.attrs["shared_name"] or self.handle.op.name

    @property
    def dtype(self) -> DType:
        return self.handle.op.attrs["dtype"]

    @property
    def shape(self) -> TensorShape:
        return self.handle.op.attrs["shape"]

    @property
    def graph(self) -> Graph:
        return self.handle.graph

    @property
    def device(self) -> str:
        return self.handle.op.device

    @property
    def op(self) -> Operation:
        return self.handle.op

    def read(self) -> Output:
        """The variable's value (a snapshot, read when the run gets there); inside a
        branch or loop body being traced, a read there (each call, each iteration reads
        the value then, as in TensorFlow 2)."""
        graph = active_graph(self.graph)
        if graph is not self.graph:
            return self._scope.beside(self).read_variable_op(
                self.handle, dtype=self.dtype, name=f"{self.name.rsplit('/', 1)[-1]}/Read")
        return self._read

    def as_output(self) -> Output:
        return self.read()

    def value(self) -> Output:
        return self.read()

    def as_output_in(self, scope) -> Output:
        """The read an op built in ``scope`` takes: the shared ``read()``, or, when
        ``scope`` has control dependencies, a fresh read under them (on the variable's
        device), so that ``scope.with_control_dependencies([update]).identity(v)`` sees
        the update, as in TensorFlow 1.x."""
        if not scope.control_dependencies or active_graph(scope.graph) is not self.graph:
            return self.read()
        return scope.beside(self).with_control_dependencies(
            self._read_after()).read_variable_op(
            self.handle, dtype=self.dtype, name=f"{self.name.rsplit('/', 1)[-1]}/Read")

    def _read_after(self) -> tuple:
        """What every read of this object waits on (an UnreadVariable's update)."""
        return ()

    # -- updates ---------------------------------------------------------------------
    def _after(self, update: Operation, read_value: bool):
        return UnreadVariable(self, update) if read_value else update

    def _update(self, op_type: str, *args, read_value: bool = True, name: str | None = None,
                **attrs):
        update = self._scope.create_op(op_type, self.handle, *args,
                                       name=name or f"{self.name}/{op_type}", **attrs)
        return self._after(update, read_value)

    def assign(self, value: Any, read_value: bool = True, name: str | None = None):
        """variable = value. Returns the value after, unread (an UnreadVariable whose
        ``.op`` is the update), or the update Operation with ``read_value=False``."""
        return self._update("AssignVariableOp", self._typed(value), read_value=read_value,
                            name=name)

    def assign_add(self, value: Any, read_value: bool = True, name: str | None = None):
        return self._update("AssignAddVariableOp", self._typed(value), read_value=read_value,
                            name=name)

    def assign_sub(self, value: Any, read_value: bool = True, name: str | None = None):
        return self._update("AssignSubVariableOp", self._typed(value), read_value=read_value,
                            name=name)

    def scatter_nd_update(self, indices: Any, updates: Any, read_value: bool = True,
                          name: str | None = None, bad_indices_policy: str = ""):
        """variable[indices[i]] = updates[i] in place (the last duplicate wins)."""
        return self._scatter("ResourceScatterNdUpdate", indices, updates, read_value, name,
                             bad_indices_policy)

    def scatter_nd_add(self, indices: Any, updates: Any, read_value: bool = True,
                       name: str | None = None, bad_indices_policy: str = ""):
        """variable[indices[i]] += updates[i] in place (duplicates accumulate)."""
        return self._scatter("ResourceScatterNdAdd", indices, updates, read_value, name,
                             bad_indices_policy)

    def scatter_nd_sub(self, indices: Any, updates: Any, read_value: bool = True,
                       name: str | None = None, bad_indices_policy: str = ""):
        return self._scatter("ResourceScatterNdSub", indices, updates, read_value, name,
                             bad_indices_policy)

    def scatter_nd_min(self, indices: Any, updates: Any, read_value: bool = True,
                       name: str | None = None, bad_indices_policy: str = ""):
        return self._scatter("ResourceScatterNdMin", indices, updates, read_value, name,
                             bad_indices_policy)

    def scatter_nd_max(self, indices: Any, updates: Any, read_value: bool = True,
                       name: str | None = None, bad_indices_policy: str = ""):
        return self._scatter("ResourceScatterNdMax", indices, updates, read_value, name,
                             bad_indices_policy)

    def sparse_read(self, indices: Any, name: str | None = None) -> Output:
        """Rows ``indices`` of the variable (a gather along dim 0): copies only those rows."""
        return self._scope.resource_gather(self.handle, indices, dtype=self.dtype,
                                           name=name or f"{self.name}/SparseRead")

    def _scatter(self, op_type, indices, updates, read_value, name, policy):
        return self._update(op_type, indices, self._typed(updates), read_value=read_value,
                            name=name, bad_indices_policy=policy)

    def _typed(self, value: Any):
        """Raw values become Consts of the variable's dtype (an Output is checked by the op)."""
        if as_operand(value) is not None:
            return value
        return self._scope.without_control_dependencies().constant(value, dtype=self.dtype,
                                                          name=f"{self.name}/Value")

    def __repr__(self) -> str:
        return f"<gf.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}>"


class UnreadVariable(Variable):
    """A variable's value after an update, read only where it is used (TF's
    ``_UnreadVariable``): what ``assign``/``assign_add``/``assign_sub`` and every
    ``scatter_nd_*`` return with ``read_value=True``.

    ``.op`` is the update, so ``sess.run(v.assign_add(x).op)`` updates in place and
    copies nothing. Used as a tensor (fetched, passed to an op, ``read()``) it is a
    ReadVariableOp that waits on the update, built once on first use. Its own updates
    and sparse reads also wait on that update, so ``v.assign(a).assign_add(b)`` chains.
    """

    __slots__ = ("_update_op",)

    def __init__(self, variable: Variable, update: Operation):
        super().__init__(variable.handle, variable.initializer, None)
        self._update_op = update
        self._scope = self._scope.with_control_dependencies([update])

    @property
    def op(self) -> Operation:
        """The update (TensorFlow: ``_UnreadVariable.op`` is the parent op)."""
        return self._update_op

    def _read_after(self) -> tuple:
        return (self._update_op,)

    def control_op(self) -> Operation:
        """What ``with_control_dependencies([this])`` waits on: the update, not a read."""
        return self._update_op

    def read(self) -> Output:
        """The value after the update: a ReadVariableOp made at the first use."""
        if self._read is None:
            self._read = self._scope.read_variable_op(self.handle, dtype=self.dtype,
                                                      name=f"{self.name}/ReadAfter")
        return self._read

    def __repr__(self) -> str:
        return (f"<gf.UnreadVariable '{self.name}' after '{self._update_op.name}' "
                f"shape={self.shape} dtype={self.dtype.name}>")


def global_variables(graph: Graph) -> list[Variable]:
    """Every variable of ``graph``, in creation order; also in a loaded graph."""
    found = []
    for op in graph.operations():
        if op.type != "VarHandleOp":
            continue
        name = op.attrs["shared_name"] or op.name
        init = graph.operation(f"{name}/Initializer") if f"{name}/Initializer" in graph else None
        read = graph.operation(f"{name}/Read").outputs[0] if f"{name}/Read" in graph else None
        if read is None:
            from .scope import Scope
            read = Scope(graph).beside(op).read_variable_op(
                op.outputs[0], dtype=op.attrs["dtype"], name=f"{name}/Read")
        found.append(Variable(op.outputs[0], init, read))
    return found


def global_variables_initializer(graph: Graph) -> Operation:
    """One op that runs every variable's initializer (a NoOp depending on them)."""
    from .scope import Scope
    inits = [v.initializer for v in global_variables(graph) if v.initializer is not None]
    return Scope(graph).with_control_dependencies(inits).no_op(name="init")


def variable_of(value: Any) -> Variable | None:
    """``value`` if it is a Variable (for APIs that take variables or tensors)."""
    return value if isinstance(value, Variable) else None
