"""Training: optimizers that update variables in place (``gf.train``).

``minimize(loss)`` = ``compute_gradients`` + ``apply_gradients``, as TensorFlow
1.x's. A gradient that is an IndexedSlices (the gradient of a sparse read or of
a depth-1 gather) is applied as a sparse in-place update of only the touched
rows (duplicate indices accumulate); a dense gradient updates the whole value.

Every update of a step runs after every gradient of that step is computed (the
updates wait on the gradients through control dependencies), so all gradients
of a step see the values from before the step.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .errors import InvalidArgumentError
from .graph import Operation, Output
from .gradients import gradients, is_differentiable
from .indexed_slices import IndexedSlices
from .scope import Scope
from .variables import Variable, global_variables
from .saver import Saver  # noqa: F401


class Optimizer:
    """The TF 1.x optimizer protocol; subclasses say how one variable is updated."""

    def __init__(self, name: str):
        self.name = name

    def compute_gradients(self, loss: Any, var_list: Sequence[Variable] | None = None,
                          grad_loss: Any = None) -> list:
        """``[(gradient, variable), ...]``: the gradient of ``loss`` w.r.t. each variable
        (None where ``loss`` does not depend on it)."""
        loss_out = _as_loss(loss)
        variables = list(var_list) if var_list is not None else global_variables(loss_out.graph)
        if not variables:
            raise InvalidArgumentError("No variables to optimize.")
        for v in variables:
            if not isinstance(v, Variable):
                raise TypeError(f"var_list holds {v!r}, which is not a gf.Variable")
            if v.graph is not loss_out.graph:
                raise InvalidArgumentError(f"Variable '{v.name}' is from another graph than "
                                           f"the loss '{loss_out.name}'")
        trainable = [v for v in variables if is_differentiable(v.read())]
        grads = gradients(loss_out, trainable, grad_ys=grad_loss) if trainable else []
        by_var = dict(zip((v.name for v in trainable), grads))
        return [(by_var.get(v.name), v) for v in variables]

    def apply_gradients(self, grads_and_vars: Sequence, name: str | None = None) -> Operation:
        """One op that applies every (gradient, variable) pair, after all gradients."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            names = [v.name for _, v in grads_and_vars]
            raise InvalidArgumentError(f"No gradients provided for any variable: {names}")
        graph = pairs[0][1].graph
        computed = _gradient_ops(pairs)
        scope = Scope(graph).with_sub_scope(name or self.name).with_control_dependencies(
            computed)
        updates = []
        for g, v in pairs:
            s = scope.with_sub_scope(f"update_{v.name.replace('/', '_')}")._replace(
                _device=v.device)
            if isinstance(g, IndexedSlices):
                updates.append(self._apply_sparse(s, g, v))
            else:
                updates.append(self._apply_dense(s, g, v))
        return Scope(graph).with_control_dependencies(updates).no_op(name=name or self.name)

    def minimize(self, loss: Any, var_list: Sequence[Variable] | None = None,
                 name: str | None = None) -> Operation:
        """compute_gradients then apply_gradients: the training step's op."""
        return self.apply_gradients(self.compute_gradients(loss, var_list), name=name)

    def _apply_dense(self, scope: Scope, grad: Output, var: Variable) -> Operation:
        raise NotImplementedError

    def _apply_sparse(self, scope: Scope, grad: IndexedSlices, var: Variable) -> Operation:
        raise NotImplementedError


def _learning_rate(value: Any, what: str = "learning_rate") -> "float | Output":
    """A number (a float) or a scalar real Output (a placeholder, a schedule), as TF 1.x
    optimizers take."""
    from .builder import as_operand
    out = as_operand(value)
    if out is not None:
        if not (out.dtype.is_floating or out.dtype.is_integer) or out.dtype.is_bool:
            raise TypeError(f"{what} must be a real number, got {out.name} of dtype "
                            f"{out.dtype.name}")
        if not out.shape.is_compatible_with([]):
            raise InvalidArgumentError(f"{what} must be a scalar, got {out.name} of shape "
                                       f"{out.shape}")
        return out
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what} must be a number or a scalar Output, got {value!r}")
    return float(value)


