"""Training: optimizers that update variables in place (``gf.train``).

``minimize(loss)`` = ``compute_gradients`` + ``apply_gradients``, as TensorFlow
1.x's. A gradient that is an IndexedSlices (the gradient of a sparse read or of
a depth-1 gather) is applied as a sparse in-place update of only the touched
rows (duplicate indices accumulate); a dense gradient updates the whole value.

Every update of a step runs after every gradient of that step is computed (the
updates wait on the gradients through control dependencies), so all gradients
of a step see the values from before the step.

Optimizers and schedules follow TensorFlow 1.x (``tf.compat.v1.train``):
GradientDescent, Adagrad, Momentum, Adam and RMSProp, slots as variables named
``<var>/<OptimizerName>``, ``<var>/<OptimizerName>_1`` (so checkpoints hold them),
``global_step`` incremented after each step, ``exponential_decay`` and
``piecewise_constant``. Momentum, Adam and RMSProp take hyperparameters as TF 1.x's
``convert_to_tensor`` does: a Python number is a float32 tensor, cast to each
variable's dtype (a float64 variable sees float64(float32(0.1))); an Output is cast.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..builder import as_operand
from ..dtypes import DType, int32, int64
from ..errors import InvalidArgumentError, UnimplementedError
from ..graph import Graph, Operation, Output
from ..gradients import _gradients, is_differentiable
from ..indexed_slices import IndexedSlices
from ..scope import Scope
from ..shapes import TensorShape
from ..variables import Variable, global_variables
from ..registry import op_def as _op_def
from .saver import Saver, latest_checkpoint  # noqa: F401


class Optimizer:
    """The TF 1.x optimizer protocol; subclasses say how one variable is updated.

    A subclass declares its slots (``_slot_names``) and makes them in ``_create_slots``
    (called by ``apply_gradients`` before any update is built, as TF's); ``_finish``
    adds what runs after every update of a step (Adam's beta powers)."""

    _slot_names: tuple[str, ...] = ()

    def __init__(self, name: str):
        self.name = name
        #: slot name -> {(graph, variable name): slot Variable}
        self._slots: dict[str, dict[tuple[Graph, str], Variable]] = {}

    # -- slots -----------------------------------------------------------------------
    def get_slot_names(self) -> list[str]:
        """The slots each variable gets (TF's names, sorted as TF's)."""
        return sorted(self._slot_names)

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        """``var``'s slot ``name`` (None before ``minimize``/``apply_gradients`` made it)."""
        if name not in self._slot_names:
            raise ValueError(f"{type(self).__name__} has no slot '{name}'; it has "
                             f"{', '.join(repr(n) for n in self.get_slot_names())}")
        return self._slots.get(name, {}).get((var.graph, var.name))

    def _slot(self, var: Variable, name: str, fill: float, init_name: str | None = None
              ) -> Variable:
        """``var``'s slot ``name``, made on first use: a variable of var's dtype and shape
        starting at ``fill`` everywhere, named ``<var>/<optimizer name>`` (made unique:
        ``_1``, ``_2``... as TF's slot_creator), beside var and without the scope's control
        dependencies. Slots are keyed by graph and variable name (as TF's): one optimizer
        may train variables of one name in several graphs."""
        by_var = self._slots.setdefault(name, {})
        slot = by_var.get((var.graph, var.name))
        if slot is None:
            scope = Scope(var.graph).beside(var)
            start = scope.fill(var.shape.as_list(), scope.constant(fill, dtype=var.dtype),
                               name=init_name or f"{var.name}/{self.name}Init")
            slot = scope.variable(start, name=f"{var.name}/{self.name}")
            by_var[(var.graph, var.name)] = slot
        return slot

    def _create_slots(self, var_list: Sequence[Variable]) -> None:
        """Make the slots of every variable about to be updated (none by default)."""

    def _finish(self, scope: Scope, updates: list[Operation]) -> list[Operation]:
        """Ops that run after every update of a step (``scope`` waits on them); none by
        default."""
        return []

    # -- the protocol -------------------------------------------------------------------
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

    def apply_gradients(self, grads_and_vars: Sequence, global_step: Variable | None = None,
                        name: str | None = None) -> Operation:
        """One op, named ``name`` (default: the optimizer's name, as TF's), that applies
        every (gradient, variable) pair after all gradients; the updates are named
        ``<name>/update_<variable>/...``. A gradient may be an Output, an IndexedSlices
        or a value numpy converts (a constant of the variable's dtype). With
        ``global_step`` (a variable), the op is TF 1.x's: ``global_step += 1`` after
        every update."""
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
        _check_global_step(global_step, graph)
        # The updates go under the prefix "<name>/" without reserving "<name>", so that the
        # step op itself gets the name (a sub-scope took it: minimize(name="train") was
        # "train_1", and a saved graph did not run by the name the user gave).
        prefix = Scope(graph).with_name(base).within(base)
        pairs = [(_as_gradient(prefix, g, v, k), v) for k, (g, v) in enumerate(pairs)
                 if g is not None]
        self._create_slots([v for _, v in pairs])
        computed = _gradient_ops(pairs)
        scope = prefix.with_control_dependencies(computed)
        updates = []
        for g, v in pairs:
            s = scope.with_sub_scope(f"update_{v.name.replace('/', '_')}").beside(v)
            if isinstance(g, IndexedSlices):
                updates.append(self._apply_sparse(s, g, v))
            else:
                updates.append(self._apply_dense(s, g, v))
        updates += self._finish(prefix.with_control_dependencies(updates), updates)
        if global_step is None:
            return Scope(graph).with_control_dependencies(updates).no_op(name=base)
        done = prefix.with_control_dependencies(updates).no_op(name="update")
        step = prefix.beside(global_step).constant(1, dtype=global_step.dtype,
                                                   name="global_step_increment")
        return Scope(graph).beside(global_step).with_control_dependencies([done]) \
            .assign_add_variable_op(global_step.handle, step, name=base)

    def minimize(self, loss: Any, global_step: Variable | None = None,
                 var_list: Sequence[Variable] | None = None, name: str | None = None,
                 grad_loss: Any = None) -> Operation:
        """compute_gradients then apply_gradients: the training step's op (TF 1.x's
        argument order: ``minimize(loss, global_step, var_list)``)."""
        if global_step is not None and not isinstance(global_step, Variable):
            raise TypeError(f"minimize: global_step must be a gf.Variable, got "
                            f"{type(global_step).__name__} {global_step!r} (the variables to "
                            f"train are var_list=, the third argument, as in TF 1.x)")
        return self.apply_gradients(self.compute_gradients(loss, var_list, grad_loss),
                                    global_step=global_step, name=name)

    def _apply_dense(self, scope: Scope, grad: Output, var: Variable) -> Operation:
        raise NotImplementedError

    def _apply_sparse(self, scope: Scope, grad: IndexedSlices, var: Variable) -> Operation:
        raise NotImplementedError


def _check_global_step(step: Any, graph: Graph) -> None:
    """A global step is a variable of the graph with a real dtype (TF adds one to it)."""
    if step is None:
        return
    if not isinstance(step, Variable):
        raise TypeError(f"global_step must be a gf.Variable, got {type(step).__name__} "
                        f"{step!r}")
    if step.graph is not graph:
        raise InvalidArgumentError(f"global_step '{step.name}' is from another graph than "
                                   f"the variables it counts the steps of")
    if not (step.dtype.is_integer or step.dtype.is_floating) or step.dtype.is_bool:
        raise TypeError(f"global_step '{step.name}' must be a number variable, got dtype "
                        f"{step.dtype.name}")


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
            from ..ops.check_ops import AssertEqual
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

    _slot_names = ("accumulator",)

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

    def _accumulator(self, var: Variable) -> Variable:
        return self._slot(var, "accumulator", self.initial_accumulator_value,
                          init_name=f"{var.name}/AdagradInit")

    def _rate(self, scope: Scope, var: Variable) -> Output:
        return _rate_for(scope, self.learning_rate, var)

    def _apply_dense(self, scope, grad, var):
        return scope.resource_apply_adagrad(var.handle, self._accumulator(var).handle,
                                            self._rate(scope, var), grad, name="ApplyDense")

    def _apply_sparse(self, scope, grad, var):
        return scope.resource_sparse_apply_adagrad(
            var.handle, self._accumulator(var).handle, self._rate(scope, var), grad.values,
            grad.indices, name="ApplySparse")


# -- Momentum, Adam, RMSProp: TensorFlow's raw update ops (ops/training_ops.py) -------------------
def _hyperparameter(value: Any, what: str) -> "np.ndarray | Output":
    """A hyperparameter as TF 1.x's ``convert_to_tensor`` makes it (``_tf_array``: a
    Python float a float32 scalar, an int int32, a numpy scalar its own dtype; each
    update casts it to its variable's dtype), or a scalar real Output as is."""
    out = _learning_rate(value, what)
    return out if isinstance(out, Output) else _tf_array(value)


def _cast_for(scope: Scope, value: "np.ndarray | Output", var: Variable, name: str) -> Output:
    """``value`` cast to ``var``'s dtype (TF's ``math_ops.cast(hyper, var.dtype)``): a
    constant holds the cast value, an Output gets a Cast if its dtype differs."""
    if isinstance(value, Output):
        if value.graph is not var.graph:
            raise InvalidArgumentError(f"{name} {value.name} is from another graph than "
                                       f"variable '{var.name}'")
        return value if value.dtype == var.dtype else scope.cast(value, var.dtype)
    return scope.constant(value.astype(var.dtype.as_numpy_dtype), dtype=var.dtype, name=name)


def _deduplicated(scope: Scope, grad: IndexedSlices) -> tuple[Output, Output]:
    """(summed values, distinct indices) of ``grad``: TF's ``_deduplicate_indexed_slices``
    (Unique, then UnsortedSegmentSum over the positions), which TF 1.x's optimizers apply
    before a sparse update kernel (which itself applies a duplicate row twice)."""
    s = scope.with_sub_scope("deduplicate")
    rows, position = s.unique(grad.indices)
    return s.unsorted_segment_sum(grad.values, position, s.size(rows)), rows


class _SlotOptimizer(Optimizer):
    """An optimizer whose step is one of TensorFlow's raw update ops per variable, with
    zero-initialized slots (``_zero_slots``, in order) unless said otherwise."""

    _zero_slots: tuple[str, ...] = ()

    def __init__(self, name: str, use_locking: bool):
        super().__init__(name)
        if not isinstance(use_locking, (bool, np.bool_)):
            raise TypeError(f"use_locking must be a bool, got {use_locking!r}")
        self.use_locking = bool(use_locking)  # every update holds its variables' locks anyway

    def _create_slots(self, var_list):
        for var in var_list:
            for name in self._slot_order():
                self._slot(var, name, self._slot_start(name))

    def _slot_order(self) -> tuple[str, ...]:
        return self._zero_slots

    def _slot_start(self, name: str) -> float:
        return 0.0

    def _hyper(self, scope: Scope, var: Variable, *names: str) -> list[Output]:
        """The hyperparameters ``names`` (attributes holding _hyperparameter values) as
        scalars of ``var``'s dtype."""
        return [_cast_for(scope, getattr(self, n), var, n) for n in names]

    def _slot_handles(self, var: Variable, *names: str) -> list[Output]:
        return [self.get_slot(var, n).handle for n in names]


class MomentumOptimizer(_SlotOptimizer):
    """TF 1.x's Momentum: accum = accum * momentum + g; var -= learning_rate * accum
    (``use_nesterov``: var -= g * lr + accum * momentum * lr). One slot per variable,
    ``"momentum"`` (``<var>/Momentum``, zeros). A sparse gradient updates only its rows,
    duplicates summed first."""

    _slot_names = _zero_slots = ("momentum",)

    def __init__(self, learning_rate: "float | Output", momentum: "float | Output",
                 use_locking: bool = False, name: str = "Momentum", use_nesterov: bool = False):
        super().__init__(name, use_locking)
        self.learning_rate = _hyperparameter(learning_rate, "learning_rate")
        self.momentum = _hyperparameter(momentum, "momentum")
        self.use_nesterov = bool(use_nesterov)

    def _apply_dense(self, scope, grad, var):
        lr, momentum = self._hyper(scope, var, "learning_rate", "momentum")
        return scope.resource_apply_momentum(
            var.handle, *self._slot_handles(var, "momentum"), lr, grad, momentum,
            use_locking=self.use_locking, use_nesterov=self.use_nesterov)

    def _apply_sparse(self, scope, grad, var):
        lr, momentum = self._hyper(scope, var, "learning_rate", "momentum")
        values, rows = _deduplicated(scope, grad)
        return scope.resource_sparse_apply_momentum(
            var.handle, *self._slot_handles(var, "momentum"), lr, values, rows,
            momentum, use_locking=self.use_locking, use_nesterov=self.use_nesterov)


class AdamOptimizer(_SlotOptimizer):
    """TF 1.x's Adam (tf.compat.v1.train.AdamOptimizer). Slots ``"m"`` and ``"v"``
    (``<var>/Adam``, ``<var>/Adam_1``, zeros); two non-slot float32 variables
    ``beta1_power`` and ``beta2_power`` per graph (starting at beta1 and beta2, beside
    the first variable by name), multiplied by beta1 and beta2 after every update of a
    step. A dense gradient is ResourceApplyAdam; a sparse one is TF 1.x's
    ``_apply_sparse_shared``: every row of m and v decays, the (summed) rows are added,
    and every row of the variable moves (not only the touched ones)."""

    _slot_names = _zero_slots = ("m", "v")

    def __init__(self, learning_rate: "float | Output" = 0.001, beta1: "float | Output" = 0.9,
                 beta2: "float | Output" = 0.999, epsilon: "float | Output" = 1e-08,
                 use_locking: bool = False, name: str = "Adam"):
        super().__init__(name, use_locking)
        self.learning_rate = _hyperparameter(learning_rate, "learning_rate")
        self.beta1 = _hyperparameter(beta1, "beta1")
        self.beta2 = _hyperparameter(beta2, "beta2")
        self.epsilon = _hyperparameter(epsilon, "epsilon")
        self._powers: dict[Graph, tuple[Variable, Variable]] = {}

    def _create_slots(self, var_list):
        first = min(var_list, key=lambda v: v.name)
        if first.graph not in self._powers:
            scope = Scope(first.graph).beside(first)
            self._powers[first.graph] = tuple(
                scope.variable(_power_start(getattr(self, b), first), name=f"{b}_power")
                for b in ("beta1", "beta2"))
        super()._create_slots(var_list)

    def _get_beta_accumulators(self, graph: Graph) -> tuple[Variable, Variable]:
        """(beta1_power, beta2_power) of ``graph`` (TF's name for them)."""
        return self._powers[graph]

    def _inputs(self, scope: Scope, var: Variable) -> list:
        """m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon for var's update."""
        powers = [p.as_output_in(scope) for p in self._get_beta_accumulators(var.graph)]
        powers = [p if p.dtype == var.dtype else scope.cast(p, var.dtype) for p in powers]
        return [*self._slot_handles(var, "m", "v"), *powers,
                *self._hyper(scope, var, "learning_rate", "beta1", "beta2", "epsilon")]

    def _apply_dense(self, scope, grad, var):
        return scope.resource_apply_adam(var.handle, *self._inputs(scope, var), grad,
                                         use_locking=self.use_locking)

    def _apply_sparse(self, scope, grad, var):
        from ..ops.training_ops import SparseApplyAdam
        return scope.create_op(SparseApplyAdam, var.handle, *self._inputs(scope, var),
                               grad.values, grad.indices, use_locking=self.use_locking,
                               name="SparseApplyAdam")

    def _finish(self, scope, updates):
        """beta1_power *= beta1, beta2_power *= beta2, after every update (float32, as
        TF's: the variables and beta1/beta2 as convert_to_tensor made them)."""
        ops = []
        for power, b in zip(self._get_beta_accumulators(updates[0].graph), ("beta1", "beta2")):
            s = scope.beside(power)
            factor = _cast_for(s, getattr(self, b), power, b)
            ops.append(s.assign_variable_op(power.handle, s.mul(power, factor),
                                            name=f"update_{b}_power"))
        return ops


def _power_start(beta: "np.ndarray | Output", first: Variable) -> Any:
    """beta1_power's initial value: beta (a float32 number as TF's, or the Output)."""
    if isinstance(beta, Output):
        if beta.graph is not first.graph:
            raise InvalidArgumentError(f"beta {beta.name} is from another graph than "
                                       f"variable '{first.name}'")
        return beta
    return beta.astype(np.float32) if beta.dtype.kind in "iu" else beta


class RMSPropOptimizer(_SlotOptimizer):
    """TF 1.x's RMSProp: ms += (g^2 - ms) * (1 - decay); mom = mom * momentum + lr * g /
    sqrt(ms + epsilon); var -= mom (``centered``: with mg += (g - mg) * (1 - decay) and
    sqrt(ms - mg^2 + epsilon)). Slots ``"rms"`` (``<var>/RMSProp``, ONES, as TF 1.x),
    ``"mg"`` when centered (``<var>/RMSProp_1``, zeros) and ``"momentum"`` (the next name,
    zeros). A sparse gradient updates only its rows, duplicates summed first."""

    _slot_names = ("rms", "momentum", "mg")

    def __init__(self, learning_rate: "float | Output", decay: "float | Output" = 0.9,
                 momentum: "float | Output" = 0.0, epsilon: "float | Output" = 1e-10,
                 use_locking: bool = False, centered: bool = False, name: str = "RMSProp"):
        super().__init__(name, use_locking)
        self.learning_rate = _hyperparameter(learning_rate, "learning_rate")
        self.decay = _hyperparameter(decay, "decay")
        self.momentum = _hyperparameter(momentum, "momentum")
        self.epsilon = _hyperparameter(epsilon, "epsilon")
        self.centered = bool(centered)

    def get_slot_names(self) -> list[str]:
        return sorted(self._slot_order())

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        """``var``'s slot ``name``; None for ``"mg"`` when not centered (as TF's)."""
        if name == "mg" and not self.centered:
            return None
        return super().get_slot(var, name)

    def _slot_order(self):
        return ("rms", "mg", "momentum") if self.centered else ("rms", "momentum")

    def _slot_start(self, name):
        return 1.0 if name == "rms" else 0.0

    def _args(self, scope: Scope, var: Variable) -> list:
        slots = ("mg", "rms", "momentum") if self.centered else ("rms", "momentum")
        return [var.handle, *self._slot_handles(var, *slots),
                *self._hyper(scope, var, "learning_rate", "decay", "momentum", "epsilon")]

    def _apply_dense(self, scope, grad, var):
        op = "ResourceApplyCenteredRMSProp" if self.centered else "ResourceApplyRMSProp"
        return scope.create_op(op, *self._args(scope, var), grad, use_locking=self.use_locking)

    def _apply_sparse(self, scope, grad, var):
        op = "ResourceSparseApplyCenteredRMSProp" if self.centered else \
            "ResourceSparseApplyRMSProp"
        values, rows = _deduplicated(scope, grad)
        return scope.create_op(op, *self._args(scope, var), values, rows,
                               use_locking=self.use_locking)


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
    """The ops the updates wait on: those computing a gradient. An op with no inputs (a
    fed Placeholder, a Const) reads no variable, so there is nothing to wait for; a
    control edge from a fed Placeholder would also run its kernel, which fails (TF drops
    such edges when it feeds a Placeholder)."""
    ops = []
    for g, _ in pairs:
        parts = (g.values, g.indices, g.dense_shape) if isinstance(g, IndexedSlices) else (g,)
        ops.extend(p.op for p in parts if p.op.inputs or p.op.control_inputs)
    return ops


# -- the global step and learning-rate schedules ------------------------------------------------
def get_global_step(graph: Graph) -> Variable | None:
    """The variable named ``global_step`` of ``graph`` (TF 1.x finds it by that name too),
    or None. graphflow has no default graph: pass it."""
    _check_graph(graph, "get_global_step")
    for v in global_variables(graph):
        if v.name == "global_step":
            _assert_global_step(v)
            return v
    return None


def get_or_create_global_step(graph: Graph | None = None) -> Variable:
    """``graph``'s ``global_step``, made if missing: an int64 scalar variable starting at
    0, at the top of the graph's names (TF 1.x's ``tf.train.get_or_create_global_step``;
    ``graph`` is required, graphflow has no default graph)."""
    _check_graph(graph, "get_or_create_global_step")
    found = get_global_step(graph)
    if found is not None:
        return found
    return Scope(graph).without_control_dependencies().variable(np.int64(0), name="global_step")


def _check_graph(graph: Any, what: str) -> None:
    if not isinstance(graph, Graph):
        raise TypeError(f"{what} needs a gf.Graph (graphflow has no default graph), got "
                        f"{type(graph).__name__} {graph!r}")


def _assert_global_step(v: Variable) -> None:
    """TF's ``assert_global_step``: an integer scalar."""
    if not v.dtype.is_integer or v.dtype.is_bool:
        raise TypeError(f"Existing \"global_step\" must be an integer variable, got dtype "
                        f"{v.dtype.name}")
    if v.shape.rank != 0:
        raise TypeError(f"Existing \"global_step\" is not a scalar: {v.shape}")


def _schedule_input(value: Any, what: str) -> Output:
    """The Output of a Variable (its read) or of an Output."""
    out = as_operand(value)
    if out is None:
        raise TypeError(f"{what} must be a gf.Variable or an Output, got {value!r}")
    return out


def _tf_array(value: Any) -> np.ndarray:
    """A value as ``ops.convert_to_tensor`` types it: a Python int int32, a float
    float32, a numpy value (or a nest of them) as numpy makes it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return np.asarray(value, np.int32)
    if isinstance(value, float):
        return np.asarray(value, np.float32)
    return np.asarray(value)


def _as_tf_tensor(scope: Scope, value: Any, name: str) -> Output:
    """``ops.convert_to_tensor(value)``: an Output (of scope's graph) as is, another value
    a constant typed by ``_tf_array``."""
    out = as_operand(value)
    if out is None:
        return scope.constant(_tf_array(value), name=name)
    if out.graph is not scope.graph:
        raise InvalidArgumentError(f"{name} {out.name} is from another graph")
    return out


def _tf_cast(scope: Scope, value: Any, dtype: DType, name: str) -> Output:
    """``math_ops.cast(value, dtype)``: convert_to_tensor, then a Cast where the dtype
    differs (a number's cast is made once, into the constant)."""
    out = as_operand(value)
    if out is None:
        return scope.constant(_tf_array(value).astype(dtype.as_numpy_dtype), dtype=dtype,
                              name=name)
    return out if out.dtype == dtype else scope.cast(out, dtype, name=name)


def _require_ops(what: str, *names: str) -> None:
    """The ops a schedule is built from must be registered (Pow and Floor land with the
    dense math ops of issue #35)."""
    missing = []
    for n in names:
        try:
            _op_def(n)
        except LookupError:  # the registry's NotFoundError
            missing.append(n)
    if missing:
        raise UnimplementedError(f"{what} needs the op(s) {', '.join(missing)}, not "
                                 f"registered in this build (ops/dense_math_ops.py)")


def exponential_decay(learning_rate: Any, global_step: Any, decay_steps: Any, decay_rate: Any,
                      staircase: bool = False, name: str | None = None) -> Output:
    """TF 1.x's ``tf.train.exponential_decay``: learning_rate * decay_rate ** (global_step /
    decay_steps), the exponent floored with ``staircase``, built from graph ops as TF builds
    it (in learning_rate's dtype: float32 for a Python number), named ``name`` (default
    ``ExponentialDecay``). Feed it to an optimizer as its learning rate."""
    if global_step is None:
        raise ValueError("global_step is required for exponential_decay.")
    step = _schedule_input(global_step, "global_step")
    _require_ops("exponential_decay", "Pow", *(("Floor",) if staircase else ()))
    base = name or "ExponentialDecay"
    scope = Scope(step.graph).with_name(base).within(base)
    lr = _as_tf_tensor(scope, learning_rate, "initial_learning_rate")
    dtype = lr.dtype
    p = scope.real_div(_tf_cast(scope, step, dtype, "Cast"),
                       _tf_cast(scope, decay_steps, dtype, "decay_steps"))
    if staircase:
        p = scope.create_op("Floor", p)
    power = scope.create_op("Pow", _tf_cast(scope, decay_rate, dtype, "decay_rate"), p)
    return Scope(step.graph).mul(lr, power, name=base)


def piecewise_constant(x: Any, boundaries: Sequence, values: Sequence,
                       name: str | None = None) -> Output:
    """TF 1.x's ``tf.train.piecewise_constant``: values[0] while x <= boundaries[0],
    values[i] while boundaries[i-1] < x <= boundaries[i], values[-1] after the last
    boundary (values[0] where no interval holds x, as a NaN: TF's ``case`` default).
    Boundaries must have x's dtype (int32 ones are cast for an int64 x, as TF's); the
    values one dtype. Built from comparisons and selects, named ``name`` (default
    ``PiecewiseConstant``)."""
    x_out = _schedule_input(x, "x")
    boundaries, values = list(boundaries), list(values)
    if len(boundaries) != len(values) - 1:
        raise ValueError("The length of boundaries should be 1 less than the length of values")
    base = name or "PiecewiseConstant"
    scope = Scope(x_out.graph).with_name(base).within(base)
    bounds = [_boundary(scope, b, x_out, k) for k, b in enumerate(boundaries)]
    vals = [_as_tf_tensor(scope, v, f"value_{k}") for k, v in enumerate(values)]
    for v in vals[1:]:
        if v.dtype != vals[0].dtype:
            raise ValueError(f"Values must have elements all with the same dtype "
                             f"({vals[0].dtype.name} vs {v.dtype.name}).")
    result = vals[0]  # TF's case default: no interval holds a NaN
    if bounds:
        result = scope.select_v2(scope.greater(x_out, bounds[-1]), vals[-1], result)
    for low, high, v in zip(bounds[:-1], bounds[1:], vals[1:-1]):
        inside = scope.logical_and(scope.greater(x_out, low), _less_equal(scope, x_out, high))
        result = scope.select_v2(inside, v, result)
    return Scope(x_out.graph).identity(result, name=base)


def _boundary(scope: Scope, b: Any, x: Output, k: int) -> Output:
    """A boundary in x's dtype: int32 promoted for an int64 x, another dtype a ValueError."""
    out = _as_tf_tensor(scope, b, f"boundary_{k}")
    if out.dtype == x.dtype:
        return out
    if out.dtype == int32 and x.dtype == int64:
        return _tf_cast(scope, out if as_operand(b) is not None else b, int64, f"boundary_{k}")
    raise ValueError(f"Boundaries ({out.dtype.name}) must have the same dtype as x "
                     f"({x.dtype.name}).")


def _less_equal(scope: Scope, x: Output, y: Output) -> Output:
    """x <= y (False for NaN) from the comparisons graphflow has."""
    return scope.logical_or(scope.less(x, y), scope.equal(x, y))


__all__ = ["Optimizer", "GradientDescentOptimizer", "AdagradOptimizer", "MomentumOptimizer",
           "AdamOptimizer", "RMSPropOptimizer", "Saver", "latest_checkpoint",
           "exponential_decay", "piecewise_constant", "get_global_step",
           "get_or_create_global_step"]
