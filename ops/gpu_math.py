"""GPU kernels of element-wise math where cupy's own ufunc gives other bits than the
CPU (numpy) does.

* Complex division: cupy divides as thrust does (scaled by |re| + |im|), numpy by
  Smith's method; the two differ in the last bit of about one quotient in eight
  (seen on an H200). :func:`divide` runs numpy's formula, operation for operation,
  with the compiler's multiply-add contraction off (``--fmad=false``), so RealDiv on
  the GPU equals the CPU bit for bit, as the other element-wise ops do.

A device whose ``xp`` is numpy (the tests' simulated GPU) runs numpy itself.
"""
from __future__ import annotations

import functools

import numpy as np

#: numpy's complex division (numpy/_core/src/umath/loops.c.src, ``@TYPE@_divide``)
_SMITH_DIVIDE = r"""
typedef typename T::value_type R;
const R xr = x.real(), xi = x.imag(), yr = y.real(), yi = y.imag();
// |v| as fabs gives it: +0 for -0 (a zero divisor divides by +0)
const R yr_abs = yr < R(0) ? -yr : (yr == R(0) ? R(0) : yr);
const R yi_abs = yi < R(0) ? -yi : (yi == R(0) ? R(0) : yi);
if (yr_abs >= yi_abs) {
  if (yr_abs == R(0) && yi_abs == R(0)) {
    z = T(xr / yr_abs, xi / yr_abs);
  } else {
    const R rat = yi / yr;
    const R scl = R(1) / (yr + yi * rat);
    z = T((xr + xi * rat) * scl, (xi - xr * rat) * scl);
  }
} else {
  const R rat = yr / yi;
  const R scl = R(1) / (yi + yr * rat);
  z = T((xr * rat + xi) * scl, (xi * rat - xr) * scl);
}
"""


@functools.cache
def _divide_kernel(xp):
    return xp.ElementwiseKernel("T x, T y", "T z", _SMITH_DIVIDE, "graphflow_complex_divide",
                                options=("--fmad=false",))


def divide(xp, x, y):
    """``x / y`` in the dtype of ``x``; complex numbers by numpy's formula."""
    if xp is np or x.dtype.kind != "c":
        return xp.true_divide(x, y, dtype=x.dtype)
    x, y = xp.broadcast_arrays(x, y)
    shape = x.shape
    z = xp.empty(shape, x.dtype)
    _divide_kernel(xp)(xp.ascontiguousarray(x).reshape(-1),
                       xp.ascontiguousarray(y, dtype=x.dtype).reshape(-1), z.reshape(-1))
    return z


__all__ = ["divide"]