def _rate_for(scope: Scope, rate: "float | Output", var: Variable) -> Output:
    """The learning rate as a scalar of ``var``'s dtype."""
    if isinstance(rate, Output):
        if rate.graph is not var.graph:
            raise InvalidArgumentError(f"learning_rate {rate.name} is from another graph than "
                                       f"variable '{var.name}'")
        return rate if rate.dtype == var.dtype else scope.cast(rate, var.dtype)
    return scope.constant(rate, dtype=var.dtype, name="learning_rate")


class GradientDescentOptimizer(Optimizer):
    """var -= learning_rate * gradient; sparse gradients touch only their rows.
    ``learning_rate`` is a number or a scalar Output (fed, or a schedule)."""

    def __init__(self, learning_rate: "float | Output", name: str = "GradientDescent"):
        super().__init__(name)
        self.learning_rate = _learning_rate(learning_rate)

    def _rate(self, scope: Scope, var: Variable) -> Output:
        return _rate_for(scope, self.learning_rate, var)

    def _apply_dense(self, scope, grad, var):
        step = scope.mul(self._rate(scope, var), grad)
        return scope.assign_sub_variable_op(var.handle, step, name="ApplyDense")

    def _apply_sparse(self, scope, grad, var):
        step = scope.mul(self._rate(scope, var), grad.values)
        rows = scope.expand_dims(grad.indices, -1)
        return scope.resource_scatter_nd_sub(var.handle, rows, step, name="ApplySparse")


class AdagradOptimizer(Optimizer):
    """TensorFlow's Adagrad: accum += g * g; var -= learning_rate * g / sqrt(accum).

    Each variable gets an accumulator slot variable ``<var>/Adagrad`` (starting at
    ``initial_accumulator_value``; run ``gf.global_variables_initializer`` after
    ``minimize``). A sparse gradient updates only its rows, duplicates summed
    first, as TensorFlow's sparse Adagrad.
    """

    def __init__(self, learning_rate: "float | Output", initial_accumulator_value: float = 0.1,
                 name: str = "Adagrad"):
        super().__init__(name)
        self.learning_rate = _learning_rate(learning_rate)
        start = _learning_rate(initial_accumulator_value, "initial_accumulator_value")
        if isinstance(start, Output):
            raise TypeError("initial_accumulator_value must be a number")
        if not start > 0:
            raise InvalidArgumentError(f"initial_accumulator_value must be positive, got "
                                       f"{initial_accumulator_value}")
        self.initial_accumulator_value = start
        self.slots: dict[str, Variable] = {}

    def _accumulator(self, var: Variable) -> Variable:
        slot = self.slots.get(var.name)
        if slot is None:
            scope = Scope(var.graph)._replace(_device=var.device)
            start = scope.fill(var.shape.as_list(), scope.constant(
                self.initial_accumulator_value, dtype=var.dtype), name=f"{var.name}/AdagradInit")
            slot = self.slots[var.name] = scope.variable(start, name=f"{var.name}/{self.name}")
        return slot

    def _rate(self, scope: Scope, var: Variable) -> Output:
        return _rate_for(scope, self.learning_rate, var)

    def _apply_dense(self, scope, grad, var):
        return scope.resource_apply_adagrad(var.handle, self._accumulator(var).handle,
                                            self._rate(scope, var), grad, name="ApplyDense")

    def _apply_sparse(self, scope, grad, var):
        return scope.resource_sparse_apply_adagrad(
            var.handle, self._accumulator(var).handle, self._rate(scope, var), grad.values,
            grad.indices, name="ApplySparse")


def _as_loss(loss: Any) -> Output:
    from .builder import as_operand
    out = as_operand(loss)
    if out is None:
        raise TypeError(f"loss {loss!r} is not a graphflow Output")
    return out


def _gradient_ops(pairs: Sequence) -> list[Operation]:
    ops = []
    for g, _ in pairs:
        parts = (g.values, g.indices, g.dense_shape) if isinstance(g, IndexedSlices) else (g,)
        ops.extend(p.op for p in parts)
    return ops


__all__ = ["Optimizer", "GradientDescentOptimizer", "AdagradOptimizer", "Saver"]
