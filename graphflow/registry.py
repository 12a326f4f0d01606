"""One declaration per op: signature, shape function and kernels per device.

Everything else about an op (the ``Scope`` builder method, the TF-Java-style
class in ``graphflow.ops``, ``gf.op_def(name)``) is derived from its OpDef::

    ScatterNd = register_op(
        "ScatterNd",
        inputs=["indices: Tindices", "updates: T", "shape: Tindices"],
        outputs=["output: T"],
        attrs={"T": TypeAttr(), "Tindices": TypeAttr(INDEX_TYPES),
               "bad_indices_policy": StringAttr("", BAD_INDICES_POLICIES)},
        doc="zeros(shape), then updates added at indices.")

    @ScatterNd.shape_fn
    def _(ctx): ...

    @ScatterNd.kernel("cpu")
    def _(ctx, indices, updates, shape): ...

Argument specs read like TensorFlow's REGISTER_OP: ``"x: T"`` (dtype from a
type attr), ``"partitions: int32"`` (fixed dtype), ``"data: N * T"`` (a list
whose length is the int attr N), ``"outputs: num_partitions * T"``.
"""
from __future__ import annotations

import contextlib
import keyword
import re
import sys
import threading
import types
from dataclasses import dataclass, field, replace
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from . import dtypes as _dt
from .dtypes import DType, as_dtype
from .errors import InvalidArgumentError, InvalidDTypeError, NotFoundError
from .shapes import TensorShape, as_shape, check_not_too_large

_REQUIRED = object()


def _not_differentiable(*_):  # pragma: no cover - a marker, never called
    raise AssertionError("NOT_DIFFERENTIABLE is a marker")


#: The gradient function of ops declared with ``op.not_differentiable()``.
NOT_DIFFERENTIABLE: Callable = _not_differentiable


def _site_of(fn: Callable) -> str:
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else repr(fn)


# -- attrs ---------------------------------------------------------------------
@dataclass(frozen=True)
class Attr:
    """An attribute: its kind, default, and the values it accepts."""

    kind: str  # type | int | bool | string | float | shape | tensor | list(int) | list(type)
    #          # | list(shape) | func
    default: Any = _REQUIRED
    allowed: tuple | None = None   # allowed values (dtypes for kind "type")
    minimum: int | None = None
    maximum: int | None = None     # ints are int64 in any case; list lengths int32

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def describe(self) -> str:
        kind = self.kind
        if self.allowed is not None:
            kind = "{" + ", ".join(str(a) if not isinstance(a, str) else repr(a)
                                   for a in self.allowed) + "}"
        if self.minimum is not None:
            kind += f" >= {self.minimum}"
        if not self.required:
            kind += f" = {self.default!r}" if self.kind != "type" else f" = {self.default}"
        return kind

    def coerce(self, name: str, value: Any, op_name: str) -> Any:
        """Check ``value`` against this attr and return its canonical form."""
        def bad(msg, cls=InvalidArgumentError):
            return cls(f"Attr '{name}' of '{op_name}' Op: {msg}")

        if self.kind == "type":
            return self._coerce_type(name, value, bad)
        coerce_kind = _COERCE_KIND.get(self.kind)
        if coerce_kind is not None:
            value = coerce_kind(self, name, value, op_name, bad)
        if self.kind == "list(type)":
            self._check_types_allowed(name, value)
        elif self.allowed is not None and value not in self.allowed:
            raise bad(f"{value!r} is not one of {', '.join(map(repr, self.allowed))}")
        return value

    def _check_types_allowed(self, name: str, types: tuple) -> None:
        for dtype in types:
            if self.allowed is not None and dtype not in self.allowed:
                raise InvalidDTypeError(
                    f"Value for attr '{name}' of {dtype.name} is not in the list of allowed "
                    f"values: {', '.join(t.name for t in self.allowed)}")

    def _coerce_type(self, name: str, value: Any, bad: Callable) -> DType:
        try:
            value = as_dtype(value)
        except TypeError as e:
            raise bad(str(e), InvalidDTypeError) from None
        if self.allowed is not None and value not in self.allowed:
            raise InvalidDTypeError(
                f"Value for attr '{name}' of {value.name} is not in the list of allowed "
                f"values: {', '.join(t.name for t in self.allowed)}")
        return value


