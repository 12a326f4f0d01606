"""Feeding values: one rule for every kind of array, TensorFlow 1.x Session's.

TF1's ``Session.run`` converts a fed value with ``np.asarray(value,
dtype=placeholder_dtype)``, and so does graphflow, through :func:`feed_array`,
for numpy arrays, Python scalars and (nested) lists, and any object with
``__array__`` or ``__dlpack__`` (torch, jax) or ``__cuda_array_interface__``
(cupy, cast on its device). numpy's cast decides the value: float64 into
float32 rounds, 1.5 into int32 truncates to 1, ``"7"`` into int32 parses,
complex into a real dtype keeps the real part, and NaN or an out-of-range
float into an integer is undefined (as in TensorFlow).

Refused with a TypeError (``InvalidDTypeError``), as TF1 refuses them: a
Python int the dtype cannot hold exactly (300 into uint8, 2**40 into int32,
2**53 + 1 into float64, as TF1 checks Python ints; graphflow also checks the
Python ints in lists, while numpy ints in a list are cast as numpy casts them),
anything but strings into a string tensor (``[1, "a"]`` too, which numpy would
turn into strings), None, and a graph Output or Operation. An empty value
(``[]``, ``[[]]``) feeds any dtype, string included. Refused with a ValueError (``InvalidArgumentError``):
strings numpy cannot parse (``"a"`` into int32), ragged lists, a shape the
placeholder does not allow.

An array that already has the placeholder's dtype is not copied: kernels get a
read-only view of it (a fed value is never written). A masked array or another
ndarray subclass is fed as its plain data, as ``np.asarray`` gives it.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

from graphflow.convert import leaves, shared_array, to_array
from graphflow.dtypes import DType, string
from graphflow.errors import InvalidArgumentError, InvalidDTypeError
from graphflow.graph import Operation, Output


def feed_array(value: Any, dtype: DType, name: str) -> Any:
    """``value`` as an array of ``dtype`` for the tensor ``name``, by TF1's rule (see
    the module docstring): a read-only numpy array, or a device array (cupy)."""
    np_dtype = dtype.as_numpy_dtype
    if type(value) is np.ndarray and value.dtype == np_dtype and np_dtype.kind != "O":
        return _read_only_view(value)  # the common case, first
    if value is None or isinstance(value, (Output, Operation)) or callable(
            getattr(value, "as_output", None)):
        raise InvalidDTypeError(
            f"The value of a feed cannot be {_kind_of(value)} (Tensor '{name}'): feed Python "
            f"scalars, strings, lists, numpy arrays or objects with __array__ or __dlpack__")
    try:
        shared = shared_array(value)  # __dlpack__ / __array__ objects: no copy
    except (TypeError, ValueError, RuntimeError, BufferError) as e:  # bf16, device memory...
        raise InvalidArgumentError(f"Cannot feed value for Tensor '{name}': {e}") from None
    if hasattr(shared, "__cuda_array_interface__"):
        return _device_array(shared, dtype, name)
    from_python = not isinstance(shared, (np.ndarray, np.generic))  # scalars, lists, tuples
    try:
        array = np.asarray(shared)  # an ndarray subclass (np.ma, np.matrix): its plain data
    except (ValueError, TypeError, OverflowError, RuntimeError) as e:  # ragged, requires_grad
        raise InvalidArgumentError(f"Cannot feed value for Tensor '{name}': {e}") from None
    if dtype.is_string:
        if array.size == 0:  # [] or [[]] (float64 to numpy): an empty tensor of any dtype
            return _read_only_view(np.empty(array.shape, object))
        if from_python and array.dtype.kind in "SU" and not all(
                isinstance(x, (str, bytes, np.str_, np.bytes_)) for x in leaves(shared)):
            shown = repr(shared) if array.size <= 8 else f"a list of {array.size} values"
            raise InvalidDTypeError(  # numpy made strings of [1, "a"]: TF1 refuses the 1
                f"Cannot feed value {shown} for Tensor '{name}', which has dtype string: a "
                f"string tensor takes strings only")
        return _string_array(array, name)
    if array.dtype == np_dtype:
        return _read_only_view(array)
    return _cast(array, dtype, name, python_value=shared if from_python else None)


def _read_only_view(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def _kind_of(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, Operation):
        return f"a gf.Operation ('{value.name}')"
    if isinstance(value, Output):
        return f"a gf.Output ('{value.name}')"
    return f"a graph element ({type(value).__name__})"


def _string_array(array: np.ndarray, name: str) -> np.ndarray:
    """Strings (str or bytes, any numpy string dtype) as an object array of bytes."""
    if array.dtype.kind not in "SUO":
        raise InvalidDTypeError(f"Cannot feed value of dtype {array.dtype} for Tensor '{name}', "
                                f"which has dtype string")
    try:
        return to_array(array, string)
    except TypeError as e:  # an object array holding something else than strings
        raise InvalidDTypeError(f"Cannot feed value for Tensor '{name}': {e}") from None


def _is_python_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _cast(array: np.ndarray, dtype: DType, name: str, python_value: Any = None) -> np.ndarray:
    """``np.asarray(array, dtype)``: numpy's cast. The Python ints of ``python_value``
    (the fed scalar or list ``array`` was made of) must be held exactly, as TF1's
    Session requires of them; numpy scalars in a list are cast as numpy casts them."""
    np_dtype = dtype.as_numpy_dtype
    source = array
    if python_value is not None and np_dtype.kind in "iu" and array.dtype.kind in "fO" \
            and _has_wide_python_int(python_value):
        return _cast_leaves(python_value, source, dtype, name)
    try:
        with np.errstate(all="ignore"):  # NaN or overflow into an integer: undefined, quietly
            cast = _complex_to_real(array, np_dtype) if array.dtype.kind == "c" \
                and np_dtype.kind in "iuf" else array.astype(np_dtype)
    except OverflowError as e:  # a Python int past int64
        raise _inexact_int(source, dtype, name, e) from None
    except (ValueError, TypeError) as e:  # "a" into int32, objects numpy cannot convert
        raise InvalidArgumentError(f"Cannot feed value for Tensor '{name}': {e}") from None
    if (python_value is not None and source.dtype.kind in "iufO"  # [0, 2**63] is float64
            and _changed(cast, source) and _python_ints_inexact(python_value, np_dtype)):
        raise _inexact_int(source, dtype, name)
    cast.flags.writeable = False
    return cast


def _has_wide_python_int(value: Any) -> bool:
    """Whether a Python int among ``value``'s leaves is past float64's 53 bits."""
    return any(_is_python_int(leaf) and abs(leaf) > 2 ** 53 for leaf in leaves(value))


def _cast_leaves(value: Any, source: np.ndarray, dtype: DType, name: str) -> np.ndarray:
    """A list whose Python ints numpy made float64 of (``[2**63 + 1, np.int64(0)]``:
    the numpy int takes it off uint64), cast leaf by leaf into the integer ``dtype``: a
    Python int exactly or not at all, numpy's numbers as numpy casts them."""
    try:
        with np.errstate(all="ignore"):
            cast = np.array(value, dtype=dtype.as_numpy_dtype)
    except OverflowError as e:  # a Python int the dtype cannot hold
        raise _inexact_int(source, dtype, name, e) from None
    except (ValueError, TypeError) as e:
        raise InvalidArgumentError(f"Cannot feed value for Tensor '{name}': {e}") from None
    cast.flags.writeable = False
    return cast


