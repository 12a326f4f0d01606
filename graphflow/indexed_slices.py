"""IndexedSlices: a sparse tensor of whole rows, the gradient of a gather.

``values[i]`` is row ``indices[i]`` of a dense tensor of shape ``dense_shape``;
duplicate indices sum. The gradient of a depth-1 GatherNd w.r.t. its params is
one, so that an optimizer can update only the rows a step touched, as
TensorFlow's ``tf.IndexedSlices``.
"""
from __future__ import annotations

from typing import Any

from .builder import as_operand
from .dtypes import DType, int64
from .errors import InvalidArgumentError
from .graph import Graph, Output
from .shapes import TensorShape


class IndexedSlices:
    """Rows ``values`` at ``indices`` (1-D) of a tensor of shape ``dense_shape`` (1-D)."""

    __slots__ = ("values", "indices", "dense_shape", "_dense")

    def __init__(self, values: Output, indices: Output, dense_shape: Output):
        for what, t in (("values", values), ("indices", indices), ("dense_shape", dense_shape)):
            if not isinstance(t, Output):
                raise TypeError(f"IndexedSlices {what} must be an Output, got {t!r}")
        if indices.dtype != dense_shape.dtype:
            raise InvalidArgumentError(
                f"IndexedSlices indices ({indices.dtype.name}) and dense_shape "
                f"({dense_shape.dtype.name}) must have one dtype")
        if not indices.shape.is_compatible_with(TensorShape([None])):
            raise InvalidArgumentError(f"IndexedSlices indices must be 1-D, got {indices.shape}")
        if not dense_shape.shape.is_compatible_with(TensorShape([None])):
            raise InvalidArgumentError(
                f"IndexedSlices dense_shape must be 1-D, got {dense_shape.shape}")
        rows = indices.shape[0] if indices.shape.rank else None
        if values.shape.rank == 0 or (values.shape.rank is not None and None not in (
                rows, values.shape[0]) and values.shape[0] != rows):
            raise InvalidArgumentError(
                f"IndexedSlices values '{values.name}' of shape {values.shape} must hold one "
                f"row per index of '{indices.name}' (shape {indices.shape})")
        dense_rank = dense_shape.shape[0] if dense_shape.shape.rank else None
        if None not in (dense_rank, values.shape.rank) and dense_rank != values.shape.rank:
            raise InvalidArgumentError(
                f"IndexedSlices values '{values.name}' of shape {values.shape} do not have "
                f"the rank of dense_shape '{dense_shape.name}' ({dense_rank})")
        self.values = values
        self.indices = indices
        self.dense_shape = dense_shape
        self._dense: Output | None = None

    @property
    def dtype(self) -> DType:
        return self.values.dtype

    @property
    def graph(self) -> Graph:
        return self.values.graph

    @property
    def device(self) -> str:
        return self.values.op.device

    @property
    def shape(self) -> TensorShape:
        """The dense tensor's static shape, as far as known."""
        from .inference import shape_from_tensor
        return shape_from_tensor(self.dense_shape).merge_with(
            TensorShape([None]).concatenate(self.values.shape[1:])
            if self.values.shape.rank is not None else TensorShape(None))

    def as_output(self) -> Output:
        """The dense tensor (a ScatterNd of the rows, duplicates summing), built once."""
        if self._dense is None:
            from .scope import Scope
            scope = Scope(self.graph).with_device(self.device).with_sub_scope("IndexedSlices")
            rows = scope.expand_dims(self.indices, -1, name="Rows")
            self._dense = scope.scatter_nd(rows, self.values, self.dense_shape, name="ToDense")
        return self._dense

    def __add__(self, other: Any) -> "IndexedSlices | Output":
        """Slices + slices concatenate (a sum, since duplicates sum); slices + a dense
        tensor is the dense sum."""
        if isinstance(other, IndexedSlices):
            return concat_slices([self, other])
        other_output = as_operand(other)
        if other_output is None:
            return NotImplemented
        from .scope import Scope
        return Scope(self.graph).with_device(self.device).add(self.as_output(), other_output)

    __radd__ = __add__

    def __neg__(self) -> "IndexedSlices":
        """The negated rows at the same indices (TensorFlow's IndexedSlices.__neg__)."""
        from .scope import Scope
        scope = Scope(self.graph).with_device(self.device).with_sub_scope("IndexedSlicesNeg")
        return IndexedSlices(scope.neg(self.values, name="Values"), self.indices,
                             self.dense_shape)

    def __repr__(self) -> str:
        return (f"<gf.IndexedSlices values={self.values.name} indices={self.indices.name} "
                f"dense_shape={self.dense_shape.name} dtype={self.dtype.name}>")