# -- one coercion per attr kind: (attr, name, value, op_name, bad) -> canonical value ----------
def _coerce_int(attr: Attr, name: str, value: Any, op_name: str, bad: Callable) -> int:
    value = _int64(value, bad)
    if attr.minimum is not None and value < attr.minimum:
        raise InvalidArgumentError(f"Attr '{name}' of '{op_name}' Op passed {value} less "
                                   f"than minimum {attr.minimum}.")
    if attr.maximum is not None and value > attr.maximum:
        raise InvalidArgumentError(f"Attr '{name}' of '{op_name}' Op passed {value} "
                                   f"greater than maximum {attr.maximum}.")
    return value


def _coerce_bool(attr: Attr, name: str, value: Any, op_name: str, bad: Callable) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise bad(f"expected a bool, got {value!r}")
    return bool(value)


def _coerce_float(attr: Attr, name: str, value: Any, op_name: str, bad: Callable) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        raise bad(f"expected a float, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        raise bad(f"{value} is out of range for a float") from None


def _coerce_string(attr: Attr, name: str, value: Any, op_name: str, bad: Callable) -> str:
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            raise bad(f"{value!r} is not valid UTF-8") from None
    if not isinstance(value, str):
        raise bad(f"expected a string, got {value!r}")
    return value


def _coerce_shape(attr: Attr, name: str, value: Any, op_name: str, bad: Callable) -> TensorShape:
    try:
        value = as_shape(value)
    except (TypeError, ValueError) as e:
        raise bad(f"expected a shape, got {value!r}: {e}") from None
    try:
        check_not_too_large(value)  # TensorFlow's count, as for every op's outputs
    except InvalidArgumentError as e:
        raise bad(e.message) from None
    return value


def _coerce_int_list(attr: Attr, name: str, value: Any, op_name: str, bad: Callable) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise bad(f"expected a list of ints, got {value!r}")
    return tuple(_int64(v, bad) for v in value)


def _coerce_tensor(attr: Attr, name: str, value: Any, op_name: str, bad: Callable) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise bad(f"expected a numpy array, got {type(value).__name__}")
    return value


def _coerce_type_list(attr: Attr, name: str, value: Any, op_name: str, bad: Callable) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise bad(f"expected a list of dtypes, got {value!r}")
    try:
        return tuple(as_dtype(v) for v in value)
    except TypeError as e:
        raise bad(str(e), InvalidDTypeError) from None


def _coerce_shape_list(attr: Attr, name: str, value: Any, op_name: str, bad: Callable) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise bad(f"expected a list of shapes, got {value!r}")
    return tuple(_coerce_shape(attr, name, v, op_name, bad) for v in value)


def _coerce_func(attr: Attr, name: str, value: Any, op_name: str, bad: Callable) -> Any:
    from .functions import Function  # the function library sits above the registry
    if not isinstance(value, Function):
        raise bad(f"expected a gf.Function (a traced graph function), got "
                  f"{type(value).__name__} {value!r}")
    return value


_COERCE_KIND: dict[str, Callable] = {
    "int": _coerce_int, "bool": _coerce_bool, "float": _coerce_float, "string": _coerce_string,
    "shape": _coerce_shape, "list(int)": _coerce_int_list, "tensor": _coerce_tensor,
    "list(type)": _coerce_type_list, "list(shape)": _coerce_shape_list, "func": _coerce_func}


INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1
#: TensorFlow's bound on list lengths and output counts (N, num_partitions).
INT32_MAX = 2 ** 31 - 1


def _int64(value: Any, bad: Callable[[str], Exception]) -> int:
    """``value`` as an int attr: TensorFlow's int attrs are int64."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise bad(f"expected an int, got {value!r}")
    value = int(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise bad(f"value {value} is out of range for an int (int64)")
    return value


def TypeAttr(allowed: Iterable[DType] | None = None, default: Any = _REQUIRED) -> Attr:
    return Attr("type", default if default is _REQUIRED else as_dtype(default),
                None if allowed is None else tuple(allowed))


def IntAttr(default: Any = _REQUIRED, minimum: int | None = None,
            maximum: int | None = None) -> Attr:
    return Attr("int", default, None, minimum, maximum)


def BoolAttr(default: Any = _REQUIRED) -> Attr:
    return Attr("bool", default)


def FloatAttr(default: Any = _REQUIRED) -> Attr:
    return Attr("float", default)


def StringAttr(default: Any = _REQUIRED, allowed: Iterable[str] | None = None) -> Attr:
    return Attr("string", default, None if allowed is None else tuple(allowed))


def ShapeAttr(default: Any = _REQUIRED) -> Attr:
    return Attr("shape", default if default is _REQUIRED else as_shape(default))


def TensorAttr() -> Attr:
    return Attr("tensor")


def IntListAttr(default: Any = _REQUIRED) -> Attr:
    return Attr("list(int)", default if default is _REQUIRED else tuple(default))


def TypeListAttr(allowed: Iterable[DType] | None = None, default: Any = _REQUIRED) -> Attr:
    """A list of dtypes: the types of a heterogeneous list argument (``"input: Tin"``)."""
    return Attr("list(type)", default if default is _REQUIRED else tuple(default),
                None if allowed is None else tuple(allowed))


def ShapeListAttr(default: Any = _REQUIRED) -> Attr:
    return Attr("list(shape)", default if default is _REQUIRED
                else tuple(as_shape(d) for d in default))


def FuncAttr() -> Attr:
    """A graph function (``gf.Function``): a branch or body of a control-flow op."""
    return Attr("func")


# -- argument specs --------------------------------------------------------------
_ARG = re.compile(r"^\s*(\w+)\s*:\s*(?:(\w+)\s*\*\s*)?(\w+)\s*$")


@dataclass(frozen=True)
class ArgSpec:
    """An input or output: ``name: [number_attr *] type_attr_or_dtype``."""

    name: str
    type_attr: str | None   # name of the attr giving the dtype, or None if fixed
    dtype: DType | None     # the fixed dtype, if any
    number_attr: str | None  # for lists: the int attr giving the length
    type_list_attr: str | None = None  # for mixed lists: the list(type) attr giving the dtypes

    @property
    def is_list(self) -> bool:
        return self.number_attr is not None or self.type_list_attr is not None

    def length(self, attrs: Mapping[str, Any]) -> int:
        """How many flat values this argument takes under ``attrs``."""
        if self.type_list_attr is not None:
            return len(attrs[self.type_list_attr])
        return attrs[self.number_attr] if self.number_attr is not None else 1

    def dtypes(self, attrs: Mapping[str, Any]) -> list[DType]:
        """The dtype of each flat value under ``attrs``."""
        if self.type_list_attr is not None:
            return list(attrs[self.type_list_attr])
        return [self.dtype or attrs[self.type_attr]] * self.length(attrs)

    @classmethod
    def parse(cls, text: str, attrs: dict[str, Attr]) -> "ArgSpec":
        m = _ARG.match(text)
        if not m:
            raise ValueError(f"Malformed argument spec {text!r}; expected 'name: [N *] T'")
        name, number, type_ = m.groups()
        if number is not None and attrs.get(number, Attr("?")).kind != "int":
            raise ValueError(f"In {text!r}: '{number}' must be declared as an IntAttr")
        if type_ in attrs and attrs[type_].kind == "list(type)":
            if number is not None:
                raise ValueError(f"In {text!r}: a list(type) attr gives its own length")
            return cls(name, None, None, None, type_)
        if type_ in attrs:
            if attrs[type_].kind != "type":
                raise ValueError(f"In {text!r}: '{type_}' must be declared as a TypeAttr")
            return cls(name, type_, None, number)
        try:
            return cls(name, None, as_dtype(type_), number)
        except TypeError:
            raise ValueError(f"In {text!r}: '{type_}' is neither an attr nor a dtype") from None

    def __str__(self) -> str:
        type_ = self.type_attr or self.type_list_attr or self.dtype.name
        return f"{self.name}: {self.number_attr + ' * ' if self.number_attr else ''}{type_}"


# -- kernels -------------------------------------------------------------------
_registering_own_kernels = False


@contextlib.contextmanager
def own_kernels() -> Iterator[None]:
    """Kernels and preparers registered inside are graphflow's own (the package facade
    loads its op set so): their tests check what they return, and the runtime calls
    them as they are. Any other, a user's kernel of a graphflow op too, is checked
    (graphflow/output_check.py)."""
    global _registering_own_kernels
    before, _registering_own_kernels = _registering_own_kernels, True
    try:
        yield
    finally:
        _registering_own_kernels = before


@dataclass(frozen=True)
class KernelDef:
    """A kernel for one device type, valid where every constrained attr matches;
    ``trusted`` when it is graphflow's own (see :func:`own_kernels`)."""

    fn: Callable
    device_type: str
    constraints: dict[str, tuple]
    trusted: bool = False

    def matches(self, attrs: dict[str, Any]) -> bool:
        return all(attrs.get(k) in allowed for k, allowed in self.constraints.items())

    def describe(self) -> str:
        if not self.constraints:
            return self.device_type
        parts = [f"{k} in {{{', '.join(str(v) for v in vals)}}}" for k, vals in self.constraints.items()]
        return f"{self.device_type} ({'; '.join(parts)})"


