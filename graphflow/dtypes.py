"""Element types: a small closed set mirroring TensorFlow's, mapped to numpy.

A string tensor is a numpy object array of ``bytes`` (as ``tf.Tensor.numpy()``
gives it).
"""
from __future__ import annotations

from typing import Any

import numpy as np


class DType:
    """One element type. Compare with ``==``; ``as_numpy_dtype`` maps to numpy."""

    __slots__ = ("name", "as_numpy_dtype", "kind")

    def __init__(self, name: str, np_dtype: Any, kind: str):
        self.name = name
        self.as_numpy_dtype = np.dtype(np_dtype)
        self.kind = kind  # "float", "int", "uint", "bool", "complex", "string"

    @property
    def is_floating(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "uint"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def is_string(self) -> bool:
        return self.kind == "string"

    @property
    def is_numeric(self) -> bool:
        return self.kind in ("float", "int", "uint", "complex")

    @property
    def itemsize(self) -> int:
        return self.as_numpy_dtype.itemsize

    def zero(self) -> Any:
        """The value a fresh tensor of this type starts from (b"" for string)."""
        return b"" if self.is_string else self.as_numpy_dtype.type(0)

    def __repr__(self) -> str:
        return f"gf.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (as_dtype, (self.name,))


float16 = DType("float16", np.float16, "float")
float32 = DType("float32", np.float32, "float")
float64 = DType("float64", np.float64, "float")
int8 = DType("int8", np.int8, "int")
int16 = DType("int16", np.int16, "int")
int32 = DType("int32", np.int32, "int")
int64 = DType("int64", np.int64, "int")
uint8 = DType("uint8", np.uint8, "uint")
uint16 = DType("uint16", np.uint16, "uint")
uint32 = DType("uint32", np.uint32, "uint")
uint64 = DType("uint64", np.uint64, "uint")
bool_ = DType("bool", np.bool_, "bool")
complex64 = DType("complex64", np.complex64, "complex")
complex128 = DType("complex128", np.complex128, "complex")
string = DType("string", object, "string")

ALL_TYPES: tuple[DType, ...] = (
    float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32,
    uint64, bool_, complex64, complex128, string)
FLOAT_TYPES = (float16, float32, float64)
INTEGER_TYPES = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
COMPLEX_TYPES = (complex64, complex128)
REAL_NUMBER_TYPES = FLOAT_TYPES + INTEGER_TYPES
NUMBER_TYPES = REAL_NUMBER_TYPES + COMPLEX_TYPES
INDEX_TYPES = (int32, int64)
#: Every dtype but string: what numeric and GPU kernels accept.
NON_STRING_TYPES = tuple(t for t in ALL_TYPES if t is not string)


def non_string(types) -> tuple:
    """``types`` without string: what a GPU kernel (cupy) or a numeric path takes."""
    return tuple(t for t in types if not t.is_string)

_BY_NAME = {t.name: t for t in ALL_TYPES}
_BY_NAME.update({"bool_": bool_, "half": float16, "float": float32, "double": float64,
                 "str": string, "bytes": string, "object": string})
_BY_NUMPY = {t.as_numpy_dtype: t for t in ALL_TYPES if t is not string}


def as_dtype(value: Any) -> DType:
    """The DType for a DType, a name (``"int32"``), a numpy dtype or a Python type."""
    if isinstance(value, DType):
        return value
    if value is None:  # numpy would read None as float64: a placeholder(None) typo
        raise TypeError("Cannot convert the argument `type_value`: None to a graphflow DType.")
    if isinstance(value, str):
        try:
            return _BY_NAME[value]
        except KeyError:
            raise TypeError(f"Unknown dtype name {value!r}") from None
    if value in (bytes, str):
        return string
    if value is bool:
        return bool_
    if value is int:
        return int32
    if value is float:
        return float32
    if value is complex:
        return complex128
    try:
        np_dtype = np.dtype(value)
    except TypeError:
        raise TypeError(f"Cannot convert {value!r} to a graphflow dtype") from None
    if np_dtype.kind in "OSU":
        return string
    if not np_dtype.isnative and np_dtype.fields is None:  # '>i4': int32, as in TensorFlow
        np_dtype = np_dtype.newbyteorder("=")
    try:
        return _BY_NUMPY[np_dtype]
    except KeyError:
        raise TypeError(f"numpy dtype {np_dtype} has no graphflow equivalent") from None


def dtype_of_array(array: np.ndarray) -> DType:
    """The DType of a numpy array (object, bytes and str arrays are string)."""
    return as_dtype(array.dtype)