def _complex_to_real(array: np.ndarray, np_dtype) -> np.ndarray:
    """numpy's own cast, which keeps the real part, without its ComplexWarning. Not a
    cast of ``array.real``: that strided view takes another numpy loop, whose results
    for values outside an integer type's range (undefined in C) differ from TF1's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        return array.astype(np_dtype)


def _changed(cast: np.ndarray, source: np.ndarray) -> bool:
    """Whether casting ``source`` to ``cast`` changed a value. Integers cast to floats
    go back to their own type to be compared (numpy compares int64 with float64 as
    float64: 2**53 + 1 would equal its rounded 2**53)."""
    if source.dtype.kind in "iu" and cast.dtype.kind in "fc":
        real = cast.real
        with np.errstate(all="ignore"):
            back = np.where(np.isfinite(real), real, 0).astype(source.dtype)
        return not (np.isfinite(real) & (back == source)).all()
    return not np.array_equal(cast, source)


def _python_ints_inexact(value: Any, np_dtype: np.dtype) -> bool:
    """Whether a Python int among ``value``'s leaves changes when cast to ``np_dtype``
    (only asked once the whole cast changed something: a rare path)."""
    for leaf in leaves(value):
        if _is_python_int(leaf):
            try:
                with np.errstate(all="ignore"):
                    held = np.array(leaf).astype(np_dtype)[()]
            except OverflowError:  # past int64 / uint64
                return True
            if np.iscomplexobj(held):
                held = held.real
            # compared in Python: exact (numpy would compare 2**53 + 1 as a float64)
            if not np.isfinite(held) or int(held) != leaf:
                return True
    return False


def _inexact_int(source: np.ndarray, dtype: DType, name: str,
                 cause: Exception | None = None) -> InvalidDTypeError:
    shown = source.tolist() if source.size <= 8 else f"an array of {source.size} Python ints"
    return InvalidDTypeError(
        f"Type of feed value {shown} is not compatible with Tensor '{name}' of dtype "
        f"{dtype.name}: it cannot hold the value exactly"
        + (f" ({cause})" if cause is not None else "")
        + "; feed a numpy array of that dtype, or use a larger dtype")


def _device_array(array: Any, dtype: DType, name: str) -> Any:
    """A device array (cupy), cast on its device by the same rule."""
    if dtype.is_string:
        raise InvalidDTypeError(f"Cannot feed a device array of dtype {array.dtype} for Tensor "
                                f"'{name}', which has dtype string")
    np_dtype = dtype.as_numpy_dtype
    if array.dtype == np_dtype:
        return array
    if array.dtype.kind == "c" and np_dtype.kind in "iuf":
        array = array.real
    try:
        return array.astype(np_dtype)
    except (ValueError, TypeError) as e:
        raise InvalidArgumentError(f"Cannot feed value for Tensor '{name}': {e}") from None


def feed_checker(out: Output) -> Callable[[Any], Any]:
    """A function that turns one fed value for ``out`` into what its readers get
    (:func:`feed_array`), and checks it against ``out``'s static shape."""
    dtype, name = out.dtype, out.name
    static = out.shape.as_tuple()
    if static is None:
        return lambda value: feed_array(value, dtype, name)
    known = tuple((k, d) for k, d in enumerate(static) if d is not None)
    rank = len(static)

    def check(value):
        value = feed_array(value, dtype, name)
        shape = value.shape
        if shape != static:  # a fully known shape matches at once
            if len(shape) != rank or any(shape[k] != d for k, d in known):
                raise InvalidArgumentError(
                    f"Cannot feed value of shape {tuple(shape)} for Tensor '{name}', which has "
                    f"shape {out.shape}")
        return value
    return check