# -- interop ------------------------------------------------------------------------
@dataclass(frozen=True)
class TFForm:
    """How an op is one node of a TensorFlow op in a GraphDef, both ways: written by
    ``gf.export_tf_graph`` (graphflow/interop/tf_lowering.py) and read by
    ``gf.import_tf_graph`` (tf_import_plan.py, tf_import.py). The node has the op's
    inputs and its attrs, less ``dropped``, renamed by ``renamed``, with ``defaults``
    added; declared with :func:`same_as_tf`."""

    op: str  #: TensorFlow's op type
    #: graphflow attr -> TensorFlow's name for it (ResourceScatterNd*: ``dtype`` is ``T``)
    renamed: Mapping[str, str] = field(default_factory=dict)
    #: TensorFlow attrs the op lacks: name -> (kind, the value TF's own graphs hold). A
    #: GraphDef's node may hold only that value (any other changes the semantics) ...
    defaults: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    #: ... except these, of ``defaults``, which only hint at how to compute (never what):
    #: read at any value (MatMul's grad_a, grad_b)
    hints: frozenset = frozenset()
    #: graphflow attrs TensorFlow's op lacks (left out of the node; GatherNd's batch_dims,
    #: which its TF lowering computes first)
    dropped: tuple[str, ...] = ()
    #: other TensorFlow op types read as this op, of the same semantics (Add: AddV2)
    aliases: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "renamed", types.MappingProxyType(dict(self.renamed)))
        object.__setattr__(self, "defaults", types.MappingProxyType(dict(self.defaults)))
        object.__setattr__(self, "hints", frozenset(self.hints))
        object.__setattr__(self, "dropped", tuple(self.dropped))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        if not self.hints <= set(self.defaults):
            raise ValueError(f"TFForm {self.op}: hints {sorted(self.hints - set(self.defaults))} "
                             f"are not among its defaults")

    def describe(self) -> str:
        """``Op`` or ``Op (T for dtype; + attr = value; - attr; also read from X)``."""
        parts = [f"{theirs} for {ours}" for ours, theirs in self.renamed.items()]
        parts += [f"+ {k} = {v!r}" for k, (_, v) in self.defaults.items()]
        parts += [f"- {k}" for k in self.dropped]
        parts += [f"also read from {a}" for a in self.aliases]
        return self.op + (f" ({'; '.join(parts)})" if parts else "")


