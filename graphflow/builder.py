"""Adding one node to a graph from an OpDef and the user's arguments.

This is the single place that binds arguments, turns Python values into
Consts, infers type attrs, checks that some device has a kernel, runs the
shape function, and wraps every build-time error with the node's context.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import convert
from .dtypes import DType
from .errors import InvalidArgumentError, InvalidDTypeError, OpError
from .functions import active_graph, auto_control_inputs, capture, note_built
from .graph import Operation, Output, user_site
from .inference import ShapeContext
from .registry import OpDef, op_def as lookup_op_def
from .shapes import TensorShape, check_not_too_large

if TYPE_CHECKING:  # pragma: no cover
    from .scope import Scope


def as_operand(value: Any) -> Output | None:
    """The Output behind an Operand (an Output or anything with ``as_output()``)."""
    if isinstance(value, Output):
        return value
    as_output = getattr(value, "as_output", None)
    if callable(as_output):
        out = as_output()
        if isinstance(out, Output):
            return out
    return None


def bind_arguments(op_def: OpDef, args: tuple, kwargs: dict) -> tuple[dict, dict]:
    """Split the builder's arguments into input values and attr values."""
    params = [s.name for s in op_def.inputs] + list(op_def.user_attrs)
    if len(args) > len(params):
        raise InvalidArgumentError(
            f"{op_def.builder_name}() takes {len(params)} arguments "
            f"({', '.join(params)}) but {len(args)} were given")
    bound = dict(zip(params, args))
    for key, value in kwargs.items():
        if key in bound:
            raise InvalidArgumentError(f"{op_def.builder_name}() got multiple values for '{key}'")
        if key not in params:
            if key in op_def.inferred_attrs:
                raise InvalidArgumentError(
                    f"Attr '{key}' of '{op_def.name}' is inferred from the inputs; do not pass it")
            raise InvalidArgumentError(
                f"Unknown argument '{key}' for op '{op_def.name}'; it takes {', '.join(params)}")
        bound[key] = value
    inputs = {}
    for spec in op_def.inputs:
        if spec.name not in bound:
            raise InvalidArgumentError(f"{op_def.name}: missing input '{spec.name}'")
        inputs[spec.name] = bound.pop(spec.name)
    return inputs, bound


def create_operation(scope: "Scope", op_def: OpDef, args: tuple = (), kwargs: dict | None = None,
                     name: str | None = None, *, reserved_name: str | None = None) -> Operation:
    """Build one node of type ``op_def`` in ``scope`` and return it; ``reserved_name``: a
    name the caller reserved in the graph already (``scope.make_op_name``), taken as is."""
    kwargs = dict(kwargs or {})
    graph = active_graph(scope.graph)
    if graph is not scope.graph:  # built while a function is traced: the op goes there
        scope = scope.in_graph(graph)
    site = user_site()
    node_name = reserved_name or scope.make_op_name(name or op_def.name)
    groups: list | None = None
    try:
        input_values, attr_values = bind_arguments(op_def, args, kwargs)
        attrs: dict[str, Any] = {}
        groups = _resolve_inputs(scope, op_def, node_name, input_values, attrs)
        for attr_name in op_def.user_attrs:
            attr = op_def.attrs[attr_name]
            if attr_name in attr_values:
                attrs[attr_name] = attr.coerce(attr_name, attr_values[attr_name], op_def.name)
            elif attr.required:
                raise InvalidArgumentError(f"{op_def.name}: missing required attr '{attr_name}'")
            else:
                attrs[attr_name] = attr.default
        # dtype-free attrs checked; attrs in declaration order for display
        attrs = {k: attrs[k] for k in op_def.attrs if k in attrs}
        if op_def.kernels and not op_def.kernel_devices(attrs):
            raise op_def.no_kernel_error(None, attrs, node_name)
        out_dtypes, out_counts = _output_types(op_def, attrs)
        shapes = infer_shapes(op_def, node_name, groups, attrs, sum(out_counts))
    except OpError as e:
        raise e.with_node(node_name, op_def.name, site=site, detail=_input_shapes(groups)) from None
    except (TypeError, ValueError) as e:
        cls = InvalidDTypeError if isinstance(e, TypeError) else InvalidArgumentError
        raise cls(str(e), node_name, op_def.name, site=site) from e
    flat_inputs, lengths = [], []
    for spec, g in zip(op_def.inputs, groups):
        items = g if spec.is_list else [g]
        flat_inputs.extend(items)
        lengths.append(len(items))
    control = auto_control_inputs(graph, op_def, list(scope.control_dependencies))
    op = Operation(graph, node_name, op_def, flat_inputs, tuple(lengths), control, attrs,
                   scope.device, site)
    graph._add(op, out_dtypes, shapes)
    note_built(graph, op)
    return op


