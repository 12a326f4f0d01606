"""Scope: the immutable construction context of TensorFlow Java.

A Scope carries a graph, a name prefix, a requested device and control
dependencies; each ``with_*`` returns a new Scope. Every registered op adds a
builder method to Scope (``scope.scatter_nd(...)``), generated from its OpDef.
"""
from __future__ import annotations

import inspect
from typing import Any, Iterable

import numpy as np

from . import convert
from .builder import as_operand, create_operation
from .device_spec import merge_devices
from .dtypes import DType, as_dtype
from .errors import InvalidArgumentError, InvalidDTypeError
from .graph import Graph, Operation, Output
from .registry import OpDef, on_register, op_def as lookup_op_def


class Scope:
    """Where and how new ops are created. Immutable: ``with_*`` returns a new Scope."""

    __slots__ = ("graph", "_prefix", "_op_name", "device", "control_dependencies")

    def __init__(self, graph: Graph | None = None, *, _prefix: str = "", _op_name: str | None = None,
                 _device: str = "", _control: tuple[Operation, ...] = ()):
        if graph is not None and not isinstance(graph, Graph):
            raise TypeError(f"Scope needs a gf.Graph, got {type(graph).__name__} {graph!r}")
        self.graph = graph if graph is not None else Graph()
        self._prefix = _prefix
        self._op_name = _op_name
        self.device = _device
        self.control_dependencies = _control

    def _replace(self, **changes) -> "Scope":
        fields = dict(_prefix=self._prefix, _op_name=self._op_name, _device=self.device,
                      _control=self.control_dependencies)
        fields.update(changes)
        return Scope(self.graph, **fields)

    def in_graph(self, graph: Graph) -> "Scope":
        """This scope building into ``graph`` (a function traced inside this scope's graph)."""
        return Scope(graph, _prefix=self._prefix, _op_name=self._op_name, _device=self.device,
                     _control=self.control_dependencies)

    # -- deriving scopes ---------------------------------------------------
    def with_name(self, name: str) -> "Scope":
        """A scope whose next op is called ``name`` (made unique, under the prefix)."""
        _check_name(name, "with_name")
        if not name or "/" in name:
            raise InvalidArgumentError(f"Invalid op name '{name}'")
        return self._replace(_op_name=name)

    def with_sub_scope(self, name: str) -> "Scope":
        """A scope whose ops are named ``name/...``; ``name`` is made unique."""
        _check_name(name, "with_sub_scope")
        if not name:
            raise InvalidArgumentError("A sub-scope needs a non-empty name")
        unique = self.graph.unique_name(self._qualify(name))
        return self._replace(_prefix=unique + "/", _op_name=None)

    def with_device(self, device: str | None) -> "Scope":
        """A scope whose ops ask for ``device`` merged into this scope's, as TensorFlow's
        nested device scopes: the parts ``device`` gives override, the others stay
        (``with_device("/job:worker/task:1").with_device("/gpu:0")`` asks for
        ``/job:worker/task:1/device:GPU:0``); ``""`` changes nothing, None clears."""
        if device is None:
            return self._replace(_device="")
        _check_name(device, "with_device")
        return self._replace(_device=merge_devices(self.device, device))

    def with_control_dependencies(self, controls: Iterable) -> "Scope":
        """A scope whose ops run only after every op (or op of each Output) in ``controls``,
        a list: a single Operation or Output is a TypeError, as in TensorFlow."""
        if (isinstance(controls, (str, bytes, Operation, Output))
                or not isinstance(controls, Iterable)
                or callable(getattr(controls, "as_output", None))):
            what = getattr(controls, "name", None)
            raise TypeError(
                f"with_control_dependencies() takes a list of Operations or Outputs, got "
                f"{type(controls).__name__} " + (f"'{what}'" if isinstance(what, str) else
                                                  repr(controls)) + ": pass it in a list")
        ops = list(self.control_dependencies)
        for c in controls:
            op = c if isinstance(c, Operation) else _control_op(c)
            if not isinstance(op, Operation):
                raise TypeError(f"Control dependency {c!r} must be an Operation or an Output, got "
                                f"{type(c).__name__}")
            if op.graph is not self.graph and not _traced_inside(op.graph, self.graph):
                raise InvalidArgumentError(f"Control dependency '{op.name}' is from another graph")
            if op not in ops:
                ops.append(op)
        return self._replace(_control=tuple(ops))

    def beside(self, node: Any) -> "Scope":
        """A scope whose ops are placed exactly where ``node`` (an Operation, Output,
        Variable or device string) is, not merged with this scope's device: the ops a
        library builds for a node (its gradient, its update, its reads) go with it."""
        device = node if isinstance(node, str) else getattr(node, "device", None)
        if not isinstance(device, str):
            raise TypeError(f"beside() takes an Operation, an Output, a Variable or a device "
                            f"string, got {type(node).__name__} {node!r}")
        return self._replace(_device=device)

    def within(self, node_name: str) -> "Scope":
        """A scope whose ops are named ``node_name/...`` exactly, for a name the graph has
        reserved already (a node's own helpers: ``v/Initializer`` of a variable ``v``)."""
        _check_name(node_name, "within")
        return self._replace(_prefix=node_name + "/", _op_name=None)

    def without_op_name(self) -> "Scope":
        """This scope without a pending ``with_name`` name: for the helpers of a node that
        takes that name itself."""
        return self._replace(_op_name=None)

    def without_control_dependencies(self) -> "Scope":
        """This scope with no control dependencies."""
        return self._replace(_control=())

    def make_op_name(self, default: str) -> str:
        """The unique name of the next op: ``with_name``'s name, else ``default``."""
        _check_name(default, "op name")
        return self.graph.unique_name(self._qualify(self._op_name or default))

    def _qualify(self, name: str) -> str:
        return self._prefix + name

    # -- values ---------------------------------------------------------------
    def constant(self, value: Any, dtype: DType | str | None = None, shape: Any = None,
                 name: str | None = None) -> Output:
        """A Const holding ``value`` (Python ints -> int32, floats -> float32), as
        ``tf.constant``: with ``shape``, a scalar or one-element value is broadcast and a
        value of as many elements reshaped. A value that does not convert or fit is an
        InvalidDTypeError (a TypeError, as in TensorFlow)."""
        dtype = as_dtype(dtype) if dtype is not None else None
        try:
            array = convert.to_array(value, dtype)
            if shape is not None:
                array = convert.with_shape(array, shape)
        except TypeError as e:
            raise InvalidDTypeError(str(e)) from None
        return self.const(array, dtype=as_dtype(array.dtype), name=name)

    def variable(self, initial_value: Any, name: str | None = None,
                 dtype: DType | str | None = None):
        """A ``gf.Variable`` starting at ``initial_value`` (copied by its initializer);
        its value lives in each Session, as a TensorFlow 1.x resource variable's."""
        from .variables import Variable
        return Variable.create(self, initial_value, name=name, dtype=dtype)

    def _constant_named(self, array: np.ndarray, full_name: str) -> Output:
        scope = Scope(self.graph, _device=self.device)
        return scope.const(array, dtype=as_dtype(array.dtype), name=full_name)

    def create_op(self, op_type: str | OpDef, *args, name: str | None = None, **kwargs):
        """Build an op of any registered type; returns what its builder method returns."""
        definition = op_type if isinstance(op_type, OpDef) else lookup_op_def(op_type)
        return _result(create_operation(self, definition, args, kwargs, name))

    def __repr__(self) -> str:
        return f"<gf.Scope prefix='{self._prefix}' device='{self.device}'>"

    def __getattr__(self, name: str):
        """Only for names no builder has: an AttributeError that says graphflow has no
        such op (yet), with the builders whose names are close (``mat_mul``: ``matmul``)."""
        if name.startswith("_"):
            raise AttributeError(f"'Scope' object has no attribute '{name}'")
        raise AttributeError(missing_op_message(name))