# -- the op definition -----------------------------------------------------------
@dataclass(eq=False)
class OpDef:
    """Everything about one op type, declared in one place."""

    name: str
    inputs: list[ArgSpec]
    outputs: list[ArgSpec]
    attrs: dict[str, Attr]
    doc: str = ""
    aliases: tuple[str, ...] = ()
    fresh_outputs: bool = True   # False: outputs may alias an input or a constant
    stateful: bool = False
    #: a stateful op that running again changes nothing (a variable read): a gradient
    #: may recompute it (graphflow/function_gradients.py)
    idempotent: bool = False
    shape_function: Callable | None = None
    kernels: list[KernelDef] = field(default_factory=list)
    gradient_function: Callable | None = None  # or NOT_DIFFERENTIABLE
    gradient_site: str = ""                    # file:line of that declaration
    preparers: dict[str, Callable] = field(default_factory=dict)  # device type -> prepare
    trusted_preparers: set[str] = field(default_factory=set)  # device types: own_kernels()
    lowerers: dict[str, Callable] = field(default_factory=dict)  # device type -> lower
    elementwise: Any = None  # its element-wise trait (ops/elementwise_table.py), if any
    uses_blas: bool = False  # its CPU kernel calls BLAS (runtime/blas_threads.py bounds it)
    #: its kernels take every output from ``ctx.empty``/``ctx.zeros`` or check it with
    #: ``ctx.check_allocation`` before allocating: the memory limit's wrapper
    #: (graphflow/memory_limit.py) adds nothing, and its shape function is not rerun per
    #: call (DynamicStitch's reads every index)
    checks_allocations: bool = False
    #: its outputs depend on its first input's shape and dtype only (Shape, ZerosLike):
    #: constant folding computes them from a static shape (runtime/folding.py)
    shape_only: bool = False
    #: its kernel reads no input value and never fails (Const, VarHandleOp): a compiled
    #: segment runs it before itself instead of ending there (runtime/segments.py)
    hoistable: bool = False
    #: its output is its first input wherever their static shapes are one (Reshape,
    #: BroadcastTo, Squeeze, ExpandDims): the plan's simplification (runtime/simplify.py)
    identity_when_same_shape: bool = False
    #: its kernel raises only what its shape function raises once the shapes of its
    #: inputs and outputs and the values of its inputs after the first are known
    #: (Reshape, ExpandDims, Squeeze, BroadcastTo): a folded Shape of its output keeps
    #: only its first input computed (runtime/folding.py)
    fails_by_shape_only: bool = False
    #: a reduction whose output is its input over no axes (Sum, Prod, Max, Min)
    identity_over_no_axes: bool = False
    #: it reads the value of the variable its first input is the handle of (a dense or a
    #: sparse read): what a gradient w.r.t. that variable sums over (graphflow/gradients.py)
    reads_variable: bool = False
    #: its TensorFlow counterpart of one node (None: none of the same meaning; an export
    #: lowering, ``exporters["tf"]``, may still write it as other TF ops)
    tf: TFForm | None = None
    #: format ("tf", "onnx") -> the function writing the op in it (registered with
    #: ``@op.export(format)`` by graphflow/interop/'s modules)
    exporters: dict[str, Callable] = field(default_factory=dict)
    #: format -> ``check(op, ...) -> why this node cannot be written, or None``
    export_checks: dict[str, Callable] = field(default_factory=dict)

    # derived at registration
    inferred_attrs: frozenset = frozenset()
    user_attrs: tuple[str, ...] = ()

    def __post_init__(self):
        inferred = {s.type_attr for s in self.inputs if s.type_attr} | \
                   {s.number_attr for s in self.inputs if s.number_attr} | \
                   {s.type_list_attr for s in self.inputs if s.type_list_attr}
        self.inferred_attrs = frozenset(inferred)
        self.user_attrs = tuple(a for a in self.attrs if a not in inferred)

    # -- decorators --------------------------------------------------------
    def shape_fn(self, fn: Callable) -> Callable:
        """Register ``fn(ctx) -> TensorShape | list[TensorShape]``."""
        self.shape_function = fn
        return fn

    def kernel(self, device_type: str, **constraints: Iterable) -> Callable:
        """Register ``fn(ctx, *inputs)`` for ``device_type`` ("cpu", "gpu").

        Keyword arguments constrain type attrs, e.g. ``T=NUMBER_TYPES``.
        """
        device_type = device_type.lower()
        for attr in constraints:
            if attr not in self.attrs:
                raise ValueError(f"{self.name}: kernel constraint on unknown attr '{attr}'")

        def register(fn: Callable) -> Callable:
            self.kernels.append(KernelDef(fn, device_type,
                                          {k: tuple(v) for k, v in constraints.items()},
                                          trusted=_registering_own_kernels))
            return fn
        return register

    def prepare(self, device_type: str) -> Callable:
        """Register ``prepare(spec) -> kernel | None`` for ``device_type``: called once per
        plan step with a :class:`graphflow.kernel_context.KernelSpec` (static shapes,
        dtypes, constant inputs), it returns a lean kernel ``fn(ctx, *inputs)`` with the
        checks that do not depend on values done, or None to use the registered kernel.
        A prepared kernel must give the registered kernel's results and errors."""
        device_type = device_type.lower()

        def register(fn: Callable) -> Callable:
            self.preparers[device_type] = fn
            if _registering_own_kernels:
                self.trusted_preparers.add(device_type)
            return fn
        return register

    def lower(self, device_type: str) -> Callable:
        """Register ``lower(spec) -> Lowering | None`` for ``device_type``: the step as
        numba source, so that a run of lowered steps compiles into one function
        (graphflow/lowering.py, runtime/segments.py). None: the step runs on its own."""
        device_type = device_type.lower()

        def register(fn: Callable) -> Callable:
            self.lowerers[device_type] = fn
            return fn
        return register

    def export(self, format: str) -> Callable:
        """Register ``fn`` as how the op is written in ``format`` ("tf": a TensorFlow
        GraphDef, ``fn(writer, op)``; "onnx": ``fn(emitter, op, inputs)``); the function
        belongs to the exporter's module (graphflow/interop/), and what it takes and
        returns is that exporter's (docs/extending.md, "Export to TensorFlow and ONNX")."""
        def register(fn: Callable) -> Callable:
            self.exporters[format] = fn
            return fn
        return register

    def export_check(self, format: str) -> Callable:
        """Register ``check(op, ...) -> str | None``: why a node of this op cannot be
        written in ``format`` (None: it can), asked before anything is written."""
        def register(fn: Callable) -> Callable:
            self.export_checks[format] = fn
            return fn
        return register

    def gradient(self, fn: Callable) -> Callable:
        """Register the op's gradient rule ``fn(g, *grads) -> grads per flat input``.

        ``g`` is a :class:`graphflow.gradients.GradContext` (``g.op``, ``g.scope``);
        ``grads`` holds one gradient per output (zeros for outputs that got none while
        others did). The rule returns one entry per flat input: an Output, a
        ``gf.IndexedSlices`` or None (no gradient flows to that input).
        """
        if not callable(fn):
            raise TypeError(f"{self.name}.gradient takes a function, got {fn!r}")
        self._check_no_gradient_yet(_site_of(fn))
        self.gradient_function = fn
        self.gradient_site = _site_of(fn)
        return fn

    def not_differentiable(self) -> None:
        """Declare that no gradient flows through this op (as TF's NotDifferentiable)."""
        caller = sys._getframe(1)  # inspect.stack() reads every frame's source: ~4 ms a call
        site = f"{caller.f_code.co_filename}:{caller.f_lineno}"
        self._check_no_gradient_yet(site)
        self.gradient_function = NOT_DIFFERENTIABLE
        self.gradient_site = site

    def _check_no_gradient_yet(self, site: str) -> None:
        """A second declaration would silently replace the first (TF: "Registering two
        gradient with name ..."), unless it is the same one made again (a module reloaded)."""
        if self.gradient_function is None or self.gradient_site == site:
            return
        first = ("declared not differentiable" if self.gradient_function is NOT_DIFFERENTIABLE
                 else "given a gradient")
        raise ValueError(f"Registering two gradients for op type '{self.name}': it was "
                         f"{first} at {self.gradient_site}; the second declaration is at "
                         f"{site}")

    @property
    def differentiable(self) -> bool | None:
        """True with a gradient rule, False if declared not differentiable, None if neither."""
        if self.gradient_function is None:
            return None
        return self.gradient_function is not NOT_DIFFERENTIABLE

    @property
    def gradient_description(self) -> str:
        return {True: "yes", False: "no (not differentiable)",
                None: "no rule registered"}[self.differentiable]

    # -- queries -----------------------------------------------------------
    def find_kernel(self, device_type: str, attrs: dict[str, Any]) -> KernelDef | None:
        for k in self.kernels:
            if k.device_type == device_type and k.matches(attrs):
                return k
        return None

    def kernel_devices(self, attrs: dict[str, Any] | None = None) -> list[str]:
        """Device types with a kernel (for these attrs, if given)."""
        found = {k.device_type for k in self.kernels if attrs is None or k.matches(attrs)}
        return sorted(found, key=lambda d: (d != "cpu", d))

    def no_kernel_error(self, device_type: str | None, attrs: dict[str, Any],
                        node_name: str) -> NotFoundError:
        requested = ", ".join(f"{k}={v}" for k, v in attrs.items() if isinstance(v, DType))
        where = f"'{device_type.upper()}' devices" if device_type else "any device"
        registered = "; ".join(k.describe() for k in self.kernels) or "<no registered kernels>"
        return NotFoundError(
            f"No registered '{self.name}' OpKernel for {where} compatible with node "
            f"{{{{node {node_name}}}}}. Requested attributes: {requested or '<none>'}. "
            f"Registered: {registered}")

    @property
    def signature(self) -> str:
        ins = ", ".join(str(s) for s in self.inputs)
        outs = ", ".join(str(s) for s in self.outputs)
        attrs = ", ".join(f"{n}: {a.describe()}" for n, a in self.attrs.items())
        return f"{self.name}({ins}) -> ({outs}) [{attrs}]"

    @property
    def shape_rule(self) -> str:
        fn = self.shape_function
        return (fn.__doc__ or "").strip() if fn else ""

    @property
    def returns_list(self) -> bool:
        """Whether a kernel returns a list of values, one per output, rather than the value
        of its one output: any list output, or a number of outputs other than one."""
        return len(self.outputs) != 1 or any(spec.is_list for spec in self.outputs)

    def group_inputs(self, flat: list, arg_lengths: tuple[int, ...]) -> list:
        """``flat`` input values per declared input, as a kernel takes them: the value
        itself, or a list for a list input (``arg_lengths``: values per input)."""
        groups, start = [], 0
        for spec, n in zip(self.inputs, arg_lengths):
            groups.append(list(flat[start:start + n]) if spec.is_list else flat[start])
            start += n
        return groups

    def input_counts(self, attrs: Mapping[str, Any]) -> list[int]:
        """How many flat inputs each declared input takes under ``attrs``."""
        return [spec.length(attrs) for spec in self.inputs]

    def output_counts(self, attrs: Mapping[str, Any]) -> list[int]:
        """How many outputs each declared output gives under ``attrs``."""
        return [spec.length(attrs) for spec in self.outputs]

    @property
    def internal(self) -> bool:
        return self.name.startswith("_")

    @property
    def builder_name(self) -> str:
        """The Scope method's name: ``if_`` and ``while_`` for If and While (keywords)."""
        name = snake_case(self.name)
        return name + "_" if keyword.iskeyword(name) else name

    def __repr__(self) -> str:
        return (f"<OpDef {self.signature}; kernels: {', '.join(self.kernel_devices()) or 'none'}; "
                f"gradient: {self.gradient_description}>")


