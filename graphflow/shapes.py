"""Partially known shapes, as TensorFlow's ``TensorShape``.

A shape has an unknown rank (``dims is None``) or a tuple of dims, each an int
or None (unknown). All operations are pure: a TensorShape never changes.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from .errors import InvalidArgumentError


def _as_dim(value) -> int | None:
    if value is None:
        return None
    if hasattr(value, "value") and not isinstance(value, (int, np.integer)):
        value = value.value  # a tf.compat.v1.Dimension-like object
        if value is None:
            return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"A shape dimension must be an int or None, got {value!r}")
    value = int(value)
    if value < 0:
        if value == -1:
            return None  # TensorFlow's spelling of "unknown" in shape attrs
        raise InvalidArgumentError(f"Dimension {value} must be >= 0")
    return value


class TensorShape:
    """A shape with possibly unknown dims or an unknown rank."""

    __slots__ = ("_dims",)

    def __init__(self, dims: "Iterable | TensorShape | None"):
        if isinstance(dims, TensorShape):
            self._dims = dims._dims
        elif dims is None:
            self._dims = None
        elif isinstance(dims, (int, np.integer)):
            self._dims = (_as_dim(dims),)
        else:
            self._dims = tuple(_as_dim(d) for d in dims)

    @classmethod
    def unknown(cls, rank: int | None = None) -> "TensorShape":
        return cls(None if rank is None else [None] * rank)

    # -- views -----------------------------------------------------------
    @property
    def rank(self) -> int | None:
        return None if self._dims is None else len(self._dims)

    ndims = rank

    @property
    def dims(self) -> list[int | None] | None:
        return None if self._dims is None else list(self._dims)

    def as_list(self) -> list[int | None]:
        if self._dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self._dims)

    def as_tuple(self) -> tuple[int | None, ...] | None:
        return self._dims

    def is_fully_defined(self) -> bool:
        return self._dims is not None and None not in self._dims

    def num_elements(self) -> int | None:
        """The number of elements, exact (a Python int: it never wraps); None unless
        fully defined."""
        if not self.is_fully_defined():
            return None
        return math.prod(self._dims)

    def __len__(self) -> int:
        if self._dims is None:
            raise ValueError("Cannot take the length of a shape with unknown rank.")
        return len(self._dims)

    def __iter__(self):
        if self._dims is None:
            raise ValueError("Cannot iterate over a shape with unknown rank.")
        return iter(self._dims)

    def __getitem__(self, key):
        if isinstance(key, slice):
            if self._dims is None:
                # Slicing an unknown rank: the result has unknown rank too,
                # except for a fully bounded positive slice whose length is known.
                start, stop, step = key.start, key.stop, key.step
                if step in (None, 1) and start is not None and stop is not None \
                        and start >= 0 and stop >= start:
                    return TensorShape.unknown(stop - start)
                return TensorShape(None)
            return TensorShape(self._dims[key])
        if self._dims is None:
            return None
        return self._dims[key]

    # -- relations -------------------------------------------------------
    def is_compatible_with(self, other) -> bool:
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return True
        if len(self._dims) != len(other._dims):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self._dims, other._dims))

    def merge_with(self, other) -> "TensorShape":
        """The most specific shape compatible with both; ValueError if none."""
        other = as_shape(other)
        if self._dims is None:
            return other
        if other._dims is None:
            return self
        if len(self._dims) != len(other._dims):
            raise ValueError(f"Shapes {self} and {other} must have the same rank")
        merged = []
        for a, b in zip(self._dims, other._dims):
            if a is not None and b is not None and a != b:
                raise ValueError(f"Shapes {self} and {other} are not compatible")
            merged.append(a if a is not None else b)
        return TensorShape(merged)

    def concatenate(self, other) -> "TensorShape":
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return TensorShape(None)
        return TensorShape(self._dims + other._dims)

    def with_rank(self, rank: int) -> "TensorShape":
        return self.merge_with(TensorShape.unknown(rank))

    def with_rank_at_least(self, rank: int) -> "TensorShape":
        if self._dims is not None and len(self._dims) < rank:
            raise ValueError(f"Shape {self} must have rank at least {rank}")
        return self

    def broadcast_with(self, other) -> "TensorShape":
        """NumPy/TensorFlow broadcasting of two shapes; ValueError if impossible."""
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return TensorShape(None)
        a, b = self._dims, other._dims
        n = max(len(a), len(b))
        a = (1,) * (n - len(a)) + a
        b = (1,) * (n - len(b)) + b
        out = []
        for x, y in zip(a, b):
            if x == 1:
                out.append(y)
            elif y == 1:
                out.append(x)
            elif x is None:
                out.append(y)  # y is unknown or > 1: the result is y (or an error at run time)
            elif y is None:
                out.append(x)
            elif x == y:
                out.append(x)
            else:
                raise ValueError(f"Incompatible shapes: {self} vs. {other}")
        return TensorShape(out)

    # -- identity --------------------------------------------------------
    def __eq__(self, other) -> bool:
        try:
            other = as_shape(other)
        except (TypeError, ValueError):
            return NotImplemented
        return self._dims == other._dims

    def __hash__(self) -> int:
        return hash(self._dims)

    def __repr__(self) -> str:
        return f"TensorShape({self.dims!r})" if self._dims is not None else "TensorShape(None)"

    def __str__(self) -> str:
        """TensorFlow's debug form: ``[4,?,3]``, ``<unknown>``."""
        if self._dims is None:
            return "<unknown>"
        return "[" + ",".join("?" if d is None else str(d) for d in self._dims) + "]"


