"""Turning Python and numpy values into constant arrays, with TensorFlow's rules:
numpy arrays and scalars keep their dtype; a Python value (scalar or nested
list) takes the dtype numpy infers for it, except that float64 becomes float32
and int64 int32 when every value fits (so ints are int32, int64 past int32,
uint64 past int64, and ``[np.int8(1)]`` stays int8); str/bytes are string.
An empty value converts to any dtype. Conversion to a requested dtype is exact
or a TypeError (1.5 and 1.0 are not int32s)."""
from __future__ import annotations

import math
import os
from typing import Any, Callable

import numpy as np

from . import dtypes
from .dtypes import DType
from .errors import InvalidArgumentError, ResourceExhaustedError
from .shapes import TensorShape, check_not_too_large

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
    (e.g. 1.5 as int32, 300 as uint8, a string as a number), or when a Python
    value mixes strings with other things or holds what is no number
    (``[1, "b"]``, ``[None]``, ``2**64``); ValueError for None and ragged lists.
    """
    if value is None:
        raise ValueError("None values not supported.")
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.array(value, copy=True)
        if not arr.dtype.isnative and arr.dtype.fields is None:  # '>i4': held as int32
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if arr.dtype.kind in "SUO" or (dtype is not None and dtype.is_string):
            arr = _string_array(arr)
        if dtype is not None and not dtype.is_string:
            arr = _cast_exactly(arr, dtype, value)
    else:
        probe = np.asarray(value)
        if probe.dtype.kind in "SUO":
            if not all(isinstance(x, _STRING_TYPES) for x in leaves(value)):
                raise TypeError(_not_convertible(value))
            if dtype is not None and not dtype.is_string and probe.size:
                raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {dtype.name}")
            arr = _string_array(value)
        elif dtype is not None and dtype.is_string:
            if probe.size:
                raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {dtype.name}")
            arr = _string_array(probe)
        elif dtype is not None:
            # np.asarray built a new array from a list or a Python scalar: no second copy
            fresh = isinstance(value, (list, tuple, int, float, complex))
            arr = _cast_exactly(probe, dtype, value, copy=not fresh)
        elif isinstance(value, (list, tuple, int, float, complex)):
            arr = _preferred_width(probe)
        else:  # an array-like object (``__array__``): its dtype, as a numpy array's
            arr = np.array(probe, copy=True)
    if arr.dtype.kind not in "O" and dtypes.as_dtype(arr.dtype) is None:  # pragma: no cover
        raise TypeError(f"Unsupported dtype {arr.dtype}")
    arr.flags.writeable = False
    return arr


_STRING_TYPES = (str, bytes, np.str_, np.bytes_)


def leaves(value: Any):
    """The scalars of a (nested) list or tuple, in order; a scalar is its own leaf."""
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from leaves(item)
    else:
        yield value


def _not_convertible(value: Any) -> str:
    if any(callable(getattr(x, "as_output", None)) for x in leaves(value)):
        return "Expected any non-tensor type, but got a tensor instead."
    return (f"Failed to convert elements of {value!r} to Tensor. Consider casting elements to a "
            "supported type.")


def _preferred_width(probe: np.ndarray) -> np.ndarray:
    """A Python value's array at TensorFlow's preferred width: float64 becomes float32,
    int64 int32 when every value fits; other dtypes (from numpy scalars in a list, or
    uint64 for ints past int64) stay as numpy inferred them."""
    if probe.dtype == np.float64:
        return probe.astype(np.float32)
    if probe.dtype == np.int64:
        fits = probe.size == 0 or (probe.min() >= _INT32.min and probe.max() <= _INT32.max)
        return probe.astype(np.int32) if fits else np.array(probe, copy=True)
    return np.array(probe, copy=True)


def _cast_exactly(arr: np.ndarray, dtype: DType, original: Any, copy: bool = True) -> np.ndarray:
    target = dtype.as_numpy_dtype
    if arr.dtype == target:
        return np.array(arr, copy=True) if copy else arr
    if arr.size == 0:  # nothing to lose: [] and np.array([]) are empty tensors of any dtype
        return np.empty(arr.shape, target)
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


def with_shape(array: np.ndarray, shape: Any) -> np.ndarray:
    """``array`` as a tensor of ``shape``, as ``tf.constant(value, shape=shape)`` makes
    it: a scalar or a one-element vector is broadcast, a value with as many elements
    is reshaped; anything else (or a shape with unknown dims) is a TypeError."""
    dims = TensorShape(shape).dims
    if dims is None or None in dims:
        raise TypeError(f"Expected a fully defined shape for a constant, got {shape!r}")
    check_not_too_large(TensorShape(dims))
    if array.shape == tuple(dims):
        return array
    if array.shape in ((), (1,)):
        out = _filled(array.reshape(()), dims)
    elif array.size == math.prod(dims):
        out = array.reshape(dims)
    else:
        raise TypeError(f"Expected Tensor's shape: {tuple(dims)}, but got {array.shape}.")
    out.flags.writeable = False
    return out


def _filled(scalar: np.ndarray, dims: list[int]) -> np.ndarray:
    """``scalar`` broadcast to ``dims``, allocated; a ResourceExhaustedError (not numpy's
    MemoryError, nor a process killed for memory) when it cannot be: past the machine's
    memory, checked before anything is allocated."""
    n = math.prod(dims)
    nbytes = n * (8 if scalar.dtype.kind == "O" else scalar.dtype.itemsize)
    try:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        available = None
    refusal = (f"OOM when allocating a constant with {n} elements of type "
               f"{dtypes.as_dtype(scalar.dtype).name} ({nbytes} bytes)")
    if available is not None and nbytes > available:
        raise ResourceExhaustedError(f"{refusal}: more than the machine's {available} bytes")
    try:
        return np.array(np.broadcast_to(scalar, dims))
    except MemoryError:
        raise ResourceExhaustedError(refusal) from None


def inferred_dtype(value: Any) -> DType:
    """The dtype ``to_array(value)`` would give."""
    return dtypes.as_dtype(to_array(value).dtype)


def from_little_endian(raw: bytes, count: int, dtype: DType, *,
                       wrong_size: Callable[[int], str], bad_bool: str) -> np.ndarray:
    """``count`` values of ``dtype`` (not string) from exactly their little-endian bytes,
    as an owned, native-order, flat array: how GraphDefs and TensorProtos store tensors.
    A byte count other than ``count * itemsize`` is an InvalidArgumentError with
    ``wrong_size(needed bytes)``; a bool byte other than 0 or 1 one with ``bad_bool``."""
    need = count * dtype.itemsize
    if len(raw) != need:
        raise InvalidArgumentError(wrong_size(need))
    if dtype.is_bool and any(b > 1 for b in raw):
        raise InvalidArgumentError(bad_bool)
    array = np.frombuffer(raw, dtype=np.dtype(dtype.as_numpy_dtype).newbyteorder("<"))
    return array.astype(dtype.as_numpy_dtype)  # native order, an owned copy