def same_as_tf(*ops: "OpDef | str", **form: Any) -> None:
    """Declare each op (an OpDef or its name) one node of TensorFlow's op of the same name
    in a GraphDef: ``op.tf = TFForm(op.name, **form)`` (``renamed``, ``defaults``,
    ``hints``, ``dropped``, ``aliases``: see :class:`TFForm`)."""
    for op in ops:
        d = op if isinstance(op, OpDef) else op_def(op)
        d.tf = TFForm(d.name, **form)


def exporters_of(format: str, checks: bool = False) -> Mapping[str, Callable]:
    """A live, read-only view {op type: exporter} (or {op type: export check}) of the
    registered ops, internal ones included, that have one for ``format``."""
    return _ExportView(format, "export_checks" if checks else "exporters")


class _ExportView(Mapping):
    def __init__(self, format: str, table: str):
        self.format, self.table = format, table

    def _defs(self) -> list[OpDef]:
        return [d for d in registered_ops(include_internal=True)
                if self.format in getattr(d, self.table)]

    def __getitem__(self, op_type: str) -> Callable:
        d = _REGISTRY.get(op_type)
        if d is None or self.format not in getattr(d, self.table):
            raise KeyError(op_type)
        return getattr(d, self.table)[self.format]

    def __iter__(self) -> Iterator[str]:
        return iter([d.name for d in self._defs()])

    def __len__(self) -> int:
        return len(self._defs())

    def __repr__(self) -> str:
        return f"<{self.table}[{self.format!r}] of {sorted(self)}>"


