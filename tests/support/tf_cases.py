"""Decoding the TENSOR dicts of the TensorFlow golden corpora (tests/conformance/
tf_cases*.json, written by their generators) into numpy arrays."""
from __future__ import annotations

import numpy as np

import graphflow as gf


def _number(v):
    return float(v) if isinstance(v, str) else v  # "nan", "inf", "-inf"


def decode(t: dict) -> np.ndarray:
    """``{"dtype", "shape", "data"}`` as an array: strings from latin-1, complex numbers
    from [re, im] pairs, float specials from their names."""
    dtype = gf.as_dtype(t["dtype"])
    data = t["data"]
    if dtype.is_string:
        flat = np.empty(len(data), dtype=object)
        flat[:] = [s.encode("latin-1") for s in data]
    elif dtype.is_complex:
        flat = np.array([complex(_number(re_), _number(im)) for re_, im in data],
                        dtype=dtype.as_numpy_dtype)
    else:
        flat = np.array([_number(v) for v in data], dtype=dtype.as_numpy_dtype)
    return flat.reshape(t["shape"])
