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

from .builder import as_operand
from .errors import InvalidArgumentError
from .graph import Graph, Operation, Output
from .gradients import _gradients, is_differentiable
from .indexed_slices import IndexedSlices
from .scope import Scope
from .shapes import TensorShape
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
        grads = _gradients(loss_out, trainable, grad_loss, None, "gradients",
                           require_path=False) if trainable else []
        by_var = dict(zip((v.name for v in trainable), grads))
        return [(by_var.get(v.name), v) for v in variables]

    def apply_gradients(self, grads_and_vars: Sequence, name: str | None = None) -> Operation:
        """One op, named ``name`` (default: the optimizer's name, as TF's), that applies
        every (gradient, variable) pair after all gradients; the updates are named
        ``<name>/update_<variable>/...``. A gradient may be an Output, an IndexedSlices
        or a value numpy converts (a constant of the variable's dtype)."""
        base = name or self.name
        pairs = _checked_pairs(grads_and_vars)
        if not any(g is not None for g, _ in pairs):
            names = [v.name for _, v in pairs]
            raise InvalidArgumentError(f"No gradients provided for any variable: {names}")
        graph = pairs[0][1].graph
        for _, v in pairs[1:]:
            if v.graph is not graph:
                raise InvalidArgumentError(f"apply_gradients: variable '{v.name}' is from "
                                           f"another graph than '{pairs[0][1].name}'")
        # The updates go under the prefix "<name>/" without reserving "<name>", so that the
        # step op itself gets the name (a sub-scope took it: minimize(name="train") was
        # "train_1", and a saved graph did not run by the name the user gave).
        prefix = Scope(graph).with_name(base).within(base)
        pairs = [(_as_gradient(prefix, g, v, k), v) for k, (g, v) in enumerate(pairs)
                 if g is not None]
        computed = _gradient_ops(pairs)
        scope = prefix.with_control_dependencies(computed)
        updates = []
        for g, v in pairs:
            s = scope.with_sub_scope(f"update_{v.name.replace('/', '_')}").beside(v)
            if isinstance(g, IndexedSlices):
                updates.append(self._apply_sparse(s, g, v))
            else:
                updates.append(self._apply_dense(s, g, v))
        return Scope(graph).with_control_dependencies(updates).no_op(name=base)

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
    """The learning rate as a scalar of ``var``'s dtype; one whose shape is not known to
    be scalar is checked at run time (TF's "alpha is not a scalar": a fed [.1, .2, .3]
    scaled the update element-wise)."""
    if isinstance(rate, Output):
        if rate.graph is not var.graph:
            raise InvalidArgumentError(f"learning_rate {rate.name} is from another graph than "
                                       f"variable '{var.name}'")
        if rate.shape != TensorShape([]):
            from .ops.check_ops import AssertEqual
            rate = scope.create_op(
                AssertEqual, rate, scope.shape(rate), scope.constant(np.zeros(0, np.int32)),
                message=f"alpha is not a scalar: {{x}} (learning_rate '{rate.name}')",
                name="LearningRateIsScalar")
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
        self._slots: dict[tuple[Graph, str], Variable] = {}

    def get_slot_names(self) -> list[str]:
        """The slots each variable gets (TF's names)."""
        return ["accumulator"]

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        """``var``'s accumulator (None before ``minimize``/``apply_gradients`` made it)."""
        if name != "accumulator":
            raise ValueError(f"AdagradOptimizer has no slot '{name}'; it has 'accumulator'")
        return self._slots.get((var.graph, var.name))

    def _accumulator(self, var: Variable) -> Variable:
        """Slots are keyed by graph and variable name (as TF's): one optimizer may train
        variables of one name in several graphs."""
        slot = self._slots.get((var.graph, var.name))
        if slot is None:
            scope = Scope(var.graph).beside(var)
            start = scope.fill(var.shape.as_list(), scope.constant(
                self.initial_accumulator_value, dtype=var.dtype), name=f"{var.name}/AdagradInit")
            slot = scope.variable(start, name=f"{var.name}/{self.name}")
            self._slots[(var.graph, var.name)] = slot
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


def _checked_pairs(grads_and_vars: Any) -> list[tuple[Any, Variable]]:
    """(gradient, variable) pairs, each variable a gf.Variable (TypeError naming what is
    not)."""
    if isinstance(grads_and_vars, (str, bytes)) or not hasattr(grads_and_vars, "__iter__"):
        raise TypeError(f"apply_gradients takes a list of (gradient, variable) pairs, got "
                        f"{grads_and_vars!r}")
    pairs = []
    for k, pair in enumerate(grads_and_vars):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"apply_gradients: grads_and_vars[{k}] is {pair!r}, not a "
                            f"(gradient, variable) pair")
        g, v = pair
        if not isinstance(v, Variable):
            raise TypeError(f"apply_gradients: grads_and_vars[{k}] has {v!r} in place of the "
                            f"variable; it must be a gf.Variable")
        pairs.append((g, v))
    if not pairs:
        raise InvalidArgumentError("No variables provided: grads_and_vars is empty")
    return pairs


def _as_gradient(scope: Scope, g: Any, v: Variable, k: int) -> "Output | IndexedSlices":
    """An Output or IndexedSlices as is (of ``v``'s graph); another value, converted as TF's
    ``convert_to_tensor`` does: a constant of ``v``'s dtype."""
    if isinstance(g, IndexedSlices):
        parts = (g.values,)
    else:
        out = as_operand(g)
        if out is None:
            try:
                return scope.constant(g, dtype=v.dtype, name=f"gradient_{k}")
            except TypeError as e:
                raise TypeError(f"apply_gradients: the gradient of variable '{v.name}' "
                                f"({g!r}) does not convert to {v.dtype.name}: {e}") from None
        g, parts = out, (out,)
    for p in parts:
        if p.graph is not v.graph:
            raise InvalidArgumentError(f"apply_gradients: the gradient '{p.name}' of variable "
                                       f"'{v.name}' is from another graph")
    return g


def _as_loss(loss: Any) -> Output:
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
