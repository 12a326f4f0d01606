"""``scope.cond`` and ``scope.while_loop``: TensorFlow 2's functional control flow.

Each Python function is traced once into a ``gf.Function`` (graphflow/functions.py):
the ops it builds, through any scope, go to the function's own graph, and the outer
tensors it uses are captured. ``cond`` builds an If (StatelessIf when neither
branch has effects) over the union of both branches' captures; ``while_loop`` a
While (StatelessWhile) whose loop variables are, as in TF 2's while_v2, a loop
counter, the maximum number of iterations, the user's variables and the captures
(which the body passes through). Shape invariants are checked as TensorFlow checks
them, when the body is traced.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .builder import as_operand, create_operation
from .dtypes import DType, bool_
from .functions import (FuncGraph, arguments_like, capture, finish, new_func_graph,
                        trace, tracing, union_captures)
from .graph import Operation, Output
from .registry import op_def
from .scope import Scope
from .shapes import TensorShape, as_shape, most_specific_compatible_shape, within_invariant


# -- nested structures (lists, tuples, namedtuples, dicts), as tf.nest -------------------------
def flatten(structure: Any) -> list:
    if isinstance(structure, dict):
        return [leaf for k in sorted(structure) for leaf in flatten(structure[k])]
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in flatten(item)]
    return [structure]


def pack_as(structure: Any, leaves: list) -> Any:
    """``leaves`` in the shape of ``structure``."""
    it = iter(leaves)

    def build(s):
        if isinstance(s, dict):
            return type(s)((k, build(s[k])) for k in sorted(s))
        if isinstance(s, tuple) and hasattr(s, "_fields"):
            return type(s)(*(build(v) for v in s))
        if isinstance(s, (list, tuple)):
            return type(s)(build(v) for v in s)
        return next(it)
    return build(structure)


def same_structure(a: Any, b: Any) -> bool:
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and sorted(a) == sorted(b) and \
            all(same_structure(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and \
            len(a) == len(b) and all(same_structure(x, y) for x, y in zip(a, b))
    return True


def _tensor_in(graph: FuncGraph, value: Any, dtype: DType | None = None) -> Output:
    """A function's result as a tensor of its graph: a captured outer tensor, or a Const."""
    out = as_operand(value)
    if out is None:
        with tracing(graph):
            try:
                return Scope(graph).constant(value, dtype=dtype)
            except (TypeError, ValueError) as e:
                raise TypeError(f"A function's result {value!r} is not a tensor: {e}") from None
    if out.graph is not graph:
        out = capture(graph, out)
    return out


def _outer_tensor(scope: Scope, value: Any, what: str) -> Output:
    out = as_operand(value)
    if out is not None:
        return out
    try:
        return scope.constant(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} {value!r} does not convert to a tensor: {e}") from None


# -- cond ----------------------------------------------------------------------------------------
def cond(scope: Scope, pred: Any, true_fn: Callable, false_fn: Callable,
         name: str | None = None) -> Any:
    """``true_fn()`` if ``pred`` else ``false_fn()``, as ``tf.cond``: both branches are
    traced, must return the same structure of the same dtypes, and the result's shapes
    are what both branches agree on."""
    if isinstance(pred, (bool, np.bool_)):
        raise TypeError("pred must not be a Python bool")
    for label, fn in (("true_fn", true_fn), ("false_fn", false_fn)):
        if not callable(fn):
            raise TypeError(f"{label} must be callable.")
    pred = _outer_tensor(scope, pred, "pred")
    node = scope.make_op_name(name or "cond")
    branches = [_trace_branch(scope, fn, f"{node}_{label}")
                for fn, label in ((true_fn, "true"), (false_fn, "false"))]
    (then_graph, then_result, then_flat), (else_graph, else_result, else_flat) = branches
    _check_branches(then_result, else_result, then_flat, else_flat)
    captured = union_captures(then_graph, else_graph)
    then_fn = finish(then_graph, [], then_flat, captured)
    else_fn = finish(else_graph, [], else_flat, captured)
    shapes = [most_specific_compatible_shape(a.shape, b.shape) for a, b in zip(then_flat, else_flat)]
    op_type = "If" if then_fn.stateful or else_fn.stateful else "StatelessIf"
    controls = then_graph.outer_controls + else_graph.outer_controls
    op = _build(scope.with_control_dependencies(controls), op_type, node, pred, captured,
                Tout=[t.dtype for t in then_flat], then_branch=then_fn, else_branch=else_fn,
                output_shapes=shapes)
    return op if then_result is None else pack_as(then_result, list(op.outputs))


