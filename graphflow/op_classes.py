"""TF-Java-style op classes (``ScatterNd.create(scope, ...).output()``),
generated from each OpDef when it is registered."""
from __future__ import annotations

from typing import Any

from .builder import create_operation
from .graph import Graph, Operation, Output
from .registry import OpDef, on_register

#: op type -> generated class; ``graphflow.ops`` exposes these by name.
OP_CLASSES: dict[str, type] = {}


class OpWrapper:
    """A thin handle on one Operation, as TensorFlow Java's generated op classes."""

    op_def: OpDef

    def __init__(self, operation: Operation):
        self.op = operation

    @classmethod
    def create(cls, scope, *args, name: str | None = None, **kwargs: Any) -> "OpWrapper":
        """Build the op in ``scope``: inputs first, then attrs (positional or keyword)."""
        from .scope import Scope  # scope.py builds on this module's registrations

        if not isinstance(scope, Scope):
            hint = " (wrap it: gf.Scope(graph))" if isinstance(scope, Graph) else ""
            raise TypeError(f"{cls.__name__}.create() takes a gf.Scope first, got "
                            f"{type(scope).__name__}{hint}")
        return cls(create_operation(scope, cls.op_def, args, kwargs, name))

    def output(self) -> Output:
        """The op's only output."""
        if len(self.op.outputs) != 1:
            raise ValueError(f"{self.op.type} has {len(self.op.outputs)} outputs; use outputs()")
        return self.op.outputs[0]

    def as_output(self) -> Output:
        return self.output()

    def outputs(self) -> list[Output]:
        return list(self.op.outputs)

    def __iter__(self):
        return iter(self.op.outputs)

    def __repr__(self) -> str:
        return f"<{self.op.type} '{self.op.name}'>"


def _output_accessor(position: int, is_list: bool):
    def accessor(self):
        groups = _output_groups(self.op)
        return groups[position] if is_list else groups[position][0]
    return accessor


def _output_groups(op: Operation) -> list[list[Output]]:
    groups, start = [], 0
    for n in op.op_def.output_counts(op.attrs):
        groups.append(list(op.outputs[start:start + n]))
        start += n
    return groups


def _make_class(definition: OpDef) -> None:
    namespace = {"op_def": definition, "__doc__": f"{definition.signature}\n\n{definition.doc}",
                 "__module__": "graphflow.ops"}
    for position, spec in enumerate(definition.outputs):
        if spec.name not in ("output", "outputs", "op", "create", "as_output"):
            namespace[spec.name] = _output_accessor(position, spec.is_list)
    OP_CLASSES[definition.name] = type(definition.name, (OpWrapper,), namespace)


on_register(_make_class)
