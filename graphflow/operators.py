"""Python's operators on Outputs, as ``tf.Tensor`` defines them in graph mode.

``x + 1``, ``1 + x``, ``x - y``, ``x * y``, ``-x``, ``x < y``, ``x > y``, ``x // y`` and
``x % y`` (FloorDiv/FloorMod: integers, as Python's) and, on
bool Outputs, ``&``, ``|``, ``^``, ``~`` build an op in the Output's graph, on its
op's device (a plain Scope: no name prefix, no control dependencies). A raw operand
becomes a Const of the Output's dtype, exactly or not at all (``x + 1.5`` on int32
is a TypeError, as in TensorFlow). ``x / y`` is TensorFlow's ``truediv``: integers
divide as float32 (8 and 16 bits) or float64 (32 and 64 bits). ``x[...]`` takes
ints, slices of step 1, ``...`` and None (Slice, Squeeze, ExpandDims). ``==`` and
``!=`` stay identity (Outputs are dict keys), as in TensorFlow's graph mode;
``<=``, ``>=`` and the other operators are left out until the ops they need exist.

The data model (graphflow/graph.py) knows no op: :func:`install_operators` puts
these methods on Output once the op set is loaded (the package facade calls it), as
TensorFlow's math_ops installs tf.Tensor's operators.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .dtypes import (DType, float32, float64, int8, int16, int32, int64, uint8, uint16,
                     uint32, uint64)
from .errors import InvalidArgumentError, InvalidDTypeError

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Output
    from .scope import Scope

#: TensorFlow's ``__truediv__``: the float type integers are divided as.
TRUEDIV_FLOAT: dict[DType, DType] = {
    int8: float32, uint8: float32, int16: float32, uint16: float32,
    int32: float64, uint32: float64, int64: float64, uint64: float64}


#: ``x <op> y`` and ``y <op> x`` (``__<op>__``, ``__r<op>__``): the builder they call.
_BINARY_BUILDERS = {"add": "add", "sub": "sub", "mul": "mul", "floordiv": "floor_div",
                    "mod": "floor_mod", "and": "logical_and", "or": "logical_or"}
#: ``x < y``, ``x > y``: the builder they call (numpy reflects ``array < x`` itself).
_COMPARISON_BUILDERS = {"lt": "less", "gt": "greater"}
#: ``-x``, ``~x``: the builder they call.
_UNARY_BUILDERS = {"neg": "neg", "invert": "logical_not"}


def install_operators(output_class: type) -> None:
    """Give ``output_class`` (graphflow's Output) Python's operators: each builds its op
    with the builder methods of the registered op set."""
    methods = {"__truediv__": lambda self, other: truediv(self, other, self),
               "__rtruediv__": lambda self, other: truediv(other, self, self),
               "__xor__": lambda self, other: logical_xor(self, other, self),
               "__rxor__": lambda self, other: logical_xor(other, self, self),
               "__getitem__": lambda self, key: getitem(self, key)}
    for op, builder in _BINARY_BUILDERS.items():
        methods[f"__{op}__"] = _forward(builder)
        methods[f"__r{op}__"] = _reflected(builder)
    for op, builder in _COMPARISON_BUILDERS.items():
        methods[f"__{op}__"] = _forward(builder)
    for op, builder in _UNARY_BUILDERS.items():
        methods[f"__{op}__"] = _unary(builder)
    for name, fn in methods.items():
        fn.__name__, fn.__qualname__ = name, f"{output_class.__name__}.{name}"
        setattr(output_class, name, fn)


def _forward(builder: str):
    return lambda self, other: binary(builder, self, other, self)


def _reflected(builder: str):
    return lambda self, other: binary(builder, other, self, self)


def _unary(builder: str):
    return lambda self: unary(builder, self)


def scope_of(x: "Output") -> "Scope":
    """The Scope operators on ``x`` build in: ``x``'s graph and its op's device."""
    from .scope import Scope
    return Scope(x.graph, _device=x.op.device)


def binary(builder: str, x: Any, y: Any, owner: "Output") -> "Output":
    """``scope.<builder>(x, y)`` in ``owner``'s scope; ``owner`` is x or y."""
    return getattr(scope_of(owner), builder)(x, y)


def unary(builder: str, x: "Output") -> "Output":
    return getattr(scope_of(x), builder)(x)


def logical_xor(x: Any, y: Any, owner: "Output") -> "Output":
    """(x | y) & ~(x & y), as TensorFlow composes it."""
    scope = scope_of(owner)
    return scope.logical_and(scope.logical_or(x, y),
                             scope.logical_not(scope.logical_and(x, y)))


def truediv(x: Any, y: Any, owner: "Output") -> "Output":
    """TensorFlow's ``x / y``: both of one dtype (a raw ``y`` takes x's when it converts
    exactly; a raw ``x``, in ``1 / y``, must convert to y's), integers cast to
    ``TRUEDIV_FLOAT`` first, then RealDiv."""
    scope = scope_of(owner)
    if x is owner:
        y = _as_output(scope, y, hint=owner.dtype)
    else:
        x = _as_output(scope, x, dtype=owner.dtype)
    if x.dtype != y.dtype:
        raise TypeError(f"`x` and `y` must have the same dtype, got {x.dtype!r} != {y.dtype!r}.")
    if not x.dtype.is_numeric:
        raise TypeError(f"Invalid dtype {x.dtype!r} in __truediv__")
    target = TRUEDIV_FLOAT.get(x.dtype)
    if target is not None:
        x, y = scope.cast(x, target), scope.cast(y, target)
    return scope.real_div(x, y)


def _as_output(scope: "Scope", value: Any, dtype: DType | None = None,
               hint: DType | None = None) -> "Output":
    """``value`` as an Output: an Operand's, else a Const of ``dtype`` (exactly), or of
    ``hint`` when it converts to it exactly and of its own dtype otherwise."""
    from .builder import as_operand
    operand = as_operand(value)
    if operand is not None:
        return operand
    if hint is not None:
        try:
            return scope.constant(value, dtype=hint)
        except InvalidDTypeError:
            pass
    return scope.constant(value, dtype=dtype)


def getitem(x: "Output", key: Any) -> "Output":
    """``x[key]`` as TensorFlow's ``__getitem__`` reads it, for the keys a Slice can
    serve: ints (negative ones count from the end of a known dim), slices of step 1
    (clamped as Python's), ``...`` and None (a new dim of 1). An int index outside a
    known dim is an InvalidArgumentError at build time. What a Slice cannot serve (a
    step other than 1; a negative index, a negative start or any stop on a dim unknown
    at build time) is one StridedSlice, as TensorFlow builds every ``__getitem__``."""
    rank = x.shape.rank
    items = list(key) if isinstance(key, tuple) else [key]
    for item in items:
        if not (item is None or item is Ellipsis or isinstance(item, slice)
                or _is_int(item)):
            raise TypeError(f"Only integers, slices (`:`), ellipsis (`...`) and None "
                            f"(`newaxis`) are valid indices of an Output, got {item!r}")
    if sum(item is Ellipsis for item in items) > 1:
        raise InvalidArgumentError("An index can only have a single ellipsis ('...')")
    if rank is None:
        return _strided_getitem(x, items)
    consumed = sum(item is not None and item is not Ellipsis for item in items)
    if consumed > rank:
        raise InvalidArgumentError(
            f"Index {key!r} has {consumed} indices for {x.name} of rank {rank}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (rank - consumed)
    else:
        items += [slice(None)] * (rank - consumed)
    if not all(_slice_serves(x, d, item) for d, item in _consuming(items)):
        return _strided_getitem(x, list(key) if isinstance(key, tuple) else [key])
    begin, size, squeezed, new_axes = [], [], [], []
    dim, out_pos = 0, 0
    for item in items:
        if item is None:
            new_axes.append(out_pos)
            out_pos += 1
            continue
        b, n = _slice_bounds(x, dim, item)
        begin.append(b)
        size.append(n)
        if isinstance(item, slice):
            out_pos += 1
        else:
            squeezed.append(dim)
        dim += 1
    scope = scope_of(x)
    out = x
    if any(b != 0 or n != -1 for b, n in zip(begin, size)):
        index_type = "int64" if max(map(abs, begin + size), default=0) > 2 ** 31 - 1 else "int32"
        out = scope.slice(x, np.array(begin, index_type), np.array(size, index_type))
    if squeezed:
        out = scope.squeeze(out, squeeze_dims=squeezed)
    for axis in new_axes:
        out = scope.expand_dims(out, axis)
    return out


def _consuming(items: list) -> list[tuple[int, Any]]:
    """(input dim, index) of each index that consumes a dim (not None)."""
    found, dim = [], 0
    for item in items:
        if item is not None:
            found.append((dim, item))
            dim += 1
    return found


def _slice_serves(x: "Output", dim: int, item: Any) -> bool:
    """Whether a Slice (with Squeeze) serves index ``item`` of dim ``dim``: a step of 1,
    and on a dim unknown at build time no end and nothing counted from the end."""
    if not isinstance(item, slice):
        return x.shape[dim] is not None or int(item) >= 0
    if item.step not in (None, 1):
        return False
    if x.shape[dim] is not None:
        return True
    return (item.start is None or int(item.start) >= 0) and item.stop is None


def _strided_getitem(x: "Output", items: list) -> "Output":
    """``x[items]`` as one StridedSlice, built exactly as TensorFlow's ``__getitem__``
    builds it (masks for ``:``, ``...``, None and int indices)."""
    begin, end, strides = [], [], []
    masks = dict.fromkeys(("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                           "shrink_axis_mask"), 0)
    for i, item in enumerate(items):
        bit = 1 << i
        if isinstance(item, slice):
            for name, bound, values in (("begin_mask", item.start, begin),
                                        ("end_mask", item.stop, end)):
                if bound is None:
                    masks[name] |= bit
                values.append(0 if bound is None else _index(bound))
            strides.append(1 if item.step is None else _index(item.step))
        elif item is Ellipsis or item is None:
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["ellipsis_mask" if item is Ellipsis else "new_axis_mask"] |= bit
        else:
            begin.append(int(item))
            end.append(int(item) + 1)
            strides.append(1)
            masks["shrink_axis_mask"] |= bit
    values = begin + end + strides
    index_type = "int64" if max(map(abs, values), default=0) > 2 ** 31 - 1 else "int32"
    return scope_of(x).strided_slice(x, np.array(begin, index_type), np.array(end, index_type),
                                     np.array(strides, index_type), **masks)


def _index(bound: Any) -> int:
    if not _is_int(bound):
        raise TypeError(f"Slice indices must be integers or None, got {bound!r}")
    return int(bound)


def _is_int(item: Any) -> bool:
    return isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_))


def _slice_bounds(x: "Output", dim: int, item: Any) -> tuple[int, int]:
    """(begin, size) of a Slice for one index of dim ``dim`` (one :func:`_slice_serves`);
    size -1: the rest."""
    d = x.shape[dim]
    if not isinstance(item, slice):
        k = int(item)
        if d is not None:
            if not -d <= k < d:
                raise InvalidArgumentError(f"slice index {k} of dimension {dim} out of bounds "
                                           f"for {x.name} of shape {x.shape}")
            return k % d, 1
        return k, 1
    if d is not None:
        start, stop, _ = item.indices(d)
        return start, max(0, stop - start)
    return (0 if item.start is None else int(item.start)), -1
