"""ops/gpu_math.py: the GPU's complex division is numpy's, bit for bit. Found on an H200:
cupy's own (thrust's) quotient differed from the CPU's in the last bit of 26 of 192
complex64 values (tests/gpu/test_gpu_agreement.py, real_div). Here its CUDA kernel runs
compiled for the CPU (tests/support/cuda_emulator.py); tests/gpu/test_gpu_agreement.py runs it on
the real device."""
from __future__ import annotations

import numpy as np
import pytest

from graphflow.ops import gpu_math

from support import cuda_emulator

pytestmark = pytest.mark.skipif(cuda_emulator.COMPILER is None, reason=cuda_emulator.NEEDS)

XP = cuda_emulator.cupy_on_cpu
SPECIAL = [0.0, -0.0, 1.0, -3.5, 1e-30, 1e30, np.inf, -np.inf, np.nan]


def _complex(rng, dtype, shape):
    parts = rng.standard_normal((2,) + shape) * 10.0 ** rng.integers(-3, 4, (2,) + shape)
    return (parts[0] + 1j * parts[1]).astype(dtype)


def _bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bits, any NaN matching a NaN (a GPU makes its own NaNs)."""
    g, w = got.view(got.real.dtype), want.view(want.real.dtype)
    both_nan = np.isnan(g) & np.isnan(w)
    assert g.shape == w.shape and (np.where(both_nan, 0, g).tobytes()
                                   == np.where(both_nan, 0, w).tobytes())


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=str)
def test_complex_division_is_numpys_bit_for_bit(dtype):
    rng = np.random.default_rng(5)
    x, y = _complex(rng, dtype, (400,)), _complex(rng, dtype, (400,))
    y[:100] = y[:100].real  # real divisors, as RealDiv of real-valued complex tensors
    y[100:150] = 1j * y[100:150].imag
    with np.errstate(all="ignore"):
        want = np.true_divide(x, y, dtype=x.dtype)
    got = gpu_math.divide(XP, XP.asarray(x), XP.asarray(y)).get()
    assert got.dtype == want.dtype
    _bits_equal(got, want)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=str)
def test_complex_division_special_values_and_broadcasting(dtype):
    values = np.array([complex(a, b) for a in SPECIAL for b in SPECIAL], dtype)
    x, y = values[:, None], values[None, :]
    with np.errstate(all="ignore"):
        want = np.true_divide(x, y, dtype=dtype)
    got = gpu_math.divide(XP, XP.asarray(x), XP.asarray(y)).get()
    assert got.shape == want.shape
    _bits_equal(got, want)


def test_real_division_stays_the_ufunc():
    x, y = np.array([1.0, 2.0], np.float32), np.array([3.0, 7.0], np.float32)
    assert gpu_math.divide(XP, XP.asarray(x), XP.asarray(y)).get().tobytes() == \
        (x / y).tobytes()
    assert gpu_math.divide(np, x, y).tobytes() == (x / y).tobytes()