def missing_op_message(name: str) -> str:
    """What ``scope.<name>`` says when graphflow has no builder of that name."""
    import difflib
    builders = sorted(n for n in dir(Scope) if not n.startswith("_"))
    close = difflib.get_close_matches(name, builders, n=3, cutoff=0.75)
    close += [n for n in builders if n not in close and (
        n.replace("_", "") == name.replace("_", "") or (len(name) > 3 and n.endswith("_" + name)))]
    hint = f" Did you mean {', '.join(f'scope.{n}' for n in close[:3])}?" if close else ""
    return (f"'Scope' object has no attribute '{name}': graphflow has no op or builder named "
            f"'{name}' yet ('graphflow ops' lists the ops; docs/extending.md shows how to "
            f"declare your own).{hint}")


def _check_name(name: Any, what: str) -> None:
    """Names and device strings are strings (TensorFlow: TypeError)."""
    if not isinstance(name, str):
        raise TypeError(f"{what}() needs a string, got {type(name).__name__} {name!r}"
                        if what.startswith("with_") else
                        f"An {what} must be a string, got {type(name).__name__} {name!r}")


def _traced_inside(graph: Graph, outer: Graph) -> bool:
    """Whether ``graph`` is a function traced inside ``outer`` (its ops may wait on each
    other while it is traced)."""
    encloses = getattr(graph, "encloses", None)
    return encloses is not None and encloses(outer)


def _control_op(control: Any) -> Operation | None:
    """The op of an Output or an Operand, or of an op wrapper (any number of outputs);
    an object's own ``control_op()`` first (a variable's value after an update: the
    update, so that waiting on it reads nothing)."""
    control_op = getattr(control, "control_op", None)
    if callable(control_op):
        return control_op()
    try:
        out = as_operand(control)
    except ValueError:  # a wrapper of an op with several outputs: use its op
        out = None
    return out.op if out is not None else getattr(control, "op", None)


def _result(op: Operation):
    """Builders return an Output, a list of Outputs, or the Operation if it has none."""
    d = op.op_def
    if not d.returns_list:
        return op.outputs[0]
    return list(op.outputs) if d.outputs else op


def _make_builder(definition: OpDef):
    def builder(self: Scope, *args, name: str | None = None, **kwargs):
        return _result(create_operation(self, definition, args, kwargs, name))

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(s.name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
               for s in definition.inputs]
    for a in definition.user_attrs:
        attr = definition.attrs[a]
        params.append(inspect.Parameter(
            a, inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=inspect.Parameter.empty if attr.required else attr.default))
    params.append(inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY, default=None))
    builder.__signature__ = inspect.Signature(params)
    builder.__name__ = definition.builder_name
    builder.__qualname__ = f"Scope.{definition.builder_name}"
    builder.__doc__ = f"{definition.signature}\n\n{definition.doc}"
    return builder


def _install_builder(definition: OpDef) -> None:
    builder = _make_builder(definition)
    for method_name in (definition.builder_name, *definition.aliases):
        existing = Scope.__dict__.get(method_name)
        if existing is not None and getattr(existing, "_generated", False) is False:
            continue  # a hand-written method (e.g. Scope.constant) keeps its name
        setattr(builder, "_generated", True)
        setattr(Scope, method_name, builder)


on_register(_install_builder)