def concat_slices(parts: list[IndexedSlices], scope=None) -> IndexedSlices:
    """One IndexedSlices holding every row of ``parts`` (their sum).

    Indices of int32 and int64 mix as int64 (TensorFlow casts them so). The parts must
    have one dense shape: a contradiction between static shapes is an error here, one
    left open by them is checked when the sum runs."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    for p in parts[1:]:
        if p.dtype != first.dtype:
            raise InvalidArgumentError(
                f"Cannot add IndexedSlices of {p.dtype.name} ('{p.values.name}') to "
                f"IndexedSlices of {first.dtype.name} ('{first.values.name}')")
    if scope is None:
        from .scope import Scope
        scope = Scope(first.graph).with_device(first.device).with_sub_scope("IndexedSlicesAdd")
    from .inference import shape_from_tensor
    static = [shape_from_tensor(p.dense_shape) for p in parts]  # before any cast
    if len({p.indices.dtype for p in parts}) > 1:
        parts = [_with_int64_indices(scope, p) for p in parts]
    dense_shape = _one_dense_shape(scope, parts, static)
    values = scope.concat([p.values for p in parts], 0, name="Values")
    indices = scope.concat([p.indices for p in parts], 0, name="Indices")
    return IndexedSlices(values, indices, dense_shape)


def _with_int64_indices(scope, p: IndexedSlices) -> IndexedSlices:
    if p.indices.dtype == int64:
        return p
    return IndexedSlices(p.values, scope.cast(p.indices, int64, name="IndicesInt64"),
                         scope.cast(p.dense_shape, int64, name="DenseShapeInt64"))


def _one_dense_shape(scope, parts: list[IndexedSlices], static: list) -> Output:
    """The parts' common dense_shape (their static ``static`` shapes): a build-time error
    where static shapes differ, a run-time check where they do not settle it."""
    first = parts[0]
    dense_shape, known = first.dense_shape, static[0]
    for p, shape in zip(parts[1:], static[1:]):
        if not known.is_compatible_with(shape):
            raise InvalidArgumentError(
                f"Cannot add IndexedSlices with dense_shape {shape} ('{p.dense_shape.name}') "
                f"to IndexedSlices with dense_shape {known} ('{first.dense_shape.name}')")
        if p.dense_shape is first.dense_shape or (
                known.is_fully_defined() and shape.is_fully_defined()):
            continue
        dense_shape = scope.create_op(
            "_AssertEqual", dense_shape, dense_shape, p.dense_shape,
            message=f"Cannot add IndexedSlices with dense_shape {{y}} ('{p.dense_shape.name}') "
                    f"to IndexedSlices with dense_shape {{x}} ('{first.dense_shape.name}')",
            name="DenseShape")
        known = known.merge_with(shape)
    return dense_shape


def convert_to_tensor(value: Any, dtype: DType | str | None = None) -> Output:
    """The Output behind ``value``: an Output or Operand as is, an IndexedSlices densified.

    Raw Python/numpy values need a graph: use ``scope.constant(value)``.
    """
    out = as_operand(value)
    if out is None:
        raise TypeError(f"convert_to_tensor: {value!r} is not an Output, Operand or "
                        f"IndexedSlices; build constants with scope.constant(value)")
    if dtype is not None:
        from .dtypes import as_dtype
        want = as_dtype(dtype)
        if want != out.dtype:
            raise TypeError(f"convert_to_tensor: {out.name} has dtype {out.dtype.name}, "
                            f"requested {want.name}")
    return out
