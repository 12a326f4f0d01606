"""Checking symbolic gradients against central finite differences, as
``tf.test.compute_gradient``: users check their own ops' rules with it.

Complex tensors are viewed as pairs of reals (real, imaginary), so the Jacobian
of a complex y w.r.t. a complex x has twice the rows and columns. The symbolic
column for a real component of y is the gradient of the real loss
``Re(conj(v) * y)`` with ``v`` a one-hot (1 for the real part, 1j for the
imaginary part): graphflow's complex convention makes that gradient
``dL/dRe(x) + i dL/dIm(x)``, exactly what the finite differences measure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..builder import as_operand
from ..errors import InvalidArgumentError
from ..graph import Output
from ..indexed_slices import IndexedSlices


@dataclass
class GradientCheck:
    """Jacobians ``[x_component, y_component]`` of one x: symbolic and numerical."""

    x: Output
    theoretical: np.ndarray
    numerical: np.ndarray

    @property
    def max_error(self) -> float:
        if self.theoretical.size == 0:
            return 0.0
        return float(np.max(np.abs(self.theoretical - self.numerical)))


def gradient_check(y: Any, xs: Any, values: Sequence[Any], *, delta: float | None = None,
                   feed_dict: dict | None = None, session=None) -> list[GradientCheck]:
    """Symbolic and central-difference Jacobians of ``y`` w.r.t. each of ``xs``.

    ``xs``: Outputs (usually placeholders) fed with ``values`` (one array each).
    ``feed_dict``: further feeds. ``delta``: the finite-difference step (default:
    1e-3 for 16/32-bit floats, 1e-6 for 64-bit). ``session``: a Session to use
    (default: a new CPU-and-GPU Session of the graph, closed afterwards).
    Returns one :class:`GradientCheck` per x; compare with ``max_error``.
    """
    from ..gradients import gradients
    from ..runtime import Session

    y_out = as_operand(y)
    if y_out is None:
        raise TypeError(f"gradient_check: y {y!r} is not a graphflow Output")
    x_outs = [as_operand(x) for x in (xs if isinstance(xs, (list, tuple)) else [xs])]
    if any(x is None for x in x_outs):
        raise TypeError("gradient_check: every x must be a graphflow Output")
    if not isinstance(values, (list, tuple)) or len(values) != len(x_outs):
        raise InvalidArgumentError(
            f"gradient_check: pass one value per x ({len(x_outs)}), got {values!r}")
    from ..gradients import is_differentiable
    for what, t in [("y", y_out)] + [("x", x) for x in x_outs]:
        if not is_differentiable(t):
            raise TypeError(f"gradient_check: {what} '{t.name}' has dtype {t.dtype.name}; "
                            f"gradients exist for float and complex tensors only")
    if delta is not None and not (np.isscalar(delta) and np.isfinite(delta) and delta > 0):
        raise ValueError(f"gradient_check: delta must be a finite number > 0, got {delta!r}")
    arrays = [np.array(v, dtype=x.dtype.as_numpy_dtype) for x, v in zip(x_outs, values)]
    for x, a in zip(x_outs, arrays):
        if not x.shape.is_compatible_with(a.shape):
            raise InvalidArgumentError(f"gradient_check: value of shape {a.shape} for "
                                       f"'{x.name}' of shape {x.shape}")
    graph = y_out.graph
    from ..scope import Scope
    v = Scope(graph).with_sub_scope("gradient_check").placeholder(y_out.dtype, shape=y_out.shape,
                                                                   name="v")
    grads = gradients(y_out, x_outs, grad_ys=v)
    grads = [g.as_output() if isinstance(g, IndexedSlices) else g for g in grads]
    owned = session is None
    sess = Session(graph) if owned else session
    try:
        base = dict(feed_dict or {})
        base.update(zip(x_outs, arrays))
        y_value = np.asarray(sess.run(y_out, base))
        theoretical = _symbolic(sess, grads, x_outs, arrays, y_value, v, base)
        numerical = _numerical(sess, y_out, x_outs, arrays, base, delta, _components(y_value))
    finally:
        if owned:
            sess.close()
    return [GradientCheck(x, t, n) for x, t, n in zip(x_outs, theoretical, numerical)]


def _real_view(a: np.ndarray) -> np.ndarray:
    """A flat real vector: complex entries as (real, imaginary) pairs."""
    a = np.ascontiguousarray(a).reshape(-1)
    return a.view(a.real.dtype) if np.iscomplexobj(a) else a


def _components(array: np.ndarray) -> int:
    return array.size * (2 if np.iscomplexobj(array) else 1)


def _symbolic(sess, grads, xs, arrays, y_value, v, feeds) -> list[np.ndarray]:
    n_y = _components(y_value)
    jac = [np.zeros((_components(a), n_y), np.float64) for a in arrays]
    fetch = [g for g in grads if g is not None]
    if not fetch:
        return jac
    for j in range(n_y):
        one_hot = np.zeros(y_value.shape, y_value.dtype)
        flat = _real_view(one_hot)
        flat[j] = 1  # real part (or 1j times it for an odd index of a complex y)
        values = sess.run(fetch, {**feeds, v: one_hot})
        it = iter(values)
        for k, g in enumerate(grads):
            if g is not None:
                jac[k][:, j] = _real_view(np.asarray(next(it), dtype=arrays[k].dtype))
    return jac


def _numerical(sess, y, xs, arrays, feeds, delta, n_y: int) -> list[np.ndarray]:
    result = []
    for k, (x, a) in enumerate(zip(xs, arrays)):
        step = delta if delta is not None else (1e-6 if _real_view(a).itemsize >= 8 else 1e-3)
        n_x = _components(a)
        jac = np.zeros((n_x, n_y), np.float64)
        for i in range(n_x):
            values, ends = [], []
            for sign in (1, -1):
                moved = a.copy()
                _real_view(moved)[i] += sign * step
                ends.append(float(_real_view(moved)[i]))
                values.append(_real_view(np.asarray(sess.run(y, {**feeds, x: moved}))))
            # Differences in float64 over the step actually taken: x +- delta rounds in
            # x's dtype (in float16, 1 + 1e-3 is 1.00098 but 1 - 1e-3 is 0.99902).
            diff = values[0].astype(np.float64) - values[1].astype(np.float64)
            jac[i] = diff / (ends[0] - ends[1])
        result.append(jac)
    return result
