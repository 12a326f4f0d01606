"""Build-time knowledge about values: the context shape functions see, and the
partial evaluation of constant inputs (TensorFlow's ``InferenceContext`` with
``input_tensor`` and ``MakeShapeFromShapeTensor``)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .dtypes import DType
from .errors import InvalidArgumentError
from .host_eval import evaluate_on_host
from .shapes import MAX_RANK, TensorShape

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Output
    from .registry import OpDef

#: Largest constant (in elements) that shape inference evaluates at build time.
MAX_FOLDED_ELEMENTS = 1 << 16
#: The memory a kernel may ask for while it is evaluated at build time.
MAX_FOLDED_BYTES = MAX_FOLDED_ELEMENTS * 16


class ShapeContext:
    """Inputs, attrs and constant values of the node whose shapes are inferred."""

    def __init__(self, op_def: "OpDef", node_name: str, groups: list, attrs: dict[str, Any]):
        self.op_def = op_def
        self.op_name = node_name
        self._groups = {spec.name: g for spec, g in zip(op_def.inputs, groups)}
        self.attrs = attrs

    def attr(self, name: str) -> Any:
        return self.attrs[name]

    def input(self, name: str):
        return self._groups[name]

    def shape(self, name: str):
        g = self._groups[name]
        return [o.shape for o in g] if isinstance(g, list) else g.shape

    def dtype(self, name: str) -> DType:
        g = self._groups[name]
        return g[0].dtype if isinstance(g, list) else g.dtype

    def value(self, name: str):
        """The input's value if it is known at build time, else None."""
        g = self._groups[name]
        return [constant_value(o) for o in g] if isinstance(g, list) else constant_value(g)

    def value_bounds(self, name: str):
        """The input's (smallest, largest) element if known at build time (see
        ``value_bounds``), else None; a list for a list input."""
        g = self._groups[name]
        return [value_bounds(o) for o in g] if isinstance(g, list) else value_bounds(g)

    def shape_value(self, name: str) -> TensorShape:
        """The shape that the 1-D integer input ``name`` describes, as far as known."""
        return shape_from_tensor(self._groups[name])

    def error(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(message)

    def merge(self, a: TensorShape, b: TensorShape, message: str) -> TensorShape:
        """``a.merge_with(b)``, or an InvalidArgumentError stating ``message``."""
        try:
            return a.merge_with(b)
        except ValueError as e:
            raise InvalidArgumentError(f"{message}: {e}") from None


def constant_value(output: "Output") -> np.ndarray | None:
    """The value of ``output`` if it can be computed at build time, else None.

    Consts give their value; Shape/Size/Rank give what the static shape fixes;
    any other pure op whose inputs are all small constants is evaluated with
    its CPU kernel.
    """
    op = output.op
    cache = op._const_cache
    if output.index in cache:
        return cache[output.index]
    value = _compute_constant(output)
    cache[output.index] = value
    return value


def _compute_constant(output: "Output") -> np.ndarray | None:
    op = output.op
    if op.type == "Const":
        return op.attrs["value"]
    if op.type in ("Shape", "Size", "Rank"):
        shape = op.inputs[0].shape
        out_type = op.attrs.get("out_type")
        np_type = out_type.as_numpy_dtype if out_type is not None else np.int32
        if not shape.is_fully_defined() and (op.type != "Rank" or shape.rank is None):
            return None
        dims = shape.as_list()
        known = (len(dims) if op.type == "Rank"  # dims may hold None: only the rank is known
                 else math.prod(dims) if op.type == "Size" else dims)
        if max(np.ravel(known), default=0) > np.iinfo(np_type).max:
            return None  # the kernel fails when the graph runs, as in TensorFlow
        return np.array(known, np_type)
    if op.op_def.stateful or op.type in ("Placeholder",):
        return None
    if not all(_may_fold(o.shape) for o in op.outputs):
        return None  # decided from the static shapes, before anything is computed
    values = []
    for inp in op.inputs:
        v = constant_value(inp)
        if v is None or v.size > MAX_FOLDED_ELEMENTS:
            return None
        values.append(v)
    # outputs of unknown shape: kernels that check their allocations stop early
    results = evaluate_on_host(op, values, MAX_FOLDED_BYTES)
    if results is None or any(r.size > MAX_FOLDED_ELEMENTS for r in results):
        return None
    for out, r in zip(op.outputs, results):
        op._const_cache[out.index] = r
    return op._const_cache.get(output.index)


#: The bounds of an empty tensor: min() and max() over several tensors ignore it.
EMPTY_BOUNDS = (math.inf, -math.inf)

#: op type -> fn(output) giving its (smallest, largest) element without computing it.
_BOUNDS_RULES: dict[str, Callable[["Output"], "tuple | None"]] = {}


def bounds_rule(*op_types: str) -> Callable:
    """Register ``fn(output) -> (smallest, largest) | EMPTY_BOUNDS | None`` for op types
    whose outputs may be too large to evaluate at build time but whose bounds are cheap
    (Range: its first and last element)."""
    def register(fn: Callable) -> Callable:
        for op_type in op_types:
            _BOUNDS_RULES[op_type] = fn
        return fn
    return register


def value_bounds(output: "Output") -> tuple | None:
    """The (smallest, largest) element of a real-valued ``output`` when known at build time
    (EMPTY_BOUNDS for an empty tensor), else None. A small constant gives its own; a large
    one is never computed: its op's bounds rule answers (TensorFlow's shape functions see
    such values through constant folding; here they need not exist)."""
    if not (output.dtype.is_integer or output.dtype.is_floating or output.dtype.is_bool):
        return None
    value = constant_value(output)
    if value is None:
        rule = _BOUNDS_RULES.get(output.op.type)
        return None if rule is None else rule(output)
    if value.size == 0:
        return EMPTY_BOUNDS
    low, high = value.min().item(), value.max().item()
    return None if math.isnan(low) or math.isnan(high) else (low, high)


def _may_fold(shape: TensorShape) -> bool:
    """Whether an output of this static shape may be small enough to evaluate (the known
    dims alone are at most MAX_FOLDED_ELEMENTS elements)."""
    return shape.rank is None or math.prod(d for d in shape.dims if d is not None) \
        <= MAX_FOLDED_ELEMENTS


def shape_from_tensor(output: "Output") -> TensorShape:
    """TensorFlow's MakeShapeFromShapeTensor: the (partial) shape a 1-D int tensor holds.

    A constant gives a full shape (-1 marks an unknown dim); a Pack of scalars
    gives one dim per known scalar; a ConcatV2 concatenates its parts; a Shape
    op gives its input's static shape; otherwise only the length is known.
    """
    value = constant_value(output)
    if value is not None:
        if value.ndim == 0:
            if int(value) == -1:
                return TensorShape(None)
            raise InvalidArgumentError(
                f"Shape must be a vector, got a scalar {int(value)}")
        if value.ndim != 1:
            raise InvalidArgumentError(f"Shape must be a vector, got shape {list(value.shape)}")
        _check_rank(value.size)
        dims = []
        for d in value.tolist():
            if d < -1:
                raise InvalidArgumentError(f"Dimension {d} must be >= -1 in shape {value.tolist()}")
            dims.append(None if d == -1 else int(d))
        return TensorShape(dims)
    op = output.op
    if op.type == "Pack" and op.attrs.get("axis", 0) == 0 and all(i.shape.rank == 0 for i in op.inputs):
        _check_rank(len(op.inputs))
        dims = []
        for scalar in op.inputs:
            v = constant_value(scalar)
            dims.append(None if v is None or int(v) < 0 else int(v))
        return TensorShape(dims)
    if op.type == "ConcatV2":
        axis = constant_value(op.inputs[-1])
        if axis is not None and int(axis) in (0, -1):
            result = TensorShape([])
            for part in op.inputs[:-1]:
                result = result.concatenate(shape_from_tensor(part))
            return result
    if op.type == "Shape":
        return op.inputs[0].shape
    if op.type == "Cast":
        return shape_from_tensor(op.inputs[0])
    if output.shape.rank == 1 and output.shape[0] is not None:
        return TensorShape.unknown(_check_rank(output.shape[0]))
    return TensorShape(None)


def _check_rank(rank: int) -> int:
    """``rank``, if a shape may have that many dims (checked before building the shape)."""
    if rank > MAX_RANK:
        raise InvalidArgumentError(f"Shape must have at most {MAX_RANK} dims, but the shape "
                                   f"tensor has {rank} elements")
    return rank
