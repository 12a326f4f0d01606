"""Adding one node to a graph from an OpDef and the user's arguments.

This is the single place that binds arguments, turns Python values into
Consts, infers type attrs, checks that some device has a kernel, runs the
shape function, and wraps every build-time error with the node's context.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import convert
from .dtypes import DType
from .errors import InvalidArgumentError, InvalidDTypeError, OpError
from .graph import Operation, Output, user_site
from .inference import ShapeContext
from .registry import OpDef
from .shapes import TensorShape

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
                     name: str | None = None) -> Operation:
    """Build one node of type ``op_def`` in ``scope`` and return it."""
    kwargs = dict(kwargs or {})
    graph = scope.graph
    site = user_site()
    node_name = scope.make_op_name(name or op_def.name)
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
        shapes = _infer_shapes(op_def, node_name, groups, attrs, sum(out_counts))
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
    control = [c for c in scope.control_dependencies]
    op = Operation(graph, node_name, op_def, flat_inputs, tuple(lengths), control, attrs,
                   scope.device, site)
    return graph._add(op, out_dtypes, shapes)


def _input_shapes(groups: list | None) -> str | None:
    """``input shapes: [4,1], [4], [1]``, as TensorFlow appends to shape errors."""
    if not groups:
        return None
    shapes = [str(o.shape) for g in groups for o in (g if isinstance(g, list) else [g])]
    return "input shapes: " + ", ".join(shapes)


def _resolve_inputs(scope: "Scope", op_def: OpDef, node_name: str, values: dict,
                    attrs: dict) -> list:
    """Turn input values into Outputs, binding type and length attrs on the way."""
    graph = scope.graph
    operands: dict[str, Any] = {}
    # 1. Outputs bind the type attrs; raw values wait until then.
    for spec in op_def.inputs:
        value = values[spec.name]
        if spec.is_list:
            if isinstance(value, (Output,)) or as_operand(value) is not None \
                    or not isinstance(value, (list, tuple)):
                raise InvalidArgumentError(
                    f"Expected list for '{spec.name}' argument to '{op_def.name}' Op, "
                    f"not {value!r}.")
            items = [as_operand(v) or v for v in value]
        else:
            items = [as_operand(value) or value]
        operands[spec.name] = items
        if spec.is_list and spec.dtype is not None:
            _check_list_type(op_def, spec, items)
        for item in items:
            if isinstance(item, Output):
                if item.graph is not graph:
                    raise InvalidArgumentError(
                        f"Input '{spec.name}' of '{op_def.name}' Op ({item.name}) must be from "
                        f"the same graph as the op")
                _bind_type(op_def, spec, item.dtype, attrs)
    # 2. Raw values become Consts of the bound (or their natural) dtype.
    groups = []
    for spec in op_def.inputs:
        items = []
        for item in operands[spec.name]:
            if not isinstance(item, Output):
                target = spec.dtype or (attrs.get(spec.type_attr) if spec.type_attr else None)
                try:
                    array = convert.to_array(item, target)
                except TypeError as e:
                    raise InvalidDTypeError(
                        f"Input '{spec.name}' of '{op_def.name}' Op: {e}") from None
                item = scope._constant_named(array, f"{node_name}/{spec.name}")
                _bind_type(op_def, spec, item.dtype, attrs)
            items.append(item)
        if spec.is_list:
            known = attrs.get(spec.number_attr)
            if known is not None and known != len(items):
                first = next(s.name for s in op_def.inputs if s.number_attr == spec.number_attr)
                raise InvalidArgumentError(
                    f"List argument '{spec.name}' to '{op_def.name}' Op with length {len(items)} "
                    f"must match length {known} of argument '{first}'.")
            n_attr = op_def.attrs[spec.number_attr]
            attrs[spec.number_attr] = n_attr.coerce(spec.number_attr, len(items), op_def.name)
            groups.append(items)
        else:
            groups.append(items[0])
    return groups


def _check_list_type(op_def: OpDef, spec, items: list) -> None:
    """A list input of a fixed dtype: TensorFlow names the types of the whole list."""
    types = [item.dtype for item in items if isinstance(item, Output)]
    if any(t != spec.dtype for t in types):
        raise InvalidDTypeError(
            f"Tensors in list passed to '{spec.name}' of '{op_def.name}' Op have types "
            f"[{', '.join(t.name for t in types)}] that do not match expected type "
            f"{spec.dtype.name}.")


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


def _output_types(op_def: OpDef, attrs: dict) -> tuple[list[DType], list[int]]:
    dtypes, counts = [], []
    for spec in op_def.outputs:
        n = attrs[spec.number_attr] if spec.is_list else 1
        dtype = spec.dtype or attrs[spec.type_attr]
        dtypes.extend([dtype] * n)
        counts.append(n)
    return dtypes, counts


def _infer_shapes(op_def: OpDef, node_name: str, groups: list, attrs: dict,
                  num_outputs: int) -> list[TensorShape]:
    if op_def.shape_function is None:
        return [TensorShape(None)] * num_outputs
    ctx = ShapeContext(op_def, node_name, groups, attrs)
    result = op_def.shape_function(ctx)
    if isinstance(result, TensorShape):
        result = [result]
    result = [r if isinstance(r, TensorShape) else TensorShape(r) for r in (result or [])]
    if len(result) != num_outputs:
        raise InvalidArgumentError(
            f"shape function of {op_def.name} returned {len(result)} shapes for "
            f"{num_outputs} outputs")
    return result
