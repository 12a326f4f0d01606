"""Reference distributions of the random ops' draws (tests/test_random_ops.py, and the
ONNX export of them): moments and CDFs to check samples against."""
import math

import numpy as np


def phi(x: np.ndarray) -> np.ndarray:
    """The standard normal CDF."""
    erf = np.asarray(np.frompyfunc(math.erf, 1, 1)(x / math.sqrt(2.0)), dtype=np.float64)
    return 0.5 * (1.0 + erf)


def truncated_cdf(x: np.ndarray) -> np.ndarray:
    lo, hi = phi(np.array(-2.0)), phi(np.array(2.0))
    return (phi(x) - lo) / (hi - lo)


def truncated_moments() -> tuple[float, float]:
    """E[X^2] and E[X^4] of the standard normal truncated to [-2, 2]."""
    a, density = 2.0, math.exp(-2.0) / math.sqrt(2 * math.pi)
    z = math.erf(a / math.sqrt(2.0))
    m2 = 1 - 2 * a * density / z
    return m2, 3 * m2 - 2 * a ** 3 * density / z


#: kind -> (mean, variance, fourth central moment, CDF) of the raw draw
REFERENCE = {
    "uniform": (0.5, 1 / 12, 1 / 80, lambda x: np.clip(x, 0.0, 1.0)),
    "normal": (0.0, 1.0, 3.0, phi),
    "truncated": (0.0, *truncated_moments(), truncated_cdf),
}


def max_cdf_deviation(sample: np.ndarray, cdf) -> float:
    """Kolmogorov-Smirnov's D: the largest gap between the sample's CDF and ``cdf``."""
    x = np.sort(sample.astype(np.float64).ravel())
    n = x.size
    f = cdf(x)
    above = np.arange(1, n + 1) / n - f
    below = f - np.arange(0, n) / n
    return float(max(above.max(), below.max()))