def _build(scope: Scope, op_type: str, node: str, *args, **attrs) -> Operation:
    """The control-flow op, named ``node`` (reserved before its functions were traced)."""
    return create_operation(scope, op_def(op_type), args, attrs, reserved_name=node)


def _trace_branch(scope: Scope, fn: Callable, name: str):
    graph = new_func_graph(scope, name)
    result = trace(graph, fn, [])
    flat = [] if result is None else [_tensor_in(graph, v) for v in flatten(result)]
    return graph, result, flat


def _check_branches(then_result, else_result, then_flat, else_flat) -> None:
    same = same_structure(then_result, else_result) and (then_result is None) == (
        else_result is None) and len(then_flat) == len(else_flat) and all(
        a.dtype == b.dtype for a, b in zip(then_flat, else_flat))
    if not same:
        raise TypeError(
            f"true_fn and false_fn arguments to tf.cond must have the same number, type, and "
            f"overall structure of return values.\n\ntrue_fn output: {then_result!r}\n"
            f"false_fn output: {else_result!r}")


# -- while_loop ----------------------------------------------------------------------------------
def while_loop(scope: Scope, cond: Callable, body: Callable, loop_vars: Any,
               shape_invariants: Any = None, maximum_iterations: Any = None,
               parallel_iterations: int = 10, name: str | None = None) -> Any:
    """Repeat ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)``, as
    ``tf.while_loop``: a loop variable keeps its dtype, and its shape stays within its
    shape invariant (its initial shape unless ``shape_invariants`` relaxes it);
    ``maximum_iterations`` bounds the iterations."""
    if not callable(cond):
        raise TypeError("cond must be callable.")
    if not callable(body):
        raise TypeError("body must be callable.")
    if isinstance(parallel_iterations, bool) or not isinstance(
            parallel_iterations, (int, np.integer)) or parallel_iterations < 1:
        raise ValueError("parallel_iterations must be a positive integer.")
    single = not isinstance(loop_vars, (list, tuple, dict))
    structure = [loop_vars] if single else loop_vars
    flat = [_outer_tensor(scope, v, "Loop variable") for v in flatten(structure)]
    if not flat:
        raise ValueError("No loop variables provided")
    invariants = _invariants(flat, shape_invariants, single)
    node = scope.make_op_name(name or "while")
    counter, limit = _counter_and_limit(scope, maximum_iterations, node)
    specs = [(counter.dtype, TensorShape([])), (limit.dtype, TensorShape([]))] + \
        [(v.dtype, s) for v, s in zip(flat, invariants)]
    cond_graph, cond_args, pred = _trace_cond(scope, cond, specs, structure, single, node,
                                              maximum_iterations is not None)
    body_graph, body_args, body_outs = _trace_body(scope, body, specs, structure, single, flat,
                                                   node)
    captured = union_captures(cond_graph, body_graph)
    passed = [capture(body_graph, c) for c in captured]  # the body passes captures through
    cond_fn = finish(cond_graph, cond_args, [pred], captured)
    body_fn = finish(body_graph, body_args,
                     body_outs + passed, captured)
    op_type = "While" if cond_fn.stateful or body_fn.stateful else "StatelessWhile"
    controls = cond_graph.outer_controls + body_graph.outer_controls
    op = _build(scope.with_control_dependencies(controls), op_type, node,
                [counter, limit] + flat + captured, cond=cond_fn, body=body_fn,
                output_shapes=[s for _, s in specs] + [c.shape for c in captured],
                parallel_iterations=int(parallel_iterations))
    results = list(op.outputs[2:2 + len(flat)])
    return results[0] if single else pack_as(structure, results)


def _invariants(flat: list[Output], shape_invariants: Any, single: bool) -> list[TensorShape]:
    if shape_invariants is None:
        return [v.shape for v in flat]
    given = [shape_invariants] if single else shape_invariants
    shapes = [as_shape(s) for s in flatten(_shapes_as_leaves(given))]
    if len(shapes) != len(flat):
        raise ValueError(f"shape_invariants has {len(shapes)} shapes for {len(flat)} loop "
                         f"variables: it must have the structure of loop_vars")
    for v, s in zip(flat, shapes):
        if not within_invariant(v.shape, s):
            raise ValueError(
                f"The shape invariant specified for {v.name} is not compatible with the "
                f"initial shape of the loop variable. It enters the loop with shape "
                f"{v.shape}, but the specified shape invariant is {s}.")
    return shapes