def _input_shapes(groups: list | None) -> str | None:
    """``input shapes: [4,1], [4], [1]``, as TensorFlow appends to shape errors."""
    if not groups:
        return None
    shapes = [str(o.shape) for g in groups for o in (g if isinstance(g, list) else [g])]
    return "input shapes: " + ", ".join(shapes)


def _resolve_inputs(scope: "Scope", op_def: OpDef, node_name: str, values: dict,
                    attrs: dict) -> list:
    """Turn input values into Outputs, binding type and length attrs on the way: the
    Outputs given bind the type attrs first, then the raw values become Consts."""
    operands = {spec.name: _bind_operands(scope, op_def, spec, values[spec.name], attrs)
                for spec in op_def.inputs}
    return [_input_group(scope, op_def, spec, operands[spec.name], attrs,
                         f"{node_name}/{spec.name}") for spec in op_def.inputs]


def _bind_operands(scope: "Scope", op_def: OpDef, spec, value: Any, attrs: dict) -> list:
    """The items of one input (the Outputs behind Operands, raw values as they are);
    the Outputs among them bind the spec's type attr."""
    if spec.is_list:
        if isinstance(value, (Output,)) or as_operand(value) is not None \
                or not isinstance(value, (list, tuple)):
            raise InvalidArgumentError(
                f"Expected list for '{spec.name}' argument to '{op_def.name}' Op, "
                f"not {value!r}.")
        items = [_operand_or_value(v, scope) for v in value]
        if spec.type_list_attr is None:
            _check_list_type(op_def, spec, items)
    else:
        items = [_operand_or_value(value, scope)]
    for k, item in enumerate(items):
        if isinstance(item, Output):
            if item.graph is not scope.graph:
                items[k] = item = capture(scope.graph, item, op_def, spec)
            if spec.type_list_attr is None:
                _bind_type(op_def, spec, item.dtype, attrs)
    return items


def _input_group(scope: "Scope", op_def: OpDef, spec, operands: list, attrs: dict,
                 name: str):
    """One input as the node takes it (an Output, or a list of them), binding a list's
    length attr. Raw values become Consts of the bound dtype, else of the attr's default
    dtype if they convert to it exactly (a non-empty numpy value keeps its own), else of
    their natural one; nested lists holding Outputs become Packs. The raw items of a
    list whose type is still unbound each take their own dtype, and must agree
    (TensorFlow's rule); a list item that does not convert is reported with the types
    of the whole list, as TensorFlow reports it."""
    if spec.type_list_attr is not None:
        return _mixed_list_group(scope, op_def, spec, operands, attrs, name)
    items = []
    unbound_list = spec.is_list and spec.dtype is None and spec.type_attr not in attrs
    for item in operands:
        if not isinstance(item, Output):
            try:
                item = _raw_input(scope, op_def, spec, item, attrs, name)
            except InvalidDTypeError:
                if not spec.is_list:
                    raise
                raise _list_types_error(op_def, spec, operands) from None
            if not unbound_list:
                _bind_type(op_def, spec, item.dtype, attrs)
        items.append(item)
    if not spec.is_list:
        return items[0]
    if unbound_list and items:
        _check_list_type(op_def, spec, items)
        _bind_type(op_def, spec, items[0].dtype, attrs)
    _bind_length(op_def, spec, len(items), attrs)
    return items


def _mixed_list_group(scope: "Scope", op_def: OpDef, spec, operands: list, attrs: dict,
                      name: str) -> list[Output]:
    """A list input of mixed dtypes (``"input: Tin"``): raw values become Consts of their
    own dtype, and the dtypes bind the list(type) attr."""
    items = [item if isinstance(item, Output) else _raw_input(scope, op_def, spec, item, attrs,
                                                              f"{name}/{k}")
             for k, item in enumerate(operands)]
    attrs[spec.type_list_attr] = tuple(item.dtype for item in items)
    return items


def _bind_length(op_def: OpDef, spec, length: int, attrs: dict) -> None:
    """A list input's length binds its number attr (or must match it)."""
    known = attrs.get(spec.number_attr)
    if known is not None and known != length:
        first = next(s.name for s in op_def.inputs if s.number_attr == spec.number_attr)
        raise InvalidArgumentError(
            f"List argument '{spec.name}' to '{op_def.name}' Op with length {length} "
            f"must match length {known} of argument '{first}'.")
    n_attr = op_def.attrs[spec.number_attr]
    attrs[spec.number_attr] = n_attr.coerce(spec.number_attr, length, op_def.name)