#: The most elements a tensor may have: TensorFlow counts them in an int64.
MAX_ELEMENTS = 2 ** 63 - 1

#: TensorFlow's TensorShape::MaxDimensions: no tensor has more dims.
MAX_RANK = 254


def check_not_too_large(shape: TensorShape) -> TensorShape:
    """``shape``, or an InvalidArgumentError if TensorFlow rejects it as too large: its dims,
    multiplied in order up to the first unknown one, pass int64 (TensorFlow's running
    count, so [2**62, 4, 0] is too large while [0, 2**62, 4] and [2**62, None, 4] are not),
    or it has more than ``MAX_RANK`` dims."""
    if shape.rank is not None and shape.rank > MAX_RANK:
        raise InvalidArgumentError(f"Shape of rank {shape.rank} has too many dimensions (a "
                                   f"shape has at most {MAX_RANK})")
    count = 1
    for d in shape.dims or ():
        if d is None:
            break
        count *= d
        if count > MAX_ELEMENTS:
            raise InvalidArgumentError(f"Shape {shape} is too large (more than 2**63 - 1 entries)")
    return shape


def most_specific_compatible_shape(a: TensorShape, b: TensorShape) -> TensorShape:
    """The most specific shape both ``a`` and ``b`` have: unknown where they differ
    (TensorFlow's ``most_specific_compatible_shape``)."""
    if a.rank is None or b.rank is None or a.rank != b.rank:
        return TensorShape(None)
    return TensorShape([x if x == y else None for x, y in zip(a.dims, b.dims)])


def within_invariant(shape: TensorShape, invariant: TensorShape) -> bool:
    """Whether ``shape`` is as specific as ``invariant`` or more (TensorFlow's
    ``_ShapeLessThanOrEqual``): every value of ``shape`` has a shape ``invariant`` allows."""
    if invariant.rank is None:
        return True
    return shape.rank == invariant.rank and all(
        b is None or a == b for a, b in zip(shape.dims, invariant.dims))


def as_shape(value) -> TensorShape:
    return value if isinstance(value, TensorShape) else TensorShape(value)


def shape_of(array: np.ndarray) -> TensorShape:
    return TensorShape(array.shape)


def debug_string(dims: Sequence[int]) -> str:
    """A concrete shape as TensorFlow prints it in kernel errors: ``[4,4,4]``."""
    return "[" + ",".join(str(int(d)) for d in dims) + "]"