def snake_case(name: str) -> str:
    """``TensorScatterUpdate`` -> ``tensor_scatter_update``, ``ConcatV2`` -> ``concat_v2``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


# -- the registry ------------------------------------------------------------------
_REGISTRY: dict[str, OpDef] = {}
_LOCK = threading.Lock()
_listeners: list[Callable[[OpDef], None]] = []


def register_op(name: str, *, inputs: Iterable[str] = (), outputs: Iterable[str] = (),
                attrs: dict[str, Attr] | None = None, doc: str = "",
                aliases: Iterable[str] = (), fresh_outputs: bool = True,
                stateful: bool = False) -> OpDef:
    """Declare a new op type. Returns its OpDef, to which the shape function and
    kernels are attached with ``@op.shape_fn`` and ``@op.kernel(device)``.

    A name with a leading underscore declares an internal op (made by graph
    rewrites, never by users): it gets no builder method and no class.
    """
    attrs = dict(attrs or {})
    if not re.match(r"^_?[A-Z][A-Za-z0-9]*$", name):
        raise ValueError(f"Op type names are CamelCase, got {name!r}")
    ins = [ArgSpec.parse(s, attrs) for s in inputs]
    outs = [ArgSpec.parse(s, attrs) for s in outputs]
    for spec in ins + outs:  # a list length is an int32 in TensorFlow
        length = attrs.get(spec.number_attr)
        if length is not None and (length.maximum is None or length.maximum > INT32_MAX):
            attrs[spec.number_attr] = replace(length, maximum=INT32_MAX)
    op_def = OpDef(name, ins, outs, attrs, doc, tuple(aliases), fresh_outputs, stateful)
    with _LOCK:
        if name in _REGISTRY:
            raise ValueError(f"Op type '{name}' is already registered")
        _REGISTRY[name] = op_def
    if not op_def.internal:
        for listener in list(_listeners):
            listener(op_def)
    return op_def


def op_def(name: str) -> OpDef:
    """The OpDef registered under ``name`` (an op type or its builder name)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        for d in _REGISTRY.values():
            if name == d.builder_name or name in d.aliases:
                return d
        raise NotFoundError(f"Op type not registered '{name}'") from None


