"""Turning Python and numpy values into constant arrays, with TensorFlow's rules:
Python ints become int32 (int64 if they do not fit), floats float32, str/bytes
string; numpy arrays keep their dtype."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes
from .dtypes import DType

_INT32 = np.iinfo(np.int32)


def _to_bytes(x: Any) -> bytes:
    if isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, np.bytes_):
        return bytes(x)
    raise TypeError(f"Cannot convert {x!r} to a string tensor element")


def _string_array(value: Any) -> np.ndarray:
    arr = np.asarray(value, dtype=object)
    flat = [_to_bytes(x) for x in arr.reshape(-1)]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(arr.shape)


def to_array(value: Any, dtype: DType | None = None) -> np.ndarray:
    """A new read-only numpy array holding ``value`` as ``dtype`` (or the inferred type).

    Raises TypeError when the value cannot be represented exactly in ``dtype``
    (e.g. 1.5 as int32, 300 as uint8, a string as a number).
    """
    if dtype is not None and dtype.is_string:
        arr = _string_array(value)
    elif isinstance(value, (np.ndarray, np.generic)):
        arr = np.array(value, copy=True)
        if arr.dtype.kind in "SUO":
            arr = _string_array(arr)
        if dtype is not None:
            arr = _cast_exactly(arr, dtype, value)
    else:
        probe = np.asarray(value)
        if probe.dtype.kind in "SUO":
            if dtype is not None and not dtype.is_string:
                raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {dtype.name}")
            arr = _string_array(probe)
        elif dtype is not None:
            arr = _cast_exactly(probe, dtype, value)
        elif probe.dtype.kind in "iu":
            fits = probe.size == 0 or (probe.min() >= _INT32.min and probe.max() <= _INT32.max)
            arr = probe.astype(np.int32 if fits else np.int64)
        elif probe.dtype.kind == "f":
            arr = probe.astype(np.float32)
        else:
            arr = np.array(probe, copy=True)
    if arr.dtype.kind not in "O" and dtypes.as_dtype(arr.dtype) is None:  # pragma: no cover
        raise TypeError(f"Unsupported dtype {arr.dtype}")
    arr.flags.writeable = False
    return arr


def _cast_exactly(arr: np.ndarray, dtype: DType, original: Any) -> np.ndarray:
    target = dtype.as_numpy_dtype
    if arr.dtype == target:
        return np.array(arr, copy=True)
    src = arr.dtype.kind
    ok = {
        "float": src in "biuf",
        "complex": src in "biufc",
        "int": src in "biu",
        "uint": src in "biu",
        "bool": src == "b",
    }.get(dtype.kind, False)
    if ok:
        with np.errstate(all="ignore"):
            cast = arr.astype(target)
        if src in "iu" and dtype.is_integer and not np.array_equal(cast.astype(arr.dtype), arr):
            ok = False
    if not ok:
        shown = original if np.size(original) <= 8 else f"array of {arr.dtype}"
        raise TypeError(f"Cannot convert {shown!r} to a tensor of dtype {dtype.name}")
    return cast


def inferred_dtype(value: Any) -> DType:
    """The dtype ``to_array(value)`` would give."""
    return dtypes.as_dtype(to_array(value).dtype)