def _operand_or_value(value: Any, scope: "Scope") -> Any:
    """The Output behind an Operand, else the raw value itself. An Operand with
    ``as_output_in(scope)`` (a Variable) gives the Output an op built in ``scope``
    reads (a Variable read under the scope's control dependencies, as TF 1.x's)."""
    as_output_in = getattr(value, "as_output_in", None)
    if callable(as_output_in):
        return as_output_in(scope)
    operand = as_operand(value)
    return value if operand is None else operand


def _check_list_type(op_def: OpDef, spec, items: list) -> None:
    """The Outputs of a list input share one dtype (the spec's, if it fixes one)."""
    types = {item.dtype for item in items if isinstance(item, Output)}
    if types - {spec.dtype} if spec.dtype is not None else len(types) > 1:
        raise _list_types_error(op_def, spec, items)


def _list_types_error(op_def: OpDef, spec, items: list) -> InvalidDTypeError:
    """TensorFlow's error for a list input of mixed types: the type each item has on its
    own (a raw value's natural one), then the rule they break."""
    observed = []
    for item in items:
        if isinstance(item, Output):
            observed.append(item.dtype.name)
            continue
        try:
            observed.append(convert.inferred_dtype(item).name)
        except (TypeError, ValueError):
            observed.append("<NOT CONVERTIBLE TO TENSOR>")
    rule = (f"do not match expected type {spec.dtype.name}" if spec.dtype is not None
            else "don't all match")
    return InvalidDTypeError(f"Tensors in list passed to '{spec.name}' of '{op_def.name}' Op "
                             f"have types [{', '.join(observed)}] that {rule}.")


def _raw_input(scope: "Scope", op_def: OpDef, spec, value: Any, attrs: dict,
               name: str) -> Output:
    """The Output a raw input value becomes: a Const, or a Pack for nested lists
    holding Outputs. A TypeError reads as an InvalidDTypeError naming the input."""
    target = spec.dtype or attrs.get(spec.type_attr)
    try:
        try:
            if target is None and spec.type_attr is not None \
                    and not op_def.attrs[spec.type_attr].required and not _typed(value):
                try:  # TensorFlow's preferred dtype: the attr's default, when exact
                    array = convert.to_array(value, op_def.attrs[spec.type_attr].default)
                except TypeError:
                    array = convert.to_array(value)
            else:
                array = convert.to_array(value, target)
        except (TypeError, ValueError):
            if not holds_output(value):  # looked for only now: a long list costs one walk
                raise
            return pack_nested(scope, value, target, name)
    except TypeError as e:
        if isinstance(e, OpError):
            raise
        raise InvalidDTypeError(f"Input '{spec.name}' of '{op_def.name}' Op: {e}") from None
    return scope._constant_named(array, name)


def _typed(value: Any) -> bool:
    """Whether ``value`` brings a dtype of its own: a numpy value with elements."""
    return isinstance(value, (np.ndarray, np.generic)) and value.size > 0


#: numpy's most dims: a list nested deeper never becomes a tensor.
MAX_NESTING = 64


def holds_output(value: Any) -> bool:
    """Whether a (nested) list or tuple holds an Operand somewhere. A walk with a
    stack, each list once: a list nested 5000 deep, or holding itself, is no
    RecursionError and no endless loop."""
    if not isinstance(value, (list, tuple)):
        return False
    seen, stack = set(), [value]
    while stack:
        items = stack.pop()
        if id(items) in seen:
            continue
        seen.add(id(items))
        for v in items:
            if isinstance(v, (list, tuple)):
                stack.append(v)
            elif as_operand(v) is not None:
                return True
    return False


def check_nesting(value: list | tuple) -> None:
    """A ValueError (numpy's) if ``value`` nests lists deeper than ``MAX_NESTING``
    levels, or holds itself; what walks it recursively then stays shallow."""
    deepest: dict[int, int] = {}
    stack = [(value, 1)]
    while stack:
        items, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ValueError(f"A list nested more than {MAX_NESTING} levels deep (or holding "
                             f"itself) cannot become a tensor: a tensor has at most "
                             f"{MAX_NESTING} dims here")
        if deepest.get(id(items), 0) >= depth:
            continue
        deepest[id(items)] = depth
        stack.extend((v, depth + 1) for v in items if isinstance(v, (list, tuple)))


def pack_nested(scope: "Scope", value: list | tuple, dtype: DType | None, name: str) -> Output:
    """A nested list holding Outputs as one Output, packed as TensorFlow's autopacking
    does: each level that holds an Output is a Pack (axis 0) of its items, raw items
    becoming Consts of the dtype; the dtype is ``dtype``, else the first Output's. An
    Output of another dtype is cast when ``dtype`` was asked for and differs from the
    first Output's (TensorFlow casts then), else a TypeError."""
    check_nesting(value)
    inferred = _first_output_dtype(value)
    cast = dtype is not None and dtype != inferred
    bare = type(scope)(scope.graph, _device=scope.device)
    return _autopack(bare, value, dtype or inferred, cast, name)