def registered_ops(include_internal: bool = False) -> list[OpDef]:
    """Every public op type (and the internal ones too, if asked), in registration order.
    Internal ops appear in graphs that rewrites and gradients build, so a graph file
    may hold them."""
    with _LOCK:
        return [d for d in _REGISTRY.values() if include_internal or not d.internal]


def on_register(listener: Callable[[OpDef], None]) -> None:
    """Call ``listener(op_def)`` for every op registered, now and later."""
    _listeners.append(listener)
    for d in registered_ops():
        listener(d)


# re-exported type sets, handy in declarations
ALL_TYPES = _dt.ALL_TYPES
NON_STRING_TYPES = _dt.NON_STRING_TYPES
NUMBER_TYPES = _dt.NUMBER_TYPES
REAL_NUMBER_TYPES = _dt.REAL_NUMBER_TYPES
INDEX_TYPES = _dt.INDEX_TYPES

__all__ = ["Attr", "TypeAttr", "IntAttr", "BoolAttr", "FloatAttr", "StringAttr", "ShapeAttr",
           "TensorAttr", "IntListAttr", "TypeListAttr", "ShapeListAttr", "FuncAttr", "ArgSpec", "KernelDef", "OpDef", "register_op",
           "op_def", "registered_ops", "on_register", "snake_case", "TensorShape",
           "TFForm", "same_as_tf", "exporters_of"]
