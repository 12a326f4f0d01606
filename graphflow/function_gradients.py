"""Vector-Jacobian functions of graph functions, for the gradients of control flow.

``vjp_function(scope, f, wrt, outs)`` traces ``g(*f.inputs, *dys) -> dxs``: it copies
``f``'s body into a new function (:func:`inline`), then differentiates the copy with
``gf.gradients`` (so a loop or cond inside ``f`` brings its own gradient). The copy
recomputes ``f``'s intermediates from its inputs: exact for everything except ops with
effects, which a gradient may not replay; such a body is refused when the gradient is
built (UnimplementedError), as reads of variables are not.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .builder import create_operation
from .errors import UnimplementedError
from .functions import Function, arguments_like, finish, new_func_graph, tracing
from .gradients import DIFFERENTIABLE_TYPES
from .graph import Operation, Output
from .indexed_slices import IndexedSlices
from .scope import Scope


def differentiable(dtype) -> bool:
    return dtype in DIFFERENTIABLE_TYPES


def dense(scope: Scope, grad, like: Output, of_type=None) -> Output:
    """An output gradient as a dense tensor (IndexedSlices densified, None as zeros:
    like ``like``, or of ``of_type`` = (dtype, static shape), a variable's)."""
    if grad is None:
        if of_type is not None and of_type != (like.dtype, like.shape):
            dtype, shape = of_type
            return zeros_of(scope, dtype, shape)
        return scope.zeros_like(like)
    if isinstance(grad, IndexedSlices):
        from .indexed_slices import convert_to_tensor
        return convert_to_tensor(grad)
    return grad


def zeros_of(scope: Scope, dtype, shape) -> Output:
    """Zeros of a static ``shape`` (a variable's gradient where none flows)."""
    if not shape.is_fully_defined():
        raise UnimplementedError(f"gradients w.r.t. a variable of shape {shape} read in "
                                 f"control flow need its full shape")
    return scope.fill(shape.as_list(), scope.constant(np.zeros((), dtype.as_numpy_dtype)))


def inline(scope: Scope, function: Function, inputs: Sequence[Output]) -> list[Output]:
    """``function``'s outputs computed from ``inputs`` by a copy of its ops built in
    ``scope`` (its stateful ops included, in their order)."""
    mapped: dict[Output, Output] = dict(zip(function.inputs, inputs))
    copies: dict[Operation, Operation] = {}
    fed = {p.op for p in function.inputs}
    for op in function.graph.operations():
        if op in fed:
            continue
        controls = [copies[c] for c in op.control_inputs if c in copies]
        args = [[mapped[x] for x in group] if isinstance(group, list) else mapped[group]
                for group in op.grouped_inputs()]
        attrs = {a: op.attrs[a] for a in op.op_def.user_attrs if a in op.attrs}
        copy = create_operation(scope.with_control_dependencies(controls), op.op_def,
                                tuple(args), attrs, name=op.name)
        copies[op] = copy
        mapped.update(zip(op.outputs, copy.outputs))
    return [mapped[o] for o in function.outputs]


def replayable(op: Operation) -> bool:
    """Whether running ``op`` again changes nothing: a stateless op, a read, or control
    flow whose functions are all replayable."""
    functions = [v for v in op.attrs.values() if isinstance(v, Function)]
    if functions:
        return all(replayable(c) for f in functions for c in f.control_outputs)
    return not op.op_def.stateful or op.op_def.idempotent


def _check_replayable(function: Function, what: str) -> None:
    for op in function.control_outputs:
        if not replayable(op):
            raise UnimplementedError(
                f"No gradient through {what}: its node '{op.name}' ({op.type}) has effects "
                f"(a variable update or a random draw), which a gradient would run again. "
                f"Move it out of the branch or body, or stop the gradient before it")


def reads_variable(function: Function, k: int) -> bool:
    """Whether ``function``'s input ``k`` is a variable's handle it reads (directly, or in
    a branch or body inside it): a gradient w.r.t. that variable flows through it."""
    from .gradients import is_handle, variable_reads
    x = function.inputs[k]
    return is_handle(x) and differentiable(variable_type_of(x)[0]) \
        and bool(variable_reads(x, x.name))


def variable_type_of(handle: Output):
    from .gradients import variable_type
    return variable_type(handle)


def gradient_type(x: Output):
    """(dtype, shape) of the gradient w.r.t. input ``x``: its own, or for a handle its
    variable's."""
    from .gradients import is_handle
    return variable_type_of(x) if is_handle(x) else (x.dtype, x.shape)


def vjp_function(scope: Scope, function: Function, wrt: Sequence[int], outs: Sequence[int],
                 name: str) -> Function:
    """``g(*inputs, *dys) -> dxs``: the gradients of ``function``'s outputs ``outs``
    (weighted by ``dys``) w.r.t. its inputs ``wrt``; zeros where none flows. An input
    that is a variable's handle (:func:`reads_variable`) gets the gradient w.r.t. the
    variable's value, summed over its reads; as an output it must be passed through
    (a loop's), and its dy is added on."""
    from .gradients import gradients_or_none, is_handle
    _check_replayable(function, f"'{name}'")
    graph = new_func_graph(scope, name.replace("/", "_") + "_vjp")
    xs = arguments_like(graph, [(p.dtype, p.shape) for p in function.inputs])
    for x, p in zip(xs, function.inputs):
        if is_handle(p):
            graph.handle_sources[x] = p  # its reads know the variable's dtype and shape
    carried = [k for k in outs if is_handle(function.outputs[k])]
    for k in carried:
        if function.outputs[k] is not function.inputs[k]:
            raise UnimplementedError(
                f"No gradient through '{name}': it returns a variable handle it was not "
                f"given as that loop variable ({function.outputs[k].name})")
    dys = arguments_like(graph, [gradient_type(function.outputs[k]) for k in outs], prefix="dy")
    dy_of = dict(zip(outs, dys))
    with tracing(graph):
        inner = Scope(graph)
        ys = inline(inner.with_sub_scope("forward"), function, xs)
        targets = [k for k in outs if k not in carried]
        grads = gradients_or_none([ys[k] for k in targets], [xs[k] for k in wrt],
                                  grad_ys=[dy_of[k] for k in targets]) if targets \
            else [None] * len(wrt)
        results = []
        for g, k in zip(grads, wrt):
            r = dense(inner, g, xs[k], gradient_type(function.inputs[k]))
            results.append(inner.add(r, dy_of[k]) if k in carried else r)
        results = [inner.identity(r) if r.graph is not graph or r.op.type == "Placeholder"
                   else r for r in results]
    return finish(graph, xs + dys, results, captured=[])