def _first_output_dtype(value: list | tuple) -> DType | None:
    for v in value:
        operand = as_operand(v)
        if operand is not None:
            return operand.dtype
        if isinstance(v, (list, tuple)):
            found = _first_output_dtype(v)
            if found is not None:
                return found
    return None


def _autopack(scope: "Scope", value: list | tuple, dtype: DType, cast: bool, name: str):
    """An Output for the levels of ``value`` that hold one; the plain list otherwise."""
    items, must_pack = [], False
    for i, v in enumerate(value):
        operand = as_operand(v)
        if operand is not None:
            if operand.dtype != dtype:
                if not cast:
                    raise TypeError(
                        f"Cannot convert a list containing a tensor of dtype "
                        f"{operand.dtype.name} to {dtype.name} (Tensor is: {operand!r})")
                operand = create_operation(scope, lookup_op_def("Cast"), (operand, dtype),
                                           name=f"{name}/{i}").outputs[0]
            items.append(operand)
            must_pack = True
        elif isinstance(v, (list, tuple)):
            packed = _autopack(scope, v, dtype, cast, f"{name}/{i}")
            must_pack = must_pack or isinstance(packed, Output)
            items.append(packed)
        else:
            items.append(v)
    if not must_pack:
        return items
    tensors = [v if isinstance(v, Output)
               else scope._constant_named(convert.to_array(v, dtype), f"{name}/{i}")
               for i, v in enumerate(items)]
    return create_operation(scope, lookup_op_def("Pack"), (tensors,), {"axis": 0},
                            name=name).outputs[0]


def _bind_type(op_def: OpDef, spec, dtype: DType, attrs: dict) -> None:
    if spec.dtype is not None:
        if dtype != spec.dtype:
            raise InvalidDTypeError(
                f"Input '{spec.name}' of '{op_def.name}' Op has type {dtype.name} that does not "
                f"match expected type of {spec.dtype.name}.")
        return
    attr_name = spec.type_attr
    bound = attrs.get(attr_name)
    if bound is None:
        attr = op_def.attrs[attr_name]
        if attr.allowed is not None and dtype not in attr.allowed:
            raise InvalidDTypeError(
                f"Value passed to parameter '{spec.name}' has DataType {dtype.name} not in list "
                f"of allowed values: {', '.join(t.name for t in attr.allowed)}")
        attrs[attr_name] = dtype
    elif bound != dtype:
        first = next(s.name for s in op_def.inputs if s.type_attr == attr_name)
        raise InvalidDTypeError(
            f"Input '{spec.name}' of '{op_def.name}' Op has type {dtype.name} that does not match "
            f"type {bound.name} of argument '{first}'.")


#: The most outputs one node may have. TensorFlow's limit is int32, but a node of
#: 10**8 outputs cannot be built in any memory: it is refused before its lists are.
MAX_OUTPUTS_PER_NODE = 1 << 16


def _output_types(op_def: OpDef, attrs: dict) -> tuple[list[DType], list[int]]:
    counts = op_def.output_counts(attrs)
    if sum(counts) > MAX_OUTPUTS_PER_NODE:
        raise InvalidArgumentError(
            f"{op_def.name} would have {sum(counts)} outputs; a node has at most "
            f"{MAX_OUTPUTS_PER_NODE}")
    dtypes = []
    for spec in op_def.outputs:
        dtypes.extend(spec.dtypes(attrs))
    return dtypes, counts


def infer_shapes(op_def: OpDef, node_name: str, groups: list, attrs: dict,
                 num_outputs: int) -> list[TensorShape]:
    """The output shapes ``op_def``'s shape function gives for inputs ``groups`` (one
    Output, or a list, per input arg): at build time, and again for a plan's
    shape-specialized clones (runtime/specialize.py)."""
    if op_def.shape_function is None:
        return [TensorShape(None)] * num_outputs
    ctx = ShapeContext(op_def, node_name, groups, attrs)
    result = op_def.shape_function(ctx)
    if isinstance(result, TensorShape):
        result = [result]
    result = [check_not_too_large(r if isinstance(r, TensorShape) else TensorShape(r))
              for r in (result or [])]
    if len(result) != num_outputs:
        raise InvalidArgumentError(
            f"shape function of {op_def.name} returned {len(result)} shapes for "
            f"{num_outputs} outputs")
    return result
