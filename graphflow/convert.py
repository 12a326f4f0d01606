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


#: DLPack device types numpy reads directly: kDLCPU, kDLCUDAHost, kDLROCMHost.
_HOST_DLPACK_DEVICES = (1, 3, 11)
#: DLPack device types cupy reads: kDLCUDA, kDLCUDAManaged.
_CUDA_DLPACK_DEVICES = (2, 13)


def shared_array(value: Any) -> Any:
    """``value`` as an array sharing its memory, when it comes from another array
    library: an object with ``__dlpack__`` becomes a numpy array (host memory,
    ``np.from_dlpack``) or a cupy array (CUDA memory, when cupy is installed);
    otherwise an object with ``__array__`` becomes ``np.asarray(value)``.
    numpy and cupy arrays, lists and scalars come back unchanged.

    Raises TypeError for DLPack memory on a device graphflow cannot read.
    """
    if isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "__cuda_array_interface__"):
        return value
    if hasattr(value, "__dlpack__"):
        try:
            device = value.__dlpack_device__()[0]
        except Exception:  # noqa: BLE001 - no or a broken __dlpack_device__: let numpy try
            device = None
        cupy = None
        if device in _CUDA_DLPACK_DEVICES:
            try:
                import cupy
            except ImportError:
                pass
        reader = (np.from_dlpack if device is None or device in _HOST_DLPACK_DEVICES
                  else cupy.from_dlpack if cupy is not None else None)
        if reader is not None:
            try:
                return reader(value)
            except (BufferError, TypeError, ValueError, RuntimeError, AttributeError):
                pass  # e.g. a dtype DLPack cannot carry: __array__ may still work
        elif not hasattr(value, "__array__"):
            raise TypeError(f"{type(value).__name__} lives on DLPack device type {device}, which "
                            + ("graphflow reads only through cupy (not installed)"
                               if device in _CUDA_DLPACK_DEVICES else "graphflow cannot read"))
    if hasattr(value, "__array__"):
        return np.asarray(value)
    return value


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
            # np.asarray built a new array from a list or a Python scalar: no second copy
            fresh = isinstance(value, (list, tuple, int, float, complex))
            arr = _cast_exactly(probe, dtype, value, copy=not fresh)
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


def _cast_exactly(arr: np.ndarray, dtype: DType, original: Any, copy: bool = True) -> np.ndarray:
    target = dtype.as_numpy_dtype
    if arr.dtype == target:
        return np.array(arr, copy=True) if copy else arr
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
