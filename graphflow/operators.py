"""Python's operators on Outputs, as ``tf.Tensor`` defines them in graph mode.

``x + 1``, ``1 + x``, ``x - y``, ``x * y``, ``-x``, ``x < y``, ``x > y`` and, on
bool Outputs, ``&``, ``|``, ``^``, ``~`` build an op in the Output's graph, on its
op's device (a plain Scope: no name prefix, no control dependencies). A raw operand
becomes a Const of the Output's dtype, exactly or not at all (``x + 1.5`` on int32
is a TypeError, as in TensorFlow). ``x / y`` is TensorFlow's ``truediv``: integers
divide as float32 (8 and 16 bits) or float64 (32 and 64 bits). ``==`` and ``!=``
stay identity (Outputs are dict keys), as in TensorFlow's graph mode; ``<=``,
``>=`` and the other operators are left out until the ops they need exist.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .dtypes import (DType, float32, float64, int8, int16, int32, int64, uint8, uint16,
                     uint32, uint64)
from .errors import InvalidDTypeError

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Output
    from .scope import Scope

#: TensorFlow's ``__truediv__``: the float type integers are divided as.
TRUEDIV_FLOAT: dict[DType, DType] = {
    int8: float32, uint8: float32, int16: float32, uint16: float32,
    int32: float64, uint32: float64, int64: float64, uint64: float64}


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