def _shapes_as_leaves(given: Any) -> Any:
    """Shape invariants with each shape a leaf (a shape given as a list is not a level)."""
    if isinstance(given, TensorShape) or given is None:
        return given
    if isinstance(given, dict):
        return {k: _shapes_as_leaves(v) for k, v in given.items()}
    if isinstance(given, (list, tuple)) and all(
            d is None or isinstance(d, (int, np.integer)) for d in given):
        return TensorShape(list(given))
    return type(given)(_shapes_as_leaves(v) for v in given) if isinstance(
        given, (list, tuple)) else given


def _counter_and_limit(scope: Scope, maximum_iterations: Any, node: str):
    inner = scope.within(node)
    if maximum_iterations is None:
        limit = inner.constant(np.int32(-1), name="maximum_iterations")
    else:
        limit = _outer_tensor(inner, maximum_iterations, "maximum_iterations")
        if limit.shape.rank is not None and limit.shape.rank != 0:
            raise ValueError(f"maximum_iterations must be a scalar, saw shape: {limit.shape}")
        if limit.dtype.name not in ("int32", "int64"):
            raise TypeError(f"maximum_iterations must be an int32 or int64 tensor, got "
                            f"{limit.dtype.name}")
    counter = inner.constant(np.zeros((), limit.dtype.as_numpy_dtype), name="loop_counter")
    return counter, limit


def _user_args(args: list[Output], structure: Any, single: bool) -> list:
    packed = pack_as(structure, args[2:])
    return [packed[0]] if single else list(packed) if isinstance(packed, (list, tuple)) \
        else [packed]


def _trace_cond(scope, cond, specs, structure, single, node, bounded):
    graph = new_func_graph(scope, f"{node}_cond")
    args = arguments_like(graph, specs)
    result = trace(graph, cond, _user_args(args, structure, single))
    with tracing(graph):
        pred = _tensor_in(graph, result, bool_ if isinstance(result, (bool, np.bool_))
                          else None)
        if pred.shape.rank is not None and pred.shape.rank != 0:
            raise ValueError(f"The while loop's cond must return a scalar, it returns "
                             f"{pred.name} of shape {pred.shape}")
        if bounded:
            inner = Scope(graph)
            pred = inner.logical_and(inner.less(args[0], args[1]), inner.cast(pred, bool_)
                                     if pred.dtype != bool_ else pred)
    return graph, args, pred


def _trace_body(scope, body, specs, structure, single, flat, node):
    graph = new_func_graph(scope, f"{node}_body")
    args = arguments_like(graph, specs)
    result = trace(graph, body, _user_args(args, structure, single))
    if single and isinstance(result, (list, tuple)) and len(result) == 1:
        result = result[0]
    elif isinstance(structure, (list, tuple)) and len(structure) == 1 and \
            as_operand(result) is not None:
        result = type(structure)([result])  # one loop variable, returned bare
    if not (single or same_structure(structure, result)) or (
            not single and isinstance(result, (list, tuple)) != isinstance(
            structure, (list, tuple))):
        raise ValueError(f"The two structures don't have the same nested structure.\n\n"
                         f"First structure: {structure!r}\n\nSecond structure: {result!r}")
    leaves = [result] if single else flatten(result)
    outs = []
    for k, (value, var) in enumerate(zip(leaves, flat)):
        out = _tensor_in(graph, value, var.dtype if as_operand(value) is None else None)
        if out.dtype != var.dtype:
            raise TypeError(f"Loop var {var.name} enters the loop with type {var.dtype} but has "
                            f"type {out.dtype} after 1 iteration. {var.name} type should "
                            f"remain constant.")
        invariant = specs[2 + k][1]
        if not within_invariant(out.shape, invariant):
            raise ValueError(
                f"Input tensor `{var.name}` enters the loop with shape {invariant}, but has "
                f"shape {out.shape} after one iteration. To allow the shape to vary across "
                f"iterations, use the `shape_invariants` argument of tf.while_loop to "
                f"specify a less-specific shape.")
        outs.append(out)
    with tracing(graph):
        inner = Scope(graph)
        step = inner.add(args[0], inner.constant(np.ones((), args[0].dtype.as_numpy_dtype)))
    return graph, args, [step, args[1]] + outs


def _install() -> None:
    Scope.cond = cond
    Scope.while_loop = while_loop


_install()

__all__ = ["cond", "while_loop", "flatten", "pack_as"]
